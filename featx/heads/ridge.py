"""The staged grid's scout: ridge regression on the labels' indicator columns. No torch.

Least squares on standardised features against one-hot classes (or each label's 0/1) is one
(d, d) eigendecomposition per training split for every class and every penalty at once: on TREC
fine (47 classes) a small fraction of the logistic path's time per feature set, and it ranked the
feature sets as the logistic head did (bench/HISTORY.md). So it scouts every feature set, and
the costlier heads run on the set it ranks first.

Decision values become probabilities by a small multinomial fit on the training rows: a softmax
of T * d + b over classes, with one temperature T and one offset per class (each class's d is
centred, see `fit`), and a sigmoid of T * (d - 0.5) per label. The offsets set where the classes'
decisions fall (rare and dominant classes alike); T only makes the probabilities read as such.
"""
from __future__ import annotations

import hashlib

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from featx.heads.varying import CONSTANT_LOGIT, constant_labels

BLOCK_ROWS = 8192  # rows per float64 block of the Gram matrix (memory stays O(block x d))
TEMPERATURE_ROWS = 4096  # training rows the temperature and offsets are fitted on


def _digest(array: np.ndarray) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(array).data, digest_size=16).digest()


class RidgeClassifierHead(ClassifierMixin, BaseEstimator):
    """Ridge on standardised inputs (the penalty `alpha` on the standardised coefficients, as
    StandardScaler + Ridge): one column per class (binary and multiclass, softmax) or per label
    (multilabel y of 0/1 columns, sigmoid). With `warm_start`, a refit on the same rows (the
    next penalty of the grid's path) reuses their eigendecomposition."""

    def __init__(self, *, alpha: float = 1.0, warm_start: bool = False):
        self.alpha = alpha
        self.warm_start = warm_start

    def fit(self, X, y):
        X, y = validate_data(self, X, y, multi_output=True, dtype=[np.float64, np.float32])
        multilabel = y.ndim == 2
        if multilabel:
            Y = np.asarray(y, dtype=np.float64)
            self.varying_, self.constant_ = constant_labels(Y)
            self.classes_ = np.arange(Y.shape[1])
        else:
            check_classification_targets(y)
            self.classes_, codes = np.unique(y, return_inverse=True)
            Y = np.eye(len(self.classes_))[codes]
        self.multilabel_ = multilabel
        mean, scale, y_mean, values, vectors, projected = self._decomposition(X, Y)
        W = vectors @ (projected / (values + float(self.alpha))[:, None]) / scale[:, None]  # (d, K)
        self.coef_ = W
        # Each class's decision is centred (the mean input scores 0 for every class) and the
        # classes' offsets are learned with the temperature below, by training log-loss. Neither
        # fixed choice is right: least squares on one-hot targets pulls rare classes toward the
        # priors (TREC fine, 50 classes of 3 to 700 rows: dev accuracy 0.729 with them, 0.762
        # centred), while centring alone picks a 3% class whenever its fit passes 3% (a binary
        # task at 3%: 0.53 against the majority's 0.97). Multilabel keeps its priors: one
        # threshold serves every label.
        self.intercept_ = (y_mean if multilabel else 0.0) - mean @ W
        if multilabel:
            self.coef_[:, ~self.varying_] = 0.0
            self.intercept_[~self.varying_] = self.constant_[~self.varying_]
        # K + 1 numbers fitted on evenly spaced rows as well as on all of them, at a bounded cost
        # on a path of several penalties.
        rows = np.linspace(0, len(X) - 1, min(len(X), TEMPERATURE_ROWS)).astype(int)
        if multilabel:
            self.temperature_ = self._fit_temperature(self._decision(X[rows]), Y[rows])
        else:
            previous = getattr(self, "offset_", None)
            start = (np.log(self.temperature_), previous) if (  # the path's last fit: a few steps away
                self.warm_start and previous is not None and len(previous) == Y.shape[1]) else None
            self.temperature_, self.offset_ = self._calibrate(self._decision(X[rows]), Y[rows], start)
        return self

    def _decomposition(self, X, Y):
        """(mean, scale, mean of Y, eigenvalues, eigenvectors, eigenvectors' projection of the
        standardised X'Y): reused when the path refits on the same rows."""
        # Keyed by the arrays' bytes (O(n d), against the decomposition's O(n d^2)): an array
        # changed in place is not the same rows.
        key = (X.shape, Y.shape, _digest(X), _digest(Y)) if self.warm_start else None
        cached = getattr(self, "_cache", None)
        if key is not None and cached is not None and cached[0] == key:
            return cached[1]
        n, d = X.shape
        gram, cross = np.zeros((d, d)), np.zeros((d, Y.shape[1]))
        total = np.zeros(d)
        for lo in range(0, n, BLOCK_ROWS):
            block = X[lo:lo + BLOCK_ROWS].astype(np.float64)
            gram += block.T @ block
            cross += block.T @ Y[lo:lo + BLOCK_ROWS]
            total += block.sum(axis=0)
        mean, y_mean = total / n, Y.mean(axis=0)
        variance = np.maximum(np.diag(gram) / n - mean * mean, 0.0)
        scale = np.sqrt(variance)
        scale[scale < 1e-12 * np.maximum(1.0, np.abs(mean))] = 1.0  # a constant column: StandardScaler's 1
        gram = (gram - n * np.outer(mean, mean)) / np.outer(scale, scale)
        cross = (cross - n * np.outer(mean, y_mean)) / scale[:, None]
        values, vectors = np.linalg.eigh(gram)
        result = (mean, scale, y_mean, np.maximum(values, 0.0), vectors, vectors.T @ cross)
        self._cache = (key, result)
        return result

    def _decision(self, X) -> np.ndarray:
        return np.asarray(X, dtype=np.float64) @ self.coef_ + self.intercept_

    def _logits(self, decision: np.ndarray, temperature: float) -> np.ndarray:
        if not self.multilabel_:
            return temperature * decision + self.offset_
        # Clipped: a label that varies never reads as certain (a constant one is set exactly).
        logits = np.clip(temperature * (decision - 0.5), -CONSTANT_LOGIT, CONSTANT_LOGIT)
        logits[:, ~self.varying_] = np.where(self.constant_[~self.varying_] > 0, CONSTANT_LOGIT, -CONSTANT_LOGIT)
        return logits

    def _probabilities(self, logits: np.ndarray) -> np.ndarray:
        if self.multilabel_:
            from scipy.special import expit

            return expit(logits)
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        return shifted / shifted.sum(axis=1, keepdims=True)

    def _calibrate(self, decision: np.ndarray, Y: np.ndarray, start=None) -> tuple[float, np.ndarray]:
        """(T in [e^-3, e^4], one offset per class) of least training log-loss of softmax(T d + b):
        the multinomial fit of K + 1 numbers on the decisions (bounded T: on separable rows the
        loss falls forever)."""
        from scipy.optimize import minimize

        n, k = Y.shape
        codes = Y.argmax(axis=1)  # Y is one-hot: each row's class
        # The true classes' part of the loss and its gradient, fixed over the fit: d of each row's
        # own class, and the classes' shares of the rows. Each step is then one pass of a few
        # in-place operations over the (n, k) decisions (where a scout spends most of its time at
        # many classes).
        true_decision = decision[np.arange(n), codes].sum() / n
        shares = np.bincount(codes, minlength=k) / n
        work = np.empty(decision.shape)  # (n, k), reused by every step

        def loss(theta):
            t, b = np.exp(theta[0]), theta[1:]
            z = np.multiply(decision, t, out=work)
            z += b
            top = z.max(axis=1)
            z -= top[:, None]
            np.exp(z, out=z)
            total = z.sum(axis=1)  # (n,)
            z /= total[:, None]  # (n, k) softmax
            # mean -log p(true class) = mean(log sum exp(z)) - mean(t d_true + b_true)
            value = (np.log(total) + top).mean() - t * true_decision - shares @ b
            grad_t = t * (np.einsum("ij,ij->", z, decision) / n - true_decision)
            return float(value), np.concatenate([[grad_t], z.sum(axis=0) / n - shares])

        if start is None:
            prior = np.log(np.clip(Y.mean(axis=0), 1e-12, None))
            start = (0.0, prior - prior.mean())
        # 30 corrections, not L-BFGS's 10: the rare classes' offsets have little curvature, and a
        # refit on another fold's rows from the last fit's solution takes about half the steps to
        # the same optimum (bench/HISTORY.md, Probe cost).
        result = minimize(loss, np.concatenate([[start[0]], start[1]]), jac=True, method="L-BFGS-B",
                          bounds=[(-3.0, 4.0)] + [(-50.0, 50.0)] * k, options={"maxcor": 30})
        return float(np.exp(result.x[0])), result.x[1:]

    def _fit_temperature(self, decision: np.ndarray, Y: np.ndarray) -> float:
        """The T in [e^-3, e^4] of least training log-loss (bounded: on separable rows the loss
        falls forever, and probabilities that round to exactly 0 or 1 would say nothing)."""
        from scipy.optimize import minimize_scalar

        def loss(log_t: float) -> float:
            p = np.clip(self._probabilities(self._logits(decision, float(np.exp(log_t)))), 1e-12, 1.0)
            if self.multilabel_:
                return float(-(Y * np.log(p) + (1 - Y) * np.log(np.clip(1 - p, 1e-12, 1.0))).mean())
            return float(-(Y * np.log(p)).sum(axis=1).mean())

        return float(np.exp(minimize_scalar(loss, bounds=(-3.0, 4.0), method="bounded").x))

    def decision_function(self, X) -> np.ndarray:
        check_is_fitted(self)
        return self._decision(validate_data(self, X, reset=False, dtype=[np.float64, np.float32]))

    def predict_proba(self, X) -> np.ndarray:
        proba = self._probabilities(self._logits(self.decision_function(X), self.temperature_))
        if self.multilabel_:  # a label constant in train is exactly that constant
            proba[:, ~self.varying_] = self.constant_[~self.varying_]
        return proba

    def predict(self, X):
        proba = self.predict_proba(X)
        if self.multilabel_:
            return (proba >= 0.5).astype(int)
        return self.classes_[proba.argmax(axis=1)]

    def __getstate__(self):
        # A copy: object.__getstate__ returns the instance's own __dict__, and popping from it
        # would drop the decomposition of the head being pickled as well.
        state = dict(super().__getstate__())
        state.pop("_cache", None)  # the path's decomposition: nothing a saved head keeps
        return state

    def __deepcopy__(self, memo):
        # A copy of a fitted candidate is where the path goes on from (featx.probe.search: past the
        # grid's edge, the other folds): it keeps the decomposition, shared, since it is never
        # changed in place and its key says which rows it is of.
        import copy

        other = type(self).__new__(type(self))
        memo[id(self)] = other
        other.__dict__.update({k: v if k == "_cache" else copy.deepcopy(v, memo) for k, v in self.__dict__.items()})
        return other
