"""The report's table and pages as text: one row per record (`rows`, also results.csv's), the
table's header and cells (`table_rows`, which markdown and HTML share), and the text of
report.md, report.html (images embedded) and results.csv. Chooses no record and writes no file.
"""
from __future__ import annotations

import base64
import csv
import html
import io
import math

from featx.runs.schema import Record, metric_text, spread_text, train_seconds
from featx.runs.choice import selection_score
from featx.report.collected import Collected
from featx.report.curve import curve_rows
from featx.report.verdict import Verdict


def rows(collected: Collected) -> list[dict]:
    """One row per record: fine-tunes, probes (best selection score first), baselines, then
    the control's."""
    out = []
    for record in sorted(collected.main + collected.control, key=_row_order):
        primary = record.primary_metric
        ci = record.metrics_ci[primary] or [None, None]
        selection = selection_score(record)
        out.append({
            # A baseline reads the texts: no backbone, so no init and no cache of its own.
            "stage": record.stage, "init": "" if record.baseline else record.init,
            "features": record.features,
            "head": record.shown_head, "baseline": record.baseline or "",
            "protocol": record.protocol["name"], "primary_metric": primary,
            "primary": record.metrics[primary], "primary_std": record.metrics_std[primary],
            "primary_ci_low": ci[0], "primary_ci_high": ci[1],
            "selection": selection if math.isfinite(selection) else None,
            **{f"metric:{k}": v for k, v in record.metrics.items()},
            "train_seconds": train_seconds(record),
            "backbone_forward_passes": record.backbone_forward_passes,
            "cache_mb": round(record.cache_bytes / 1e6, 1) if record.cache_bytes and not record.baseline else None,
            "seeds": len(record.seeds or [1]), "n_eval": record.n_eval,
            "converged": record.converged,
        })
    return out


def _row_order(r: Record) -> tuple:
    """The sort key of `rows`: pretrained first; fine-tunes, then probes (best selection score
    first), then baselines."""
    group = (0 if r.stage == "finetune" else 2 if r.baseline else 1)
    score = selection_score(r)  # an undefined one (NaN) last, not wherever a comparison with NaN puts it
    return (r.init != "pretrained", group, -score if math.isfinite(score) else math.inf, r.features, r.head)


def table_rows(all_rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the report table (markdown and HTML share it)."""
    task_metrics = [k.removeprefix("metric:") for k in all_rows[0] if k.startswith("metric:")]
    primary = all_rows[0]["primary_metric"]
    header = ["features", "head", "init", "protocol", f"{primary} (95% interval)", "selection",
              *[m for m in task_metrics if m != primary], "train s", "backbone passes", "cache MB", "note"]
    cells = []
    for row in all_rows:
        std = spread_text(row["primary_std"], row["primary"])  # over seeds
        interval = (f" [{metric_text(row['primary_ci_low'])}, {metric_text(row['primary_ci_high'])}]"
                    if _finite(row["primary_ci_low"]) and _finite(row["primary_ci_high"]) else "")
        note = {"majority": "baseline: majority", "lexical": "baseline: TF-IDF"}.get(row["baseline"], "")
        if row["converged"] is False:
            note = "not converged: a lower bound"
        cells.append([row["features"], row["head"], row["init"], row["protocol"],
                      f"{_metric(row['primary'])}{std}{interval}", _metric(row["selection"]),
                      *[_metric(row.get(f"metric:{k}")) for k in task_metrics if k != primary],
                      _num(row["train_seconds"], 1), f"{row['backbone_forward_passes'] or 0:,}",
                      "" if row["baseline"] else _num(row["cache_mb"], 1), note])
    return header, cells


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _num(value, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def _metric(value) -> str:
    """A metric cell: as `metric_text` prints it (4 decimals, or 4 significant digits far from 1);
    "undefined" where the rows cannot define it (NaN: one class, a constant), "-" where it is not
    recorded."""
    if value is None:
        return "-"
    return "undefined" if isinstance(value, float) and math.isnan(value) else metric_text(value)


def markdown_text(collected: Collected, judged: Verdict, *, header: list[str], cells: list[list[str]],
                  images: dict[str, bytes], notes: list[str], settings: list[str]) -> str:
    """report.md: the verdict, the configuration, the notes, the table and the plots' images."""
    lines = [f"# featx report: {collected.pipeline}", "", f"**Verdict.** {judged.text}", ""]
    lines += ["## Configuration", ""] + [f"- {n}" for n in settings] + [""]
    lines += ["## Results", ""] + [f"- {n}" for n in notes] + [""]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in cells]
    lines.append("")
    if judged.label_curve is not None:
        curve_header, curve_cells = curve_rows(judged.label_curve)
        lines += ["## Learning curve", "", "| " + " | ".join(curve_header) + " |", "|" + "---|" * len(curve_header)]
        lines += ["| " + " | ".join(row) + " |" for row in curve_cells] + [""]
    for name in images:
        lines += [f"![{name}]({name}.png)", ""]
    return "\n".join(lines)


def html_text(collected: Collected, judged: Verdict, *, header: list[str], cells: list[list[str]],
              images: dict[str, bytes], notes: list[str], settings: list[str]) -> str:
    """report.html: report.md's content in one self-contained page, the images embedded."""
    escape = html.escape
    parts = ["<!DOCTYPE html>", "<html><head><meta charset=\"utf-8\">",
             f"<title>featx report: {escape(collected.pipeline)}</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
             "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;"
             "padding:3px 6px;text-align:right}td:first-child,th:first-child{text-align:left}"
             "img{max-width:100%}</style></head><body>",
             f"<h1>featx report: {escape(collected.pipeline)}</h1>",
             f"<p><strong>Verdict.</strong> {_code(escape(judged.text))}</p>", "<h2>Configuration</h2>", "<ul>"]
    parts += [f"<li>{_code(escape(n))}</li>" for n in settings] + ["</ul>", "<h2>Results</h2>", "<ul>"]
    parts += [f"<li>{_code(escape(n))}</li>" for n in notes] + ["</ul>", "<table>"]
    parts.append("<tr>" + "".join(f"<th>{escape(h)}</th>" for h in header) + "</tr>")
    parts += ["<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in cells]
    parts.append("</table>")
    if judged.label_curve is not None:
        curve_header, curve_cells = curve_rows(judged.label_curve)
        parts += ["<h2>Learning curve</h2>", "<table>",
                  "<tr>" + "".join(f"<th>{escape(h)}</th>" for h in curve_header) + "</tr>"]
        parts += ["<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in curve_cells]
        parts.append("</table>")
    for name, data in images.items():
        encoded = base64.b64encode(data).decode()
        parts.append(f'<h2>{escape(name.replace("_", " "))}</h2>'
                     f'<img alt="{escape(name)}" src="data:image/png;base64,{encoded}">')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _code(escaped: str) -> str:
    """`text` -> <code>text</code>: the notes' commands, set as code instead of backticks."""
    import re

    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


def csv_text(all_rows: list[dict]) -> str:
    """results.csv: every row's every field, a column for each field any row has."""
    fields = list(dict.fromkeys(k for row in all_rows for k in row))
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=fields)
    writer.writeheader()
    writer.writerows(all_rows)
    return buffer.getvalue()
