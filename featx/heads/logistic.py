"""featx's own logistic regressions, scikit-learn's objective by L-BFGS in float32 products:
MultilabelLogistic (one per label, fitted jointly) and MultinomialLogistic (the softmax of a
multiclass task), with the parameters they share (L2Logistic). The registry's `logistic` head
is made of them for multilabel and multiclass tasks."""
from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from featx.heads.varying import CONSTANT_LOGIT, constant_labels


class L2Logistic(ClassifierMixin, BaseEstimator):
    """The parameters featx's logistic heads share: L2 strength C (scikit-learn's), L-BFGS's
    step cap and gradient tolerance, and whether a refit starts from the last solution."""

    def __init__(self, *, C: float = 1.0, max_iter: int = 2000, tol: float = 1e-4,
                 warm_start: bool = False):
        self.C = C
        self.max_iter = max_iter
        self.tol = tol
        self.warm_start = warm_start


class MultilabelLogistic(L2Logistic):
    """One L2-regularised logistic regression per label, fitted jointly.

    The objective is exactly that of L separate scikit-learn `LogisticRegression(C=C)` fits
    (mean log-loss + ||w||^2 / (2 C n) per label; the loss and the penalty both separate by
    label), minimised in one L-BFGS run whose every step is one (n, d) x (d, L) product, instead
    of L runs of their own: 28 GoEmotions labels cost about one fit, not 28.

    A label never (or always) present in the training rows is left out of the fit (its
    optimum is an infinite intercept): zero weights, intercept -/+ CONSTANT_LOGIT, and
    `predict_proba` gives exactly its constant. `varying_` says which labels were fitted.
    """

    def fit(self, X, y):
        from scipy.optimize import minimize
        from scipy.special import expit

        # The two (n, d) products of each step run in float32 (faster than float64 for the same
        # dev scores, bench/HISTORY.md, Probe cost); the loss is summed and the solver's
        # state kept in float64, so the line search sees a smooth objective.
        X = np.asarray(X, dtype=np.float32)
        Y = np.asarray(y, dtype=np.float32).reshape(len(X), -1)  # (n, L) every label
        n, d = X.shape
        varying, constant = constant_labels(Y)
        previous = getattr(self, "varying_", None)
        warm = (self.warm_start and getattr(self, "coef_", None) is not None
                and self.coef_.shape == (len(varying), d) and np.array_equal(previous, varying))
        keep = np.flatnonzero(varying)
        Y = Y[:, keep]  # (n, L) the labels fitted
        L = Y.shape[1]
        penalty = 1.0 / (self.C * n)

        def loss(theta):
            W, b = theta[:d * L].reshape(d, L), theta[d * L:]
            Z = X @ W.astype(np.float32) + b.astype(np.float32)  # (n, L)
            # log(1 + e^z) - y z, computed stably; its gradient is sigmoid(z) - y
            value = (np.logaddexp(0.0, Z) - Y * Z).sum(dtype=np.float64) / n + 0.5 * penalty * (W * W).sum()
            # expit: the sigmoid without overflow (e^-z of a float32 overflows past z = -88, which
            # a weakly penalised label of few rows reaches)
            G = (expit(Z) - Y) / n  # (n, L)
            return value, np.concatenate([(X.T @ G).ravel() + penalty * W.ravel(),
                                          G.sum(axis=0, dtype=np.float64)])

        start = (np.concatenate([self.coef_[keep].T.ravel(), self.intercept_[keep]]) if warm
                 else np.zeros(d * L + L))
        self.coef_ = np.zeros((len(varying), d))  # (all labels, d), as scikit-learn's
        self.intercept_ = np.where(constant > 0, CONSTANT_LOGIT, -CONSTANT_LOGIT)
        self.n_iter_ = 0
        if L:
            result = minimize(loss, start, jac=True, method="L-BFGS-B",
                              options={"maxiter": self.max_iter, "gtol": self.tol, "maxfun": 15000})
            self.coef_[keep] = result.x[:d * L].reshape(d, L).T
            self.intercept_[keep] = result.x[d * L:]
            self.n_iter_ = int(result.nit)
        self.varying_, self.constant_ = varying, constant
        self.classes_ = np.arange(len(varying))
        return self

    def decision_function(self, X):
        return np.asarray(X, dtype=np.float64) @ self.coef_.T + self.intercept_  # (n, L)

    def predict_proba(self, X):
        from scipy.special import expit

        proba = expit(self.decision_function(X))  # (n, L) per-label probabilities
        proba[:, ~self.varying_] = self.constant_[~self.varying_]
        return proba

    def predict(self, X):
        return (self.predict_proba(X) >= 0.5).astype(int)


class MultinomialLogistic(L2Logistic):
    """L2-regularised multinomial logistic regression: scikit-learn's `LogisticRegression(C=C)`
    objective for a multiclass task (mean log-loss of the softmax + ||W||^2 / (2 C n), the
    intercepts unpenalised), to the same gradient tolerance, by the same solver (L-BFGS).

    What differs is the arithmetic, not the optimum. scikit-learn hands float32 features to
    float64 weights, so each step converts all of X to float64 twice and multiplies in float64;
    here the two (n, d) x (d, K) products run in float32 against float32 copies of the weights
    (the loss summed and the solver's state kept in float64), in buffers reused every step. L-BFGS
    keeps 30 corrections instead of 10: the same optimum in about a quarter fewer steps. A 78-class
    probe's logistic fits: about 1.5x faster (bench/HISTORY.md, Probe cost).
    """

    def fit(self, X, y):
        from scipy.optimize import minimize

        X, y = validate_data(self, X, y, dtype=[np.float32, np.float64])
        check_classification_targets(y)
        classes, codes = np.unique(y, return_inverse=True)
        if len(classes) < 2:
            raise ValueError(f"this solver needs samples of at least 2 classes in the data, but the "
                             f"data contains only one class: {classes[0]!r}")
        X = np.ascontiguousarray(X, dtype=np.float32)
        n, d = X.shape
        k = len(classes)
        warm = (self.warm_start and getattr(self, "coef_", None) is not None
                and np.array_equal(getattr(self, "classes_", None), classes) and self.coef_.shape == (k, d))
        rows = np.arange(n)
        penalty = 1.0 / (self.C * n)
        buffer = np.empty((n, k), dtype=np.float32)  # the logits, then the softmax, then its gradient
        G = np.empty((k, d), dtype=np.float32)

        def loss(theta):
            W, b = theta[:d * k].reshape(d, k), theta[d * k:]
            Z = np.matmul(X, W.astype(np.float32), out=buffer)
            Z += b.astype(np.float32)
            true = Z[rows, codes].sum(dtype=np.float64)
            top = Z.max(axis=1, keepdims=True)
            Z -= top
            np.exp(Z, out=Z)
            total = Z.sum(axis=1, keepdims=True)
            value = ((np.log(total) + top).sum(dtype=np.float64) - true) / n + 0.5 * penalty * (W * W).sum()
            Z /= total  # softmax
            Z[rows, codes] -= 1.0  # minus the one-hot: n times d loss / d logits
            np.matmul(Z.T, X, out=G)  # (K, d): as fast as X' Z at many classes, faster at few
            return value, np.concatenate([(G.T / n).ravel() + penalty * W.ravel(),
                                          Z.sum(axis=0, dtype=np.float64) / n])

        start = (np.concatenate([self.coef_.T.ravel(), self.intercept_]) if warm else np.zeros(d * k + k))
        result = minimize(loss, start, jac=True, method="L-BFGS-B",
                          options={"maxiter": self.max_iter, "gtol": self.tol, "maxcor": 30, "maxls": 50,
                                   "ftol": 64 * np.finfo(float).eps, "maxfun": 15000})
        self.classes_ = classes
        self.coef_ = result.x[:d * k].reshape(d, k).T.copy()  # (K, d), as scikit-learn's
        self.intercept_ = result.x[d * k:].copy()
        self.n_iter_ = np.array([int(result.nit)])
        return self

    def _logits(self, X) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        return np.asarray(X, dtype=np.float64) @ self.coef_.T + self.intercept_  # (n, K)

    def decision_function(self, X):
        logits = self._logits(X)
        # scikit-learn's convention: two classes give one score, the second class's margin
        return logits[:, 1] - logits[:, 0] if logits.shape[1] == 2 else logits

    def predict_proba(self, X):
        logits = self._logits(X)
        logits -= logits.max(axis=1, keepdims=True)
        proba = np.exp(logits)
        return proba / proba.sum(axis=1, keepdims=True)

    def predict(self, X):
        logits = self._logits(X)  # checks the fit before classes_ is read
        return self.classes_[logits.argmax(axis=1)]
