"""Metrics per task type, from scikit-learn and scipy; one primary metric per task.

`scores` is what a head outputs: binary (n,) P(positive); multiclass (n, K) class
probabilities; multilabel (n, L) per-label probabilities; regression (n, T) predictions on the
original target scale. Every primary metric is "higher is better".

A metric the rows cannot define is NaN, never a number a convention makes up: the MCC of rows of
one true class, the F1 of rows where neither the truth nor the prediction holds a positive, the
r2 of a constant target, a correlation or AUC without two values on each side. A constant class
prediction on rows of two classes or more keeps the MCC of 0 (scikit-learn's and GLUE's
convention: it knows nothing), the score the majority baseline sets as the floor.
"""
from __future__ import annotations

import logging
import warnings

import numpy as np
from scipy.stats import pearsonr, spearmanr
from sklearn import metrics as skm

from featx.errors import FeatxError, check_choice
from featx.tasks import TASKS

log = logging.getLogger("featx")

PRIMARY = {name: task.primary for name, task in TASKS.items()}
# Thresholds tried for multilabel decisions (chosen on dev, or on out-of-fold predictions).
# Below 0.05 too: with many rare labels a linear head's probabilities of the true labels of
# new rows are small, and micro-F1 peaks at 0.02 on a 90-label newswire-like long tail.
THRESHOLDS = np.round(np.concatenate([[0.01, 0.02, 0.03, 0.04], np.arange(0.05, 0.96, 0.05)]), 2)


def _binary(y: np.ndarray, scores: np.ndarray, threshold: float) -> dict[str, float]:
    predicted = (scores >= threshold).astype(int)
    return {"accuracy": skm.accuracy_score(y, predicted),
            "f1": skm.f1_score(y, predicted, zero_division=np.nan),
            "mcc": _mcc(y, predicted),
            "roc_auc": _auc(y, scores)}


def _multiclass(y: np.ndarray, scores: np.ndarray, threshold: float) -> dict[str, float]:
    predicted = scores.argmax(axis=1)
    return {"accuracy": skm.accuracy_score(y, predicted),
            "macro_f1": skm.f1_score(y, predicted, average="macro", zero_division=0),
            "mcc": _mcc(y, predicted)}


def _mcc(y: np.ndarray, predicted: np.ndarray) -> float:
    """scikit-learn's MCC, NaN on rows of one true class (it has no correlation to measure)."""
    return skm.matthews_corrcoef(y, predicted) if len(np.unique(y)) > 1 else float("nan")


def _multilabel(y: np.ndarray, scores: np.ndarray, threshold: float) -> dict[str, float]:
    predicted = (scores >= threshold).astype(int)
    present, both = macro_labels(y)
    return {"micro_f1": skm.f1_score(y, predicted, average="micro", zero_division=np.nan),
            "macro_f1": skm.f1_score(y, predicted, labels=present, average="macro", zero_division=0)
            if len(present) else float("nan"),
            "macro_roc_auc": float(np.mean([_auc(y[:, j], scores[:, j]) for j in both]))
            if len(both) else float("nan"),
            "subset_accuracy": skm.accuracy_score(y, predicted)}


def macro_labels(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The labels multilabel macro averages run over, on rows with labels y (n, L): macro-F1
    over the labels with a positive row (a label with none has no recall, and its F1 would be
    0 or 1 by convention alone; false positives on it still count in micro-F1), macro ROC AUC
    over the labels with a positive and a negative row (an AUC needs both)."""
    positives = (np.asarray(y) != 0).sum(axis=0)
    return np.flatnonzero(positives > 0), np.flatnonzero((positives > 0) & (positives < len(y)))


def label_summary(y_train: np.ndarray, y_report: np.ndarray, label_names) -> dict:
    """What a multilabel record says about its labels: how many there are, which ones are
    constant in the training rows (never or always present: a head predicts them as that
    constant), and how many the report split's macro-F1 and macro ROC AUC average over."""
    positives = (np.asarray(y_train) != 0).sum(axis=0)
    constant = [str(label_names[j]) for j in np.flatnonzero((positives == 0) | (positives == len(y_train)))]
    present, both = macro_labels(y_report)
    return {"total": int(np.asarray(y_report).shape[1]), "constant_in_train": constant,
            "macro_f1": int(len(present)), "macro_roc_auc": int(len(both))}


def _regression(y: np.ndarray, scores: np.ndarray, threshold: float) -> dict[str, float]:
    # Averaged over targets when there are several.
    columns = range(y.shape[1])
    with warnings.catch_warnings():  # a constant prediction has no correlation: nan, not a crash
        warnings.simplefilter("ignore")
        pearson = [pearsonr(y[:, j], scores[:, j])[0] for j in columns]
        spearman = [spearmanr(y[:, j], scores[:, j])[0] for j in columns]
    # r2 of a constant target divides by zero: NaN (scikit-learn's force_finite would say 0, or 1
    # for a perfect fit), and its mean over targets with it.
    constant = len(y) == 0 or bool((np.ptp(y, axis=0) == 0).any())
    r2 = float("nan") if constant else skm.r2_score(y, scores)
    return {"mse": skm.mean_squared_error(y, scores), "mae": skm.mean_absolute_error(y, scores),
            "r2": r2, "pearson": float(np.mean(pearson)),
            "spearman": float(np.mean(spearman))}


METRICS = {"binary": _binary, "multiclass": _multiclass, "multilabel": _multilabel,
           "regression": _regression}
NAMES = {name: task.metrics for name, task in TASKS.items()}
# Errors, not scores: reported beside the others, never a selection or verdict metric (every
# selection keeps the highest score, and a ratio of two errors reads upside down).
LOWER_IS_BETTER = frozenset({"mse", "mae"})



def _auc(y: np.ndarray, scores: np.ndarray) -> float:
    if len(np.unique(y)) < 2:
        return float("nan")
    return skm.roc_auc_score(y, scores)


def evaluate(task: str, y: np.ndarray, scores: np.ndarray, threshold: float = 0.5) -> dict[str, float]:
    """Every metric of the task type, as plain floats."""
    if TASKS[task].regression:
        y, scores = y.reshape(len(y), -1), scores.reshape(len(scores), -1)
    return {k: float(v) for k, v in METRICS[task](y, scores, threshold).items()}


def primary(task: str, metric: str | None = None) -> str:
    """The task's primary metric, or `metric` if it is one of the task's higher-is-better
    metrics (r2 ranks candidates as mse does on one split)."""
    if metric is None:
        return PRIMARY[task]
    scores = [m for m in NAMES[task] if m not in LOWER_IS_BETTER]
    if metric in LOWER_IS_BETTER and metric in NAMES[task]:
        raise FeatxError(f"probe.metric = {metric!r} is an error measure (lower is better); featx "
                         f"selects and compares by a score: choose one of {', '.join(scores)} "
                         "(r2 ranks candidates exactly as mse does)")
    return check_choice(metric, scores, f"metric for a {task} task")


def choose_threshold(y: np.ndarray, scores: np.ndarray) -> float:
    """Multilabel decision threshold maximising micro-F1 (ties: the one closest to 0.5)."""
    best = max(THRESHOLDS, key=lambda t: (
        skm.f1_score(y, (scores >= t).astype(int), average="micro", zero_division=0), -abs(t - 0.5)))
    return float(best)


def undefined(task: str, metric: str, y: np.ndarray, label_names) -> str | None:
    """Why `metric` cannot be computed on rows labelled `y`, or None when it can: a score that
    is 0 by convention there (scikit-learn's MCC of a single class) would read as a result."""
    if len(y) == 0:
        return None  # an empty split is refused where it is made, with its own fix
    if TASKS[task].classes:
        present = np.unique(y)
        if len(present) < 2 and metric in ("mcc", "roc_auc", "f1", "macro_f1"):
            return f"holds a single class ({label_names[int(present[0])]!r})"
        return None
    if TASKS[task].thresholded:
        return "has no row with any label" if not np.asarray(y).any() else None
    flat = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
    constant = [label_names[j] for j in range(flat.shape[1]) if np.ptp(flat[:, j]) == 0]
    if constant and metric in ("pearson", "spearman", "r2"):
        return f"has a constant target {constant[0]!r} ({flat[0, label_names.index(constant[0])]:g})"
    return None


def check_defined(task: str, metric: str, splits: dict[str, np.ndarray], label_names) -> None:
    """Refuse, before any fit, a selection or report split on which the primary metric is
    undefined: every candidate would score the same convention, and the verdict rest on it."""
    for name, y in splits.items():
        reason = undefined(task, metric, y, list(label_names))
        if reason:
            other = [m for m in NAMES[task] if m not in LOWER_IS_BETTER and m != metric
                     and undefined(task, m, y, list(label_names)) is None]
            rows = ("targets that vary" if TASKS[task].regression else "rows of every class"
                    if TASKS[task].classes else "rows with and without each label")
            raise FeatxError(
                f"the {name} split {reason}: {metric} is undefined on it, so no configuration can be "
                f"chosen or compared by it. Give that split {rows} (more rows in its file, or, when "
                f"featx splits one file, data.{name}_fraction), or choose a metric defined there"
                + (f" (probe.metric = {other[0]!r})" if other else ""))


def check_selectable(task: str, train: np.ndarray, dev: np.ndarray, label_names) -> None:
    """A dev split that chooses among configurations must hold two classes at least (accuracy on
    one class ranks heads by how often they predict it: a majority baseline scores 1.0 there and
    can test at 0.33); fewer classes than train is a warning."""
    if not TASKS[task].classes:
        return
    present, trained = np.unique(dev), np.unique(train)
    if len(present) < 2:
        raise FeatxError(f"the dev split holds a single class ({label_names[present[0]]!r}): choosing "
                         "among configurations on it ranks them by how often they predict that class. "
                         "Give dev rows of every class, or leave data.dev unset (the probe then chooses "
                         "by cross-validation on train)")
    missing = [label_names[i] for i in np.setdiff1d(trained, present)]
    if missing:
        log.warning(
            "the dev split, which chooses among configurations, holds no row of %d of the %d training "
            "classes (%s%s): the choice cannot see how they are told apart", len(missing), len(trained),
            ", ".join(map(repr, missing[:10])), ", ..." if len(missing) > 10 else "")


def check_trainable(task: str, y: np.ndarray, label_names) -> None:
    """A single-class training split or a constant target is a clear error, not a crash deep
    in scikit-learn."""
    if TASKS[task].classes:
        present = np.unique(y)
        if len(present) < 2:
            raise FeatxError(f"the training split has a single class ({label_names[present[0]]!r}); "
                             "a classifier needs at least two")
    elif TASKS[task].thresholded:
        # A label never (or always) present in train is predicted as that constant (benchmark
        # splits have such labels); only when no label varies is there nothing to learn.
        counts = y.sum(axis=0)
        if not y.shape[1]:
            raise FeatxError("the multilabel data has no label at all (every row's label set is "
                             "empty); fix the label column or data.label_sep")
        if all(counts[j] in (0, len(y)) for j in range(y.shape[1])):
            raise FeatxError(f"every label is never (or always) present in the training split "
                             f"({', '.join(map(str, list(label_names)[:10]))}): a multilabel head "
                             "needs a label with positive and negative rows; fix the labels or the split")
    else:
        flat = y.reshape(len(y), -1)
        constant = [label_names[j] for j in range(flat.shape[1]) if np.ptp(flat[:, j]) == 0]
        if constant:
            raise FeatxError(f"regression target(s) {constant} have zero variance in the training "
                             "split; there is nothing to predict")
