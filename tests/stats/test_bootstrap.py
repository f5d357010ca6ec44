"""Bootstrap metrics equal featx.stats.metrics (scikit-learn) on the resampled rows; intervals behave."""
from __future__ import annotations

import numpy as np
import pytest

from featx.stats import bootstrap as BS
from featx.stats import metrics as M


def problem(task: str, n: int, rng: np.random.Generator, k: int = 5, ties: bool = False):
    if task == "binary":
        y = rng.integers(0, 2, n)
        scores = np.clip(0.5 * y + rng.normal(0.25, 0.3, n), 0, 1)
    elif task == "multiclass":
        y = rng.integers(0, k, n)
        logits = rng.normal(size=(n, k)) + 2 * np.eye(k)[y] * rng.random((n, 1))
        scores = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    elif task == "multilabel":
        y = (rng.random((n, k)) < 0.3).astype(np.uint8)
        scores = np.clip(0.4 * y + rng.random((n, k)) * 0.6, 0, 1)
    else:
        y = rng.normal(size=(n, 2)) * [1.0, 50.0] + [0.0, 300.0]
        scores = y + rng.normal(size=(n, 2)) * [0.8, 30.0]
    if ties:
        scores = np.round(scores, 1)
        if task == "regression":
            y = np.round(y, 0)
    return y, scores


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("task", ["binary", "multiclass", "multilabel", "regression"])
def test_each_resample_equals_scikit_learn_on_the_repeated_rows(task, ties):
    rng = np.random.default_rng(3)
    y, scores = problem(task, 60, rng, ties=ties)
    threshold = 0.4
    W = BS.counts(len(y), 25, rng)
    samples = BS.metric_samples(task, W, y, scores[None], threshold)
    for b in range(len(W)):
        rows = np.repeat(np.arange(len(y)), W[b].astype(int))
        expected = M.evaluate(task, y[rows], scores[rows], threshold)
        for name, value in expected.items():
            got = samples[name][b]
            if np.isnan(value):
                assert np.isnan(got), (name, b)
            else:
                assert got == pytest.approx(value, abs=1e-9), (name, b)


def test_absent_classes_and_undefined_metrics_follow_the_conventions():
    y = np.array([0, 0, 1, 1, 2])
    scores = np.eye(3)[[0, 0, 1, 1, 2]] * 0.9 + 0.03
    W = np.array([[2.0, 1, 1, 1, 0]])  # class 2 never drawn: macro-F1 over classes 0 and 1
    got = BS.metric_samples("multiclass", W, y, scores[None])
    assert got["macro_f1"][0] == pytest.approx(1.0) and got["accuracy"][0] == 1.0
    W = np.array([[3.0, 2, 0, 0, 0]])  # one true class only: AUC and MCC undefined
    binary = BS.metric_samples("binary", W, np.array([0, 0, 1, 1, 1]),
                               np.array([[0.1, 0.2, 0.8, 0.9, 0.7]]))
    assert np.isnan(binary["roc_auc"][0]) and np.isnan(binary["mcc"][0])
    W = np.array([[1.0, 1, 1, 1, 1]])  # a constant prediction: MCC 0 (scikit-learn's), both classes true
    binary = BS.metric_samples("binary", W, np.array([0, 0, 1, 1, 1]), np.array([[0.9, 0.9, 0.8, 0.9, 0.7]]))
    assert binary["mcc"][0] == 0.0 == M.evaluate("binary", np.array([0, 0, 1, 1, 1]),
                                                  np.array([0.9, 0.9, 0.8, 0.9, 0.7]))["mcc"]


def test_seeds_are_averaged_within_each_resample():
    rng = np.random.default_rng(0)
    y, a = problem("multiclass", 80, rng)
    _, b = problem("multiclass", 80, rng)
    W = BS.counts(80, 10, rng)
    both = BS.metric_samples("multiclass", W, y, np.stack([a, b]))["accuracy"]
    one = BS.metric_samples("multiclass", W, y, a[None])["accuracy"]
    two = BS.metric_samples("multiclass", W, y, b[None])["accuracy"]
    np.testing.assert_allclose(both, (one + two) / 2)


def test_interval_covers_the_estimate_and_shrinks_with_rows():
    rng = np.random.default_rng(1)
    widths = []
    for n in (100, 1600):
        y, scores = problem("binary", n, rng)
        ci = BS.intervals("binary", y, scores[None], n_resamples=400)
        value = M.evaluate("binary", y, scores)["accuracy"]
        assert ci["accuracy"][0] <= value <= ci["accuracy"][1]
        widths.append(ci["accuracy"][1] - ci["accuracy"][0])
    assert widths[1] < widths[0] / 3  # ~1/sqrt(16)


def test_intervals_are_reproducible_and_blocked_like_one_pass(monkeypatch):
    rng = np.random.default_rng(2)
    y, scores = problem("multilabel", 200, rng)
    first = BS.intervals("multilabel", y, scores[None], n_resamples=200)
    assert BS.intervals("multilabel", y, scores[None], n_resamples=200) == first
    monkeypatch.setattr(BS, "BLOCK_ELEMENTS", 2000)  # many small blocks, same draws per block size
    small = BS.intervals("multilabel", y, scores[None], n_resamples=200)
    for name in first:
        assert small[name] == pytest.approx(first[name], abs=0.05)


def test_the_counts_drawn_once_serve_every_later_call_and_nobody_writes_into_them(monkeypatch):
    rng = np.random.default_rng(3)
    y, scores = problem("multiclass", 300, rng)
    BS._kept.clear()
    drawn = []
    counts = BS.counts
    monkeypatch.setattr(BS, "counts", lambda *a: drawn.append(a[:2]) or counts(*a))
    first = BS.intervals("multiclass", y, scores[None], n_resamples=200)
    assert drawn and all(not W.flags.writeable for W in next(iter(BS._kept.values())))
    drawn.clear()
    # the same rows again (another record's test interval): the same draws, none drawn anew
    assert BS.intervals("multiclass", y, scores[None], n_resamples=200) == first
    assert BS.standard_error("multiclass", "accuracy", y, scores, n_resamples=200) is not None
    assert not drawn
    # another number of rows draws its own; past KEPT_BYTES nothing is kept, the figures the same
    other = BS.intervals("multiclass", y[:250], scores[None, :250], n_resamples=200)
    assert drawn
    monkeypatch.setattr(BS, "KEPT_BYTES", 1000)
    BS._kept.clear()
    assert BS.intervals("multiclass", y[:250], scores[None, :250], n_resamples=200) == other
    assert not BS._kept


def test_paired_comparison_of_identical_and_different_predictors():
    rng = np.random.default_rng(4)
    y, good = problem("multiclass", 400, rng)
    same = BS.paired("multiclass", "accuracy", y, (good[None], 0.5), (good[None], 0.5), n_resamples=300)
    assert same["difference"] == 0 and same["difference_ci"] == [0.0, 0.0] and same["ratio"] == 1.0
    noise = rng.random(good.shape)
    worse = BS.paired("multiclass", "accuracy", y, (noise[None], 0.5), (good[None], 0.5), n_resamples=300)
    assert worse["difference"] < 0 and worse["difference_ci"][1] < 0  # measurably worse
    assert worse["ratio_ci"][0] <= worse["ratio"] <= worse["ratio_ci"][1]
    assert worse["n"] == 400


def test_ratio_is_withheld_when_the_reference_is_not_positive():
    y = np.array([0, 1, 0, 1, 0, 1, 0, 1])
    flipped = np.array([0.9, 0.1, 0.8, 0.2, 0.7, 0.3, 0.6, 0.4])
    result = BS.paired("binary", "mcc", y, (flipped[None], 0.5), (flipped[None], 0.5), n_resamples=50)
    assert result["ratio"] is None and result["ratio_ci"] is None


def test_two_positives_in_a_hundred_rows_give_no_mcc_interval():
    """13% of the resamples hold no positive row: their MCC is undefined, not 0, and more than a
    tenth undefined gives no interval (it was [0, 1]: "no measurable difference")."""
    y = np.zeros(100, int)
    y[:2] = 1
    frozen = np.full(100, 0.1)
    frozen[:5] = 0.9  # both positives, and three false ones
    tuned = np.full(100, 0.1)  # one class for every row: MCC 0, scikit-learn's convention
    got = BS.paired("binary", "mcc", y, (frozen[None], 0.5), (tuned[None], 0.5))
    assert got["b"] == 0.0 and got["a"] > 0.6
    assert all(np.isnan(v) for v in got["difference_ci"])


def test_pearson_of_small_predictions_beside_a_huge_target_is_a_number():
    """One cut-off for "constant" over both columns, set by the target's 1e6, made predictions of
    spread under 1 constant: NaN on every resample where scipy gives a number."""
    rng = np.random.default_rng(3)
    y = rng.normal(size=200)
    y[0] = 1e6
    scores = y * 1e-7 + rng.normal(scale=0.3, size=200)
    every_row = np.ones((1, 200))
    got = BS.metric_samples("regression", every_row, y, scores[None])["pearson"][0]
    assert got == pytest.approx(M.evaluate("regression", y, scores)["pearson"])


@pytest.mark.parametrize("scale", [1e-90, 1e90])
def test_correlation_intervals_do_not_depend_on_the_targets_scale(scale):
    # va * vb overflowed past 1e78 (an interval of [0, 0]) and underflowed below 1e-100 (NaN).
    rng = np.random.default_rng(0)
    y = rng.normal(size=(40, 1))
    scores = y + 0.3 * rng.normal(size=(40, 1))
    plain = BS.intervals("regression", y, scores[None])
    scaled = BS.intervals("regression", y * scale, (scores * scale)[None])
    for metric in ("pearson", "spearman", "r2"):
        np.testing.assert_allclose(scaled[metric], plain[metric], rtol=1e-9)


@pytest.mark.parametrize("outlier", [1e6, 1e9])
def test_resamples_without_a_huge_outlier_keep_their_pearson(outlier):
    """Red team: scaled by a 1e6 outlier, the other values' variance fell under a fixed 1e-12 in
    every resample that missed it: no interval, where scipy's Pearson is defined every time."""
    from scipy.stats import pearsonr

    rng = np.random.default_rng(0)
    y = rng.normal(size=150)
    scores = y + rng.normal(scale=0.5, size=150)
    y[0], scores[0] = outlier, 0.9 * outlier
    low, high = BS.intervals("regression", y[:, None], scores[None, :, None])["pearson"]
    assert 0.7 < low < high <= 1.0
    draws = np.random.default_rng(1).integers(0, 150, (200, 150))
    reference = np.percentile([pearsonr(y[i], scores[i])[0] for i in draws], 2.5)
    assert low == pytest.approx(reference, abs=0.03)
