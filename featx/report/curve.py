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
import re
from pathlib import Path

import numpy as np

from featx.config.load import command
from featx.errors import FeatxError
from featx.report.collected import Collected
from featx.runs.choice import best_tuned
from featx.runs.records import (curve_dir, curve_hash, point_name, read_predictions, read_records, read_run_status,
                                record_dir)
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
    try:
        full = tuple(read_predictions(record_dir(runs_dir, r), r) for r in (frozen, tuned))
    except FeatxError:
        return None
    planned, finished = _status(directory, digest)
    pairs = _points(directory, digest, pipeline.name, frozen)
    if planned is not None:  # the last run's ladder: other points of the folder are another ladder's
        pairs = {key: pair for key, pair in pairs.items() if point_name({"size": key[0], "draw": key[1]}) in planned}
    budgets, points = _budgets(pairs, full, frozen, tuned)
    if not budgets:
        return None
    ids, labels = full[0].ids, full[0].labels
    groups = collected.repeats.groups_of(ids) if collected.repeats is not None else None
    curve = analyse(frozen.task, frozen.primary_metric, labels, budgets, groups=groups)
    measured = [p for p in points if p["side"] == "tuned" and not p["full"]]
    spent = sum(p["forward_passes"] or 0 for p in measured)
    return curve | {
        "unit": points[0]["unit"], "n_test": len(labels), "frozen": {"features": frozen.features, "head": frozen.head},
        "planned": None if planned is None else len(planned), "command": command(pipeline, "curve"),
        "complete": finished and planned is not None and len(measured) == len(planned),
        "not_converged": [p for p in measured if p["converged"] is False],
        "cost": {"curve_forward_passes": spent, "full_forward_passes": tuned.backbone_forward_passes,
                 "ratio": spent / tuned.backbone_forward_passes if tuned.backbone_forward_passes else None,
                 "curve_seconds": round(sum(p["seconds"] or 0.0 for p in measured), 1),
                 "full_seconds": tuned.wall_seconds},
        "points": points}


def _status(directory: Path, digest: str) -> tuple[list[str] | None, bool]:
    """(the points the curve's last run planned, whether it finished) from its run.json; None
    when it says nothing featx writes there."""
    status = read_run_status(directory, digest)
    names = status["points"] if status is not None and "points" in status else None
    if not (isinstance(names, list) and all(isinstance(n, str) and re.fullmatch(r"size-\d{1,12}-draw-\d{1,6}", n)
                                             for n in names)):
        return None, False
    return names, "finished" in status and status["finished"] is True


def _points(directory: Path, digest: str, pipeline: str, frozen: Record) -> dict:
    """{(size, draw): ((probe record, its folder), (fine-tune record, its folder))} of the curve's
    folder: both sides there, each of this pipeline, curve and cache, in the folder its budget
    names; no link followed."""
    if not directory.is_dir() or directory.is_symlink():
        return {}
    found: dict = {}
    for folder in sorted(d for d in directory.iterdir() if d.is_dir() and not d.is_symlink()):
        for side in ("probe", "finetune"):
            where = folder / side
            if not where.is_dir() or where.is_symlink():
                continue
            try:
                records = read_records(where)
            except FeatxError:
                continue  # a damaged point is trained again by `featx curve`; the report leaves it out
            for record in records:
                budget = record.label_budget
                if (budget is None or budget["curve"] != digest or record.stage != side or record.pipeline != pipeline
                        or record.cache_key != frozen.cache_key or point_name(budget) != folder.name):
                    continue
                if side == "probe" and (record.features, record.head) != (frozen.features, frozen.head):
                    continue
                found.setdefault((budget["size"], budget["draw"]), {})[side] = (record, where)
    return {key: (sides["probe"], sides["finetune"]) for key, sides in sorted(found.items()) if len(sides) == 2}


def _budgets(pairs: dict, full: tuple, frozen: Record, tuned: Record):
    """(BudgetPredictions per budget, smallest first, the full split last; the points as rows).
    A point counts with both sides' predictions read from its own folder, on the verdict's test rows."""
    by_size: dict = {}
    points = []
    for (size, draw), ((probe, probe_at), (tune, tune_at)) in pairs.items():
        try:
            got = [read_predictions(probe_at, probe), read_predictions(tune_at, tune)]
        except FeatxError:
            continue
        if not all(np.array_equal(p.ids, full[0].ids) and np.array_equal(p.labels, full[0].labels) for p in got):
            continue  # not the verdict's test rows
        entry = by_size.setdefault(size, {"rows": [], "frozen": [], "tuned": []})
        entry["rows"].append(probe.label_budget["rows"])
        entry["frozen"].append((got[0].scores, got[0].threshold))
        entry["tuned"].append((got[1].scores, got[1].threshold))
        points += [_point(probe, "frozen", size, draw, probe.label_budget["rows"]),
                   _point(tune, "tuned", size, draw, probe.label_budget["rows"])]
    budgets = [BudgetPredictions(size, int(round(np.mean(e["rows"]))), False, e["frozen"], e["tuned"])
               for size, e in sorted(by_size.items())]
    if not budgets:
        return [], []
    unit = pairs[next(iter(pairs))][0][0].label_budget["unit"]
    budgets.append(BudgetPredictions(None, frozen.n_train, True, [(full[0].scores, full[0].threshold)],
                                     [(full[1].scores, full[1].threshold)]))
    points += [_point(frozen, "frozen", None, 0, frozen.n_train), _point(tuned, "tuned", None, 0, frozen.n_train)]
    return budgets, [p | {"unit": unit} for p in points]


def _point(record: Record, side: str, size, draw: int, budget_rows: int) -> dict:
    """One record of the curve as a row: `budget_rows` the budget's training rows (the same for
    both sides; at the full split, all of train), `rows` what this side trained on (without dev
    and test splits both, the fine-tune leaves out the part of train it selects on)."""
    metric = record.primary_metric
    tuned = record.stage == "finetune"
    return {"side": side, "size": size, "draw": draw, "full": size is None, "budget_rows": budget_rows,
            "rows": record.n_train, "metric": metric, "score": record.metrics[metric], "ci": record.metrics_ci[metric],
            "converged": record.converged if tuned else None, "epochs": record.epochs,
            "learning_rate": record.learning_rate, "hyperparameters": None if tuned else record.hyperparameters,
            "forward_passes": record.backbone_forward_passes if tuned else 0,
            "seconds": record.wall_seconds if tuned else record.fit_seconds}


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
    it does not at the full split), where the frozen side is ahead, the fitted crossing where it
    agrees with the measured budgets, what doubling the labels adds (extrapolated), what the
    curve cost and what it lacks."""
    text = "; ".join(_crossover_sentences(curve)) + "."
    text += _crossing_text(curve)
    doubling = curve["doubling"]
    if doubling is not None:
        text += (f" Doubling your labels would add about {_gain_text(doubling['frozen'])} points of "
                 f"{curve['metric']} to the frozen side and {_gain_text(doubling['tuned'])} to the fine-tune "
                 "(extrapolated from the fitted curves).")
    text += _cost_text(curve)
    below = curve["budgets"][:-1]
    if curve["complete"] and below and all(b["draws"] == 1 for b in below):
        text += (" Each budget below your rows is one draw of rows: its interval covers the test rows, not which "
                 "rows were drawn, which moves a small budget's scores by several points (`curve.draws`, within "
                 "`curve.max_cost`, draws the small budgets again).")
    unconverged, measured = curve["not_converged"], tuned_points(curve)
    if unconverged:
        text += (f" {len(unconverged)} of the curve's {len(measured)} fine-tunes below the full split stopped "
                 "at a cap while still improving: their scores are lower bounds, so the fine-tune's lead there may be "
                 "larger.")
    if not curve["complete"]:
        text += (f" The curve is incomplete ({len(measured)} of {curve['planned'] or '?'} points): "
                 f"`{curve['command']}` finishes it.")
    return text


def _crossover_sentences(curve: dict) -> list[str]:
    """The measured crossover and the budgets up to which the frozen side is ahead, each said only
    as far as the budgets' own intervals show it."""
    unit, budgets = curve["unit"], curve["budgets"]
    crossover, ahead = curve["crossover"], curve["frozen_ahead_until"]
    full_rows = budgets[-1]["rows"]
    lead = curve["tuned_ahead_until"]
    if crossover is None and lead is not None:  # ahead with few labels, not with all of them
        shown = [b for b in budgets if b["size"] is not None and b["size"] <= lead["size"]]
        gaps = [100 * b["difference"]["value"] for b in shown]
        said = [f"On the learning curve the fine-tune is measurably better at every budget up to "
                f"{_size_text(lead['size'], unit)} ({lead['rows']:,} rows), by {min(gaps):.1f} to {max(gaps):.1f} "
                f"points, but not at your {full_rows:,} rows: with {lead['rows']:,} labelled rows or fewer, fine-tuning "
                "pays, while with all of yours the frozen probe is as good as the test rows can tell"]
    elif crossover is None:
        said = [f"On the learning curve ({len(budgets)} budgets up to your {full_rows:,} rows) the fine-tune is not "
                f"measurably better at the full split, so there is no crossover up to {full_rows:,} rows"]
    elif crossover["at_smallest"]:
        return [f"On the learning curve the fine-tune is measurably better at every budget, from the smallest "
                f"({_size_text(crossover['size'], unit)})"]
    else:
        said = [f"On the learning curve the fine-tune becomes measurably better from "
                f"{_size_text(crossover['size'], unit)} ({crossover['rows']:,} rows); at "
                f"{_size_text(crossover['after_size'], unit)} it is not"]
        below = [b for b in budgets if b["size"] is not None and b["size"] < crossover["after_size"]]
        if any(b["difference"]["ci"][0] > 0 for b in below):  # not monotone: say so instead of a rule
            said.append("at a smaller budget it was again, so where it starts to pay is not settled")
        elif ahead is None:
            said.append("below that the frozen probe is as good")
    if ahead is not None:
        said.append(f"up to {_size_text(ahead['size'], unit)} the frozen probe is measurably better")
    return said


def tuned_points(curve: dict) -> list[dict]:
    """The curve's fine-tunes below the full split."""
    return [p for p in curve["points"] if p["side"] == "tuned" and not p["full"]]


def _crossing_text(curve: dict) -> str:
    """The fitted crossing, when both fits are supported and it agrees with the measured budgets:
    at or below the measured crossover, or, with none up to the full split, beyond it
    (extrapolated)."""
    crossing, crossover = curve["fitted_crossing"], curve["crossover"]
    if crossing is None or crossing["rows"] is None or not crossing["supported"]:
        return ""
    rows, (low, high), largest = crossing["rows"], crossing["ci"], curve["budgets"][-1]["rows"]
    if (crossover is not None and rows > crossover["rows"]) or (crossover is None and rows <= largest):
        return ""  # the fits disagree with what the budgets measured: the budgets speak
    per_class = _per_class(rows, curve)
    said = (" The fitted curves " + ("would cross" if crossing["extrapolated"] else "cross")
            + f" at about {rows:,.0f} rows"
            + (f" ({per_class:,.0f} per class)" if per_class is not None and math.isfinite(per_class) else ""))
    if not (math.isfinite(low) or math.isfinite(high)):
        said += " (no interval: in the resamples the fits do not cross in the budgets' range)"
    elif math.isfinite(low) and math.isfinite(high):
        said += f", interval {low:,.0f}-{high:,.0f}"
    else:
        said += (f", interval from {low:,.0f} rows to beyond the range" if math.isfinite(low)
                 else f", interval from below the range to {high:,.0f} rows")
    return said + (" (extrapolated beyond your rows)." if crossing["extrapolated"] else ".")


def _gain_text(gain: dict) -> str:
    low, high = gain["ci"]
    interval = f" [{_points_text(low)}, {_points_text(high)}]" if math.isfinite(low) and math.isfinite(high) else ""
    return _points_text(gain["gain"]) + interval


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
