"""The LightGBM heads: `LightGBMClassifierHead` and `LightGBMRegressorHead`, scikit-learn
estimators that early-stop on a seeded validation split of their own training rows, and
`lightgbm`, how the registry (featx/heads/registry.py's `HEADS`) builds them per task. Grids and
selection are not here. No torch; lightgbm is imported when a head fits.
"""
from __future__ import annotations

import inspect

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.model_selection import train_test_split
from sklearn.multioutput import MultiOutputClassifier, MultiOutputRegressor
from sklearn.utils.validation import check_is_fitted, validate_data

from featx.heads.targets import StandardisedTarget
from featx.tasks import TASKS
from featx.heads.varying import VaryingLabels


class _LightGBMHead(BaseEstimator):
    """LightGBM with early stopping on a seeded validation split carved from the training data,
    so `fit(X, y)` needs nothing else (and works inside MultiOutput wrappers)."""

    def __init__(self, *, num_leaves: int = 31, learning_rate: float = 0.1,
                 n_estimators: int = 1000, early_stopping_rounds: int = 30,
                 validation_fraction: float = 0.1, min_child_samples: int = 20,
                 colsample_bytree: float = 0.5, subsample: float = 0.8, reg_lambda: float = 1.0,
                 max_bin: int = 63, random_state: int = 0, n_jobs: int = 1):
        self.num_leaves = num_leaves
        self.learning_rate = learning_rate
        self.n_estimators = n_estimators
        self.early_stopping_rounds = early_stopping_rounds
        self.validation_fraction = validation_fraction
        self.min_child_samples = min_child_samples
        self.colsample_bytree = colsample_bytree
        self.subsample = subsample
        self.reg_lambda = reg_lambda
        self.max_bin = max_bin
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _fit(self, model_class, X, y, stratify: bool):
        import lightgbm

        if len(X) < 2:
            raise ValueError(f"{type(self).__name__} needs at least 2 samples to hold some out for "
                             f"early stopping, got n_samples={len(X)}")
        held = max(1, int(np.ceil(self.validation_fraction * len(X))))
        counts = np.unique(y, return_counts=True)[1] if stratify else None
        # Stratified only when it can be: every class twice, a held-out row per class.
        can_stratify = stratify and counts.min() >= 2 and held >= len(counts) and len(X) - held >= len(counts)
        fit_rows, val_rows = train_test_split(np.arange(len(X)), test_size=held,
                                              random_state=self.random_state,
                                              stratify=y if can_stratify else None)
        if stratify:
            fit_rows, val_rows = _keep_every_class(y, fit_rows, val_rows)
        X_fit, X_val, y_fit, y_val = X[fit_rows], X[val_rows], y[fit_rows], y[val_rows]
        self.model_ = model_class(
            n_estimators=self.n_estimators, learning_rate=self.learning_rate,
            num_leaves=self.num_leaves, min_child_samples=self.min_child_samples,
            colsample_bytree=self.colsample_bytree, subsample=self.subsample, subsample_freq=1,
            reg_lambda=self.reg_lambda, max_bin=self.max_bin, random_state=self.random_state,
            n_jobs=self.n_jobs, verbose=-1)
        stop = [lightgbm.early_stopping(self.early_stopping_rounds, verbose=False)]
        if "eval_X" in inspect.signature(model_class.fit).parameters:  # lightgbm >= 4.7
            self.model_.fit(X_fit, y_fit, eval_X=(X_val,), eval_y=(y_val,), callbacks=stop)
        else:
            self.model_.fit(X_fit, y_fit, eval_set=[(X_val, y_val)], callbacks=stop)
        self.best_iteration_ = int(self.model_.best_iteration_ or self.n_estimators)
        return self


def _keep_every_class(y: np.ndarray, fit_rows: np.ndarray, val_rows: np.ndarray):
    """The early-stopping split with every class of y in its fitting part: a class whose rows
    all fell into the validation part (a label of one positive row) moves them back, else the
    model would be fitted on one class and know nothing of the other. An emptied validation
    part is the fitting part (early stopping then reads the training loss)."""
    missing = np.isin(y[val_rows], y[fit_rows], invert=True)
    if not missing.any():
        return fit_rows, val_rows
    fit_rows = np.concatenate([fit_rows, val_rows[missing]])
    val_rows = val_rows[~missing]
    return fit_rows, val_rows if len(val_rows) else fit_rows


class LightGBMClassifierHead(ClassifierMixin, _LightGBMHead):
    def fit(self, X, y):
        from lightgbm import LGBMClassifier
        from sklearn.utils.multiclass import check_classification_targets

        X, y = validate_data(self, X, y)
        check_classification_targets(y)
        self.classes_ = np.unique(y)
        # LightGBM wants numbers: fitted on class positions, mapped back in predict.
        return self._fit(LGBMClassifier, X, np.searchsorted(self.classes_, y), stratify=True)

    def predict_proba(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        if len(self.classes_) == 1:
            return np.ones((len(X), 1))
        # A class that fell entirely into the validation split gets probability 0.
        proba = self.model_.predict_proba(X)
        out = np.zeros((len(X), len(self.classes_)))
        out[:, self.model_.classes_] = proba
        return out

    def predict(self, X):
        proba = self.predict_proba(X)  # first: it checks the head is fitted
        return self.classes_[proba.argmax(axis=1)]


class LightGBMRegressorHead(RegressorMixin, _LightGBMHead):
    def fit(self, X, y):
        from lightgbm import LGBMRegressor

        X, y = validate_data(self, X, y, y_numeric=True)
        return self._fit(LGBMRegressor, X, y, stratify=False)

    def predict(self, X):
        check_is_fitted(self)
        return self.model_.predict(validate_data(self, X, reset=False))


def lightgbm(task: str, seed: int, threads: int, num_leaves: int = 31):
    params = dict(num_leaves=num_leaves, random_state=seed, n_jobs=threads)
    if TASKS[task].regression:
        # Standardised targets: LightGBM holds them in float32 (featx/heads/targets.py).
        return StandardisedTarget(MultiOutputRegressor(LightGBMRegressorHead(**params)))
    if TASKS[task].thresholded:
        return VaryingLabels(MultiOutputClassifier(LightGBMClassifierHead(**params)))
    return LightGBMClassifierHead(**params)
