"""When a fine-tune has learned what it can: its learning-rate schedule and its plateau rule.
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
