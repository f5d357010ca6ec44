"""The fine-tune baseline, done right by default: the number frozen features are compared with.

The model (featx.finetune.modeling) is the architecture's own sequence-classification class by default,
its head initialised by the model's own `_init_weights` (PyTorch's default Kaiming-uniform init
is what makes hand-written heads train worse). Training (featx.finetune.training): fused AdamW (no decay
on biases and LayerNorm), linear warmup then the peak rate until the selection score plateaus,
then a short linear cooldown (featx.finetune.convergence), clipping at 1.0, length-grouped batches of 32.
The learning rate is searched on the selection split (`search`: every rate to convergence on
CUDA, successive halving on CPU), and the chosen one trains until its selection score has not
risen beyond the selection split's noise for `patience` epochs: the record says whether it
converged or a cap stopped it. Best epoch kept (safetensors), resumable after every epoch.
Regression is trained on standardised targets and reported on the original scale.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import time
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from featx.backbone import load as B
from featx.stats import metrics as M
from featx.backbone.batching import TORCH_DTYPES, Encoder, default_token_budget
from featx.config.pipeline import FinetuneConfig, Pipeline
from featx.data import Dataset, Split
from featx.errors import FeatxError
from featx.files import exclusive, writable_dir
from featx.finetune.modeling import (MODEL_HEAD, Encoded, ModelSpec, encode_rows, load_classifier, output_layer,
                                     probe_head, reference_class_name, truncation)
from featx.heads.targets import TargetScaler
from featx.runs.schema import Record
from featx.runs.records import (cache_facts, checkpoint_path, finetune_dir, finetune_run_hash, read_record,
                                record_name, stop_reason, write_record)
from featx.cache.plan import CachedPlan, cached_plan
from featx.data.splits import label_assignment
from featx.tasks import TASKS
from featx.finetune.convergence import auto_max_epochs, worst_case_epochs
from featx.finetune.record import CAPS, build_record, evaluate
from featx.finetune.search import search
from featx.finetune.training import Setup, check_learning_rate, scoring_period

log = logging.getLogger("featx")


# ---------------------------------------------------------------------------------------------
# Data


def encode_split(encoder: Encoder, split: Split, rows: np.ndarray) -> Encoded:
    return encode_rows(encoder, split.texts, split.text_pairs, rows, split.labels[rows])


# ---------------------------------------------------------------------------------------------
# The fine-tune stage: a learning-rate search, each candidate trained until it stops improving

@dataclass(frozen=True)
class Prepared:
    """What a fine-tune run is, decided before anything trains: the cache it pairs with and
    its data, both read back from the cache (featx.cache.plan.CachedPlan), the metric, the run's hash
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
    """The cache's facts a record carries (featx.runs.records.cache_facts)."""
    label_budget: dict | None = None
    """A learning curve's point (`run_budget`): the budget its training rows were drawn for."""
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
    # One process trains a run's folder at a time: a second would read and replace the first's
    # checkpoints. Under the lock, the first's record (if it finished meanwhile) is reused.
    with exclusive(run.directory / ".finetune.lock", f"fine-tuning this configuration in {run.directory}",
                   "wait for it to finish (a rerun then reuses its result), or stop it and rerun to resume"):
        run = dataclasses.replace(run, previous=_previous(run.done, run.run_hash))
        if run.previous is not None and not _continues(run.previous, run.max_epochs, run.max_seconds):
            return _reused(run)
        return _train(run)


def run_budget(pipeline: Pipeline, train_rows: np.ndarray, directory: Path, label_budget: dict) -> Record:
    """One point of a learning curve (featx.curve): `run_finetune`'s recipe on the training rows
    `train_rows` only, in `directory`, selecting its epochs on the rows the full run selects on
    (dev, or the part of train it holds out, which `train_rows` must not touch) and reporting on
    the full report split. A finished point is reused; a killed one resumes from its last epoch."""
    run = prepare(pipeline)
    select_split, report_split, _, select_rows = run.rows
    train_rows = np.asarray(train_rows, np.int64)
    if select_split == "train" and np.isin(train_rows, select_rows).any():
        raise FeatxError("a curve point's training rows include the rows the fine-tune selects on; "
                         "rerun featx curve (it draws them from the other training rows)")
    rows = (select_split, report_split, train_rows, select_rows)
    cfg = pipeline.finetune
    run_hash = hashlib.sha256(json.dumps([run.run_hash, label_budget], sort_keys=True).encode()).hexdigest()
    run = dataclasses.replace(run, rows=rows, run_hash=run_hash, label_budget=label_budget,
                              directory=writable_dir(directory, root=pipeline.root),
                              max_epochs=cfg.max_epochs or auto_max_epochs(len(rows[2]), cfg.batch_size))
    with exclusive(run.directory / ".finetune.lock", f"fine-tuning this curve point in {run.directory}",
                   "wait for it to finish (a rerun then reuses its result), or stop it and rerun to resume"):
        run = dataclasses.replace(run, previous=_previous(run.done, run.run_hash, weights=False))
        if run.previous is not None and not _continues(run.previous, run.max_epochs, run.max_seconds):
            return run.previous
        record = _train(run)
        if record.continue_with is None:  # a point is never exported: its weights would only fill the disk
            checkpoint_path(run.directory, record).unlink(missing_ok=True)
        return record


def _train(run: Prepared) -> Record:
    """The run trained, evaluated and written: its record."""
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


def _previous(done: Path, run_hash: str, *, weights: bool = True) -> Record | None:
    """This configuration's finished record, if its best weights are still there (`weights`: a
    curve's point keeps none)."""
    try:
        previous = read_record(done) if done.is_file() else None
    except FeatxError:
        return None  # unreadable, or of another featx: trained again, and replaced
    if previous is None or previous.run_hash != run_hash:
        return None
    if weights and not checkpoint_path(done.parent, previous).is_file():
        return None
    return previous


def _continues(previous: Record, max_epochs: int, max_seconds: float) -> bool:
    """Whether a larger cap now lets a capped, unconverged run train on."""
    if previous.converged is not False or previous.stopped_by not in CAPS:
        return False
    if previous.stopped_by == "max_epochs":
        return max_epochs > previous.epochs
    before = previous.hyperparameters["max_seconds"] or 0.0
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
    every = scoring_period(setup)
    scored = "every epoch" if every == 1 else f"every {every} epochs"
    log.info("fine-tune plan: %s on %d training rows, %d learning rate(s) %s (%s), each up to %d "
             "epochs of %d steps of %d rows at the peak rate, scored %s, until %d scores in a row gain no "
             "more than the selection split's noise over the last gain (one paired standard error%s), "
             "then a cooldown; at most %d optimizer steps in all, %s; %s, %s", plan.model.name,
             len(setup.train.labels), len(cfg.learning_rates), ", ".join(f"{lr:g}" for lr in cfg.learning_rates),
             setup.strategy if len(cfg.learning_rates) > 1 else "no search",
             setup.max_epochs, steps, cfg.batch_size, scored, cfg.patience, floor,
             setup.worst_steps, cap, setup.device, str(setup.dtype).removeprefix("torch."))


def _protocol_rows(dataset, cfg: FinetuneConfig):
    """(select split, report split, train rows, select rows). Dev picks the best epoch when a
    test split exists to report on; otherwise a seeded stratified slice of train does."""
    n_train = len(dataset.splits["train"])
    if not {"dev", "test"} & set(dataset.splits):
        raise FeatxError("fine-tuning needs a dev or test split to report on; the data has only train")
    if {"dev", "test"} <= set(dataset.splits):
        return "dev", "test", np.arange(n_train), np.arange(len(dataset.splits["dev"]))
    report = "test" if "test" in dataset.splits else "dev"
    held = held_for_selection(dataset.task, dataset.splits["train"].labels, list(dataset.splits), cfg)
    return "train", report, np.flatnonzero(~held), np.flatnonzero(held)


def held_for_selection(task: str, train_labels: np.ndarray, splits: list[str], cfg: FinetuneConfig) -> np.ndarray:
    """(n_train,) bool: the training rows the fine-tune picks its epochs on, a seeded stratified
    slice of train when the data has not both dev and test splits (dev does then: none)."""
    if {"dev", "test"} <= set(splits):
        return np.zeros(len(train_labels), bool)
    return label_assignment(task, train_labels, cfg.validation_fraction, 0.0, cfg.seed) == 1


def model_spec(pipeline: Pipeline, plan) -> ModelSpec:
    """How the pipeline's fine-tune model is built (predict builds it the same way); `plan`: a
    Plan or a Prepared run (its model files, task and label names)."""
    return ModelSpec(plan.model, plan.dataset.task, len(plan.dataset.label_names), pipeline.finetune.head_input,
                     init=pipeline.model.init, seed=pipeline.finetune.seed if pipeline.model.init != "random"
                     else pipeline.model.seed, allow_pickle=pipeline.model.allow_pickle,
                     trust_remote_code=pipeline.model.trust_remote_code)
