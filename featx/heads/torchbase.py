"""What the torch heads (featx/heads/torchheads.py, torchmlp.py) share: torch for one fit on a
device and a thread count, parameter checks, scikit-learn's convergence warning, the kinds of
target (their output units, loss and probabilities: `OUTPUTS`), and the classifiers' base
(`_TorchClassifier`: classes from y, predictions from a numpy forward pass).

Torch is imported inside `_torch` only, when a head fits: importing this module needs no torch.
"""
from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from typing import Callable

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from featx.cpus import WAIT_SETTINGS, decided
from featx.errors import check_choice


@contextlib.contextmanager
def _torch(device: str, n_jobs: int):
    """(torch, the device) for one fit, with torch's thread count set to `n_jobs` for its
    length (the probe's processes x threads = cores)."""
    # Threads that sleep while they wait instead of spinning, unless the user said otherwise or
    # featx.cpus chose for this process. It counts only where this import is torch's first (a
    # probe worker's): read when torch's OpenMP starts. On a busy machine spinning threads burn
    # the time slices their peers wait for, and a fit took several times as long
    # (bench/HISTORY.md, Heads).
    if not decided() and not any(name in os.environ for name in WAIT_SETTINGS):
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif not (isinstance(device, str) and (device in ("cpu", "cuda") or
                                           (device.startswith("cuda:") and device[5:].isdigit()))):
        check_choice(str(device), ("auto", "cpu", "cuda", "cuda:N"), "torch head device")
    threads = torch.get_num_threads()
    if n_jobs > 0:
        torch.set_num_threads(n_jobs)
    try:
        yield torch, torch.device(device)
    finally:
        torch.set_num_threads(threads)


def _check_params(estimator, **rules) -> None:
    """Refuse a parameter outside its range before any fit (scikit-learn's heads do): a NaN C
    or alpha gives NaN probabilities, and a negative block size a model of zeros, silently.
    `rules`: name -> (lowest, highest, whether the lowest is allowed, integer)."""
    for name, (low, high, closed, integer) in rules.items():
        value = getattr(estimator, name)
        ok = (isinstance(value, (int, np.integer)) if integer
              else isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool))
        ok = ok and math.isfinite(value) and (value >= low if closed else value > low) and value <= high
        if not ok:
            bound = f"{'>=' if closed else '>'} {low}" + ("" if high == math.inf else f" and <= {high}")
            raise ValueError(f"{type(estimator).__name__}: {name} = {value!r} must be "
                             f"{'an integer' if integer else 'a finite number'} {bound}")


def _warn_unconverged(estimator, why: str) -> None:
    """scikit-learn's warning for a fit stopped at its iteration cap (the probe silences it, as
    for its own heads; a direct user sees it)."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    warnings.warn(f"{type(estimator).__name__}: {why}; raise max_iter, or standardise the "
                  "features", ConvergenceWarning, stacklevel=3)


def _tensor(torch, array: np.ndarray, device):
    """A float32 tensor on `device` from a numpy array (copied when numpy holds it read-only)."""
    array = np.ascontiguousarray(array, dtype=np.float32)
    return torch.from_numpy(array if array.flags.writeable else array.copy()).to(device)


def _multi_output_tags(tags, sparse: bool = False):
    """Several outputs (multilabel columns, regression targets) are these heads' own case."""
    tags.target_tags.multi_output = True
    if tags.classifier_tags is not None:
        tags.classifier_tags.multi_label = True
    tags.input_tags.sparse = sparse
    return tags


# ---------------------------------------------------------------------------------------------
# What the outputs are: one entry per kind of target, the one place the kinds differ


@dataclass(frozen=True)
class _Output:
    units: Callable[[int], int]
    """classes (or columns) -> output units."""
    loss: Callable
    """(torch functional, Z (n, units), target) -> the mean loss over rows (a torch scalar)."""
    proba: Callable[[np.ndarray], np.ndarray]
    """Z (n, units) in numpy -> predict_proba's (n, classes) (regression: the values)."""
    target: Callable[[np.ndarray], np.ndarray]
    """The encoded y -> what `loss` takes (class codes, 0/1 columns, values)."""


def _softmax(Z: np.ndarray) -> np.ndarray:
    from scipy.special import softmax

    return softmax(Z, axis=1)


def _binary(Z: np.ndarray) -> np.ndarray:
    from scipy.special import expit

    p = expit(Z[:, 0])
    return np.stack([1 - p, p], axis=1)


def _sigmoid(Z: np.ndarray) -> np.ndarray:
    from scipy.special import expit

    return expit(Z)


OUTPUTS = {
    # scikit-learn's losses: the multinomial's mean cross-entropy; binary and multilabel log-loss
    # summed over outputs and averaged over rows; half the squared error for regression.
    "multiclass": _Output(lambda k: k, lambda F, Z, t: F.cross_entropy(Z, t), _softmax,
                          lambda y: y.astype(np.int64)),
    "binary": _Output(lambda k: 1, lambda F, Z, t: F.binary_cross_entropy_with_logits(Z[:, 0], t), _binary,
                      lambda y: y.astype(np.float32)),
    "multilabel": _Output(lambda k: k, lambda F, Z, t: F.binary_cross_entropy_with_logits(
        Z, t, reduction="sum") / len(Z), _sigmoid, lambda y: y.astype(np.float32)),
    "regression": _Output(lambda k: k, lambda F, Z, t: 0.5 * F.mse_loss(Z, t, reduction="sum") / len(Z),
                          lambda Z: Z, lambda y: y.astype(np.float32)),
}


class _TorchClassifier(ClassifierMixin, BaseEstimator):
    """What the classifiers share: classes from y (a 1-D y of labels, or 2-D 0/1 columns for
    multilabel), probabilities and decisions from the numpy forward pass `_logits`."""

    _sparse = False
    """Whether X may be a scipy sparse matrix (TF-IDF features)."""

    def _encode(self, X, y):
        X, y = validate_data(self, X, y, multi_output=True, dtype=np.float32,
                             accept_sparse="csr" if self._sparse else False)
        if y.ndim == 2 and y.shape[1] > 1:  # (n, 1) is one binary label, as scikit-learn reads it
            if not np.isin(y, (0, 1)).all():
                raise ValueError(f"{type(self).__name__}: a 2-D y is multilabel and must be 0/1")
            self.kind_, self.classes_, codes = "multilabel", np.arange(y.shape[1]), y
        else:
            y = np.ravel(y)
            check_classification_targets(y)
            self.classes_, codes = np.unique(y, return_inverse=True)
            if len(self.classes_) < 2:
                raise ValueError(f"{type(self).__name__} needs samples of at least 2 classes in the data, "
                                 f"but the data contains only one class: {self.classes_[0]!r}")
            self.kind_ = "binary" if len(self.classes_) == 2 else "multiclass"
        return X, codes

    def __sklearn_tags__(self):
        return _multi_output_tags(super().__sklearn_tags__(), self._sparse)

    def _checked(self, X):
        check_is_fitted(self)
        return validate_data(self, X, reset=False, dtype=np.float32, accept_sparse="csr" if self._sparse else False)

    def predict_proba(self, X):
        Z = self._logits(self._checked(X))  # first: it checks the head is fitted
        return OUTPUTS[self.kind_].proba(Z)

    def decision_function(self, X):
        Z = self._logits(self._checked(X))
        return Z[:, 0] if self.kind_ == "binary" else Z

    def predict(self, X):
        proba = self.predict_proba(X)
        if self.kind_ == "multilabel":
            return (proba >= 0.5).astype(int)
        return self.classes_[proba.argmax(axis=1)]
