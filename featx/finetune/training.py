"""The fine-tune's training loop: one learning-rate candidate trained epoch by epoch
(length-grouped batches, fused AdamW with no decay on biases and LayerNorm, warmup-stable-decay
learning rates, clipping, fp16 loss scaling), scored on the selection split after every epoch
with its best weights kept, judged by the plateau rule (featx.finetune.convergence), and
committed after every epoch (featx.finetune.checkpoints) so a killed run resumes. Which
candidates to train, on what data, and the record they make are featx.finetune.stage's.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from featx.finetune import convergence
from featx.finetune.checkpoints import (BEST_SCORES, Candidate, commit, load_training_state, read_scores,
                                        save_scores, save_state)
from featx.stats import metrics as M
from featx.backbone.batching import Encoder
from featx.config.pipeline import MAX_LR, WARN_LR, FinetuneConfig
from featx.errors import FeatxError
from featx.files import atomic_write, regular_file
from featx.finetune.modeling import Encoded, loss, predict_logits, scores_from_logits, targets, to_device
from featx.heads.targets import TargetScaler
from featx.tasks import TASKS

log = logging.getLogger("featx")

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


def _optimizer(model, cfg: FinetuneConfig, lr: float, device):
    # The fused kernel (CPU and CUDA) does the whole update in one pass instead of one per
    # parameter tensor (bench/HISTORY.md, Fine-tuning on CPU).
    try:
        return torch.optim.AdamW(parameter_groups(model, cfg.weight_decay), lr=lr, fused=True)
    except (RuntimeError, TypeError):  # a device or dtype the fused kernel does not cover
        return torch.optim.AdamW(parameter_groups(model, cfg.weight_decay), lr=lr)


# ---------------------------------------------------------------------------------------------
# A candidate's training


@dataclass
class Setup:
    """Everything a candidate's training needs, built once per stage run."""
    cfg: FinetuneConfig
    task: str
    n_labels: int
    metric: str
    encoder: Encoder
    train: Encoded
    select: Encoded
    scaler: TargetScaler | None
    device: torch.device
    dtype: torch.dtype
    budget_tokens: int
    max_epochs: int
    max_seconds: float
    directory: Path
    run_hash: str
    make_model: object
    """() -> a fresh classifier (featx.finetune.modeling) with the run's initial weights (the same for
    every candidate)."""
    progress: bool
    report: Encoded | None = None
    report_split: str = "test"
    select_split: str = "dev"
    worst_steps: int = 0
    """Optimizer steps the search takes at most (for the time estimate)."""
    truncated: dict | None = None
    """Texts of each part max_length cut (train, select, report), for the record."""
    estimated: bool = False
    """Whether the time estimate was logged (once, after the first steps)."""
    resumed_seconds: float = 0.0
    """Training seconds the candidates had spent when this process loaded them (a run killed
    before resumes with them): the run's cost counts every process, not only this one."""

    @property
    def eval_dtype(self) -> torch.dtype:
        """Scoring runs in float32 on CPU whatever the training autocast (a forward pass is a
        small share of the cost there, and predict, an export and its record then agree to the
        last digit); a GPU scores in its training dtype."""
        return self.dtype if self.device.type == "cuda" else torch.float32

    @property
    def steps_per_epoch(self) -> int:
        return convergence.steps_per_epoch(len(self.train.labels), self.cfg.batch_size)

    @property
    def warmup(self) -> int:
        """Optimizer steps of the linear warmup (featx.finetune.convergence.warmup_steps)."""
        return convergence.warmup_steps(self.cfg.warmup_ratio, self.steps_per_epoch, self.max_epochs)

    @property
    def strategy(self) -> str:
        """The learning-rate search actually run: `auto` is full on CUDA, halving on CPU."""
        if self.cfg.search != "auto":
            return self.cfg.search
        return "full" if self.device.type == "cuda" else "halving"


def check_learning_rate(lr: float) -> None:
    if lr > MAX_LR:  # the config refuses this already; a library caller gets the same answer
        raise FeatxError(f"learning rate {lr:g} is above {MAX_LR:g}: it destroys a pretrained "
                         "backbone (use 2e-5..5e-5)")
    if lr > WARN_LR:
        log.warning("learning rate %g is high for fine-tuning a pretrained backbone: above %g the "
                    "pretrained weights are quickly overwritten; 2e-5..5e-5 is the usual range",
                    lr, WARN_LR)


def _spent(candidates: list[Candidate]) -> float:
    return sum(c.seconds for c in candidates)


def train(setup: Setup, candidate: Candidate, everyone: list[Candidate], until: int) -> None:
    """Train `candidate` up to epoch `until` unless it stops first (patience, budget, divergence).
    An epoch is scored, judged and committed when it is due (`_due`)."""
    if candidate.stopped_by or candidate.epoch >= until:
        return
    model, optimizer, scaler_fp16 = _start(setup, candidate)
    y = targets(setup.task, setup.train.labels, setup.scaler)  # (n_train,) classes, or (n_train, L | T)
    model.train()
    scored = candidate.epoch  # the last epoch scored and committed (a run resumes from one)
    while candidate.epoch < until:
        if _over_budget(setup, candidate, everyone):
            if scored != candidate.epoch:  # scored before it stops (not judged: the cap, not a plateau, ends it)
                _evaluate(setup, model, candidate, candidate.epoch)
                commit(setup, model, optimizer, candidate)
            break
        epoch = candidate.epoch + 1
        _cool_before_cap(setup, candidate, epoch)
        started = time.perf_counter()
        if not _steps(setup, candidate, everyone, epoch=epoch, started=started, y=y, model=model,
                      optimizer=optimizer, scaler_fp16=scaler_fp16):
            return  # diverged: the candidate is out, its state saved
        candidate.epoch = epoch
        due = _due(setup, candidate, epoch, until, since=epoch - scored)
        if due:
            score, now = _evaluate(setup, model, candidate, epoch)
            scored = epoch
        candidate.seconds += time.perf_counter() - started
        candidate.epoch_seconds.append(round(candidate.seconds, 3))
        if due:
            _judged(setup, model, optimizer, candidate, epoch, score, now)
        if candidate.stopped_by:
            break
    save_state(setup, candidate)


def _judged(setup: Setup, model, optimizer, candidate: Candidate, epoch: int, score: float, now) -> None:
    """A scored epoch judged by the plateau rule and committed."""
    judge(setup, candidate, epoch, score, now)
    if candidate.stopped_by and candidate.cooling and candidate.best_epoch != epoch:
        _keep_annealed(setup, model, candidate, epoch, score, now)
    commit(setup, model, optimizer, candidate)


def _due(setup: Setup, candidate: Candidate, epoch: int, until: int, since: int) -> bool:
    """Whether epoch `epoch` is scored on the selection split (and judged, and committed): every
    `scoring_period` epochs, and always at `until`, at the cap and when the cooldown is over."""
    cooled = candidate.cooling and candidate.step >= candidate.cooldown_from + candidate.cooldown_steps
    return since >= scoring_period(setup) or epoch >= until or epoch >= setup.max_epochs or cooled


def scoring_period(setup: Setup) -> int:
    """Epochs between scores of this run (featx.finetune.convergence.scoring_period)."""
    return convergence.scoring_period(len(setup.select.labels), len(setup.train.labels), setup.max_epochs,
                                      setup.cfg.patience)


def _cool_before_cap(setup: Setup, candidate: Candidate, epoch: int) -> None:
    """The last epochs before the cap decay the rate, so a capped run ends annealed too."""
    last = convergence.cooldown_epochs(setup.max_epochs)
    if not candidate.cooling and epoch > setup.max_epochs - last:
        candidate.cooldown_from, candidate.cooldown_epoch = candidate.step, epoch
        candidate.cooldown_steps = (setup.max_epochs - epoch + 1) * setup.steps_per_epoch


def judge(setup: Setup, candidate: Candidate, epoch: int, score: float, now: tuple[np.ndarray, float]) -> None:
    """The plateau rule after epoch `epoch` scored `score` on the selection split (`now`: its
    scores and threshold): at the peak rate the epoch is progress or not (`_progress`); a
    plateau starts the cooldown; the cooldown's end or the cap stops the candidate."""
    if not math.isfinite(score):
        candidate.stale += 1
    elif not candidate.cooling:
        _progress(setup, candidate, epoch, score, now)
    if not candidate.cooling and candidate.stale >= setup.cfg.patience:
        candidate.plateau_epoch = epoch
        cooldown = min(convergence.cooldown_epochs(epoch), setup.max_epochs - epoch)
        log.info("%s: no gain beyond the selection split's noise in %d scored epochs: plateau at epoch %d, "
                 "the rate decays over %d more", candidate.name, candidate.stale, epoch, cooldown)
        if cooldown:
            candidate.cooldown_from, candidate.cooldown_epoch = candidate.step, epoch + 1
            candidate.cooldown_steps = cooldown * setup.steps_per_epoch
    cooled = candidate.cooling and candidate.step >= candidate.cooldown_from + candidate.cooldown_steps
    if cooled or epoch >= setup.max_epochs:
        candidate.stopped_by = "patience" if candidate.converged else "max_epochs"


def _keep_annealed(setup: Setup, model, candidate: Candidate, epoch: int, score: float,
                   now: tuple[np.ndarray, float]) -> None:
    """The cooldown's last epoch is kept unless the best epoch scored higher beyond the
    selection split's noise: the annealed model is what the schedule was for, and the best of
    many noisy epochs is partly its luck."""
    best = (read_scores(setup, candidate, BEST_SCORES), candidate.threshold)
    needed = convergence.progress_threshold(setup.task, setup.metric, setup.select.labels, best, now,
                                            setup.cfg.min_delta)
    if not math.isfinite(score) or candidate.best_score - score > needed:
        return
    log.info("%s: kept the annealed epoch %d (%s %.4f) over epoch %d (%.4f): no better beyond noise (%.4f)",
             candidate.name, epoch, setup.metric, score, candidate.best_epoch, candidate.best_score, needed)
    _keep_best(setup, model, candidate, epoch, score, now)
    candidate.kept_annealed = True


def _keep_best(setup: Setup, model, candidate: Candidate, epoch: int, score: float, now) -> None:
    """This epoch's weights and selection scores as the candidate's best."""
    from safetensors.torch import save_model

    candidate.best_score, candidate.best_epoch, candidate.threshold = score, epoch, now[1]
    folder = setup.directory / candidate.name
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(folder / "best.safetensors", lambda p: save_model(model, str(p)))
    save_scores(setup, candidate, BEST_SCORES, now[0])


def _start(setup: Setup, candidate: Candidate):
    """The candidate's model, optimizer and fp16 loss scaler: new, or as its last committed
    epoch left them."""
    from safetensors.torch import load_model

    folder = setup.directory / candidate.name
    model = setup.make_model()
    optimizer = _optimizer(model, setup.cfg, candidate.learning_rate, setup.device)
    scaler_fp16 = torch.amp.GradScaler(setup.device.type, enabled=setup.dtype == torch.float16)
    if candidate.epoch:  # resume: weights, optimizer and RNG as the last epoch left them
        regular_file(folder / candidate.weights_file, "a checkpoint featx wrote")  # opened by name
        load_model(model, folder / candidate.weights_file, device=str(setup.device))
        load_training_state(folder / candidate.optimizer_file, optimizer)
        log.info("continuing %s after epoch %d (from its checkpoint)", candidate.name, candidate.epoch)
    return model, optimizer, scaler_fp16


def _over_budget(setup: Setup, candidate: Candidate, everyone: list[Candidate]) -> bool:
    """Whether another epoch would pass the wall-time cap (then the candidate stops by "budget")."""
    per_epoch = candidate.seconds / candidate.epoch if candidate.epoch else 0.0
    if setup.max_seconds and candidate.epoch and _spent(everyone) + per_epoch > setup.max_seconds:
        candidate.stopped_by = "budget"
        log.warning("%s: stopping after epoch %d: another epoch (about %.0f s) would pass the "
                    "wall-time cap finetune.max_seconds = %.0f (%.0f s spent)", candidate.name,
                    candidate.epoch, per_epoch, setup.max_seconds, _spent(everyone))
        return True
    return False


def _steps(setup: Setup, candidate: Candidate, everyone: list[Candidate], *, epoch: int, started: float,
           y, model, optimizer, scaler_fp16) -> bool:
    """Epoch `epoch`'s optimizer steps, one per length-grouped batch; False when the loss
    diverged."""
    from featx.progress import progress

    cfg = setup.cfg
    rng = np.random.default_rng(cfg.seed * 1000 + epoch)  # the batch order is a function of the epoch
    batches = length_grouped_batches(setup.train.lengths, cfg.batch_size, rng)
    running, count = 0.0, 0
    bar = progress(batches, desc=f"finetune {candidate.name} epoch {epoch}/{setup.max_epochs}",
                   unit="step", enabled=setup.progress)
    for position, rows in enumerate(bar, 1):
        inputs = to_device(setup.encoder.collate([setup.train.encodings[i] for i in rows]), setup.device)  # (B, T) each
        with torch.autocast(setup.device.type, dtype=setup.dtype, enabled=setup.dtype != torch.float32):
            logits = model(**inputs)  # (B, outputs)
        value = loss(setup.task, logits.float(), y[rows].to(setup.device))  # against (B,) or (B, L | T): a scalar
        if not torch.isfinite(value):
            _diverged(setup, candidate, epoch, len(candidate.loss), everyone)
            return False
        optimizer.zero_grad(set_to_none=True)
        scaler_fp16.scale(value).backward()
        scaler_fp16.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        rate = candidate.learning_rate * convergence.lr_factor(
            candidate.step, warmup=setup.warmup, cooldown_from=candidate.cooldown_from,
            cooldown_steps=candidate.cooldown_steps)
        for group in optimizer.param_groups:
            group["lr"] = rate
        scaler_fp16.step(optimizer)
        scaler_fp16.update()
        candidate.step += 1
        candidate.train_rows += len(rows)
        running, count = running + value.item(), count + 1
        if not setup.estimated and (position == ESTIMATE_AFTER or position == len(batches)):
            _estimate(setup, everyone, candidate, position / (time.perf_counter() - started))
        if candidate.step % cfg.log_every == 0 or position == len(batches):  # every epoch's last steps too
            candidate.loss.append([candidate.step, running / count])
            bar.set_postfix_str(f"loss {running / count:.4f}", refresh=False)
            running, count = 0.0, 0
    bar.close()
    return True


# Optimizer steps timed before the search's duration is estimated (the first are the slowest).
ESTIMATE_AFTER = 20


def _estimate(setup: Setup, everyone: list[Candidate], candidate: Candidate, rate: float) -> None:
    """Log how long the rest of the search takes at most, at the rate of its first steps."""
    setup.estimated = True
    done = sum(c.step for c in everyone)
    left = max(0, setup.worst_steps - done)
    # Scoring costs at most about a third of training (`_due`), or an epoch's worth when train is larger.
    epochs = convergence.worst_case_epochs(len(everyone), setup.max_epochs, setup.strategy)
    evals = min(epochs * len(setup.select.labels), epochs * len(setup.train.labels) + len(setup.select.labels))
    log.info("%.1f optimizer steps/s on this machine (%s): the search takes at most about %s more "
             "(%d steps, and %d rows scored on the selection split), less when it converges early; "
             "a frozen-only answer needs no fine-tune (featx report after featx probe)",
             rate, setup.device, _duration(left / rate + evals / (8 * rate * setup.cfg.batch_size)),
             left, evals)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else (f"{seconds / 60:.0f} min" if seconds < 7200
                                                     else f"{seconds / 3600:.1f} h")


def _evaluate(setup: Setup, model, candidate: Candidate, epoch: int) -> tuple[float, tuple[np.ndarray, float]]:
    """Score the epoch on the selection split and keep the weights when they are the best yet;
    the score, and the scores and threshold it was computed from."""
    logits = predict_logits(model, setup.encoder, setup.select, device=setup.device, dtype=setup.eval_dtype,
                            token_budget=setup.budget_tokens)  # (n_select, outputs)
    candidate.eval_rows += len(setup.select.labels)
    scores = scores_from_logits(setup.task, logits, setup.scaler)  # (n_select,) P(positive), else (n_select, outputs)
    threshold = M.choose_threshold(setup.select.labels, scores) if TASKS[setup.task].thresholded else 0.5
    score = M.evaluate(setup.task, setup.select.labels, scores, threshold)[setup.metric]
    candidate.select.append([epoch, score])
    log.info("%s epoch %d: %s on the selection split = %.4f", candidate.name, epoch, setup.metric, score)
    if math.isfinite(score) and score > candidate.best_score:
        _keep_best(setup, model, candidate, epoch, score, (scores, threshold))
    return score, (scores, threshold)


def _progress(setup: Setup, candidate: Candidate, epoch: int, score: float, now: tuple[np.ndarray, float]) -> None:
    """Progress when the score beats the anchor's by more than the paired noise of the two
    epochs on the selection rows (featx.finetune.convergence); progress makes this epoch the anchor."""
    if candidate.anchor_epoch:
        anchor = (read_scores(setup, candidate, candidate.anchor_file), candidate.anchor_threshold)
        needed = convergence.progress_threshold(setup.task, setup.metric, setup.select.labels, now, anchor,
                                                setup.cfg.min_delta)
        candidate.needed.append([epoch, needed])
        if score - candidate.anchor_score <= needed:
            candidate.stale += 1
            return
    candidate.stale = 0
    candidate.anchor_epoch, candidate.anchor_score, candidate.anchor_threshold = epoch, score, now[1]
    candidate.anchor_file = f"anchor-{epoch}.safetensors"
    save_scores(setup, candidate, candidate.anchor_file, now[0])


def _diverged(setup: Setup, candidate: Candidate, epoch: int, step: int, everyone) -> None:
    """A non-finite loss: this learning rate is out (even its earlier epochs: it is unstable);
    with no other candidate it is an error."""
    candidate.stopped_by = "diverged"
    message = (f"the fine-tune at learning rate {candidate.learning_rate:g} diverged: the training "
               f"loss is not finite at epoch {candidate.epoch + 1}, step {candidate.step + 1}")
    if len(everyone) == 1:
        raise FeatxError(message + "; lower finetune.learning_rates or check the targets (no "
                         "record is written for a diverged run)")
    log.warning("%s; the candidate is dropped", message)
    candidate.best_epoch, candidate.best_score = 0, float("-inf")  # never chosen
    save_state(setup, candidate)
