"""What a fine-tune ends with: the chosen candidate's best epoch evaluated on the report split
(`evaluate`), its weights kept as the run's `best.safetensors`, and its record (`build_record`:
the configuration as it ran, the whole search's cost and curves, the cache's facts).
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from featx.config.load import command
from featx.files import atomic_write, refuse_link, regular_file
from featx.finetune.modeling import predict_logits, scores_from_logits
from featx.finetune.search import rank
from featx.finetune.training import Candidate, Setup
from featx.runs.records import Predictions, configuration
from featx.runs.schema import Record, new_record
from featx.stats import bootstrap
from featx.stats.duplicates import row_groups
from featx.stats import metrics as M
from featx.tasks import TASKS

if TYPE_CHECKING:
    from featx.finetune.stage import Prepared

# Stop reasons a larger budget lifts: running again with more epochs (or seconds) continues.
CAPS = ("max_epochs", "budget")


@dataclass(frozen=True)
class Evaluation:
    """The chosen candidate's best epoch on the report split, and where its weights are kept."""
    chosen: Candidate
    scores: np.ndarray
    """What featx.stats.metrics.evaluate takes, (n_report,) or (n_report, outputs)."""
    metrics: dict
    predict_seconds: float
    capped: bool
    """Whether a cap stopped it while it still improved (a larger cap continues it)."""
    best: Path


def evaluate(setup: Setup, candidates: list[Candidate]) -> Evaluation:
    """Evaluate the chosen candidate's best epoch on the report split and keep its weights."""
    chosen = max((c for c in candidates if c.best_epoch), key=rank)
    scores, predict_seconds = _report_scores(setup, chosen)
    metric_values = M.evaluate(setup.task, setup.report.labels, scores, chosen.threshold)
    capped = not chosen.converged and chosen.stopped_by in CAPS
    # A capped run keeps every candidate's last epoch, so running again with a larger cap continues.
    best = _keep_best(setup.directory, chosen, setup.cfg.keep_checkpoints or capped)
    return Evaluation(chosen, scores, metric_values, predict_seconds, capped, best)


def build_record(plan: Prepared, setup: Setup, candidates: list[Candidate], evaluation: Evaluation, *,
                 seconds: float) -> tuple[Record, Predictions]:
    """The run's record (with the cache's facts) and the predictions it was computed from."""
    pipeline, key, features, head, previous = plan.pipeline, plan.key, plan.features, plan.head, plan.previous
    facts = plan.facts
    cfg, task, report = setup.cfg, setup.task, setup.report
    chosen, scores, metric_values = evaluation.chosen, evaluation.scores, evaluation.metrics
    predict_seconds, capped, best = evaluation.predict_seconds, evaluation.capped, evaluation.best
    split = plan.dataset.splits[setup.report_split]
    predictions = Predictions(np.asarray(split.ids), report.labels,
                              scores[None].astype(TASKS[task].score_dtype()), chosen.threshold)
    train_rows_total = sum(c.train_rows for c in candidates)
    eval_rows_total = sum(c.eval_rows for c in candidates) + len(report.labels)
    raise_cap = (f"finetune.max_epochs={2 * setup.max_epochs}" if chosen.stopped_by == "max_epochs"
                 else f"finetune.max_seconds={2 * setup.max_seconds:g}")
    return new_record(
        stage="finetune", pipeline=pipeline.name, cache_key=key, task=task, features=features,
        pooling=cfg.head_input, layers=[plan.n_layers], head=head, init=pipeline.model.init,
        baseline=None,
        protocol={"name": "finetune", "select_on": setup.select_split if setup.select_split != "train"
                  else f"{cfg.validation_fraction:.0%} of train", "report_on": setup.report_split},
        hyperparameters=_hyperparameters(setup, plan, chosen),
        search=[_candidate_entry(c) for c in candidates], seeds=[cfg.seed], primary_metric=setup.metric,
        metrics=metric_values, metrics_std={k: 0.0 for k in metric_values}, per_seed=[metric_values],
        metrics_ci=bootstrap.intervals(task, report.labels, predictions.scores, chosen.threshold,
                                       groups=row_groups(split.texts, split.text_pairs)),
        threshold=chosen.threshold if TASKS[task].thresholded else None,
        n_train=len(setup.train.labels), n_eval=len(report.labels),
        fit_seconds=round(sum(c.seconds for c in candidates), 3), predict_seconds=round(predict_seconds, 4),
        learning_rate=chosen.learning_rate, epochs=chosen.epoch, steps=chosen.step,
        best_epoch=chosen.best_epoch, converged=chosen.converged, stopped_by=chosen.stopped_by,
        # The budget is work (epochs) unless a wall-time cap was asked for: then the result
        # depends on how fast and how busy the machine was.
        budget={"max_epochs": setup.max_epochs, "max_seconds": setup.max_seconds or None,
                "machine_dependent": bool(setup.max_seconds)},
        continue_with=command(pipeline, "curve" if plan.label_budget else "finetune", raise_cap) if capped else None,
        label_budget=plan.label_budget,
        continued=_continued(previous, setup),
        # Every process's time: a finished run this one continues, else the committed epochs of
        # runs killed before (their last, uncommitted minutes are lost to any count).
        wall_seconds=round(seconds + ((previous.wall_seconds or 0.0) if previous else setup.resumed_seconds), 3),
        curve=_curve(chosen), device=str(setup.device),
        # Relative to the run's folder: a data_dir that moves keeps its records true.
        run_hash=setup.run_hash, checkpoint=str(best.relative_to(setup.directory)),
        configuration=configuration(pipeline, "finetune"),
        checkpoint_bytes=best.stat().st_size,
        checkpoint_sha256=_sha256(best),  # predict loads these weights only if they are these bytes
        target_scaler={"mean": setup.scaler.mean.tolist(), "std": setup.scaler.std.tolist()} if setup.scaler else None,
        # Compute in backbone forward-pass equivalents (rows), for the whole search: a training
        # step is a forward and a backward pass, about 3 forwards; evaluation passes count once.
        backbone_forward_passes=3 * train_rows_total + eval_rows_total,
        train_rows_processed=train_rows_total, eval_rows_processed=eval_rows_total,
        truncated=setup.truncated,
        labels=M.label_summary(setup.train.labels, report.labels, plan.dataset.label_names)
        if TASKS[task].thresholded else None, **facts), predictions


def _report_scores(setup: Setup, chosen: Candidate) -> tuple[np.ndarray, float]:
    """The chosen candidate's best epoch scored on the report split, and the seconds it took."""
    from safetensors.torch import load_model

    model = setup.make_model()
    best = setup.directory / chosen.name / "best.safetensors"
    regular_file(best, "the best epoch's weights featx wrote")  # safetensors opens it by name
    load_model(model, best, device=str(setup.device))
    t = time.perf_counter()
    logits = predict_logits(model, setup.encoder, setup.report, device=setup.device, dtype=setup.eval_dtype,
                            token_budget=setup.budget_tokens)  # (n_report, outputs)
    predict_seconds = time.perf_counter() - t
    return scores_from_logits(setup.task, logits, setup.scaler), predict_seconds  # (n_report,) or (n_report, outputs)


def _hyperparameters(setup: Setup, plan: Prepared, chosen: Candidate) -> dict:
    """The configuration as it ran: the chosen learning rate, the caps, the search and dtypes used."""
    return dataclasses.asdict(setup.cfg) | {
        "learning_rate": chosen.learning_rate, "max_epochs": setup.max_epochs,
        "max_seconds": setup.max_seconds, "search": setup.strategy, "max_length": plan.max_length,
        "dtype": str(setup.dtype).removeprefix("torch."),
        "eval_dtype": str(setup.eval_dtype).removeprefix("torch.")}


def _continued(previous: Record | None, setup: Setup) -> list:
    """The runs this one continues: each one's last epoch and stop reason, and the caps it went on with."""
    return (previous.continued + [{"after_epoch": previous.epochs, "stopped_by": previous.stopped_by,
                                   "max_epochs": setup.max_epochs, "max_seconds": setup.max_seconds}]
            if previous is not None else [])


def _sha256(path: Path) -> str:
    import hashlib

    regular_file(path, "the best epoch's weights featx wrote")
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _candidate_entry(candidate: Candidate) -> dict:
    return {"params": {"learning_rate": candidate.learning_rate}, "score": candidate.best_score
            if candidate.best_epoch else None, "epochs": candidate.epoch, "best_epoch": candidate.best_epoch,
            "stopped_by": candidate.stopped_by, "converged": candidate.converged,
            "seconds": round(candidate.seconds, 3), "curve": candidate.select,
            "epoch_seconds": candidate.epoch_seconds, "needed": candidate.needed,
            "plateau_epoch": candidate.plateau_epoch or None}


def _curve(candidate: Candidate) -> dict:
    """The chosen run's curves: its loss, its selection score per epoch, the gain each judged
    epoch needed over the anchor, the plateau's epoch, the first epoch of the cooldown, and
    which epoch was kept: the best, or the annealed last one (no worse beyond noise)."""
    return {"loss": candidate.loss, "select": candidate.select, "needed": candidate.needed,
            "plateau_epoch": candidate.plateau_epoch or None, "cooldown_epoch": candidate.cooldown_epoch or None,
            "kept": "annealed" if candidate.kept_annealed else "best"}


def _keep_best(checkpoints: Path, chosen: Candidate, keep_all: bool) -> Path:
    """The chosen candidate's best weights as `best.safetensors`; unless asked to keep them,
    every other file of the search goes (optimizer states are twice the model's size)."""
    best = checkpoints / "best.safetensors"
    source = checkpoints / chosen.name / "best.safetensors"
    if keep_all:
        atomic_write(best, lambda tmp: shutil.copyfile(source, tmp))
        return best
    refuse_link(best)
    os.replace(source, best)
    for folder in checkpoints.iterdir():
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder)
    return best
