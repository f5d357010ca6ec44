"""`featx curve`: every point of a pipeline's learning curve trained (or reused) and recorded.

The full training split is the curve's last budget, and its two records are the verdict's own:
the probe's frozen choice and the fine-tune (run first when missing). Every smaller budget and
draw is a folder of the curve's (featx.runs.records.curve_dir) with one probe record and one
fine-tune record, each carrying its `label_budget`; a finished point is reused, a killed
fine-tune resumes from its last epoch, and `run.json` says how many points the curve planned
and whether it finished.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from featx.config.pipeline import Pipeline
from featx.errors import FeatxError
from featx.files import writable_dir
from featx.runs.records import (curve_dir, curve_hash, point_name, read_predictions, read_record, record_name,
                                write_record, write_run_status)
from featx.runs.schema import Record
from featx.stats import ladder
from featx.cpus import available

log = logging.getLogger("featx")


@dataclass(frozen=True)
class Point:
    """One budget and draw of the curve: its rows of the training split and what its records say."""
    rung: ladder.Rung
    draw: int
    rows: np.ndarray
    label_budget: dict


@dataclass(frozen=True)
class CurvePlan:
    """The curve of a pipeline as configured: the frozen choice it retrains, its folder and points."""
    frozen: Record
    unit: str
    rungs: list
    points: list
    directory: Path
    cache_path: Path
    n_train: int
    work: Callable[[int], float]
    """The expected forward passes of a point's fine-tune on that many rows (`point_work`)."""
    full_work: float
    """The same estimate for the rows the full fine-tune trains on."""


def plan_curve(pipeline: Pipeline, frozen: Record, tuned: Record) -> CurvePlan:
    """The ladder and the points of the pipeline's curve, retraining `frozen` (the verdict's frozen
    choice) against the pipeline's fine-tune recipe, whose run on the full split is `tuned`."""
    from featx.cache.plan import find_cache
    from featx.cache.reader import Cache
    from featx.finetune.stage import held_for_selection

    path = find_cache(pipeline)
    with Cache(path) as cache:
        task, y, splits = cache.task, cache.labels("train"), cache.splits
        held = held_for_selection(task, y, splits, pipeline.finetune)
        # The fine-tune selects on dev when there are dev and test splits, else on the held rows.
        n_select = cache.n_rows("dev") if {"dev", "test"} <= set(splits) else int(held.sum())
    # A budget never draws the rows the fine-tune picks its epochs on: every point's fine-tune
    # selects on them, as the full one does.
    eligible = np.flatnonzero(~held)
    unit = ladder.unit_of(task)
    counts = np.bincount(y[eligible]) if unit == "per_class" else np.array([len(eligible)])
    cfg = pipeline.curve
    work = point_work(pipeline, tuned, n_select)
    rungs = ladder.ladder(unit, counts[counts > 0], budgets=cfg.budgets, draws=cfg.draws, until=cfg.draws_until,
                          max_cost=cfg.max_cost, work=work)
    digest = curve_hash(pipeline, frozen.features, frozen.head, frozen.primary_metric)[:16]
    strata = ladder.strata(task, y[eligible])
    places = {d: ladder.positions(strata, unit, cfg.seed, d) for d in range(max(r.draws for r in rungs))}
    points = []
    for rung in rungs[:-1]:
        for draw in range(rung.draws):
            rows = eligible[ladder.subset(places[draw], rung.size)]
            points.append(Point(rung, draw, rows, {"curve": digest, "unit": unit, "size": rung.size,
                                                   "rows": len(rows), "draw": draw, "seed": cfg.seed,
                                                   "full": False}))
    directory = curve_dir(pipeline.runs_dir, pipeline.name, frozen.cache_key, digest)
    return CurvePlan(frozen, unit, rungs, points, directory, path, len(y), work, work(len(eligible)))


def point_work(pipeline: Pipeline, tuned: Record, n_select: int) -> Callable[[int], float]:
    """rows -> the backbone forward-pass equivalents a point's fine-tune on that many rows is
    expected to cost: the full run `tuned` trained its rows for `tuned.epochs` epochs, and a run
    on fewer rows trains more epochs of fewer steps (featx.finetune.convergence.expected_epochs),
    with the search `tuned` ran (a curve on another device may search otherwise). The ladder's
    cost cap counts this work, not rows: a small budget's fine-tune costs far more than its
    share of the rows."""
    from featx.finetune.convergence import auto_max_epochs, expected_epochs, expected_forward_passes

    cfg = pipeline.finetune

    def work(rows: int) -> float:
        cap = cfg.max_epochs or auto_max_epochs(rows, cfg.batch_size)
        epochs = expected_epochs(rows, tuned.n_train, tuned.epochs, cap)
        return expected_forward_passes(rows, n_select, tuned.n_eval, epochs=epochs, candidates=len(cfg.learning_rates),
                                       strategy=tuned.hyperparameters["search"], max_epochs=cap,
                                       patience=cfg.patience)
    return work


def run_curve(pipeline: Pipeline) -> CurvePlan:
    """Train (or reuse) every point of the pipeline's curve; returns its plan. The probe and the
    full-data fine-tune run first when they have not (each reuses a finished run)."""
    from featx.finetune.stage import run_budget, run_finetune
    from featx.probe.stage import run_probe

    run_probe(pipeline)
    tuned = run_finetune(pipeline)  # the full split's tuned side, which the report reads with the verdict
    plan = plan_curve(pipeline, _frozen_choice(pipeline), tuned)
    writable_dir(plan.directory, root=pipeline.root)
    # The points of this ladder: a folder may hold more, of another ladder of the same draws.
    status = {"config_hash": plan.directory.name.removeprefix("curve-"), "planned": len(plan.points),
              "points": [point_name(p.label_budget) for p in plan.points], "finished": False}
    write_run_status(plan.directory, status)
    _announce(plan, pipeline)
    start = time.perf_counter()
    for k, point in enumerate(plan.points, 1):
        where = plan.directory / point_name(point.label_budget)
        frozen_record = _frozen_point(pipeline, plan, point, where / "probe")
        tuned_record = run_budget(pipeline, point.rows, where / "finetune", point.label_budget)
        metric = plan.frozen.primary_metric
        log.info("curve point %d of %d: %s, draw %d (%d rows): frozen %s = %.4f, fine-tune %.4f%s", k,
                 len(plan.points), _budget_text(point.rung.size, plan.unit), point.draw, len(point.rows), metric,
                 frozen_record.metrics[metric], tuned_record.metrics[metric],
                 "" if tuned_record.converged is not False else " (not converged)")
    write_run_status(plan.directory, status | {"finished": True})
    log.info("curve done in %.0f s; points in %s", time.perf_counter() - start, plan.directory)
    return plan


def _frozen_choice(pipeline: Pipeline) -> Record:
    """The verdict's frozen choice, as the report makes it from the pipeline's records."""
    from featx.report.collected import collect

    choice = collect(pipeline.runs_dir, pipeline.name, pipeline).choice
    if choice is None:
        raise FeatxError("the curve retrains the verdict's frozen choice, and the probe gave none (the mteb "
                         "protocol chooses no head): run the curve with probe.protocol = \"auto\"")
    return choice.record


def _announce(plan: CurvePlan, pipeline: Pipeline) -> None:
    """The curve's expected work before it starts: its points, and their fine-tunes' expected
    forward passes against the full fine-tune's."""
    rows = sum(len(p.rows) for p in plan.points)
    expected = sum(plan.work(len(p.rows)) for p in plan.points)
    ladder_text = ", ".join(f"{_budget_text(r.size, plan.unit)}{f' x{r.draws}' if r.draws > 1 else ''}"
                            for r in plan.rungs[:-1])
    log.info("curve plan: %s on %s: budgets %s, then the full split (%s rows: the verdict's records); "
             "%d points, each a probe and a fine-tune, training on %s rows in all; their fine-tunes are expected "
             "to cost about %s backbone forward-pass equivalents, %.1fx the estimate for the full fine-tune "
             "(curve.max_cost = %g)",
             plan.frozen.features + "/" + plan.frozen.head, pipeline.name, ladder_text or "none",
             f"{plan.n_train:,}", len(plan.points), f"{rows:,}", f"{expected:,.0f}",
             expected / plan.full_work, pipeline.curve.max_cost)


def _budget_text(size: int, unit: str) -> str:
    return f"{size:,} per class" if unit == "per_class" else f"{size:,} rows"


def _frozen_point(pipeline: Pipeline, plan: CurvePlan, point: Point, directory: Path) -> Record:
    """The frozen side of a point: the choice's features and head, fitted on the point's rows with
    its hyperparameters chosen again; reused when this point's record and predictions are there."""
    from featx.probe.job import Features, probe_one

    frozen = plan.frozen
    done = directory / record_name(frozen.features, frozen.head)
    reused = _reused(done, point.label_budget, frozen.config_hash)
    if reused is not None:
        return reused
    features = Features(frozen.pooling, tuple(frozen.layers), frozen.combine)
    record, predictions = probe_one(plan.cache_path, features, frozen.head, pipeline.probe, pipeline=pipeline.name,
                                    threads=available(),
                                    budget={"train_rows": point.rows, "record": point.label_budget})
    return write_record(writable_dir(directory, root=pipeline.root), record, predictions)


def _reused(done: Path, label_budget: dict, config_hash: str | None) -> Record | None:
    """A point's probe record when it is this point's, of this probe configuration, and its
    predictions are there, else None."""
    if not done.is_file() or done.is_symlink():
        return None
    try:
        record = read_record(done)
        if record.label_budget != label_budget or record.config_hash != config_hash:
            return None
        read_predictions(done.parent, record)
    except FeatxError:
        return None
    return record
