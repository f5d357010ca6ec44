"""The scikit-learn MLP heads: MLPClassifier and MLPRegressor, fitted without early stopping
where their validation part cannot judge it (too few rows, or a class too rare, to split). The
registry's `mlp` head is made of them."""
from __future__ import annotations

import numpy as np
from sklearn.neural_network import MLPClassifier, MLPRegressor


# Early stopping waits `n_iter_no_change` epochs for the validation score to rise. Below this
# many validation rows the score moves in steps of 1% or more, and a training set of fewer than
# 200 rows is one Adam step an epoch (scikit-learn's batch of min(200, rows)): on 96 rows of 6
# classes it stopped after 11 steps, at one class (test accuracy 0.19 where 48 rows, too few to
# split, gave 0.56). Such a fit trains without early stopping instead.
MIN_VALIDATION_ROWS = 100


class MLPHead(MLPClassifier):
    """MLPClassifier that fits without early stopping where its validation part cannot judge it.

    scikit-learn refuses a validation part of fewer than 2 rows, and stratifies it for a single
    output, which a class of one row makes impossible (a rare class, or the one label a
    multilabel fold leaves varying, with one positive row), as does a part too small to hold
    every class; and a part of fewer than MIN_VALIDATION_ROWS stops a small training set before
    it has learned. Such a fit trains to `max_iter`, or until the training loss stops improving;
    every other fit is MLPClassifier's own.
    """

    def fit(self, X, y):
        n = X.shape[0]
        held = int(np.ceil(self.validation_fraction * n))
        impossible = held < MIN_VALIDATION_ROWS
        if np.ndim(y) == 1 or np.shape(y)[1] == 1:  # stratified by scikit-learn
            counts = np.unique(np.ravel(y), return_counts=True)[1]
            impossible |= counts.min() < 2 or min(held, n - held) < len(counts)
        return _fit_stopping_if(self, not impossible, super().fit, X, y)


class MLPRegressorHead(MLPRegressor):
    """MLPRegressor without early stopping where its validation part holds fewer than
    MIN_VALIDATION_ROWS rows, as MLPHead."""

    def fit(self, X, y):
        possible = int(np.ceil(self.validation_fraction * X.shape[0])) >= MIN_VALIDATION_ROWS
        return _fit_stopping_if(self, possible, super().fit, X, y)


def _fit_stopping_if(network, possible: bool, fit, X, y):
    """`fit(X, y)`, without early stopping when its validation part cannot be made."""
    if not network.early_stopping or possible:
        return fit(X, y)
    network.early_stopping = False  # for this fit only: the parameter is the caller's
    try:
        return fit(X, y)
    finally:
        network.early_stopping = True
