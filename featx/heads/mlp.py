"""The scikit-learn MLP heads: MLPClassifier and MLPRegressor, fitted without early stopping
where their validation part cannot be made (a training set too small, or a class too rare, to
split). The registry's `mlp` head is made of them."""
from __future__ import annotations

import numpy as np
from sklearn.neural_network import MLPClassifier, MLPRegressor


class MLPHead(MLPClassifier):
    """MLPClassifier that also fits when its early-stopping split cannot be made.

    scikit-learn refuses a validation part of fewer than 2 rows (a training set of 10 rows or
    fewer), and stratifies it for a single output, which a class of one row makes impossible
    (a rare class, or the one label a multilabel fold leaves varying, with one positive row),
    as does a part too small to hold every class. Such a fit trains without early stopping (to
    `max_iter`, or until the training loss stops improving); every other fit is
    MLPClassifier's own.
    """

    def fit(self, X, y):
        n = X.shape[0]
        held = int(np.ceil(self.validation_fraction * n))
        impossible = held < 2
        if np.ndim(y) == 1 or np.shape(y)[1] == 1:  # stratified by scikit-learn
            counts = np.unique(np.ravel(y), return_counts=True)[1]
            impossible |= counts.min() < 2 or min(held, n - held) < len(counts)
        return _fit_stopping_if(self, not impossible, super().fit, X, y)


class MLPRegressorHead(MLPRegressor):
    """MLPRegressor that also fits a training set of 10 rows or fewer, whose validation part of
    fewer than 2 rows scikit-learn refuses: without early stopping, as MLPHead."""

    def fit(self, X, y):
        possible = int(np.ceil(self.validation_fraction * X.shape[0])) >= 2
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
