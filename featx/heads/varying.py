"""Multilabel targets whose labels do not all vary: which labels are constant in the rows a
head is fitted on, and `VaryingLabels`, the wrapper that fits an estimator on the others only.
The heads themselves are featx/heads/registry.py's (and featx/heads/boosting.py's, featx/heads/lexical.py's). No torch.
"""
from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.utils.validation import check_is_fitted


# The logit a constant label's coefficients give (zero weights, this intercept): finite, so LP-FT
# can fold it into a torch head, and its sigmoid is within 1e-13 of the constant.
CONSTANT_LOGIT = 30.0


def constant_labels(Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(varying (L,) bool, constant (L,) float) of 0/1 labels Y (n, L): which labels have both
    positive and negative rows, and the value (0 or 1) of each one that has not (0 where it
    varies)."""
    Y = np.asarray(Y)
    positives = (Y.reshape(len(Y), -1) != 0).sum(axis=0)
    varying = (positives > 0) & (positives < len(Y))
    return varying, ((positives == len(Y)) & ~varying).astype(np.float64)


class VaryingLabels(ClassifierMixin, BaseEstimator):
    """A multilabel estimator fitted on the labels that vary in its training rows, only.

    A label never (or always) present in those rows gets no estimator (scikit-learn's
    classifiers refuse a single class, or answer with a one-column probability): its
    probability is that constant. Rare labels make this the rule, not the exception: a label
    with one training row is absent from the training part of all but one cross-validation
    fold. `estimator` takes (n, k) 0/1 targets of the k varying labels (MLPClassifier,
    MultiOutputClassifier, DummyClassifier); None is fitted when no label varies.
    """

    def __init__(self, estimator):
        self.estimator = estimator

    def fit(self, X, y):
        Y = np.asarray(y).reshape(X.shape[0], -1)  # (n, L); X may be sparse (TF-IDF)
        previous = getattr(self, "varying_", None)
        self.varying_, self.constant_ = constant_labels(Y)
        self.classes_ = np.arange(Y.shape[1])
        if not self.varying_.any():
            self.estimator_ = None
            return self
        # A warm-started estimator refitted on the same labels (a regularisation path) starts
        # from its last solution: its new parameters are the template's, its state its own.
        fitted = getattr(self, "estimator_", None)
        if (fitted is not None and getattr(self.estimator, "warm_start", False) is True
                and np.array_equal(previous, self.varying_)):
            self.estimator_ = fitted.set_params(**self.estimator.get_params(deep=False))
        else:
            self.estimator_ = clone(self.estimator)
        self.estimator_.fit(X, Y[:, self.varying_])
        return self

    def predict_proba(self, X):
        check_is_fitted(self)
        proba = np.tile(self.constant_, (X.shape[0], 1))  # (n, L)
        if self.estimator_ is not None:
            fitted = self.estimator_.predict_proba(X)
            proba[:, self.varying_] = _label_probabilities(fitted, int(self.varying_.sum()))
        return proba

    def predict(self, X):
        return (self.predict_proba(X) >= 0.5).astype(int)


def _label_probabilities(proba, k: int) -> np.ndarray:
    """P(label) (n, k) from a multilabel predict_proba: one (n, 2) array per label
    (MultiOutputClassifier, DummyClassifier), (n, k) (MLPClassifier), or one (n, 2) array when
    a single label was fitted (as a binary problem). Every label here varies: both columns exist."""
    if isinstance(proba, list):
        return np.stack([p[:, 1] for p in proba], axis=1)
    proba = np.asarray(proba)
    return proba[:, 1:] if k == 1 and proba.shape[1] == 2 else proba
