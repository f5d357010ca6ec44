"""The learning curve in the report: the points `featx curve` recorded for the report's
configuration, read back with their predictions, judged by featx.stats.curve, and said in
sentences (`curve_text`) and rows (`curve_rows`). `label_curve` is what verdict.json carries and
`featx.open_curve` returns.

The full training split is the curve's last budget, and its two records are the verdict's own
(the frozen choice and the fine-tune it is set against): the curve and the verdict agree there
by construction. A point counts only with both its records, each this curve's, on the verdict's
test rows.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from featx.config.load import command
from featx.errors import FeatxError
from featx.report.collected import Collected
from featx.runs.choice import best_tuned
from featx.runs.records import curve_dir, curve_hash, read_predictions, read_records, read_run_status, record_dir
from featx.runs.schema import Record
from featx.stats.curve import BudgetPredictions, analyse


def label_curve(collected: Collected, runs_dir, pipeline) -> dict | None:
    """The curve of the report's configuration (JSON values), or None when it has no point: its
    budgets with both sides, the difference and their intervals, the fits, the crossover, what
    doubling the labels adds, its cost against the full fine-tune, the fine-tunes a cap stopped,
    whether every planned point is there, and `points` (one entry per record, for a DataFrame)."""
    if pipeline is None or collected.choice is None:
        return None
    frozen = collected.choice.record
    tuned = best_tuned(collected.main, frozen.primary_metric)
    if tuned is None:
        return None
    digest = curve_hash(pipeline, frozen.features, frozen.head, frozen.primary_metric)[:16]
    directory = curve_dir(runs_dir, pipeline.name, frozen.cache_key, digest)
    pairs = _points(directory, digest, frozen)
    if not pairs:
        return None
    try:
        full = (read_predictions(record_dir(runs_dir, frozen), frozen), read_predictions(record_dir(runs_dir, tuned), tuned))
    except FeatxError:
        return None
    budgets, points = _budgets(runs_dir, pairs, full, frozen, tuned)
    if not budgets:
        return None
    ids, labels = full[0].ids, full[0].labels
    groups = collected.repeats.groups_of(ids) if collected.repeats is not None else None
    curve = analyse(frozen.task, frozen.primary_metric, labels, budgets, groups=groups)
    unit = next(iter(pairs.values()))[0].label_budget["unit"]
    status = read_run_status(directory, digest) or {}
    tuned_points = [t for _, t in pairs.values()]
    spent = sum(t.backbone_forward_passes or 0 for t in tuned_points)
    return curve | {
        "unit": unit, "n_test": len(labels), "frozen": {"features": frozen.features, "head": frozen.head},
        "planned": status.get("planned"), "command": command(pipeline, "curve"), "complete": bool(status.get("finished")) and len(pairs) == status.get("planned"),
        "not_converged": [p for p in points if p["side"] == "tuned" and not p["full"] and p["converged"] is False],
        "cost": {"curve_forward_passes": spent, "full_forward_passes": tuned.backbone_forward_passes,
                 "ratio": spent / tuned.backbone_forward_passes if tuned.backbone_forward_passes else None,
                 "curve_seconds": round(sum(t.wall_seconds or 0.0 for t in tuned_points), 1),
                 "full_seconds": tuned.wall_seconds},
        "points": points}


def _points(directory: Path, digest: str, frozen: Record) -> dict:
    """{(size, draw): (probe record, fine-tune record)} of the curve's folder: both sides there,
    each of this curve and the frozen choice's cache."""
    if not directory.is_dir():
        return {}
    found: dict = {}
    for folder in sorted(d for d in directory.iterdir() if d.is_dir() and not d.is_symlink()):
        try:
            records = [r for side in ("probe", "finetune") for r in read_records(folder / side)]
        except FeatxError:
            continue  # a damaged point is trained again by `featx curve`; the report leaves it out
        for record in records:
            budget = record.label_budget
            if budget is None or budget["curve"] != digest or record.cache_key != frozen.cache_key:
                continue
            if record.stage == "probe" and (record.features, record.head) != (frozen.features, frozen.head):
                continue
            found.setdefault((budget["size"], budget["draw"]), {})[record.stage] = record
    return {key: (sides["probe"], sides["finetune"]) for key, sides in sorted(found.items())
            if set(sides) == {"probe", "finetune"}}


def _budgets(runs_dir, pairs: dict, full: tuple, frozen: Record, tuned: Record):
    """(BudgetPredictions per budget, smallest first, the full split last; the points as rows)."""
    by_size: dict = {}
    points = []
    for (size, draw), (probe, tune) in pairs.items():
        try:
            got = [read_predictions(record_dir(runs_dir, r), r) for r in (probe, tune)]
        except FeatxError:
            continue
        if not all(np.array_equal(p.ids, full[0].ids) and np.array_equal(p.labels, full[0].labels) for p in got):
            continue  # not the verdict's test rows
        entry = by_size.setdefault(size, {"rows": [], "frozen": [], "tuned": []})
        entry["rows"].append(probe.label_budget["rows"])
        entry["frozen"].append((got[0].scores, got[0].threshold))
        entry["tuned"].append((got[1].scores, got[1].threshold))
        points += [_point(probe, "frozen", size, draw), _point(tune, "tuned", size, draw)]
    budgets = [BudgetPredictions(size, int(round(np.mean(e["rows"]))), False, e["frozen"], e["tuned"])
               for size, e in sorted(by_size.items())]
    if not budgets:
        return [], []
    budgets.append(BudgetPredictions(None, frozen.n_train, True, [(full[0].scores, full[0].threshold)],
                                     [(full[1].scores, full[1].threshold)]))
    points += [_point(frozen, "frozen", None, 0), _point(tuned, "tuned", None, 0)]
    return budgets, points


def _point(record: Record, side: str, size, draw: int) -> dict:
    metric = record.primary_metric
    return {"side": side, "size": size, "draw": draw, "full": size is None, "rows": record.n_train,
            "metric": metric, "score": record.metrics[metric], "ci": record.metrics_ci[metric],
            "converged": record.converged if record.stage == "finetune" else None,
            "epochs": record.epochs, "learning_rate": record.learning_rate,
            "hyperparameters": None if record.stage == "finetune" else record.hyperparameters,
            "forward_passes": record.backbone_forward_passes if record.stage == "finetune" else 0,
            "seconds": record.wall_seconds if record.stage == "finetune" else record.fit_seconds}


def curve_points(pipeline) -> list[dict]:
    """The learning curve's points of the pipeline as configured (a Pipeline), one entry per
    side, budget and draw (`pandas.DataFrame(points)`); empty when `featx curve` has not run."""
    from featx.report.collected import collect

    curve = label_curve(collect(pipeline.runs_dir, pipeline.name, pipeline), pipeline.runs_dir, pipeline)
    return [] if curve is None else curve["points"]


# ---------------------------------------------------------------------------------------------
# In words


def _size_text(size, unit: str) -> str:
    if size is None:
        return "the full split"
    return f"{size:,} rows per class" if unit == "per_class" else f"{size:,} rows"


def _points_text(value: float) -> str:
    return f"{100 * value:.1f}"


def _per_class(rows: float, curve: dict) -> float | None:
    """Rows in all as rows per class, by the measured budgets (linear in log between them)."""
    sized = [(b["rows"], b["size"]) for b in curve["budgets"] if b["size"] is not None]
    if curve["unit"] != "per_class" or len(sized) < 2:
        return None
    xs, ys = np.log([r for r, _ in sized]), np.log([s for _, s in sized])
    return float(np.exp(np.interp(np.log(rows), xs, ys, left=np.nan, right=np.nan)))


def curve_text(curve: dict) -> str:
    """The verdict's sentences on the curve: where the fine-tune becomes measurably better (or that
    it never does on the measured budgets), the fitted crossing, where the frozen side is ahead,
    what doubling the labels adds (extrapolated), what the curve cost and what it lacks."""
    unit, budgets = curve["unit"], curve["budgets"]
    full = budgets[-1]
    sentences = []
    crossover, ahead = curve["crossover"], curve["frozen_ahead_until"]
    if crossover is None:
        sentences.append(f"On the learning curve ({len(budgets)} budgets up to your {full['rows']:,} rows) the "
                         "fine-tune is not measurably better at the full split, so there is no crossover up to "
                         f"{full['rows']:,} rows")
    elif crossover["at_smallest"]:
        sentences.append(f"On the learning curve the fine-tune is measurably better at every budget, from the "
                         f"smallest ({_size_text(crossover['size'], unit)})")
    else:
        sentences.append(f"On the learning curve the fine-tune becomes measurably better from "
                         f"{_size_text(crossover['size'], unit)} ({crossover['rows']:,} rows); at "
                         f"{_size_text(crossover['after_size'], unit)} and below it is not")
    if ahead is not None:
        sentences.append(f"up to {_size_text(ahead['size'], unit)} the frozen probe is measurably better")
    elif crossover is not None and not crossover["at_smallest"]:
        sentences.append("below that the frozen probe is as good")
    text = "; ".join(sentences) + "."
    text += _crossing_text(curve)
    doubling = curve["doubling"]
    if doubling is not None:
        text += (f" Doubling your labels would add about {_points_text(doubling['frozen']['gain'])} points of "
                 f"{curve['metric']} to the frozen side and {_points_text(doubling['tuned']['gain'])} to the "
                 "fine-tune (extrapolated from the fitted curves).")
    text += _cost_text(curve)
    unconverged = curve["not_converged"]
    if unconverged:
        text += (f" {len(unconverged)} of the curve's {len(tuned_points(curve))} fine-tunes below the full split "
                 "stopped at a cap while still improving (lower bounds): the crossover may come earlier.")
    if not curve["complete"]:
        text += (f" The curve is incomplete ({len(tuned_points(curve))} of {curve['planned'] or '?'} points): "
                 f"`{curve['command']}` finishes it.")
    return text


def tuned_points(curve: dict) -> list[dict]:
    """The curve's fine-tunes below the full split."""
    return [p for p in curve["points"] if p["side"] == "tuned" and not p["full"]]


def _crossing_text(curve: dict) -> str:
    crossing = curve["fitted_crossing"]
    if crossing is None or crossing["rows"] is None or not crossing["supported"]:
        return ""
    rows, (low, high) = crossing["rows"], crossing["ci"]
    per_class = _per_class(rows, curve)
    said = f" The fitted curves cross at about {rows:,.0f} rows"
    said += f" ({per_class:,.0f} per class)" if per_class is not None and math.isfinite(per_class) else ""
    said += (f", interval {low:,.0f}-{high:,.0f}" if math.isfinite(low) and math.isfinite(high) else
             ", interval open (in many resamples the fits do not cross)")
    return said + (" (extrapolated beyond the measured budgets)." if crossing["extrapolated"] else ".")


def _cost_text(curve: dict) -> str:
    cost = curve["cost"]
    if not cost["ratio"]:
        return ""
    return (f" The curve's fine-tunes cost {cost['ratio']:.1f}x the full fine-tune "
            f"({cost['curve_forward_passes']:,} backbone forward-pass equivalents against "
            f"{cost['full_forward_passes']:,}).")


def curve_rows(curve: dict) -> tuple[list[str], list[list[str]]]:
    """(header, cells) of the curve's table: per budget both sides and the difference, in points."""
    metric = curve["metric"]
    header = ["budget", "rows", "draws", f"frozen {metric}", f"fine-tuned {metric}", "difference (tuned - frozen)"]

    def cell(side: dict, signed: bool = False) -> str:
        value, (low, high) = side["value"], side["ci"]
        form = "{:+.4f}" if signed else "{:.4f}"
        interval = f" [{form.format(low)}, {form.format(high)}]" if math.isfinite(low) and math.isfinite(high) else ""
        return form.format(value) + interval
    cells = [[_size_text(b["size"], curve["unit"]), f"{b['rows']:,}", str(b["draws"]), cell(b["frozen"]),
              cell(b["tuned"]), cell(b["difference"], signed=True)] for b in curve["budgets"]]
    return header, cells
