"""Regression targets standardised: `TargetScaler` (a fine-tune trains on them, featx/finetune/modeling.py)
and `StandardisedTarget`, a regression head fitted on them, its predictions mapped back in
float64, which every trained regression head wears (featx/heads/registry.py's registry, the LightGBM
heads, the TF-IDF baseline). No torch.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.utils.validation import check_is_fitted


@dataclass(frozen=True)
class TargetScaler:
    """Regression targets are standardised for training (a raw 0..400 scale makes MSE explode
    and the head's init meaningless) and mapped back for metrics."""
    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, y: np.ndarray) -> "TargetScaler":
        return cls(y.mean(axis=0), np.where(y.std(axis=0) > 0, y.std(axis=0), 1.0))

    def transform(self, y: np.ndarray) -> np.ndarray:
        return (y - self.mean) / self.std

    def inverse(self, y: np.ndarray) -> np.ndarray:
        return y * self.std + self.mean


class StandardisedTarget(RegressorMixin, BaseEstimator):
    """A regressor fitted on standardised targets, its predictions mapped back in float64.

    scikit-learn's Ridge casts the targets to the features' float32, as do LightGBM and the
    scikit-learn MLP's predictions: on targets far from zero (a timestamp, a price in cents:
    1e9 + a spread of 1) float32 keeps no digit of the spread, and the head would predict a
    constant. Here every head sees targets of mean 0 and spread 1 per column, and only the
    mapping back runs on the original scale, in float64. Ridge's optimum is unchanged by it
    (its intercept is not penalised, its slope scales with the targets), the MLP's loss and
    early stopping see the spread they were tuned for, LightGBM's splits are the same."""

    def __init__(self, estimator):
        self.estimator = estimator

    def fit(self, X, y):
        y = np.asarray(y, dtype=np.float64)
        Y = y.reshape(len(y), -1)  # (n, T)
        if not np.isfinite(Y).all():
            raise ValueError("regression targets must be finite (a NaN or infinite target)")
        scaler = TargetScaler.fit(Y)  # a constant target: its offset only
        self.mean_, self.scale_ = scaler.mean, scaler.std  # (T,) each, arrays: what a head file stores
        self.estimator_ = clone(self.estimator).fit(X, scaler.transform(Y).reshape(y.shape))
        return self

    def predict(self, X):
        check_is_fitted(self)
        scores = np.asarray(self.estimator_.predict(X), dtype=np.float64)  # (n,) or (n, T)
        return scores * self.scale_ + self.mean_ if scores.ndim == 2 else scores * self.scale_[0] + self.mean_[0]
