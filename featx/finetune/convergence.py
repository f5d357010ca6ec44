"""When a fine-tune has learned what it can: its learning-rate schedule and its plateau rule, how
often it is scored, and how much work it is expected to take (the learning curve's cost cap).
No torch: the training loop (featx.finetune.training) asks these functions and keeps their state.

The schedule is warmup-stable-decay: the rate rises linearly to its peak, stays there while the
selection score still improves, and decays linearly to zero over a short cooldown only once the
score has plateaued (or the epoch cap is near). The epochs that judge convergence therefore run
at the full rate: their gains shrink because the model has learned what it can, not because the
schedule ran out. A decay tied to the cap makes "the last epoch gained little" true at any cap.

An epoch is progress when its selection score beats the anchor (the last epoch that was
progress) by more than the noise of their difference on the same rows: one standard error of a
paired bootstrap of the two epochs' predictions (featx.stats.bootstrap.difference_se), never less
than `finetune.min_delta`. The threshold follows the selection split's size and the task's
metric; gains of a row at a time still count once they add up beyond noise, because they are
measured from the anchor, not from the previous epoch.
"""
from __future__ import annotations

import math

import numpy as np

from featx.stats import bootstrap

# The warmup spans warmup_ratio of a nominal budget: enough epochs for this many optimizer
# steps, within these bounds (or the epoch cap when it is smaller).
NOMINAL_STEPS, NOMINAL_EPOCHS = 1500, (4, 20)
# The automatic epoch cap: generous, so that the plateau rule, not the cap, ends a run (a run
# the cap stops is a lower bound with the command that continues it).
CAP_STEPS, CAP_EPOCHS = 6000, (10, 60)
# How a fine-tune's epochs grow as its rows shrink (expected_epochs): measured on TREC coarse
# and fine, whose budgets of 48 to 2,716 rows trained 7 to 60 epochs against the full 4,305
# rows' 7 and 13. With it, their curves' summed forward passes are estimated at 1.00x and 1.32x
# what they measured; single points at 0.6x to 2.0x (the smallest budgets under, the middle over).
EPOCHS_EXPONENT = 0.4
# The cooldown: this share of the epochs trained before it, at least one epoch.
COOLDOWN_SHARE = 0.1
# Standard errors of the paired difference that an epoch must gain over the anchor.
NOISE_Z = 1.0
NOISE_RESAMPLES = 200


def _clamp(value: int, bounds: tuple[int, int]) -> int:
    return int(min(bounds[1], max(bounds[0], value)))


def steps_per_epoch(n_train: int, batch_size: int) -> int:
    return max(1, math.ceil(n_train / batch_size))


def auto_max_epochs(n_train: int, batch_size: int) -> int:
    """The epoch cap when `finetune.max_epochs` is 0: enough epochs for CAP_STEPS optimizer
    steps, within CAP_EPOCHS."""
    return _clamp(math.ceil(CAP_STEPS / steps_per_epoch(n_train, batch_size)), CAP_EPOCHS)


def _halving(n_candidates: int) -> list[int]:
    """The candidates alive in each round of successive halving (one epoch each), until one is left."""
    alive, rounds = n_candidates, []
    while alive > 1:
        rounds.append(alive)
        alive = math.ceil(alive / 2)
    return rounds


def worst_case_epochs(n_candidates: int, max_epochs: int, strategy: str) -> int:
    """Epochs the search trains at most: full trains every candidate to the cap; halving trains
    every alive candidate one more epoch per round, then the last one to the cap."""
    if n_candidates == 1 or strategy == "full":
        return n_candidates * max_epochs
    rounds = _halving(n_candidates)
    return sum(rounds) + max(0, max_epochs - len(rounds))


def scoring_period(n_select: int, n_train: int, max_epochs: int, patience: int) -> int:
    """Epochs between scores: enough to train on as many rows as the selection split holds, so
    that scoring costs at most about a third of training (a forward pass against a forward and a
    backward), but short enough that the plateau rule's `patience` scores, and one more, fit in
    half the epoch cap. A training split as large as the selection split is scored every epoch."""
    rows = math.ceil(n_select / max(1, n_train))
    return max(1, min(rows, max_epochs // (2 * (patience + 1))))


def expected_epochs(n_train: int, full_rows: int, full_epochs: int, max_epochs: int) -> float:
    """Epochs a fine-tune on `n_train` rows of a task is expected to train, from the run on all
    `full_rows` that trained `full_epochs`: a run on fewer rows takes more epochs of fewer steps,
    about (full_rows / n_train) ** EPOCHS_EXPONENT times as many, at most the cap."""
    return float(min(max_epochs, max(1.0, full_epochs * (full_rows / max(1, n_train)) ** EPOCHS_EXPONENT)))


def expected_forward_passes(n_train: int, n_select: int, n_report: int, *, epochs: float, candidates: int,
                            strategy: str, max_epochs: int, patience: int) -> float:
    """Backbone forward-pass equivalents of a fine-tune (as its record counts them: a training row
    3, a scored row 1) whose learning rates each train `epochs` epochs at most: the search's
    epochs (worst_case_epochs with `epochs` as the cap), the selection split scored as the
    training loop scores it, the report split once. Halving scores every candidate after each
    of its rounds (one epoch each), then the last one every scoring_period epochs; a full search
    scores each candidate every scoring_period epochs."""
    kept = max(1, math.ceil(epochs))
    period = scoring_period(n_select, n_train, max_epochs, patience)
    trained = worst_case_epochs(candidates, kept, strategy)
    if candidates == 1 or strategy == "full":
        scores = candidates * math.ceil(kept / period)
    else:
        rounds = len(_halving(candidates))
        scores = (trained - kept) + rounds + math.ceil(max(0, kept - rounds) / period)
    return float(3 * n_train * trained + n_select * scores + n_report)


def warmup_steps(warmup_ratio: float, steps: int, max_epochs: int) -> int:
    """Optimizer steps of the linear warmup: `warmup_ratio` of the nominal budget (NOMINAL_STEPS
    in NOMINAL_EPOCHS, at most `max_epochs`) of `steps` steps per epoch."""
    nominal = min(max_epochs, _clamp(math.ceil(NOMINAL_STEPS / steps), NOMINAL_EPOCHS))
    return math.ceil(warmup_ratio * steps * nominal)


def cooldown_epochs(epochs_before: int) -> int:
    """Epochs of the final decay after `epochs_before` epochs at the peak rate."""
    return max(1, math.ceil(COOLDOWN_SHARE * epochs_before))


def lr_factor(step: int, *, warmup: int, cooldown_from: int | None, cooldown_steps: int) -> float:
    """The share of the peak learning rate for optimizer step `step` (0 is the first): linear
    warmup over `warmup` steps, then the peak, then from step `cooldown_from` (None: not yet) a
    linear decay that reaches 1/cooldown_steps of the peak on the cooldown's last step."""
    rise = min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0
    if cooldown_from is None or step < cooldown_from:
        return rise
    return min(rise, max(0.0, 1.0 - (step - cooldown_from) / max(1, cooldown_steps)))


def progress_threshold(task: str, metric: str, y: np.ndarray, now: tuple[np.ndarray, float],
                       anchor: tuple[np.ndarray, float], min_delta: float = 0.0) -> float:
    """The gain over the anchor that counts as progress: NOISE_Z standard errors of the paired
    difference of the two epochs' selection scores (`now`, `anchor`: (scores, threshold)), and
    at least `min_delta`. When the bootstrap cannot define it (too few rows, a metric undefined
    on most resamples), `min_delta` alone."""
    se = bootstrap.difference_se(task, metric, y, now, anchor, n_resamples=NOISE_RESAMPLES)
    noise = NOISE_Z * se if se is not None and math.isfinite(se) else 0.0
    return max(float(min_delta), noise)
