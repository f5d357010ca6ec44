"""The frozen-vs-tuned report: records -> tables, a verdict, plots. Formatting only.

Reads nothing but the run records (no torch, no backbone, no cache), and writes
`data/reports/<pipeline>/report.md`, a self-contained `report.html` (images embedded) and
`results.csv`.
"""
from __future__ import annotations

import base64
import csv
import html
import io
import math
from dataclasses import dataclass
from pathlib import Path

from featx.errors import FeatxError
from featx.records import read_records

# How the verdict reads the quality ratio (best frozen / fine-tuned primary metric).
GOOD_ENOUGH, CLOSE = 0.98, 0.90


@dataclass
class Inputs:
    pipeline: str
    main: list[dict]
    """Records of the pipeline's pretrained cache: probes and fine-tunes."""
    control: list[dict]
    """Records of the random-init control (its own cache), if any."""
    ignored_caches: int


def collect(runs_dir: str | Path, pipeline: str) -> Inputs:
    """The pipeline's records, grouped by cache: the newest pretrained cache is the main one."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for directory in sorted(Path(runs_dir).glob("*")):
        for record in read_records(directory):
            if record.get("pipeline") == pipeline:
                groups.setdefault((record["init"], record["cache_key"]), []).append(record)
    if not groups:
        raise FeatxError(f"no run records for pipeline {pipeline!r} under {runs_dir}: run "
                         "`make probe` (and `make finetune`) first")
    newest = lambda init: max((g for (i, _), g in groups.items() if i == init),  # noqa: E731
                              key=lambda g: max(r["created"] for r in g), default=[])
    main, control = newest("pretrained"), newest("random")
    ignored = len(groups) - bool(main) - bool(control)
    return Inputs(pipeline, main, control, ignored)


# ---------------------------------------------------------------------------------------------
# Rows, verdict


def rows(inputs: Inputs) -> list[dict]:
    """One row per record: main probes, then fine-tunes, then the control's."""
    def order(r):
        return (r["init"] != "pretrained", r["stage"] != "probe", r["features"], r["head"])
    out = []
    for record in sorted(inputs.main + inputs.control, key=order):
        primary = record["primary_metric"]
        out.append({
            "stage": record["stage"], "init": record["init"], "features": record["features"],
            "head": record["head"], "protocol": record["protocol"]["name"], "primary_metric": primary,
            "primary": record["metrics"][primary], "primary_std": record["metrics_std"].get(primary, 0.0),
            **{f"metric:{k}": v for k, v in record["metrics"].items()},
            "train_seconds": _seconds(record), "backbone_forward_passes": record.get("backbone_forward_passes"),
            "cache_mb": round(record["cache_bytes"] / 1e6, 1) if record.get("cache_bytes") else None,
            "seeds": len(record.get("seeds") or [1]),
        })
    return out


def _seconds(record: dict) -> float | None:
    if record["stage"] == "finetune":
        return record.get("wall_seconds")
    return record.get("fit_seconds")


@dataclass
class Verdict:
    text: str
    frozen: dict | None
    tuned: dict | None
    quality_ratio: float | None
    compute_ratio: float | None


def verdict(inputs: Inputs) -> Verdict:
    """Best frozen probe against the best fine-tune (pretrained backbone), with the numbers."""
    probes = [r for r in inputs.main if r["stage"] == "probe" and r["protocol"]["name"] != "mteb"]
    tunes = [r for r in inputs.main if r["stage"] == "finetune"]
    if not probes:
        return Verdict("No probe records yet: run `make probe` to train heads on the cache.",
                       None, None, None, None)
    primary = probes[0]["primary_metric"]
    # Picked by the selection score (dev or cross-validation), never by the test score it
    # reports: choosing the best of many probes on test would flatter the frozen side.
    frozen = max(probes, key=lambda r: (_selection_score(r), -(r.get("fit_seconds") or 0)))
    frozen_text = (f"best frozen ({frozen['pooling']}, layer{'s' if len(frozen['layers']) > 1 else ''} "
                   f"{'+'.join(map(str, frozen['layers']))}, {frozen['head']})")
    if not tunes:
        return Verdict(f"{frozen_text[0].upper()}{frozen_text[1:]} reaches {primary} = "
                       f"{_value(frozen, primary):.4f}. No fine-tune record yet: run `make finetune` "
                       "for the baseline this is to be compared with.", frozen, None, None, None)
    tuned = max(tunes, key=_selection_score)
    f, t = _value(frozen, primary), _value(tuned, primary)
    frozen_cost = frozen.get("backbone_forward_passes") or 0
    tuned_cost = tuned.get("backbone_forward_passes") or 0
    compute = frozen_cost / tuned_cost if frozen_cost and tuned_cost else None
    cost_text = (f" for {_fraction(compute)} of the compute ({frozen_cost:,} vs {tuned_cost:,} backbone "
                 "forward-pass equivalents: one extraction pass against training steps at ~3 "
                 "forwards each plus evaluation)") if compute else ""
    wall = _wall(frozen, tuned)
    if t > 0 and f >= 0:
        ratio = f / t
        head = (f"{frozen_text[0].upper()}{frozen_text[1:]} reaches {ratio:.1%} of the fine-tuned "
                f"{primary} ({f:.4f} vs {t:.4f}){cost_text}.")
        reading = ("Frozen features are good enough here." if ratio >= GOOD_ENOUGH else
                   "Frozen features come close: use them to iterate, fine-tune for the last points."
                   if ratio >= CLOSE else "Fine-tuning pays on this task.")
    else:  # a ratio of a negative or zero score means nothing; give the difference
        ratio = None
        head = (f"{frozen_text[0].upper()}{frozen_text[1:]}: {primary} {f:.4f} against {t:.4f} "
                f"fine-tuned (difference {f - t:+.4f}){cost_text}.")
        reading = "Frozen features are good enough here." if f >= t else "Fine-tuning pays on this task."
    return Verdict(f"{head}{wall} {reading}", frozen, tuned, ratio, compute)


def _selection_score(record: dict) -> float:
    """The score a record's configuration was chosen by: its best dev / cv candidate, or the
    fine-tune's best epoch on its selection split."""
    if record["stage"] == "finetune":
        scores = [value for _, value in (record.get("curve") or {}).get("select", [])]
    else:
        scores = [c["score"] for c in record.get("search", [])]
    scores = [s for s in scores if s is not None and not math.isnan(s)]
    return max(scores) if scores else -math.inf


def _value(record: dict, metric: str) -> float:
    value = record["metrics"].get(metric, float("nan"))
    return -math.inf if value is None or math.isnan(value) else value


def _fraction(ratio: float) -> str:
    return f"1/{1 / ratio:.0f}" if ratio < 1 else f"{ratio:.1f}x"


def _wall(frozen: dict, tuned: dict) -> str:
    extract, fit, train = frozen.get("extract_seconds"), frozen.get("fit_seconds"), tuned.get("wall_seconds")
    if extract is None or fit is None or train is None:
        return ""
    return (f" Wall time: {extract:.0f} s extraction + {fit:.1f} s head fit, against {train:.0f} s "
            "of fine-tuning.")


# ---------------------------------------------------------------------------------------------
# Plots (matplotlib, PNG bytes)


def plots(inputs: Inputs) -> dict[str, bytes]:
    import matplotlib
    matplotlib.use("Agg")
    out = {}
    for name, draw in (("layers", _plot_layers), ("heads", _plot_heads), ("learning_curve", _plot_curve),
                       ("cost", _plot_cost)):
        figure = draw(inputs)
        if figure is not None:
            buffer = io.BytesIO()
            figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
            import matplotlib.pyplot as plt
            plt.close(figure)
            out[name] = buffer.getvalue()
    return out


def _tuned_levels(records: list[dict], primary: str, axis) -> None:
    for record in records:
        if record["stage"] == "finetune":
            axis.axhline(record["metrics"][primary], linestyle="--", color="black", linewidth=1,
                         label=f"fine-tuned ({record['features']}, {record['head']})")


def _plot_layers(inputs: Inputs):
    import matplotlib.pyplot as plt

    single = [r for r in inputs.main if r["stage"] == "probe" and len(r["layers"]) == 1]
    curves: dict[tuple[str, str], list[dict]] = {}
    for r in single:
        curves.setdefault((r["pooling"], r["head"]), []).append(r)
    curves = {k: sorted(v, key=lambda r: r["layers"][0]) for k, v in curves.items() if len(v) > 1}
    if not curves:
        return None
    primary = single[0]["primary_metric"]
    figure, axis = plt.subplots(figsize=(6.4, 4))
    for (pooling, head), records in sorted(curves.items()):
        axis.errorbar([r["layers"][0] for r in records], [r["metrics"][primary] for r in records],
                      yerr=[r["metrics_std"].get(primary, 0) for r in records], marker="o",
                      capsize=3, label=f"{pooling} + {head}")
    _tuned_levels(inputs.main, primary, axis)
    axis.set(xlabel="layer (0 = embeddings)", ylabel=primary, title="Probe quality by layer")
    axis.legend(fontsize=8)
    return figure


def _plot_heads(inputs: Inputs):
    import matplotlib.pyplot as plt
    import numpy as np

    probes = [r for r in inputs.main if r["stage"] == "probe" and r["protocol"]["name"] != "mteb"]
    if not probes:
        return None
    last = max(max(r["layers"]) for r in probes)
    chosen = [r for r in probes if r["layers"] == [last]]
    poolings = sorted({r["pooling"] for r in chosen})
    heads = sorted({r["head"] for r in chosen})
    if not chosen:
        return None
    primary = chosen[0]["primary_metric"]
    figure, axis = plt.subplots(figsize=(6.4, 4))
    width = 0.8 / len(heads)
    for i, head in enumerate(heads):
        values = [next((r["metrics"][primary] for r in chosen if r["pooling"] == p and r["head"] == head),
                       np.nan) for p in poolings]
        axis.bar(np.arange(len(poolings)) + i * width, values, width, label=head)
    _tuned_levels(inputs.main, primary, axis)
    axis.set_xticks(np.arange(len(poolings)) + width * (len(heads) - 1) / 2, poolings)
    axis.set(ylabel=primary, title=f"Heads x poolings (layer {last}) against fine-tuning")
    axis.legend(fontsize=8)
    return figure


def _plot_curve(inputs: Inputs):
    import matplotlib.pyplot as plt

    tunes = [r for r in inputs.main + inputs.control if r["stage"] == "finetune" and r.get("curve")]
    if not tunes:
        return None
    figure, loss_axis = plt.subplots(figsize=(6.4, 4))
    metric_axis = loss_axis.twinx()
    for record in tunes:
        label = f"{record['features']} {record['head']} ({record['init']})"
        steps, losses = zip(*record["curve"]["loss"]) if record["curve"]["loss"] else ((), ())
        loss_axis.plot(steps, losses, label=f"loss, {label}")
        if record["curve"]["select"]:
            per_step = record["steps"] / max(record["epochs"], 1)
            epochs, values = zip(*record["curve"]["select"])
            metric_axis.plot([e * per_step for e in epochs], values, marker="s", linestyle=":",
                             label=f"{record['primary_metric']} (selection split), {label}")
    loss_axis.set(xlabel="step", ylabel="training loss", title="Fine-tuning curve")
    metric_axis.set_ylabel("selection metric")
    handles = loss_axis.get_legend_handles_labels()
    more = metric_axis.get_legend_handles_labels()
    loss_axis.legend(handles[0] + more[0], handles[1] + more[1], fontsize=7)
    return figure


def _plot_cost(inputs: Inputs):
    import matplotlib.pyplot as plt

    records = [r for r in inputs.main + inputs.control if r.get("backbone_forward_passes")
               and r["protocol"]["name"] != "mteb"]
    if not records:
        return None
    primary = records[0]["primary_metric"]
    figure, axis = plt.subplots(figsize=(6.4, 4))
    for stage, init, marker in (("probe", "pretrained", "o"), ("finetune", "pretrained", "*"),
                                ("probe", "random", "x"), ("finetune", "random", "+")):
        chosen = [r for r in records if r["stage"] == stage and r["init"] == init]
        if chosen:
            axis.scatter([r["backbone_forward_passes"] for r in chosen],
                         [r["metrics"][primary] for r in chosen], marker=marker, s=60,
                         label=f"{'frozen + head' if stage == 'probe' else 'fine-tuned'} ({init})")
    axis.set_xscale("log")
    axis.set(xlabel="compute: backbone forward-pass equivalents (rows)", ylabel=primary,
             title="Quality against cost")
    axis.legend(fontsize=8)
    return figure


# ---------------------------------------------------------------------------------------------
# Writing


def table_rows(all_rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the report table (markdown and HTML share it)."""
    task_metrics = [k.removeprefix("metric:") for k in all_rows[0] if k.startswith("metric:")]
    header = ["features", "head", "init", "protocol", "primary", *task_metrics, "train s",
              "backbone passes", "cache MB"]
    cells = []
    for row in all_rows:
        std = f" ± {row['primary_std']:.4f}" if row["primary_std"] else ""
        cells.append([row["features"], row["head"], row["init"], row["protocol"],
                      f"{row['primary_metric']} {row['primary']:.4f}{std}",
                      *[_num(row.get(f"metric:{k}")) for k in task_metrics],
                      _num(row["train_seconds"], 1), f"{row['backbone_forward_passes'] or 0:,}",
                      _num(row["cache_mb"], 1)])
    return header, cells


def _num(value, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def write_report(runs_dir: str | Path, reports_dir: str | Path, pipeline: str) -> dict[str, Path]:
    """Build the report for one pipeline; returns the paths written."""
    inputs = collect(runs_dir, pipeline)
    out_dir = Path(reports_dir) / pipeline
    out_dir.mkdir(parents=True, exist_ok=True)
    all_rows = rows(inputs)
    header, cells = table_rows(all_rows)
    judged = verdict(inputs)
    images = plots(inputs)
    notes = _notes(inputs)
    for name, data in images.items():
        (out_dir / f"{name}.png").write_bytes(data)
    paths = {"md": out_dir / "report.md", "html": out_dir / "report.html", "csv": out_dir / "results.csv"}
    paths["md"].write_text(_markdown(inputs, header, cells, judged, images, notes))
    paths["html"].write_text(_html(inputs, header, cells, judged, images, notes))
    _csv(paths["csv"], all_rows)
    return paths


def _notes(inputs: Inputs) -> list[str]:
    notes = []
    stages = {r["stage"] for r in inputs.main}
    if "probe" not in stages:
        notes.append("No probe records: run `make probe`.")
    if "finetune" not in stages:
        notes.append("No fine-tune record: run `make finetune` for the baseline.")
    if not inputs.control:
        notes.append("No random-init control: `featx extract PIPELINE model.init=random` then "
                     "`featx probe` / `featx finetune` with the same override.")
    if inputs.ignored_caches:
        notes.append(f"{inputs.ignored_caches} older cache(s) of this pipeline were left out.")
    if inputs.main:
        first = inputs.main[0]
        notes.append(f"Task: {first['task']}; cache key {first['cache_key'][:16]}; primary metric "
                     f"{first['primary_metric']} (higher is better).")
    return notes


def _markdown(inputs, header, cells, judged, images, notes) -> str:
    lines = [f"# featx report: {inputs.pipeline}", "", f"**Verdict.** {judged.text}", ""]
    lines += [f"- {n}" for n in notes] + [""]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in cells]
    lines.append("")
    for name in images:
        lines += [f"![{name}]({name}.png)", ""]
    return "\n".join(lines)


def _html(inputs, header, cells, judged, images, notes) -> str:
    e = html.escape
    parts = ["<!DOCTYPE html>", "<html><head><meta charset=\"utf-8\">",
             f"<title>featx report: {e(inputs.pipeline)}</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
             "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;"
             "padding:3px 6px;text-align:right}td:first-child,th:first-child{text-align:left}"
             "img{max-width:100%}</style></head><body>",
             f"<h1>featx report: {e(inputs.pipeline)}</h1>",
             f"<p><strong>Verdict.</strong> {e(judged.text)}</p>", "<ul>"]
    parts += [f"<li>{e(n)}</li>" for n in notes] + ["</ul>", "<table>"]
    parts.append("<tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr>")
    parts += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in cells]
    parts.append("</table>")
    for name, data in images.items():
        encoded = base64.b64encode(data).decode()
        parts.append(f'<h2>{e(name.replace("_", " "))}</h2>'
                     f'<img alt="{e(name)}" src="data:image/png;base64,{encoded}">')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _csv(path: Path, all_rows: list[dict]) -> None:
    fields = list(dict.fromkeys(k for row in all_rows for k in row))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(all_rows)
