"""The frozen-vs-tuned report written out: tables, markdown, HTML, CSV, JSON, the index.

Flattens a configuration's records (`featx.verdict.collect`) into table rows and renders them,
with the verdict `featx.verdict` gives and the plots of `featx.plots`, into `data/reports/<pipeline>/<config id>/`: `report.md`, a
self-contained `report.html` (images embedded), the plots as PNG files, `results.csv` and
`verdict.json`, with the pipeline's `index.md` and `latest.json` beside the folders. Chooses no
record and computes no statistic.
"""
from __future__ import annotations

import base64
import csv
import dataclasses
import html
import io
import math
import os
from pathlib import Path

from featx.config import Pipeline
from featx.configfile import command
from featx.errors import FeatxError
from featx.recordschema import Record, metric_text
from featx.plots import plots
from featx.choice import selection_score
from featx.verdict import Inputs, Verdict, collect, verdict


# ---------------------------------------------------------------------------------------------
# Writing


def rows(inputs: Inputs) -> list[dict]:
    """One row per record: fine-tunes, probes (best selection score first), baselines, then
    the control's."""
    def order(r):
        group = (0 if r.stage == "finetune" else 2 if r.baseline else 1)
        score = selection_score(r)  # an undefined one (NaN) last: it sorted wherever it fell
        return (r.init != "pretrained", group, -score if math.isfinite(score) else math.inf, r.features, r.head)
    out = []
    for record in sorted(inputs.main + inputs.control, key=order):
        primary = record.primary_metric
        ci = record.metrics_ci.get(primary) or [None, None]
        selection = selection_score(record)
        out.append({
            # A baseline reads the texts: no backbone, so no init and no cache of its own.
            "stage": record.stage, "init": "" if record.baseline else record.init,
            "features": record.features,
            "head": record.head, "baseline": record.baseline or "",
            "protocol": record.protocol["name"], "primary_metric": primary,
            "primary": record.metrics[primary], "primary_std": record.metrics_std.get(primary, 0.0),
            "primary_ci_low": ci[0], "primary_ci_high": ci[1],
            "selection": selection if math.isfinite(selection) else None,
            **{f"metric:{k}": v for k, v in record.metrics.items()},
            "train_seconds": record.wall_seconds if record.stage == "finetune" else record.fit_seconds,
            "backbone_forward_passes": record.backbone_forward_passes,
            "cache_mb": round(record.cache_bytes / 1e6, 1) if record.cache_bytes and not record.baseline else None,
            "seeds": len(record.seeds or [1]), "n_eval": record.n_eval,
            "converged": record.converged,
        })
    return out


def table_rows(all_rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the report table (markdown and HTML share it)."""
    task_metrics = [k.removeprefix("metric:") for k in all_rows[0] if k.startswith("metric:")]
    primary = all_rows[0]["primary_metric"]
    header = ["features", "head", "init", "protocol", f"{primary} (95% interval)", "selection",
              *[m for m in task_metrics if m != primary], "train s", "backbone passes", "cache MB", "note"]
    cells = []
    for row in all_rows:
        spread = row["primary_std"]  # over seeds: none shown for one seed, or seeds alike to rounding
        std = (f" ± {metric_text(spread)}" if _finite(spread)
               and spread > 1e-12 * max(1.0, abs(row["primary"]) if _finite(row["primary"]) else 1.0) else "")
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
    """A metric cell: as `metric_text` prints it (4 decimals, or 4 significant digits far from 1)."""
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else metric_text(value)


def write_report(runs_dir: str | Path, reports_dir: str | Path, pipeline: str,
                 current: Pipeline | None = None) -> dict[str, Path]:
    """Build the report of one configuration of a pipeline (with `current`, of the pipeline as
    configured, else of its newest records) in its own folder, `reports/<pipeline>/<config id>/`,
    and the pipeline's index of configurations beside them; returns the paths written (md, html,
    csv, json: the verdict with its numbers and the configuration; index, latest)."""
    from featx.files import writable_dir

    inputs = collect(runs_dir, pipeline, current)
    described = configuration_of(inputs)
    root = Path(reports_dir).parent
    base = Path(reports_dir) / pipeline
    out_dir = writable_dir(base / described["id"], "the report directory", root=root)
    all_rows = rows(inputs)
    header, cells = table_rows(all_rows)
    judged = verdict(inputs, runs_dir, current)
    images = plots(inputs, _matplotlib_dir(Path(reports_dir) / ".matplotlib", root))
    notes = _notes(inputs)
    settings = _configuration_lines(inputs, described)
    paths = {"md": out_dir / "report.md", "html": out_dir / "report.html", "csv": out_dir / "results.csv",
             "json": out_dir / "verdict.json", "index": base / "index.md", "latest": base / "latest.json"}
    contents = {out_dir / f"{name}.png": data for name, data in images.items()}
    page = dict(header=header, cells=cells, images=images, notes=notes, settings=settings)
    contents[paths["md"]] = _markdown(inputs, judged, **page).encode()
    contents[paths["html"]] = _html(inputs, judged, **page).encode()
    contents[paths["csv"]] = _csv_text(all_rows).encode()
    contents[paths["json"]] = _json_text(judged, described).encode()
    index, latest = _index(base, described, judged)
    contents[paths["index"]], contents[paths["latest"]] = index.encode(), latest.encode()
    write_all(contents)
    return paths


# ---------------------------------------------------------------------------------------------
# The configuration a report rests on, and the index of a pipeline's reports


def configuration_of(inputs: Inputs) -> dict:
    """What the report's records rest on: the backbone (name, fingerprint, revision), the
    extraction, the probe and the fine-tune settings, and the id of this configuration
    (`<cache key[:8]>-<probe config hash[:8]>-<fine-tune settings hash[:8]>`), which names its
    report folder."""
    from featx.files import utc_now
    from featx.records import finetune_config_hash, probe_config_hash, settings_hash, stop_reason

    probes = [r for r in inputs.main if r.stage == "probe"]
    tunes = [r for r in inputs.main if r.stage == "finetune"]
    probe = max(probes, key=lambda r: r.created) if probes else None
    tune = max(tunes, key=lambda r: r.created) if tunes else None
    source = probe or tune or max(inputs.control, key=lambda r: r.created)  # a control alone: its own
    recorded = (probe.configuration if probe else None) or {}
    tuned = (tune.configuration if tune else None) or {}
    current = inputs.current
    if current is not None:
        probe_hash, tune_hash = probe_config_hash(current.probe), finetune_config_hash(current.finetune)
    else:
        probe_hash = probe.config_hash if probe else None
        tune_hash = (settings_hash(tuned["finetune"]) if "finetune" in tuned
                     else tune.run_hash if tune else None)
    config_id = "-".join(part[:8] if part else "none" for part in (source.cache_key, probe_hash, tune_hash))
    return {"id": config_id, "pipeline": inputs.pipeline, "cache_key": source.cache_key, "written": utc_now(),
            "backbone": source.backbone or {}, "extraction": source.extraction or {},
            "extract": recorded.get("extract") or tuned.get("extract") or {},
            "data": recorded.get("data") or tuned.get("data") or {},
            "probe": recorded.get("probe"), "probe_config_hash": probe_hash,
            # A backbone probe's (under cv a baseline's selection score is its first fold's alone).
            "protocol": max(probes, key=lambda r: (not r.baseline, r.created)).protocol if probes else None,
            "finetune": None if tune is None else tune.hyperparameters,
            "finetune_settings": tuned.get("finetune") or (dataclasses.asdict(current.finetune) if current else None),
            "run_hash": tune.run_hash if tune else None,
            "stopped": None if tune is None else stop_reason(tune.converged, tune.stopped_by),
            "device": (tune.device if tune else None) or "?",
            "command": command(current, "report"), "make": _make(current, "report")}


def _make(pipeline, target: str) -> str:
    from featx.configfile import make_command

    return make_command(pipeline, target)


def _configuration_lines(inputs: Inputs, d: dict) -> list[str]:
    """The report's "Configuration" list: the backbone and every setting the numbers rest on."""
    backbone, extraction = d["backbone"], d["extraction"]
    lines = []
    if backbone.get("name"):
        lines.append(f"Backbone: `{backbone['name']}` (fingerprint `{str(backbone.get('fingerprint'))[:16]}`, "
                     f"revision {_code_or(backbone.get('revision'), 'none (the files as found)')}, "
                     f"init {backbone.get('init')}"
                     + (f", seed {backbone['init_seed']}" if backbone.get("init_seed") is not None else "")
                     + f"; from {backbone.get('source') or 'its folder'}).")
    else:
        lines.append("Backbone: not recorded (records of an older featx).")
    layers = extraction.get("layers") or {}
    stored = "; ".join(f"{p} {_span(v)}" for p, v in layers.items()) if isinstance(layers, dict) else ""
    dropped = extraction.get("dropped_empty") or {}
    in_train = extraction.get("in_train")  # None: a cache of an older featx
    extract = d["extract"]
    lines.append(f"Extraction: poolings and layers stored: {stored or 'not recorded'}; max_length "
                 f"{extraction.get('max_length', extract.get('max_length'))}; prompt "
                 f"{_code_or(extraction.get('prompt'), 'none')}; compute {extraction.get('compute_dtype', '?')}, "
                 f"stored {extraction.get('store_dtype', '?')}; rows dropped for an empty text: "
                 + (", ".join(f"{s} {n}" for s, n in dropped.items()) if dropped else "none")
                 + "; rows whose text train holds too: "
                 + ("not counted (a cache of an older featx)" if not isinstance(in_train, dict)
                    else ", ".join(f"{s} {n}" for s, n in in_train.items()) if any(in_train.values()) else "none")
                 + f"; cache key `{d['cache_key'][:16]}`.")
    probe, protocol = d["probe"], d["protocol"]
    if probe:
        chosen = (f" ({protocol['name']}: chosen on {protocol['select_on']}, reported on {protocol['report_on']})"
                  if protocol else "")
        lines.append(f"Probe (config `{d['probe_config_hash']}`): protocol {probe['protocol']}{chosen}; grid "
                     f"{probe['grid']}; heads {', '.join(probe['heads'])}; baselines "
                     f"{', '.join(probe['baselines']) or 'none'}; poolings {_listed(probe['poolings'], 'every one cached')}; "
                     f"layers {_listed(probe['layers'], '?')}; seeds {_listed(probe['seeds'], '?')}; metric "
                     f"{probe['metric'] or 'the task default'}.")
    elif protocol:
        lines.append(f"Probe: protocol {protocol['name']} (chosen on {protocol['select_on']}, reported on "
                     f"{protocol['report_on']}); its other settings are not recorded.")
    else:
        lines.append("Probe: no record of this configuration yet.")
    tuned = d["finetune"]
    if tuned is not None:
        lines.append(f"Fine-tune (run `{str(d['run_hash'])[:16]}`): head {tuned.get('head_input')}"
                     + (" with LP-FT" if tuned.get("init_head_from_probe") else "")
                     + f"; learning rates {_listed(tuned.get('learning_rates'), '?')} (search {tuned.get('search')}); "
                     f"batch {tuned.get('batch_size')}; up to {tuned.get('max_epochs')} epochs"
                     + (f" or {tuned['max_seconds']:g} s" if tuned.get("max_seconds") else "")
                     + f", plateau after {tuned.get('patience')} epochs without a gain beyond the selection "
                     f"split's noise" + (f" (at least {tuned['min_delta']:g})" if tuned.get("min_delta") else "")
                     + "; seed "
                     f"{tuned.get('seed')}; {tuned.get('dtype')} on {d['device']}; {d['stopped']}.")
    else:
        lines.append("Fine-tune: no record of this configuration yet.")
    lines.append(f"This configuration: `{d['id']}`; this report: `{d['command']}` (`{d['make']}`); every "
                 "stage takes the same overrides.")
    if inputs.others:
        lines.append("Other configurations of this pipeline with records (the command that reports each): "
                     + " | ".join(inputs.others))
    return lines


def _code_or(value, absent: str) -> str:
    return absent if value in (None, "") else f"`{value}`"


def _listed(values, absent: str) -> str:
    if values is None:
        return absent
    return ", ".join(str(v) for v in values) if isinstance(values, (list, tuple)) else str(values)


def _span(layers) -> str:
    """[0, 1, 2, 3] -> "0-3", [6] -> "6"."""
    if not isinstance(layers, list) or not layers:
        return str(layers)
    if layers == list(range(layers[0], layers[-1] + 1)) and len(layers) > 2:
        return f"{layers[0]}-{layers[-1]}"
    return ",".join(map(str, layers))


def _index(base: Path, described: dict, judged: "Verdict") -> tuple[str, str]:
    """(index.md, latest.json) of a pipeline's reports: every configuration's report folder, the
    newest first, and a stable pointer to the one just written (no link: a file)."""
    import json

    from featx.files import loads_json

    entries = {}
    for path in sorted(base.glob("*/verdict.json")):
        try:
            found = loads_json(path.read_text())["configuration"]
            entries[found["id"]] = found | {"headline": str(found.get("headline", ""))}
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a report folder of an older featx, or a damaged one: left out of the index
    entries[described["id"]] = described | {"headline": _headline(judged.text)}
    ordered = sorted(entries.values(), key=lambda e: str(e.get("written")), reverse=True)
    cell = lambda value: str(value).replace("|", "/").replace("\n", " ")  # noqa: E731
    lines = [f"# featx reports: {described['pipeline']}", "",
             f"Latest: [{described['id']}]({described['id']}/report.md), written {described['written']} "
             f"(`{described['command']}`).", "",
             "| configuration | backbone | fingerprint | init | probe | fine-tune | written | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for e in ordered:
        backbone = e.get("backbone") if isinstance(e.get("backbone"), dict) else {}
        probe = e.get("probe") if isinstance(e.get("probe"), dict) else {}
        tuned = e.get("finetune") if isinstance(e.get("finetune"), dict) else {}
        lines.append("| " + " | ".join(cell(v) for v in (
            f"[{e['id']}]({e['id']}/report.md)", backbone.get("name", "?"), str(backbone.get("fingerprint", "?"))[:12],
            backbone.get("init", "?"), f"{probe.get('protocol', '-')}, {probe.get('grid', '-')}" if probe else "-",
            f"{tuned.get('head_input')}, lr {_listed(tuned.get('learning_rates'), '?')}" if tuned else "-",
            e.get("written", "?"), e.get("headline", ""))) + " |")
    latest = {"id": described["id"], "report": f"{described['id']}/report.md",
              "html": f"{described['id']}/report.html", "verdict": f"{described['id']}/verdict.json",
              "written": described["written"], "command": described["command"]}
    return "\n".join(lines) + "\n", json.dumps(latest, indent=1) + "\n"


def _headline(text: str) -> str:
    """The verdict's first sentence, for the index."""
    first = text.split(". ")[0]
    return first if first.endswith(".") else first + "."


def write_all(contents: dict[Path, bytes]) -> None:
    """Every report file, or none: each is written whole to a temporary file first, and only
    when all of them are (a full disk fails here, replacing nothing) are they renamed into
    place, which needs no space."""
    from featx.files import refuse_link, write_bytes

    staged: list[tuple[Path, Path]] = []
    try:
        for path, data in contents.items():
            refuse_link(path, "where featx writes the report")
            staged.append((write_bytes(path.with_name(f".{path.name}.staged"), data), path))
        for keep, path in staged:
            os.replace(keep, path)
    except OSError as exc:
        raise FeatxError(f"cannot write the report in {path.parent} ({exc.strerror}); the previous "
                         "report is left as it was") from None
    finally:
        for keep, _ in staged:
            if os.path.lexists(keep):
                os.unlink(keep)


def _matplotlib_dir(folder: Path, root: Path) -> Path:
    """matplotlib's cache folder in the data directory, holding no link (matplotlib writes its
    font cache there without asking whether a name is a link)."""
    from featx.files import refuse_link, writable_dir

    writable_dir(folder, "matplotlib's cache folder", root=root)
    for entry in folder.iterdir():
        refuse_link(entry, "in matplotlib's cache folder")
    return folder


def _json_text(judged: "Verdict", described: dict) -> str:
    import json

    pick = lambda r: None if r is None else {k: getattr(r, k) for k in (  # noqa: E731
        "features", "head", "init", "primary_metric", "metrics", "metrics_ci", "n_eval", "converged")}
    document = {"text": judged.text, "frozen": pick(judged.frozen), "tuned": pick(judged.tuned),
                "quality_ratio": judged.quality_ratio, "compute_ratio": judged.compute_ratio,
                "comparison": judged.comparison, "lexical": judged.lexical,
                "configuration": described | {"headline": _headline(judged.text)}}
    # An undefined metric is null: bare NaN tokens are no JSON, and a strict parser refused the file.
    return json.dumps(_nan_free(document), indent=1, default=str, allow_nan=False) + "\n"


def _nan_free(value):
    """`value` with every NaN or infinite float (at any depth) made None. (Named apart from
    `_finite`, a test of one value: one name for both made an interval bound of 0.0 read as
    none, and the report's tables dropped that interval.)"""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _nan_free(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nan_free(v) for v in value]
    return value


def _notes(inputs: Inputs) -> list[str]:
    notes = list(inputs.notes)
    stages = {r.stage for r in inputs.main}
    current = inputs.current
    if "probe" not in stages:
        notes.append(f"No probe records of this configuration: run `{command(current, 'probe')}` "
                     f"(`{_make(current, 'probe')}`).")
    if "finetune" not in stages:
        notes.append(f"No fine-tune record of this configuration: run `{command(current, 'finetune')}` "
                     f"(`{_make(current, 'finetune')}`) for the baseline.")
    if not inputs.control:
        notes.append(f"No random-init control: `{command(current, 'extract', 'model.init=random')}`, then "
                     "`featx probe` and `featx finetune` with the same overrides.")
    if inputs.main:
        first = inputs.main[0]
        notes.append(f"Task: {first.task}; primary metric {first.primary_metric} (higher is better).")
    return notes + _label_notes(inputs.main, inputs.choice) + _truncation_notes(inputs.main)


def _label_notes(records: list[Record], choice) -> list[str]:
    """Binary: the positive class. Multilabel: the labels the macro metrics average over, the
    labels no head could learn, the labels each selection fold of the best frozen probe could score."""
    # A probe's summary first: its training rows are all of train (a fine-tune without a dev
    # split trains on 90% of them).
    binary = next((r.labels for r in records if r.labels and "positive" in r.labels), None)
    if binary is not None:
        shares = [f"{binary[k]:.0%} of {name}" for k, name in (("positive_train", "train"), ("positive_report", "the reported rows"))
                  if isinstance(binary.get(k), (int, float))]
        return [f"Positive class: {binary['positive']!r} (against {binary['negative']!r}; {', '.join(shares)}): "
                "f1 is its F1, and data.label_names orders the two labels (the second is positive)."]
    described = sorted((r for r in records if r.labels and "total" in r.labels), key=lambda r: r.stage != "probe")
    if not described:
        return []
    summary, split = described[0].labels, described[0].protocol["report_on"]
    notes = [f"Labels: macro_f1 averages over the {summary['macro_f1']} of {summary['total']} labels with "
             f"a positive {split} row, macro_roc_auc over the {summary['macro_roc_auc']} with a positive "
             "and a negative one; micro_f1 counts every label."]
    constant = summary["constant_in_train"]
    if constant:
        notes.append(f"{len(constant)} label(s) never (or always) present in the training split are "
                     f"predicted as that constant by every head: {', '.join(constant[:10])}"
                     f"{', ...' if len(constant) > 10 else ''}.")
    frozen = choice.record if choice else None
    folds = frozen.selection_labels if frozen else None
    if folds and any(f["labels_scored"] < summary["total"] for f in folds):
        notes.append(f"The best frozen probe was selected on {frozen.protocol['select_on']}: "
                     "labels with a positive held-out row per selection split: "
                     f"{', '.join(str(f['labels_scored']) for f in folds)} of {summary['total']}.")
    return notes


def _truncation_notes(records: list[Record]) -> list[str]:
    """Texts longer than max_length lose their end: how many the fine-tune cut (its record
    counts them; extraction cut the same texts for the probes)."""
    notes = []
    for tune in (r for r in records if r.stage == "finetune" and r.truncated):
        cut = tune.truncated
        if cut["train"] or cut["report"]:
            notes.append(f"The fine-tune ({tune.head}) truncated {cut['train']:,} of "
                         f"{tune.n_train:,} training texts at max_length = {cut['max_length']} "
                         f"tokens, and {cut['report']:,} of {tune.n_eval:,} "
                         f"{tune.protocol['report_on']} texts.")
    return notes


def _markdown(inputs: Inputs, judged: Verdict, *, header: list[str], cells: list[list[str]],
              images: dict[str, bytes], notes: list[str], settings: list[str]) -> str:
    lines = [f"# featx report: {inputs.pipeline}", "", f"**Verdict.** {judged.text}", ""]
    lines += ["## Configuration", ""] + [f"- {n}" for n in settings] + [""]
    lines += ["## Results", ""] + [f"- {n}" for n in notes] + [""]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in cells]
    lines.append("")
    for name in images:
        lines += [f"![{name}]({name}.png)", ""]
    return "\n".join(lines)


def _html(inputs: Inputs, judged: Verdict, *, header: list[str], cells: list[list[str]],
          images: dict[str, bytes], notes: list[str], settings: list[str]) -> str:
    e = html.escape
    parts = ["<!DOCTYPE html>", "<html><head><meta charset=\"utf-8\">",
             f"<title>featx report: {e(inputs.pipeline)}</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
             "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;"
             "padding:3px 6px;text-align:right}td:first-child,th:first-child{text-align:left}"
             "img{max-width:100%}</style></head><body>",
             f"<h1>featx report: {e(inputs.pipeline)}</h1>",
             f"<p><strong>Verdict.</strong> {_code(e(judged.text))}</p>", "<h2>Configuration</h2>", "<ul>"]
    parts += [f"<li>{_code(e(n))}</li>" for n in settings] + ["</ul>", "<h2>Results</h2>", "<ul>"]
    parts += [f"<li>{_code(e(n))}</li>" for n in notes] + ["</ul>", "<table>"]
    parts.append("<tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr>")
    parts += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in cells]
    parts.append("</table>")
    for name, data in images.items():
        encoded = base64.b64encode(data).decode()
        parts.append(f'<h2>{e(name.replace("_", " "))}</h2>'
                     f'<img alt="{e(name)}" src="data:image/png;base64,{encoded}">')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _code(escaped: str) -> str:
    """`text` -> <code>text</code>: the notes' commands, set as code instead of backticks."""
    import re

    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


def _csv_text(all_rows: list[dict]) -> str:
    fields = list(dict.fromkeys(k for row in all_rows for k in row))
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=fields)
    writer.writeheader()
    writer.writerows(all_rows)
    return buffer.getvalue()
