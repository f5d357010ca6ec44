"""The fine-tune baseline, done right by default: the number frozen features are compared with.

The model is BertForSequenceClassification's, for any backbone: pooled input -> dropout (the
config's classifier_dropout, else hidden_dropout_prob) -> Linear initialised by the backbone's
own `_init_weights` (N(0, initializer_range), zero bias; PyTorch's default Kaiming-uniform
init is what makes hand-written heads train worse). Training: AdamW at 2e-5 (no decay on
biases and LayerNorm), 6% linear warmup then linear decay, clipping at 1.0, 3 epochs,
length-grouped batches, best epoch on dev kept (safetensors), early stopping, resumable.
Regression is trained on standardised targets and reported on the original scale.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from featx import backbone as B
from featx import metrics as M
from featx.cache import Cache
from featx.config import MAX_LR, WARN_LR, FinetuneConfig, Pipeline
from featx.data import Split, stratified_assignment
from featx.errors import FeatxError
from featx.extract import Encoder, TORCH_DTYPES, default_token_budget, plan_batches
from featx.pooling import cls_pool, mean_pool
from featx.records import new_record, record_name, run_dir, write_record

log = logging.getLogger("featx")

# What the head reads from the backbone output: (output, (B, T) mask) -> (B, H).
HEAD_INPUTS = {
    "pooler": lambda output, mask: output.pooler_output,
    "cls": lambda output, mask: cls_pool(output.last_hidden_state, mask),
    "mean": lambda output, mask: mean_pool(output.last_hidden_state, mask),
}


class SequenceClassifier(nn.Module):
    """backbone -> pooled (B, H) -> dropout -> Linear -> logits (B, n_outputs).

    With head_input="pooler" this is BertForSequenceClassification, parameter for parameter.
    """

    def __init__(self, backbone, n_outputs: int, head_input: str = "pooler"):
        super().__init__()
        config = backbone.config
        if head_input == "pooler" and getattr(backbone, "pooler", None) is None:
            raise FeatxError("this backbone has no pooler; use finetune.head_input = \"cls\" or \"mean\"")
        self.backbone = backbone
        self.head_input = head_input
        dropout = getattr(config, "classifier_dropout", None)
        self.dropout = nn.Dropout(dropout if dropout is not None else config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, n_outputs)
        backbone._init_weights(self.classifier)  # the model's own init, not PyTorch's default

    def pooled(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        output = self.backbone(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=token_type_ids, return_dict=True)
        return HEAD_INPUTS[self.head_input](output, attention_mask)  # (B, H)

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        return self.classifier(self.dropout(self.pooled(input_ids, attention_mask, token_type_ids)))


# ---------------------------------------------------------------------------------------------
# Task types: outputs, targets, loss, and scores for featx.metrics


def n_outputs(task: str, n_labels: int) -> int:
    """binary -> 2 logits (softmax, as BertForSequenceClassification); else one per label/target."""
    return 2 if task == "binary" else n_labels


@dataclass(frozen=True)
class TargetScaler:
    """Regression targets are standardised for training (a raw 0..400 scale makes MSE explode
    and the head's init meaningless) and mapped back for metrics."""
    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, y: np.ndarray) -> "TargetScaler":
        return cls(y.mean(axis=0), np.where(y.std(axis=0) > 0, y.std(axis=0), 1.0))

    def transform(self, y: np.ndarray) -> np.ndarray:
        return (y - self.mean) / self.std

    def inverse(self, y: np.ndarray) -> np.ndarray:
        return y * self.std + self.mean


def targets(task: str, labels: np.ndarray, scaler: TargetScaler | None) -> torch.Tensor:
    if task == "regression":
        return torch.tensor(scaler.transform(labels), dtype=torch.float32)  # (n, T)
    if task == "multilabel":
        return torch.tensor(labels, dtype=torch.float32)  # (n, L)
    return torch.tensor(labels, dtype=torch.long)  # (n,)


LOSSES = {
    "binary": F.cross_entropy,
    "multiclass": F.cross_entropy,
    "multilabel": F.binary_cross_entropy_with_logits,
    "regression": F.mse_loss,  # on standardised targets
}


def scores_from_logits(task: str, logits: np.ndarray, scaler: TargetScaler | None) -> np.ndarray:
    """Logits -> what featx.metrics.evaluate takes (probabilities, or values on the original scale)."""
    logits = logits.astype(np.float64)
    if task == "regression":
        return scaler.inverse(logits)
    if task == "multilabel":
        return 1.0 / (1.0 + np.exp(-logits))
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities = shifted / shifted.sum(axis=1, keepdims=True)
    return probabilities[:, 1] if task == "binary" else probabilities


# ---------------------------------------------------------------------------------------------
# Optimisation


def length_grouped_batches(lengths: np.ndarray, batch_size: int, rng: np.random.Generator,
                           group: int = 50) -> list[np.ndarray]:
    """Shuffled batches of similar length: shuffle, sort within groups of `group` batches,
    cut, shuffle the batch order. Less padding than random batches, still random order."""
    order = rng.permutation(len(lengths))
    batches = []
    for start in range(0, len(order), batch_size * group):
        chunk = order[start:start + batch_size * group]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices only: biases and LayerNorm weights are not decayed."""
    no_decay = {id(p) for m in model.modules() if "LayerNorm" in type(m).__name__ or isinstance(m, nn.LayerNorm)
                for p in m.parameters(recurse=False)}
    no_decay |= {id(p) for name, p in model.named_parameters() if name.endswith("bias")}
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if id(p) not in no_decay], "weight_decay": weight_decay},
            {"params": [p for p in params if id(p) in no_decay], "weight_decay": 0.0}]


def warmup_then_linear_decay(optimizer, warmup_steps: int, total_steps: int):
    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def check_learning_rate(lr: float) -> None:
    if lr > MAX_LR:  # the config refuses this already; a library caller gets the same answer
        raise FeatxError(f"learning rate {lr:g} is above {MAX_LR:g}: it destroys a pretrained "
                         "backbone (use 2e-5..5e-5)")
    if lr > WARN_LR:
        log.warning("learning rate %g is high for fine-tuning a pretrained backbone: above %g the "
                    "pretrained weights are quickly overwritten; 2e-5..5e-5 is the usual range",
                    lr, WARN_LR)


# ---------------------------------------------------------------------------------------------
# Data


@dataclass
class Encoded:
    encodings: list
    lengths: np.ndarray
    labels: np.ndarray


def encode_split(encoder: Encoder, split: Split, rows: np.ndarray) -> Encoded:
    encodings = encoder.encode(split.texts, split.text_pairs, rows)
    return Encoded(encodings, np.array([len(e.ids) for e in encodings]), split.labels[rows])


def _to(inputs: dict, device: torch.device) -> dict:
    return {k: v.to(device, non_blocking=True) for k, v in inputs.items()}


@torch.no_grad()
def predict_logits(model: SequenceClassifier, encoder: Encoder, data: Encoded, device,
                   dtype: torch.dtype, token_budget: int) -> np.ndarray:
    """Logits in the rows' order; batches sorted by length, cut by a token budget."""
    was_training = model.training
    model.eval()
    order = np.argsort(-data.lengths, kind="stable")
    out = None
    for cut in plan_batches(data.lengths[order], token_budget, 1024):
        rows = order[cut]
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            logits = model(**_to(encoder.collate([data.encodings[i] for i in rows]), device))
        logits = logits.float().cpu().numpy()
        if out is None:
            out = np.zeros((len(data.lengths), logits.shape[1]), dtype=np.float32)
        out[rows] = logits
    model.train(was_training)
    return out


# ---------------------------------------------------------------------------------------------
# LP-FT: the linear probe folded into the head


def fold_probe(estimator, task: str, hidden: int, scaler: TargetScaler | None) -> tuple[np.ndarray, np.ndarray]:
    """(weight (n_outputs, H), bias) such that the head computes the probe's decision function
    on raw features: W (x - mu) / sigma + b = (W / sigma) x + (b - (W / sigma) . mu)."""
    standardise, model = estimator[0], estimator[-1]
    if task == "multilabel":
        W = np.stack([e.coef_[0] for e in model.estimators_])
        b = np.array([e.intercept_[0] for e in model.estimators_])
    else:
        W, b = np.atleast_2d(model.coef_), np.atleast_1d(model.intercept_)
    W = W / standardise.scale_
    b = b - W @ standardise.mean_
    if task == "regression":  # the head predicts standardised targets
        return W / scaler.std[:, None], (b - scaler.mean) / scaler.std
    if task == "binary":  # two logits whose difference is the probe's decision function
        return np.vstack([np.zeros(hidden), W]), np.array([0.0, b[0]])
    if task == "multiclass" and len(model.classes_) != W.shape[0]:
        raise FeatxError("the probe saw fewer classes than the task has; LP-FT needs them all in train")
    return W, b


# ---------------------------------------------------------------------------------------------
# The fine-tune stage


def run_finetune(pipeline: Pipeline) -> dict:
    """Fine-tune the pipeline's backbone; write the record and the best checkpoint; return the record."""
    from featx.plan import make_plan

    cfg = pipeline.finetune
    check_learning_rate(cfg.learning_rate)
    plan = make_plan(pipeline)
    cache_path = plan.find_cache()
    with Cache(cache_path) as cache:
        key = cache.key
        if cache.meta["model_fingerprint"] != plan.fingerprint:
            raise FeatxError(f"{cache_path} was built from other model files; rerun featx extract")
    task, names = plan.dataset.task, plan.dataset.label_names
    splits = plan.dataset.splits
    M.check_trainable(task, splits["train"].labels, names)
    run_hash = hashlib.sha256(json.dumps(
        [dataclasses.asdict(cfg), key, pipeline.extract.max_length]).encode()).hexdigest()
    name = f"{cfg.head_input}{'-lpft' if cfg.init_head_from_probe else ''}-seed{cfg.seed}-{run_hash[:8]}"
    directory = run_dir(pipeline.runs_dir, key)
    checkpoints = directory / "finetune" / name
    features = f"finetune:{cfg.head_input}"
    head = "lp-ft" if cfg.init_head_from_probe else "linear"
    done = directory / "finetune" / record_name(features, head)
    if done.is_file():
        previous = json.loads(done.read_text())
        if previous.get("run_hash") == run_hash and (checkpoints / "best.safetensors").is_file():
            log.info("already fine-tuned with this configuration: %s (delete it to train again)", done)
            return previous

    start = time.perf_counter()
    device = B.pick_device(cfg.device)
    dtype = TORCH_DTYPES[B.pick_dtype(cfg.dtype, device)]
    tokenizer = B.load_tokenizer(plan.model.path)
    encoder = Encoder(tokenizer, pipeline.extract.max_length)
    select_split, report_split, train_rows, select_rows = _protocol_rows(plan.dataset, cfg)
    train = encode_split(encoder, splits["train"], train_rows)
    select = encode_split(encoder, splits[select_split], select_rows)
    report = encode_split(encoder, splits[report_split], np.arange(len(splits[report_split])))
    scaler = TargetScaler.fit(train.labels) if task == "regression" else None

    torch.manual_seed(cfg.seed)
    backbone = B.load_model(plan.model, init=pipeline.model.init, seed=pipeline.model.seed,
                            allow_pickle=pipeline.model.allow_pickle, pooler=cfg.head_input == "pooler")
    model = SequenceClassifier(backbone, n_outputs(task, len(names)), cfg.head_input)
    if cfg.init_head_from_probe:
        _init_from_probe(model, pipeline, cache_path, plan.n_layers, task, scaler)
    model.to(device)
    budget = default_token_budget(device, str(dtype).removeprefix("torch."))
    state = _train(model, encoder, train, select, task, scaler, cfg, device, dtype, budget,
                   checkpoints, run_hash, pipeline.progress)

    from safetensors.torch import load_model
    load_model(model, checkpoints / "best.safetensors", device=str(device))
    t = time.perf_counter()
    logits = predict_logits(model, encoder, report, device, dtype, budget)
    predict_seconds = time.perf_counter() - t
    metric_values = M.evaluate(task, report.labels, scores_from_logits(task, logits, scaler),
                               state["threshold"])
    metric = M.primary(task, pipeline.probe.metric)
    record = new_record(
        stage="finetune", pipeline=pipeline.name, cache_key=key, task=task, features=features,
        pooling=cfg.head_input, layers=[plan.n_layers], head=head, init=pipeline.model.init,
        protocol={"name": "finetune", "select_on": select_split if select_split != "train"
                  else f"{cfg.validation_fraction:.0%} of train", "report_on": report_split},
        hyperparameters=dataclasses.asdict(cfg) | {"max_length": pipeline.extract.max_length,
                                                   "dtype": str(dtype).removeprefix("torch.")},
        search=[], seeds=[cfg.seed], primary_metric=metric, metrics=metric_values,
        metrics_std={k: 0.0 for k in metric_values}, per_seed=[metric_values],
        threshold=state["threshold"] if task == "multilabel" else None,
        n_train=len(train.labels), n_eval=len(report.labels),
        fit_seconds=round(state["train_seconds"], 3), predict_seconds=round(predict_seconds, 4),
        learning_rate=cfg.learning_rate, epochs=state["epochs_run"], steps=state["step"],
        best_epoch=state["best_epoch"], wall_seconds=round(time.perf_counter() - start, 3),
        curve=state["curve"], device=str(device), run_hash=run_hash,
        checkpoint=str(checkpoints / "best.safetensors"),
        target_scaler={"mean": scaler.mean.tolist(), "std": scaler.std.tolist()} if scaler else None,
        # Compute in backbone forward-pass equivalents (rows): a training step is a forward and
        # a backward pass, about 3 forwards; evaluation passes count once.
        backbone_forward_passes=3 * state["train_rows"] + state["eval_rows"] + len(report.labels),
        train_rows_processed=state["train_rows"], eval_rows_processed=state["eval_rows"] + len(report.labels))
    write_record(directory, record)
    log.info("fine-tuned in %.0f s (best epoch %d of %d): %s = %.4f on %s; record %s",
             record["wall_seconds"], state["best_epoch"], state["epochs_run"], metric,
             metric_values[metric], report_split, done)
    return record


def _protocol_rows(dataset, cfg: FinetuneConfig):
    """(select split, report split, train rows, select rows). Dev picks the best epoch when a
    test split exists to report on; otherwise a seeded stratified slice of train does."""
    n_train = len(dataset.splits["train"])
    if not {"dev", "test"} & set(dataset.splits):
        raise FeatxError("fine-tuning needs a dev or test split to report on; the data has only train")
    if {"dev", "test"} <= set(dataset.splits):
        return "dev", "test", np.arange(n_train), np.arange(len(dataset.splits["dev"]))
    report = "test" if "test" in dataset.splits else "dev"
    labels = dataset.splits["train"].labels
    strata = labels if labels.ndim == 1 else np.zeros(n_train, dtype=int)
    held = stratified_assignment(strata, cfg.validation_fraction, 0.0, cfg.seed) == 1
    return "train", report, np.flatnonzero(~held), np.flatnonzero(held)


def _init_from_probe(model: SequenceClassifier, pipeline: Pipeline, cache_path: Path,
                     n_layers: int, task: str, scaler: TargetScaler | None) -> None:
    from featx.probe import Features, fit_selected

    features = Features(model.head_input, (n_layers,))
    estimator = fit_selected(cache_path, features, "logistic", pipeline.probe)
    weight, bias = fold_probe(estimator, task, model.classifier.in_features, scaler)
    with torch.no_grad():
        model.classifier.weight.copy_(torch.as_tensor(weight, dtype=torch.float32))
        model.classifier.bias.copy_(torch.as_tensor(bias, dtype=torch.float32))
    log.info("LP-FT: head initialised from the logistic probe on %s", features.name)


def _train(model, encoder, train: Encoded, select: Encoded, task, scaler, cfg: FinetuneConfig,
           device, dtype, budget, checkpoints: Path, run_hash: str, progress: bool) -> dict:
    """The epoch loop, resumable at epoch boundaries; returns the final training state."""
    from safetensors.torch import load_model, save_model
    from tqdm.auto import tqdm

    y = targets(task, train.labels, scaler)
    steps_per_epoch = math.ceil(len(train.labels) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    optimizer = torch.optim.AdamW(parameter_groups(model, cfg.weight_decay), lr=cfg.learning_rate)
    scheduler = warmup_then_linear_decay(optimizer, math.ceil(cfg.warmup_ratio * total), total)
    scaler_fp16 = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    state = {"epoch": 0, "step": 0, "best_score": float("-inf"), "best_epoch": 0, "stale": 0,
             "threshold": 0.5, "train_seconds": 0.0, "train_rows": 0, "eval_rows": 0, "epochs_run": 0,
             "curve": {"loss": [], "select": []}, "run_hash": run_hash}
    checkpoints.mkdir(parents=True, exist_ok=True)
    resume = checkpoints / "last.pt"
    if resume.is_file():
        saved = torch.load(resume, weights_only=True)
        if saved["run_hash"] == run_hash:
            load_model(model, checkpoints / saved["weights"], device=str(device))
            optimizer.load_state_dict(saved["optimizer"])
            scheduler.load_state_dict(saved["scheduler"])
            torch.set_rng_state(saved["torch_rng"])
            state.update({k: saved[k] for k in state})
            log.info("resuming fine-tuning after epoch %d (of %d) from %s", state["epoch"],
                     cfg.epochs, checkpoints)
    metric = M.PRIMARY[task]
    model.train()
    while state["epoch"] < cfg.epochs and state["stale"] < cfg.patience:
        epoch = state["epoch"] + 1
        start = time.perf_counter()
        rng = np.random.default_rng(cfg.seed * 1000 + epoch)  # the batch order is a function of the epoch
        batches = length_grouped_batches(train.lengths, cfg.batch_size, rng)
        running, count = 0.0, 0
        bar = tqdm(batches, desc=f"finetune epoch {epoch}/{cfg.epochs}", unit="step",
                   disable=not progress)
        for rows in bar:
            inputs = _to(encoder.collate([train.encodings[i] for i in rows]), device)
            with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
                logits = model(**inputs)
            loss = LOSSES[task](logits.float(), y[rows].to(device))
            optimizer.zero_grad(set_to_none=True)
            scaler_fp16.scale(loss).backward()
            scaler_fp16.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            scaler_fp16.step(optimizer)
            scaler_fp16.update()
            scheduler.step()
            state["step"] += 1
            state["train_rows"] += len(rows)
            running, count = running + loss.item(), count + 1
            if state["step"] % cfg.log_every == 0 or count == len(batches):
                state["curve"]["loss"].append([state["step"], running / count])
                bar.set_postfix_str(f"loss {running / count:.4f}", refresh=False)
                running, count = 0.0, 0
        state["train_seconds"] += time.perf_counter() - start
        logits = predict_logits(model, encoder, select, device, dtype, budget)
        state["eval_rows"] += len(select.labels)
        scores = scores_from_logits(task, logits, scaler)
        threshold = M.choose_threshold(select.labels, scores) if task == "multilabel" else 0.5
        score = M.evaluate(task, select.labels, scores, threshold)[metric]
        state["curve"]["select"].append([epoch, score])
        log.info("epoch %d: %s on the selection split = %.4f", epoch, metric, score)
        state["epoch"], state["epochs_run"] = epoch, epoch
        if score > state["best_score"]:
            state.update(best_score=score, best_epoch=epoch, stale=0, threshold=threshold)
            _atomic(lambda p: save_model(model, str(p)), checkpoints / "best.safetensors")
        else:
            state["stale"] += 1
        weights = f"epoch-{epoch}.safetensors"
        _atomic(lambda p: save_model(model, str(p)), checkpoints / weights)
        _atomic(lambda p: torch.save(state | {"weights": weights, "optimizer": optimizer.state_dict(),
                                              "scheduler": scheduler.state_dict(),
                                              "torch_rng": torch.get_rng_state()}, p), resume)
        for old in checkpoints.glob("epoch-*.safetensors"):  # the committed epoch is all we need
            if old.name != weights:
                old.unlink()
    if state["best_epoch"] == 0:
        raise FeatxError("fine-tuning produced no usable epoch (the selection metric was never a "
                         "number); check the data")
    return state


def _atomic(write, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)
