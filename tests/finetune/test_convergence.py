"""The fine-tune's plateau rule and schedule (featx.finetune.convergence, featx.finetune.training.judge) on
synthetic selection curves: predictions made row by row, no model."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from featx.finetune import convergence as C

pytest.importorskip("torch")
from featx.finetune.training import Candidate, judge  # noqa: E402

K = 20  # classes


def _setup(tmp_path, y, *, patience=3, max_epochs=40, min_delta=0.0):
    return SimpleNamespace(task="multiclass", metric="accuracy", select=SimpleNamespace(labels=y),
                           cfg=SimpleNamespace(patience=patience, min_delta=min_delta), max_epochs=max_epochs,
                           steps_per_epoch=10, directory=tmp_path)


def _scores(y, correct, rng):
    """(n, K) scores whose argmax is the true class exactly on the `correct` rows."""
    wrong = (y + rng.integers(1, K, len(y))) % K
    scores = rng.random((len(y), K)) * 0.1
    scores[np.arange(len(y)), np.where(correct, y, wrong)] = 1.0
    return scores


def _curve(tmp_path, accuracy_of_epoch, *, n=1000, churn=30, seed=0, **settings):
    """Train a candidate on a synthetic curve: epoch e gets right the first
    round(accuracy_of_epoch(e) * n) rows of a fixed order, and `churn` rows of the others flip
    each epoch (the noise of a model still moving at the peak rate). The candidate, and the
    epochs it ran."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, n)
    setup = _setup(tmp_path, y, **settings)
    candidate = Candidate(learning_rate=1e-4)
    for epoch in range(1, setup.max_epochs + 1):
        correct = np.arange(n) < round(accuracy_of_epoch(epoch) * n)
        flip = rng.choice(n, churn, replace=False)
        correct[flip] = ~correct[flip]
        now = (_scores(y, correct, rng), 0.5)
        candidate.epoch, candidate.step = epoch, epoch * setup.steps_per_epoch
        judge(setup, candidate, epoch, float(correct.mean()), now)
        if candidate.stopped_by:
            break
    return candidate


# Selection accuracy per epoch of a 77-class intent fine-tune whose linear decay ended at epoch
# 6, where a fixed gain of 0.005 said "converged" (test 0.9205); trained on, it reached 0.917
# (test 0.9286) and the verdict changed direction.
STILL_RISING = [0.618, 0.833, 0.888, 0.890, 0.904, 0.907, 0.912, 0.914, 0.917, 0.925, 0.931, 0.935]


def test_a_curve_still_rising_is_not_converged_where_a_fixed_gain_said_so(tmp_path):
    rising = _curve(tmp_path, lambda e: STILL_RISING[min(e, len(STILL_RISING)) - 1], churn=15, max_epochs=12)
    assert not rising.converged or rising.plateau_epoch > 9, rising.needed
    assert all(needed > 0.003 for _, needed in rising.needed)  # one epoch's 0.003 is within noise


def test_a_steady_rise_of_a_few_rows_an_epoch_is_followed(tmp_path):
    rising = _curve(tmp_path, lambda e: 0.6 + 0.01 * min(e, 20), max_epochs=40)
    assert rising.plateau_epoch > 15, rising.needed


def test_a_flat_noisy_curve_converges_and_cools_down(tmp_path):
    flat = _curve(tmp_path, lambda e: 0.8, churn=40)
    assert flat.converged and flat.plateau_epoch <= 8
    assert flat.stopped_by == "patience" and flat.epoch == flat.plateau_epoch + 1  # one cooldown epoch
    assert flat.cooldown_epoch == flat.plateau_epoch + 1


def test_a_curve_that_rises_then_flattens_converges_after_the_rise(tmp_path):
    candidate = _curve(tmp_path, lambda e: min(0.5 + 0.05 * e, 0.8))
    assert candidate.converged and 6 <= candidate.plateau_epoch <= 10


def test_a_capped_curve_is_not_converged_and_anneals_before_the_cap(tmp_path):
    candidate = _curve(tmp_path, lambda e: 0.3 + 0.02 * e, max_epochs=12)
    assert not candidate.converged and candidate.stopped_by == "max_epochs" and candidate.epoch == 12


def test_the_threshold_follows_the_selection_split_and_its_noise():
    rng = np.random.default_rng(1)

    def threshold(n, churn_share):
        y = rng.integers(0, K, n)
        correct = np.arange(n) < 0.8 * n
        flip = rng.choice(n, int(churn_share * n), replace=False)
        later = correct.copy()
        later[flip] = ~later[flip]
        return C.progress_threshold("multiclass", "accuracy", y, (_scores(y, later, rng), 0.5),
                                    (_scores(y, correct, rng), 0.5))

    small, large = threshold(400, 0.05), threshold(10_000, 0.05)
    assert 3.5 < small / large < 6.5  # ~ sqrt(25)
    assert threshold(2000, 0.01) < threshold(2000, 0.1) / 2  # two epochs that agree more: a smaller threshold
    y = rng.integers(0, K, 50)
    same = _scores(y, np.ones(50, bool), rng)
    assert C.progress_threshold("multiclass", "accuracy", y, (same, 0.5), (same, 0.5), 0.01) == 0.01


def test_the_rate_stays_at_its_peak_until_the_cooldown():
    warmup = C.warmup_steps(0.06, 100, 40)
    assert warmup == 90  # 6% of 15 nominal epochs (1,500 steps) of 100 steps
    assert C.lr_factor(0, warmup=warmup, cooldown_from=None, cooldown_steps=0) == pytest.approx(1 / 90)
    assert [C.lr_factor(s, warmup=warmup, cooldown_from=None, cooldown_steps=0) for s in (89, 500, 3999)] == [1, 1, 1]
    decay = [C.lr_factor(s, warmup=warmup, cooldown_from=1000, cooldown_steps=100) for s in range(1000, 1100)]
    assert decay[0] == 1 and decay[-1] == pytest.approx(0.01) and np.all(np.diff(decay) < 0)
    # A cooldown inside the warmup (an epoch cap of 1) is the lower of the two.
    assert C.lr_factor(5, warmup=20, cooldown_from=0, cooldown_steps=20) == pytest.approx(6 / 20)


def test_the_automatic_cap_is_generous():
    assert C.auto_max_epochs(4305, 32) == 45  # TREC: 135 steps an epoch
    assert C.auto_max_epochs(100, 32) == 60 and C.auto_max_epochs(1_000_000, 32) == 10
    assert C.cooldown_epochs(5) == 1 and C.cooldown_epochs(15) == 2


def test_the_expected_work_of_a_fine_tune_counts_as_its_record_does():
    # TREC coarse's 8-per-class point, as measured: 48 rows, two learning rates by halving, the
    # kept one 60 epochs scored every 7 on 538 rows, then the 538-row report split: 15,240.
    assert C.scoring_period(538, 48, 60, 3) == 7
    assert C.expected_forward_passes(48, 538, 538, epochs=60, candidates=2, strategy="halving", max_epochs=60,
                                     patience=3) == 3 * 48 * 61 + 538 * 11 + 538 == 15_240
    # The full run it was drawn from, exactly as measured: 4,305 rows, 7 epochs scored every epoch.
    assert C.expected_forward_passes(4305, 538, 538, epochs=7, candidates=2, strategy="halving", max_epochs=45,
                                     patience=3) == 108_162
    # A full search (on CUDA) trains and scores every candidate every period to its end.
    assert C.expected_forward_passes(48, 538, 538, epochs=60, candidates=2, strategy="full", max_epochs=60,
                                     patience=3) == 3 * 48 * 120 + 538 * 2 * 9 + 538
    # Fewer rows train more epochs, at most the cap; the full split's own epochs are its own.
    assert C.expected_epochs(4305, 4305, 7, 45) == 7
    assert 7 < C.expected_epochs(384, 4305, 7, 60) < C.expected_epochs(96, 4305, 7, 60) < 60
    assert C.expected_epochs(10, 100_000, 7, 60) == 60


@pytest.mark.parametrize("lost, won, kept", [(40, 35, "annealed"), (120, 20, "best")])
def test_the_annealed_epoch_is_kept_unless_the_best_is_better_beyond_noise(tmp_path, lost, won, kept):
    """The best of many noisy epochs is partly luck: the cooldown's last epoch is kept unless
    the best scored higher beyond the paired noise of the two."""
    import torch

    from featx.finetune import training as T

    rng = np.random.default_rng(0)
    y = rng.integers(0, K, 1000)
    setup = _setup(tmp_path, y)
    model, candidate = torch.nn.Linear(2, 2), Candidate(learning_rate=1e-4)
    best = np.arange(1000) < 800
    T._keep_best(setup, model, candidate, 3, 0.8, (_scores(y, best, rng), 0.5))
    now = best.copy()  # rows the best had right, now wrong, and others the other way
    now[rng.choice(800, lost, replace=False)] = False
    now[800 + rng.choice(200, won, replace=False)] = True
    T._keep_annealed(setup, model, candidate, 9, float(now.mean()), (_scores(y, now, rng), 0.5))
    assert (candidate.best_epoch, candidate.kept_annealed) == ((9, True) if kept == "annealed" else (3, False))
