"""The fine-tune baseline, done right by default: the number frozen features are compared with.

The model (featx.modeling) is the architecture's own sequence-classification class by default,
its head initialised by the model's own `_init_weights` (PyTorch's default Kaiming-uniform init
is what makes hand-written heads train worse). Training (featx.training): fused AdamW (no decay
on biases and LayerNorm), linear warmup then the peak rate until the selection score plateaus,
then a short linear cooldown (featx.convergence), clipping at 1.0, length-grouped batches of 32.
The learning rate is searched on the selection split (`search`: every rate to convergence on
CUDA, successive halving on CPU), and the chosen one trains until its selection score has not
risen beyond the selection split's noise for `patience` epochs: the record says whether it
converged or a cap stopped it. Best epoch kept (safetensors), resumable after every epoch.
Regression is trained on standardised targets and reported on the original scale.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from featx import backbone as B
from featx import bootstrap
from featx import metrics as M
from featx.batching import TORCH_DTYPES, Encoder, default_token_budget
from featx.config import FinetuneConfig, Pipeline
from featx.configfile import command
from featx.data import Dataset, Split
from featx.errors import FeatxError
from featx.files import atomic_write, refuse_link, writable_dir
from featx.modeling import (MODEL_HEAD, Encoded, ModelSpec, TargetScaler, encode_rows,
                            load_classifier, output_layer, probe_head, predict_logits, truncation,
                            reference_class_name, scores_from_logits)
from featx.recordschema import Record, new_record
from featx.records import (Predictions, cache_facts, checkpoint_path, configuration, finetune_dir,
                           finetune_run_hash, read_record, record_name, stop_reason, write_record)
from featx.plan import CachedPlan, cached_plan
from featx.splits import label_assignment
from featx.tasks import TASKS
from featx.convergence import auto_max_epochs
from featx.training import (Candidate, Setup, check_learning_rate, load_state, save_state, train,
                            worst_case_epochs)

log = logging.getLogger("featx")


# ---------------------------------------------------------------------------------------------
# Data


def encode_split(encoder: Encoder, split: Split, rows: np.ndarray) -> Encoded:
    return encode_rows(encoder, split.texts, split.text_pairs, rows, split.labels[rows])


# ---------------------------------------------------------------------------------------------
# The fine-tune stage: a learning-rate search, each candidate trained until it stops improving

# Stop reasons a larger budget lifts: running again with more epochs (or seconds) continues.
CAPS = ("max_epochs", "budget")


@dataclass(frozen=True)
class Prepared:
    """What a fine-tune run is, decided before anything trains: the cache it pairs with and
    its data, both read back from the cache (featx.plan.CachedPlan), the metric, the run's hash
    and folder, the protocol's rows, the caps, and this configuration's finished run if any."""
    pipeline: Pipeline
    cached: CachedPlan
    dataset: Dataset
    """The splits as the cache stores them: the texts the frozen features were computed from."""
    metric: str
    run_hash: str
    directory: Path
    features: str
    head: str
    rows: tuple
    """(select split, report split, train rows, select rows): `_protocol_rows`."""
    max_epochs: int
    max_seconds: float
    previous: Record | None
    facts: dict
    """The cache's facts a record carries (featx.records.cache_facts)."""
    # What a Plan offers the record and the model spec, from the cache's attributes.
    key = property(lambda self: self.cached.key)
    model = property(lambda self: self.cached.model)
    n_layers = property(lambda self: self.cached.n_layers)
    max_length = property(lambda self: self.cached.max_length)
    prompt = property(lambda self: self.cached.prompt)
    done = property(lambda self: self.directory / record_name(self.features, self.head), doc="Its record.")


def run_finetune(pipeline: Pipeline) -> Record:
    """Fine-tune the pipeline's backbone: search the learning rates, train the chosen one until
    the selection score stops improving, evaluate the best epoch; write the record and the best
    checkpoint; return the record. A run a cap stopped while it was still improving continues
    from its last epoch when run again with a larger cap."""
    run = prepare(pipeline)
    if run.previous is not None and not _continues(run.previous, run.max_epochs, run.max_seconds):
        return _reused(run)
    start = time.perf_counter()
    setup = setup_training(run)
    _announce(setup, run)
    candidates = search(setup)
    evaluation = evaluate(setup, candidates)
    record, predictions = build_record(run, setup, candidates, evaluation, seconds=time.perf_counter() - start)
    record = write_record(run.directory, record, predictions)
    log.info("fine-tuned in %.0f s: learning rate %g, best epoch %d of %d (%s), %s = %.4f on %s; "
             "record %s", record.wall_seconds, record.learning_rate, record.best_epoch,
             record.epochs, stop_reason(record.converged, record.stopped_by)
             + (f"; continue it with: {record.continue_with}" if record.continue_with else ""),
             run.metric, record.metrics[run.metric], record.protocol["report_on"], run.done)
    return record


def prepare(pipeline: Pipeline) -> Prepared:
    """Everything the run is before it trains, each check before any time is spent: the
    learning rates, the cache (which finds it as probe does), the labels, the protocol's rows."""
    cfg = pipeline.finetune
    for lr in cfg.learning_rates:
        check_learning_rate(lr)
    cached = cached_plan(pipeline)
    # The fine-tune tokenises texts, which the cache stores with its vectors: it reads them there
    # (the very rows extraction encoded) instead of loading the data files again.
    dataset = cached.dataset()
    task = dataset.task
    M.check_trainable(task, dataset.splits["train"].labels, dataset.label_names)
    metric = M.primary(task, pipeline.probe.metric)  # chosen on and reported in the same metric
    run_hash = finetune_run_hash(cfg, cached.key, pipeline.extract.max_length, metric)  # the key covers the rest
    # One folder per run (its budget aside): its record, its best weights, and while a cap may be
    # raised, each learning rate's last epoch.
    directory = writable_dir(finetune_dir(pipeline.runs_dir, pipeline.name, cached.key, run_hash),
                             root=pipeline.root)
    head = (reference_class_name(cached.model, pipeline.model.trust_remote_code) if cfg.head_input == MODEL_HEAD
            else "lp-ft" if cfg.init_head_from_probe else "linear")
    rows = _protocol_rows(dataset, cfg)
    select_split, report_split, _, select_rows = rows
    M.check_defined(task, metric, {
        ("dev" if select_split == "dev" else "held-out part of train"):
            dataset.splits[select_split].labels[select_rows],
        report_split: dataset.splits[report_split].labels}, dataset.label_names)
    if select_split == "dev":
        M.check_selectable(task, dataset.splits["train"].labels, dataset.splits["dev"].labels[select_rows],
                           dataset.label_names)
    features = f"finetune:{cfg.head_input}"
    return Prepared(pipeline, cached, dataset, metric, run_hash, directory, features, head, rows,
                    max_epochs=cfg.max_epochs or auto_max_epochs(len(rows[2]), cfg.batch_size),
                    max_seconds=cfg.max_seconds or 0.0,
                    previous=_previous(directory / record_name(features, head), run_hash),
                    facts=cache_facts(cached.meta))


def _reused(run: Prepared) -> Record:
    """This configuration's finished run, said and returned as it is."""
    previous, done = run.previous, run.done
    if previous.converged is False:
        log.info("reused this configuration's fine-tune (%s); continue it with: %s",
                 stop_reason(previous.converged, previous.stopped_by), previous.continue_with)
    else:
        log.info("reused the finished fine-tune of this configuration (%s): %s (delete its folder to "
                 "train again)", stop_reason(previous.converged, previous.stopped_by), done)
    return previous


def _previous(done: Path, run_hash: str) -> Record | None:
    """This configuration's finished record, if its best weights are still there."""
    try:
        previous = read_record(done) if done.is_file() else None
    except FeatxError:
        return None  # unreadable, or of another featx: trained again, and replaced
    if previous is None or previous.run_hash != run_hash or not checkpoint_path(done.parent, previous).is_file():
        return None
    return previous


def _continues(previous: Record, max_epochs: int, max_seconds: float) -> bool:
    """Whether a larger cap now lets a capped, unconverged run train on."""
    if previous.converged is not False or previous.stopped_by not in CAPS:
        return False
    if previous.stopped_by == "max_epochs":
        return max_epochs > previous.epochs
    before = previous.hyperparameters.get("max_seconds") or 0.0
    return max_seconds == 0 or max_seconds > before


def setup_training(run: Prepared) -> Setup:
    """Tokenise the splits, fit the target scaler, and the function that builds each candidate's
    initial model."""
    pipeline = run.pipeline
    cfg = pipeline.finetune
    task, names, splits = run.dataset.task, run.dataset.label_names, run.dataset.splits
    device = B.pick_device(cfg.device)
    dtype_name = B.pick_dtype(cfg.dtype, device, training=True)
    dtype = TORCH_DTYPES[dtype_name]
    # Loaded once for the encoder; `backbone.load` checks it against each candidate's model.
    tokenizer = B.load_tokenizer(run.model.path, pipeline.model.trust_remote_code)
    encoder = Encoder(tokenizer, run.max_length, run.prompt)  # the texts as the cache saw them
    select_split, report_split, train_rows, select_rows = run.rows
    train = encode_split(encoder, splits["train"], train_rows)
    if not len(select_rows):
        raise FeatxError("the selection split is empty (the data has no dev split and train is too "
                         "small to hold out finetune.validation_fraction of it); add rows or a dev split")
    select = encode_split(encoder, splits[select_split], select_rows)
    report = encode_split(encoder, splits[report_split], np.arange(len(splits[report_split])))
    truncated = truncation(run.max_length, train=train, select=select, report=report)
    scaler = TargetScaler.fit(train.labels) if TASKS[task].regression else None
    initial_head = (probe_head(pipeline.probe, run.cached.path, head_input=cfg.head_input, n_layers=run.n_layers,
                               task=task, scaler=scaler) if cfg.init_head_from_probe else None)

    spec = model_spec(pipeline, run)

    def make_model() -> nn.Module:
        model = load_classifier(spec, device=device, dtype=dtype_name, tokenizer=tokenizer).model
        if initial_head is not None:  # LP-FT: the linear probe folded into the head
            with torch.no_grad():
                output_layer(model).weight.copy_(torch.as_tensor(initial_head[0], dtype=torch.float32))  # (outputs, H)
                output_layer(model).bias.copy_(torch.as_tensor(initial_head[1], dtype=torch.float32))  # (outputs,)
        return model

    return Setup(cfg, task, len(names), run.metric, encoder, train, select, scaler, device, dtype,
                 default_token_budget(device, dtype_name), run.max_epochs,
                 run.max_seconds, run.directory, run.run_hash, make_model, pipeline.progress, report=report,
                 report_split=report_split, select_split=select_split, truncated=truncated)


def _announce(setup: "Setup", plan: Prepared) -> None:
    """What the search will do, before it spends any time (the rate follows after its first steps)."""
    cfg = setup.cfg
    steps = math.ceil(len(setup.train.labels) / cfg.batch_size)
    epochs = worst_case_epochs(len(cfg.learning_rates), setup.max_epochs, setup.strategy)
    setup.worst_steps = epochs * steps
    cap = (f"a wall-time cap of {setup.max_seconds:.0f} s (finetune.max_seconds): the result then "
           "depends on this machine's speed and load" if setup.max_seconds else "no wall-time cap")
    floor = f", and at least {cfg.min_delta:g}" if cfg.min_delta else ""
    log.info("fine-tune plan: %s on %d training rows, %d learning rate(s) %s (%s), each up to %d "
             "epochs of %d steps of %d rows at the peak rate until %d epochs in a row gain no more "
             "than the selection split's noise over the last gain (one paired standard error%s), "
             "then a cooldown; at most %d optimizer steps in all, %s; %s, %s", plan.model.name,
             len(setup.train.labels), len(cfg.learning_rates), ", ".join(f"{lr:g}" for lr in cfg.learning_rates),
             setup.strategy if len(cfg.learning_rates) > 1 else "no search",
             setup.max_epochs, steps, cfg.batch_size, cfg.patience, floor,
             setup.worst_steps, cap, setup.device, str(setup.dtype).removeprefix("torch."))


@dataclass(frozen=True)
class Evaluation:
    """The chosen candidate's best epoch on the report split, and where its weights are kept."""
    chosen: Candidate
    scores: np.ndarray
    """What featx.metrics.evaluate takes, (n_report,) or (n_report, outputs)."""
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
        metrics_ci=bootstrap.intervals(task, report.labels, predictions.scores, chosen.threshold),
        threshold=chosen.threshold if TASKS[task].thresholded else None,
        n_train=len(setup.train.labels), n_eval=len(report.labels),
        fit_seconds=round(sum(c.seconds for c in candidates), 3), predict_seconds=round(predict_seconds, 4),
        learning_rate=chosen.learning_rate, epochs=chosen.epoch, steps=chosen.step,
        best_epoch=chosen.best_epoch, converged=chosen.converged, stopped_by=chosen.stopped_by,
        # The budget is work (epochs) unless a wall-time cap was asked for: then the result
        # depends on how fast and how busy the machine was.
        budget={"max_epochs": setup.max_epochs, "max_seconds": setup.max_seconds or None,
                "machine_dependent": bool(setup.max_seconds)},
        continue_with=command(pipeline, "finetune", raise_cap) if capped else None,
        continued=_continued(previous, setup),
        wall_seconds=round(seconds + (previous.wall_seconds or 0.0 if previous else 0.0), 3),
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
    load_model(model, setup.directory / chosen.name / "best.safetensors", device=str(setup.device))
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


def rank(candidate: Candidate) -> tuple[float, float]:
    """How candidates are ranked, by halving and by the final pick alike: the best selection
    score, then the smaller learning rate (the safer one for a pretrained backbone). Halving
    kept the first in the configured order on a tie and the pick took the smaller rate: a
    candidate dropped after one epoch was reported, with a "continue" command that did nothing."""
    return candidate.best_score, -candidate.learning_rate


def search(setup: Setup) -> list[Candidate]:
    """Train the learning-rate candidates (successive halving, or each to convergence); every
    candidate's state is on disk after each epoch, so the decisions replay on resume."""
    cfg = setup.cfg
    candidates = [load_state(setup, Candidate(lr)) for lr in cfg.learning_rates]
    if len(candidates) == 1 or setup.strategy == "full":
        for candidate in candidates:
            train(setup, candidate, candidates, until=setup.max_epochs)
    else:
        alive, rung = list(candidates), 1
        while len(alive) > 1:
            for candidate in alive:
                train(setup, candidate, candidates, until=rung)
            # A finished candidate (patience, cap) stays in the comparison with its best score.
            ranked = sorted((c for c in alive if c.best_epoch), key=rank, reverse=True)
            keep = ranked[:math.ceil(len(alive) / 2)] or alive[:1]
            for candidate in alive:
                if candidate not in keep and candidate.stopped_by is None:
                    candidate.stopped_by = "halving"
                    save_state(setup, candidate)
            alive, rung = keep, rung + 1
        train(setup, alive[0], candidates, until=setup.max_epochs)
    if not any(c.best_epoch for c in candidates):
        raise FeatxError("fine-tuning produced no usable epoch: every learning rate diverged or the "
                         "selection metric was never a number; check the data and the learning rates")
    return candidates


def _sha256(path: Path) -> str:
    import hashlib

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


def _protocol_rows(dataset, cfg: FinetuneConfig):
    """(select split, report split, train rows, select rows). Dev picks the best epoch when a
    test split exists to report on; otherwise a seeded stratified slice of train does."""
    n_train = len(dataset.splits["train"])
    if not {"dev", "test"} & set(dataset.splits):
        raise FeatxError("fine-tuning needs a dev or test split to report on; the data has only train")
    if {"dev", "test"} <= set(dataset.splits):
        return "dev", "test", np.arange(n_train), np.arange(len(dataset.splits["dev"]))
    report = "test" if "test" in dataset.splits else "dev"
    held = label_assignment(dataset.task, dataset.splits["train"].labels, cfg.validation_fraction, 0.0,
                            cfg.seed) == 1
    return "train", report, np.flatnonzero(~held), np.flatnonzero(held)


def model_spec(pipeline: Pipeline, plan) -> ModelSpec:
    """How the pipeline's fine-tune model is built (predict builds it the same way); `plan`: a
    Plan or a Prepared run (its model files, task and label names)."""
    return ModelSpec(plan.model, plan.dataset.task, len(plan.dataset.label_names), pipeline.finetune.head_input,
                     init=pipeline.model.init, seed=pipeline.finetune.seed if pipeline.model.init != "random"
                     else pipeline.model.seed, allow_pickle=pipeline.model.allow_pickle,
                     trust_remote_code=pipeline.model.trust_remote_code)
