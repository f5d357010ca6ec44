"""Bootstrap intervals for every metric, and the paired comparison the verdict rests on. No torch.

A resample draws n rows with replacement; it is represented by how often each row was drawn
(`W`, (B, n) counts), so every metric of B resamples is a handful of matrix products instead
of B calls into scikit-learn (1,000 resamples of 538 rows cost milliseconds, not minutes). Each
metric below equals `featx.stats.metrics.evaluate` on the resampled rows (tests check it against
scikit-learn on explicitly repeated rows), including its conventions: classes absent from a
resample drop out of macro-F1 (multilabel: labels without a positive row drawn), a metric the
resample cannot define (an AUC, MCC or correlation of one class or value, an F1 without a
positive, the r2 of a constant target) is NaN.

Rows that repeat one another (the same text up to case, Unicode form, format characters and spacing) are one observation, not
several: given `groups` (a group per row, rows of one group identical), a resample draws as many
groups as there are, with replacement, and each drawn group brings all its rows (a cluster
bootstrap). A test split of 20 texts repeated 10 times is then as uncertain as its 20 rows, not
as 200 would be. With every group of one row the draws are exactly the row bootstrap's.

Intervals are percentile intervals (2.5 and 97.5 percentiles of 1,000 resamples, seeded, so a
report is reproducible). A paired comparison uses the same resamples for both sides: the
interval of the difference then reflects only how the two disagree on the same rows.
"""
from __future__ import annotations

import threading

import numpy as np
import scipy.sparse as sp

from featx.errors import FeatxError
from featx.tasks import TASKS

N_RESAMPLES = 1000
LEVEL = 0.95
# Elements per block of resamples: bounds memory for large test sets and label sets.
BLOCK_ELEMENTS = 1 << 23


def counts(n: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(B, n) float64: how often each row is drawn in each of B resamples of n rows."""
    idx = rng.integers(0, n, size=(n_resamples, n))  # (B, n)
    flat = (idx + n * np.arange(n_resamples)[:, None]).ravel()
    return np.bincount(flat, minlength=n_resamples * n).reshape(n_resamples, n).astype(np.float64)


def _onehot(codes: np.ndarray, n_codes: int, rows: np.ndarray | None = None) -> sp.csr_matrix:
    """(n, n_codes) sparse indicator of each row's code (only `rows`, a boolean mask, if given)."""
    n = len(codes)
    keep = np.ones(n, bool) if rows is None else rows
    return sp.csr_matrix((np.ones(int(keep.sum())), (np.flatnonzero(keep), codes[keep])),
                         shape=(n, n_codes))


def _sums(W: np.ndarray, onehot: sp.csr_matrix) -> np.ndarray:
    """(B, n_codes): per resample, the number of drawn rows with each code."""
    return np.asarray((onehot.T @ W.T).T)


def _ratio(num: np.ndarray, den: np.ndarray, empty: float = 0.0) -> np.ndarray:
    out = np.full(np.broadcast(num, den).shape, empty, dtype=np.float64)
    np.divide(num, den, out=out, where=den != 0)
    return out


# ---------------------------------------------------------------------------------------------
# Metrics of many resamples at once: (W (B, n), ...) -> {name: (B,)}


def _confusion(W: np.ndarray, y: np.ndarray, predicted: np.ndarray, k: int) -> np.ndarray:
    return _sums(W, _onehot(y * k + predicted, k * k)).reshape(len(W), k, k)  # (B, true, pred)


def _mcc(C: np.ndarray) -> np.ndarray:
    """scikit-learn's multiclass MCC from confusion matrices (B, K, K) (`_mcc_of`)."""
    return _mcc_of(C.sum(axis=2), C.sum(axis=1), np.trace(C, axis1=1, axis2=2), C.sum(axis=(1, 2)))


def _mcc_of(t: np.ndarray, p: np.ndarray, correct: np.ndarray, n: np.ndarray) -> np.ndarray:
    """The MCC from each class's true and predicted counts (B, K), the correct rows and all rows
    (B,). A constant prediction scores 0, scikit-learn's convention (no correlation: a model that
    says one class knows nothing); a resample of a single true class is NaN, undefined as
    featx.stats.metrics.undefined refuses such a split: 2 positives in 100 rows leave 13% of resamples
    without one, and scored 0 they would make the interval read as a result, where more than a
    tenth undefined gives none."""
    cov_tp = correct * n - (t * p).sum(axis=1)
    cov_pp = n ** 2 - (p * p).sum(axis=1)
    cov_tt = n ** 2 - (t * t).sum(axis=1)
    out = _ratio(cov_tp, np.sqrt(cov_tt * cov_pp))
    out[cov_tt == 0] = np.nan
    return out


def _auc(W: np.ndarray, positive: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """ROC AUC per resample (Mann-Whitney, ties count half); NaN when a class is absent."""
    _, group = np.unique(scores, return_inverse=True)  # ascending score groups
    n_groups = int(group.max()) + 1
    P = _sums(W, _onehot(group, n_groups, positive))  # (B, G) positives per score group
    N = _sums(W, _onehot(group, n_groups, ~positive))  # (B, G) negatives
    below = np.cumsum(N, axis=1) - N  # negatives with a strictly lower score
    pairs = P.sum(axis=1) * N.sum(axis=1)
    return _ratio((P * (below + 0.5 * N)).sum(axis=1), pairs, empty=np.nan)


def _binary(W, y, scores, threshold, auc=True):
    predicted = (scores >= threshold).astype(np.int64)
    C = _confusion(W, y, predicted, 2)
    n = C.sum(axis=(1, 2))
    tp, fp, fn = C[:, 1, 1], C[:, 0, 1], C[:, 1, 0]
    out = {"accuracy": (C[:, 0, 0] + tp) / n, "f1": _ratio(2 * tp, 2 * tp + fp + fn, empty=np.nan),
           "mcc": _mcc(C)}
    return out | ({"roc_auc": _auc(W, y == 1, scores)} if auc else {})


def _multiclass(W, y, scores, threshold, auc=True):
    # Per class its true, predicted and correct counts (B, K): every metric here is of them, and
    # the (B, K, K) confusion matrix would be 33 GiB for 2,100 classes.
    k = scores.shape[1]
    predicted = scores.argmax(axis=1)
    t, p = _sums(W, _onehot(y, k)), _sums(W, _onehot(predicted, k))
    tp = _sums(W, _onehot(y, k, y == predicted))
    correct, n = tp.sum(axis=1), W.sum(axis=1)
    present = (t + p) > 0  # scikit-learn averages over the labels seen in y_true or y_pred
    f1 = _ratio(2 * tp, t + p)
    return {"accuracy": correct / n, "macro_f1": (f1 * present).sum(axis=1) / present.sum(axis=1),
            "mcc": _mcc_of(t, p, correct, n)}


def _multilabel(W, y, scores, threshold, auc=True):
    y = y.astype(bool)
    predicted = scores >= threshold
    tp, fp, fn = W @ (y & predicted), W @ (~y & predicted), W @ (y & ~predicted)  # (B, L)
    f1 = _ratio(2 * tp, 2 * tp + fp + fn)
    micro = _ratio(2 * tp.sum(axis=1), (2 * tp + fp + fn).sum(axis=1), empty=np.nan)
    n = W.sum(axis=1)
    # As featx.stats.metrics.macro_labels, per resample: macro-F1 over the labels with a positive
    # row drawn, macro AUC over those with a positive and a negative one.
    positives = W @ y  # (B, L)
    present = positives > 0
    both = present & (positives < n[:, None])
    macro_f1 = _ratio((f1 * present).sum(axis=1), present.sum(axis=1), empty=np.nan)
    out = {"micro_f1": micro, "macro_f1": macro_f1, "subset_accuracy": (W @ (y == predicted).all(axis=1)) / n}
    if auc:  # one AUC per label and resample: most of the cost at many labels
        aucs = np.stack([_auc(W, y[:, j], scores[:, j]) for j in range(y.shape[1])], axis=1)
        out["macro_roc_auc"] = _ratio(np.where(both, aucs, 0.0).sum(axis=1), both.sum(axis=1), empty=np.nan)
    return out


def _moments(W: np.ndarray, a: np.ndarray, b: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Pearson correlation of columns a, b (n,) under each resample; NaN when one is constant."""
    # Centred once and each scaled to a largest |value| of 1 (Pearson ignores both): the moments
    # below stay well conditioned, and targets near 1e90 do not overflow va * vb to inf
    # (an interval of [0, 0]) nor targets near 1e-200 underflow it to 0 (NaN).
    # Centred on the median, not the mean: a 1e9 outlier moves the mean so far that the other
    # rows' spread is rounding error of their mean square in every resample that misses it.
    a, b = _unit(a - np.median(a)), _unit(b - np.median(b))
    ma, mb = (W @ a) / n, (W @ b) / n
    sa, sb = (W @ (a * a)) / n, (W @ (b * b)) / n
    va, vb = sa - ma ** 2, sb - mb ** 2
    cov = (W @ (a * b)) / n - ma * mb
    # Constant within each resample's own scale (a variance that is rounding error of the mean
    # square): one cut-off over both columns would make predictions of spread 0.5 beside a target
    # of 1e6 "constant" (NaN on every resample, where scipy's Pearson is 0.147), and a fixed 1e-12
    # every resample without a 1e6 outlier (the rest 1e-6 of it after scaling).
    ok = (va > 1e-10 * sa) & (vb > 1e-10 * sb) & (sa > 0) & (sb > 0)
    # Clipped: rounding can put a resample of nearly collinear columns at 1.0000000000000002.
    return np.where(ok, np.clip(cov / np.sqrt(np.where(ok, va * vb, 1.0)), -1.0, 1.0), np.nan)


def _unit(x: np.ndarray) -> np.ndarray:
    """x over its largest |value| (a column of zeros as it is)."""
    top = float(np.abs(x).max(initial=0))
    return x / top if top > 0 else x


def _ranks(W: np.ndarray, values: np.ndarray) -> np.ndarray:
    """(B, n): each row's average rank among the rows drawn in each resample (ties averaged)."""
    _, group = np.unique(values, return_inverse=True)
    C = _sums(W, _onehot(group, int(group.max()) + 1))  # (B, G) drawn rows per value
    rank = np.cumsum(C, axis=1) - C + (C + 1) / 2  # (B, G)
    return rank[:, group]


def _spearman(W: np.ndarray, a: np.ndarray, b: np.ndarray, n: np.ndarray) -> np.ndarray:
    ra, rb = _ranks(W, a), _ranks(W, b)  # (B, n) each
    ma, mb = (W * ra).sum(axis=1) / n, (W * rb).sum(axis=1) / n
    cov = (W * ra * rb).sum(axis=1) / n - ma * mb
    va = (W * ra * ra).sum(axis=1) / n - ma ** 2
    vb = (W * rb * rb).sum(axis=1) / n - mb ** 2
    ok = (va > 1e-9) & (vb > 1e-9)
    return np.where(ok, cov / np.sqrt(np.where(ok, va * vb, 1.0)), np.nan)


def _regression(W, y, scores, threshold, auc=True):
    y, scores = y.reshape(len(y), -1), scores.reshape(len(scores), -1)
    n = W.sum(axis=1)
    error = y - scores
    mse = (W @ error ** 2) / n[:, None]  # (B, T)
    centred = y - y.mean(axis=0)
    squares = W @ centred ** 2
    mean = (W @ centred) / n[:, None]  # (B, T) each resample's own mean
    # Two passes: the sum of squares about each resample's mean. The one-pass form (squares -
    # n mean^2) cancels: a resample that draws one value only keeps 1e-17 of rounding, and r2
    # divided by it is -5e15.
    total = np.stack([(W * (centred[:, j][None, :] - mean[:, j][:, None]) ** 2).sum(axis=1)
                      for j in range(y.shape[1])], axis=1)  # (B, T)
    residual = W @ error ** 2
    constant = total <= 1e-20 * squares  # what rounding leaves of a constant target
    # A constant target has no variance to explain: its r2 is undefined (featx.stats.metrics).
    r2 = np.where(~constant, 1 - _ratio(residual, np.where(constant, 1.0, total)), np.nan)
    columns = range(y.shape[1])
    return {"mse": mse.mean(axis=1), "mae": ((W @ np.abs(error)) / n[:, None]).mean(axis=1),
            "r2": r2.mean(axis=1),
            "pearson": np.mean([_moments(W, y[:, j], scores[:, j], n) for j in columns], axis=0),
            "spearman": np.mean([_spearman(W, y[:, j], scores[:, j], n) for j in columns], axis=0)}


METRICS = {"binary": _binary, "multiclass": _multiclass, "multilabel": _multilabel,
           "regression": _regression}


def metric_samples(task: str, W: np.ndarray, y: np.ndarray, stack: np.ndarray,
                   threshold: float = 0.5, *, metric: str | None = None) -> dict[str, np.ndarray]:
    """Every metric of `task` (or only `metric`) for each resample in W (B, n): {name: (B,)}.

    `stack` holds one score array per seed, (S, n, ...), each as `featx.stats.metrics.evaluate`
    takes it; the metric is averaged over seeds within each resample, as records average seeds.
    """
    y = np.asarray(y)
    out: dict[str, list[np.ndarray]] = {}
    auc = metric is None or "auc" in metric
    for scores in np.asarray(stack, dtype=np.float64):
        for name, values in METRICS[task](W, y, scores, threshold, auc=auc).items():
            if metric is None or name == metric:
                out.setdefault(name, []).append(values)
    return {name: np.mean(values, axis=0) for name, values in out.items()}


def distinct_rows(groups, n: int) -> np.ndarray | None:
    """Each of the n rows' group numbered 0 .. G-1 in the order the groups first appear, or None
    when every row is a group of its own (or `groups` is None): the plain row bootstrap then.
    `groups`: one integer per row, equal for rows that repeat one another."""
    if groups is None:
        return None
    groups = np.asarray(groups)
    if groups.shape != (n,) or groups.dtype.kind not in "iu":
        raise FeatxError(f"groups must be one integer per row ({n} rows), got a {groups.dtype} "
                         f"array of shape {groups.shape}")
    _, first, inverse = np.unique(groups, return_index=True, return_inverse=True)
    if len(first) == n:
        return None
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first)] = np.arange(len(first))
    return rank[inverse.reshape(-1)]


def _distinct(n: int, groups: np.ndarray | None) -> int:
    """How many distinct rows (groups) n rows of `groups` (`distinct_rows`) hold."""
    return n if groups is None else int(groups.max()) + 1


# The last few count matrices drawn, by (units drawn, block size, resamples, seed), read-only, at
# most KEPT_BYTES in all. They are the same for every call with the same key (seeded), and a
# probe asks for the same ones again and again: each record's test interval and selection
# error, on the same rows. Drawing them costs more than the metrics, mostly in page faults on
# fresh memory (bench/HISTORY.md, Probe cost).
KEPT_BYTES = 64 << 20
_kept: dict[tuple, tuple[np.ndarray, ...]] = {}
_kept_lock = threading.Lock()


def _blocks(n: int, width: int, n_resamples: int, seed: int, groups: np.ndarray | None = None):
    """Count matrices (B_block, n) of at most BLOCK_ELEMENTS elements, B resamples in all: how
    often each row is drawn. With `groups` (`distinct_rows`), the groups are drawn and every row
    of a group counts as often as its group: each drawn group brings all its copies."""
    step = max(1, min(n_resamples, BLOCK_ELEMENTS // max(1, n * max(1, width))))
    if groups is None:
        yield from _drawn(n, step, n_resamples, seed)
        return
    for W in _drawn(_distinct(n, groups), step, n_resamples, seed):
        yield W[:, groups]  # (B_block, G) -> (B_block, n)


def _drawn(m: int, step: int, n_resamples: int, seed: int):
    """Counts of m units (rows or groups) in blocks of `step` resamples, B in all, seeded."""
    key = (m, step, n_resamples, seed)
    with _kept_lock:
        kept = _kept.pop(key, None)
        if kept is not None:
            _kept[key] = kept  # most recently used last
    if kept is not None:
        yield from kept
        return
    rng = np.random.default_rng(seed)
    keep = 8 * m * n_resamples <= KEPT_BYTES
    drawn = []
    for start in range(0, n_resamples, step):
        W = counts(m, min(step, n_resamples - start), rng)
        if keep:
            W.flags.writeable = False  # shared with later calls: nobody writes into it
            drawn.append(W)
        yield W
    if keep:
        with _kept_lock:
            _kept[key] = tuple(drawn)
            while sum(8 * k[0] * k[2] for k in _kept) > KEPT_BYTES:
                del _kept[next(iter(_kept))]


def _width(task: str, scores: np.ndarray) -> int:
    """Elements per row and resample that a block allocates beyond W (ranks, AUC groups; a
    multiclass task's counts per class, 4 (B, K) arrays, spread over its rows)."""
    if TASKS[task].thresholded:
        return 2 + scores.shape[-1]
    if TASKS[task].classes and scores.ndim == 3:  # (S, n, K): a score per class
        return 2 + -(-4 * scores.shape[-1] // max(1, scores.shape[-2]))
    return 2


# Fewer distinct rows than this have too few distinct resamples (3 rows: 10) for a percentile
# interval to mean anything: no interval is given.
MIN_ROWS = 5


def percentile_interval(samples: np.ndarray, n_rows: int | None = None) -> list[float]:
    if n_rows is not None and n_rows < MIN_ROWS:
        return [float("nan"), float("nan")]
    finite = samples[np.isfinite(samples)]
    # An interval from a minority of defined resamples would pretend to a precision it lacks.
    if len(finite) < 0.9 * len(samples):
        return [float("nan"), float("nan")]
    tail = 100 * (1 - LEVEL) / 2
    return [float(v) for v in np.percentile(finite, [tail, 100 - tail])]


def intervals(task: str, y: np.ndarray, stack: np.ndarray, threshold: float = 0.5, *,
              n_resamples: int = N_RESAMPLES, seed: int = 0, groups=None,
              metric: str | None = None) -> dict[str, list[float]]:
    """95% percentile interval of every metric (or only `metric`) over bootstrap resamples of the
    rows; `stack` is (S, n, ...), one score array per seed; `groups` (one integer per row, equal
    for rows that repeat one another) makes it resample the distinct rows (`distinct_rows`)."""
    y, stack = np.asarray(y), np.asarray(stack)
    groups = distinct_rows(groups, len(y))
    collected: dict[str, list[np.ndarray]] = {}
    for W in _blocks(len(y), _width(task, stack), n_resamples, seed, groups):
        for name, values in metric_samples(task, W, y, stack, threshold, metric=metric).items():
            collected.setdefault(name, []).append(values)
    return {name: percentile_interval(np.concatenate(parts), _distinct(len(y), groups)) for name, parts in collected.items()}


def shared_samples(task: str, metric: str, y: np.ndarray, predictions: list[tuple[np.ndarray, float]], *,
                   n_resamples: int = N_RESAMPLES, seed: int = 0, groups=None) -> np.ndarray:
    """(P, B): `metric` of each of P predictions ((score stack (S, n, ...), threshold) each, on
    the same rows) under the same B resamples (of the distinct rows, with `groups`: `intervals`),
    so that any difference or average of them keeps the pairing."""
    y = np.asarray(y)
    groups = distinct_rows(groups, len(y))
    width = max(_width(task, np.asarray(stack)) for stack, _ in predictions)
    blocks = [[metric_samples(task, W, y, stack, threshold, metric=metric)[metric] for stack, threshold in predictions]
              for W in _blocks(len(y), width, n_resamples, seed, groups)]
    return np.concatenate([np.stack(block) for block in blocks], axis=1)


def standard_error(task: str, metric: str, y: np.ndarray, scores: np.ndarray, threshold: float = 0.5,
                   *, n_resamples: int = 200, seed: int = 0, groups=None) -> float | None:
    """Bootstrap standard error of one metric of `scores` (n, ...) over the rows (the distinct
    rows, with `groups`: `intervals`); None when too few resamples define it (a constant
    prediction's correlation, a single-class split)."""
    y, stack = np.asarray(y), np.asarray(scores)[None]
    groups = distinct_rows(groups, len(y))
    samples = np.concatenate([metric_samples(task, W, y, stack, threshold, metric=metric)[metric]
                              for W in _blocks(len(y), _width(task, stack), n_resamples, seed, groups)])
    finite = samples[np.isfinite(samples)]
    return float(np.std(finite, ddof=1)) if len(finite) >= max(2, 0.9 * len(samples)) else None


def difference_se(task: str, metric: str, y: np.ndarray, a: tuple[np.ndarray, float],
                  b: tuple[np.ndarray, float], *, n_resamples: int = 200, seed: int = 0,
                  groups=None) -> float | None:
    """Bootstrap standard error of metric(a) - metric(b) on the same rows (`a`, `b`: (scores
    (n, ...), threshold); the distinct rows, with `groups`: `intervals`): how far apart two
    candidates must score before these rows can tell them apart. Two heads on the same features
    err on the same rows, so their difference is far less noisy than either score; two unrelated
    candidates, more. None when too few resamples define the metric."""
    y = np.asarray(y)
    groups = distinct_rows(groups, len(y))
    diffs = []
    for W in _blocks(len(y), _width(task, np.asarray(a[0])[None]), n_resamples, seed, groups):
        diffs.append(metric_samples(task, W, y, np.asarray(a[0])[None], a[1], metric=metric)[metric]
                     - metric_samples(task, W, y, np.asarray(b[0])[None], b[1], metric=metric)[metric])
    samples = np.concatenate(diffs)
    finite = samples[np.isfinite(samples)]
    return float(np.std(finite, ddof=1)) if len(finite) >= max(2, 0.9 * len(samples)) else None


def paired(task: str, metric: str, y: np.ndarray, a: tuple[np.ndarray, float],
           b: tuple[np.ndarray, float], *, n_resamples: int = N_RESAMPLES, seed: int = 0,
           groups=None) -> dict:
    """`a` against `b` ((score stack (S, n, ...), threshold) each) on the same rows, by a paired
    bootstrap: each resample (of the distinct rows, with `groups`: `intervals`) scores both.

    Returns the point values, their difference a - b with its interval, and the ratio a / b with
    its interval (None when b is not positive: a ratio of such scores means nothing); with rows
    that repeat one another, `distinct`: how many distinct rows the resamples drew from.
    """
    y = np.asarray(y)
    groups = distinct_rows(groups, len(y))
    distinct = _distinct(len(y), groups)
    ones = np.ones((1, len(y)))
    value_a = float(metric_samples(task, ones, y, a[0], a[1], metric=metric)[metric][0])
    value_b = float(metric_samples(task, ones, y, b[0], b[1], metric=metric)[metric][0])
    diffs, ratios = [], []
    for W in _blocks(len(y), _width(task, np.asarray(a[0])), n_resamples, seed, groups):
        sa = metric_samples(task, W, y, a[0], a[1], metric=metric)[metric]
        sb = metric_samples(task, W, y, b[0], b[1], metric=metric)[metric]
        diffs.append(sa - sb)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios.append(np.where(sb > 0, sa / sb, np.nan))
    difference = np.concatenate(diffs)
    ratio = value_a / value_b if value_b > 0 and np.isfinite(value_a) else None
    return {"metric": metric, "n": len(y), "a": value_a, "b": value_b,
            "difference": value_a - value_b, "difference_ci": percentile_interval(difference, distinct),
            "ratio": ratio, "ratio_ci": percentile_interval(np.concatenate(ratios), distinct) if ratio is not None else None,
            "resamples": n_resamples, "level": LEVEL} | ({} if groups is None else {"distinct": distinct})
