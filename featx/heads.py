"""Heads on cached features: real scikit-learn estimators, one registry, small documented grids.

| head | binary / multiclass | multilabel | regression | grid |
|---|---|---|---|---|
| logistic | StandardScaler + LogisticRegression (multinomial) | MultilabelLogistic: one per label, fitted jointly | StandardScaler + Ridge | C in 1e-3..10, alpha in 0.1..1000 (5 values each), a warm-started path |
| mlp | StandardScaler + MLPClassifier, 1 hidden layer of 256, early stopping on 10% of train | the same (sigmoid outputs) | the same MLPRegressor, standardised targets | L2 alpha in {1e-4, 1e-2, 1} |
| lightgbm | LGBMClassifier (max_bin 63, lr 0.1), early stopping on 10% of train | one model per label | LGBMRegressor (one per target) | num_leaves in {7, 31} |

Two baselines under the backbone read the texts instead of its vectors:

| baseline | binary / multiclass / multilabel | regression | grid |
|---|---|---|---|
| majority | class priors (the majority class) | the training mean | - |
| tfidf | TF-IDF of word 1-2-grams and char 2-5-grams + LogisticRegression (SAGA; liblinear per label for multilabel) | + Ridge | C in 1..100 (3), alpha in 0.1..100 (4) |

Every head takes `random_state` and a thread count; nothing touches a GPU or the backbone.
"""
from __future__ import annotations

import contextlib
import inspect
import signal
import threading
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassifierMixin,
    RegressorMixin,
    TransformerMixin,
)
from sklearn.compose import TransformedTargetRegressor
from sklearn.dummy import DummyClassifier, DummyRegressor
from sklearn.exceptions import ConvergenceWarning, DataConversionWarning
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import train_test_split
from sklearn.multioutput import MultiOutputClassifier, MultiOutputRegressor
from sklearn.neural_network import MLPClassifier, MLPRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.validation import check_is_fitted, validate_data

from featx.errors import check_choice
from featx.tasks import TASKS


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
        stratify = stratify and counts.min() >= 2 and held >= len(counts) and len(X) - held >= len(counts)
        X_fit, X_val, y_fit, y_val = train_test_split(
            X, y, test_size=held, random_state=self.random_state, stratify=y if stratify else None)
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


class MultilabelLogistic(ClassifierMixin, BaseEstimator):
    """One L2-regularised logistic regression per label, fitted jointly.

    The objective is exactly that of L separate scikit-learn `LogisticRegression(C=C)` fits
    (mean log-loss + ||w||^2 / (2 C n) per label; the loss and the penalty both separate by
    label), minimised in one L-BFGS run whose every step is one (n, d) x (d, L) product, instead
    of L runs of their own: 28 GoEmotions labels cost about one fit, not 28.
    """

    def __init__(self, *, C: float = 1.0, max_iter: int = 2000, tol: float = 1e-4,
                 warm_start: bool = False):
        self.C = C
        self.max_iter = max_iter
        self.tol = tol
        self.warm_start = warm_start

    def fit(self, X, y):
        from scipy.optimize import minimize

        # The two (n, d) products of each step run in float32 (half the time of float64, the
        # same dev scores within 0.03 points on GoEmotions); the loss is summed and the solver's
        # state kept in float64, so the line search sees a smooth objective.
        X = np.asarray(X, dtype=np.float32)
        Y = np.asarray(y, dtype=np.float32).reshape(len(X), -1)  # (n, L)
        n, d = X.shape
        L = Y.shape[1]
        penalty = 1.0 / (self.C * n)

        def loss(theta):
            W, b = theta[:d * L].reshape(d, L), theta[d * L:]
            Z = X @ W.astype(np.float32) + b.astype(np.float32)  # (n, L)
            # log(1 + e^z) - y z, computed stably; its gradient is sigmoid(z) - y
            value = (np.logaddexp(0.0, Z) - Y * Z).sum(dtype=np.float64) / n + 0.5 * penalty * (W * W).sum()
            G = (1.0 / (1.0 + np.exp(-Z)) - Y) / n  # (n, L)
            return value, np.concatenate([(X.T @ G).ravel() + penalty * W.ravel(),
                                          G.sum(axis=0, dtype=np.float64)])

        start = (np.concatenate([self.coef_.T.ravel(), self.intercept_])
                 if self.warm_start and getattr(self, "coef_", None) is not None
                 and self.coef_.shape == (L, d) else np.zeros(d * L + L))
        result = minimize(loss, start, jac=True, method="L-BFGS-B",
                          options={"maxiter": self.max_iter, "gtol": self.tol, "maxfun": 15000})
        self.coef_ = result.x[:d * L].reshape(d, L).T.copy()  # (L, d), as scikit-learn's
        self.intercept_ = result.x[d * L:].copy()
        self.n_iter_ = int(result.nit)
        self.classes_ = np.arange(L)
        return self

    def decision_function(self, X):
        return np.asarray(X, dtype=np.float64) @ self.coef_.T + self.intercept_  # (n, L)

    def predict_proba(self, X):
        return 1.0 / (1.0 + np.exp(-self.decision_function(X)))  # (n, L) per-label probabilities

    def predict(self, X):
        return (self.predict_proba(X) >= 0.5).astype(int)


class IncreasingScore(RegressorMixin, BaseEstimator):
    """No training: a single feature (a text pair's cosine) is the prediction, mapped onto the
    target's scale by an increasing affine function fitted on train. Correlations (Pearson,
    Spearman) are the feature's own, exactly as MTEB scores STS; the map only puts errors (MSE,
    MAE, R²) on the target's scale."""

    def fit(self, X, y):
        X, y = validate_data(self, X, y, y_numeric=True, multi_output=True)
        if X.shape[1] != 1:
            raise ValueError(f"IncreasingScore reads one feature, got {X.shape[1]}")
        x, Y = X[:, 0].astype(np.float64), np.asarray(y, dtype=np.float64).reshape(len(X), -1)
        spread = x.var()
        slopes = ((x - x.mean()) @ (Y - Y.mean(axis=0))) / (len(x) * spread) if spread > 0 else np.zeros(Y.shape[1])
        # Never a decreasing map: that would be training the feature's sign.
        self.coef_ = np.maximum(slopes, 1e-12)  # (T,)
        self.intercept_ = Y.mean(axis=0) - self.coef_ * x.mean()  # (T,)
        self.n_targets_ = Y.shape[1]
        return self

    def predict(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        out = X[:, :1].astype(np.float64) * self.coef_ + self.intercept_  # (n, T)
        return out[:, 0] if self.n_targets_ == 1 else out


class LexicalFeatures(TransformerMixin, BaseEstimator):
    """TF-IDF of word n-grams and character n-grams (within word boundaries), sublinear term
    frequencies, each block L2-normalised: the lexical baseline's features.

    X is (n,) texts, or (n, 2) text pairs; a pair becomes [a * b, |a - b|] of its two texts'
    vectors (element-wise), so a linear head can read what they share and where they differ.
    """

    def __init__(self, *, word_ngrams: tuple[int, int] = (1, 2), char_ngrams: tuple[int, int] = (2, 5),
                 max_features: int = 50_000):
        self.word_ngrams = word_ngrams
        self.char_ngrams = char_ngrams
        self.max_features = max_features

    def fit(self, X, y=None):
        from sklearn.feature_extraction.text import TfidfVectorizer

        texts = self._texts(X).ravel()
        common = dict(sublinear_tf=True, max_features=self.max_features, dtype=np.float32)
        self.vectorizers_ = []
        for analyzer, ngrams in (("word", self.word_ngrams), ("char_wb", self.char_ngrams)):
            # Words of one character count too ("I", "a", "2"): short texts need them.
            pattern = {"token_pattern": r"(?u)\b\w+\b"} if analyzer == "word" else {}
            vectorizer = TfidfVectorizer(analyzer=analyzer, ngram_range=tuple(ngrams), **pattern,
                                         **common)
            try:
                self.vectorizers_.append(vectorizer.fit(texts))
            except ValueError:  # no token of this kind in any text (punctuation only): skip the block
                continue
        if not self.vectorizers_:
            raise ValueError("the texts hold no word or character n-grams to build TF-IDF features from")
        return self

    def transform(self, X):
        import scipy.sparse as sp

        texts = self._texts(X)
        vectors = [sp.hstack([v.transform(texts[:, j]) for v in self.vectorizers_]).tocsr()
                   for j in range(texts.shape[1])]
        if len(vectors) == 1:
            return vectors[0]
        a, b = vectors
        return sp.hstack([a.multiply(b), abs(a - b)]).tocsr()

    @staticmethod
    def _texts(X) -> np.ndarray:
        texts = np.asarray(X, dtype=object)
        return texts.reshape(len(texts), -1)  # (n, 1) texts or (n, 2) pairs


# ---------------------------------------------------------------------------------------------
# The registry: how each head is built per task, and the grid its hyperparameters come from


def _logistic(task: str, seed: int, threads: int, C: float = 1.0, alpha: float = 1.0):
    if TASKS[task].regression:  # the linear probe of a regression task: ridge regression
        return make_pipeline(StandardScaler(), Ridge(alpha=alpha))
    if TASKS[task].thresholded:
        return make_pipeline(StandardScaler(), MultilabelLogistic(C=C, warm_start=True))
    # warm_start: along the grid's C path, each fit starts from the previous solution.
    return make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=2000, random_state=seed,
                                                              warm_start=True))


def _mlp(task: str, seed: int, threads: int, alpha: float = 1e-4, hidden: int = 256):
    common = dict(hidden_layer_sizes=(hidden,), alpha=alpha, early_stopping=True,
                  validation_fraction=0.1, n_iter_no_change=10, max_iter=200, random_state=seed)
    if TASKS[task].regression:
        network = make_pipeline(StandardScaler(), MLPRegressor(**common))
        return TransformedTargetRegressor(regressor=network, transformer=StandardScaler())
    return make_pipeline(StandardScaler(), MLPClassifier(**common))


def _lightgbm(task: str, seed: int, threads: int, num_leaves: int = 31):
    params = dict(num_leaves=num_leaves, random_state=seed, n_jobs=threads)
    if TASKS[task].regression:
        return MultiOutputRegressor(LightGBMRegressorHead(**params))
    if TASKS[task].thresholded:
        return MultiOutputClassifier(LightGBMClassifierHead(**params))
    return LightGBMClassifierHead(**params)


def _identity(task: str, seed: int, threads: int):
    if not TASKS[task].regression:
        raise ValueError("the identity head scores similarity targets (regression) only")
    return IncreasingScore()


def _majority(task: str, seed: int, threads: int):
    # Ignores its input: the floor every other row of the report must clear.
    return DummyRegressor(strategy="mean") if TASKS[task].regression else DummyClassifier(strategy="prior")


def _tfidf(task: str, seed: int, threads: int, C: float = 1.0, alpha: float = 1.0):
    # On L2-normalised TF-IDF rows, without a scaler (scaling columns would inflate rare n-grams).
    if TASKS[task].regression:
        return Ridge(alpha=alpha)
    if TASKS[task].thresholded:
        # One binary problem per label, and MultiOutputClassifier clones its estimator for each
        # (no warm start across C): liblinear's coordinate descent is the fastest fresh fit
        # there (GoEmotions, 28 labels x 43,410 rows: 1.8x faster than SAGA, the same dev F1).
        return MultiOutputClassifier(LogisticRegression(C=C, solver="liblinear", tol=1e-3,
                                                        random_state=seed))
    # SAGA: on 70,000 sparse n-gram columns and 50 classes, lbfgs took 20 s a fit (each step
    # multiplies the whole (features x classes) matrix); SAGA 2-8 s to the same accuracy.
    return LogisticRegression(C=C, solver="saga", tol=1e-3, max_iter=1000, random_state=seed,
                              warm_start=True)


@dataclass(frozen=True)
class Head:
    name: str
    build: Callable
    """(task, seed, threads, **hyperparameters) -> an unfitted estimator."""
    grid: Callable[[str], list[dict]]
    """task -> the hyperparameter candidates tried, in order."""
    deterministic: bool
    """True when the seed cannot change the fitted model (one fit serves every seed)."""
    path: bool = False
    """True for a convex head whose grid is a regularisation path: each candidate's fit may start
    from the previous one's solution (warm start) and reach the same optimum."""
    max_outputs: int | None = None
    """The staged grid leaves the head out past this many classes or labels (its cost grows with
    them); None: no limit."""
    prepare: Callable | None = None
    """An unsupervised transformer fitted once on the training inputs before the grid (TF-IDF);
    the saved head is the Pipeline of it and the fitted estimator."""
    baseline: str | None = None
    """What a baseline stands for ("majority", "lexical"); None for heads on backbone features.
    Baselines read the texts, not the cached vectors."""
    complexity: int = 0
    """Rank of simplicity for choosing among candidates within noise of the best (lower is
    simpler): no training, then linear, then the MLP, then boosted trees."""


HEADS = {
    "identity": Head("identity", _identity, deterministic=True, grid=lambda task: [{}], complexity=0),
    "logistic": Head("logistic", _logistic, deterministic=True, path=True, complexity=1, grid=lambda task: (
        [{"alpha": a} for a in (1e-1, 1.0, 10.0, 100.0, 1000.0)] if TASKS[task].regression
        else [{"C": c} for c in (1e-3, 1e-2, 1e-1, 1.0, 10.0)])),
    "mlp": Head("mlp", _mlp, deterministic=False, complexity=2,
                grid=lambda task: [{"alpha": a} for a in (1e-4, 1e-2, 1.0)]),
    "lightgbm": Head("lightgbm", _lightgbm, deterministic=False, max_outputs=20, complexity=3,
                     grid=lambda task: [{"num_leaves": n} for n in (7, 31)]),
    "majority": Head("majority", _majority, deterministic=True, grid=lambda task: [{}],
                     baseline="majority"),
    "tfidf": Head("tfidf", _tfidf, deterministic=False, path=True, prepare=LexicalFeatures,
                  baseline="lexical",
                  grid=lambda task: ([{"alpha": a} for a in (0.1, 1.0, 10.0, 100.0)] if TASKS[task].regression
                                     else [{"C": c} for c in (1.0, 10.0, 100.0)])),
}


def build(head: str, task: str, params: dict, seed: int = 0, threads: int = 1):
    check_choice(head, HEADS, "head")
    return HEADS[head].build(task, seed, threads, **params)


def step(head: str, task: str, params: dict, seed: int = 0, threads: int = 1, previous=None):
    """The next candidate along a head's grid: `previous` with new hyperparameters when the head
    is a regularisation path (its fit then warm-starts), else a fresh estimator."""
    if previous is not None and HEADS[head].path:
        final = previous[-1] if hasattr(previous, "steps") else previous
        # A multi-output wrapper takes its estimator's parameters by prefix (and refits clones).
        prefix = "estimator__" if "estimator" in final.get_params(deep=False) else ""
        final.set_params(**{prefix + k: v for k, v in params.items()})
        return previous
    return build(head, task, params, seed, threads)


def fit(estimator, X: np.ndarray, y: np.ndarray):
    with warnings.catch_warnings(), interruptible():
        # lbfgs at a tiny C, or an MLP stopped early, warns about convergence; the score shows it.
        warnings.simplefilter("ignore", ConvergenceWarning)
        # Regression targets stay (n, T) for every head (MultiOutputRegressor needs 2-D); the MLP
        # accepts (n, 1) with this warning.
        warnings.simplefilter("ignore", DataConversionWarning)
        # scikit-learn's MLP catches KeyboardInterrupt, warns this and returns the half-trained
        # network as if it had finished: the warning, raised, becomes the interrupt again.
        warnings.filterwarnings("error", message="Training interrupted by user", category=UserWarning)
        try:
            return estimator.fit(X, y)
        except UserWarning as exc:
            if "Training interrupted by user" in str(exc):
                raise KeyboardInterrupt from None
            raise


@contextlib.contextmanager
def interruptible():
    """Ctrl-C during a fit interrupts the fit, even inside a library that catches
    KeyboardInterrupt and carries on: the SIGINT is remembered and raised again once the fit
    returns, so an interrupted head is never scored or recorded as finished. (In the main
    thread, where Python delivers signals; elsewhere a no-op.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous):  # SIGINT ignored (a worker process) or left to the OS: nothing to catch
        yield
        return
    seen = []

    def handler(signum, frame):
        seen.append(signum)
        previous(signum, frame)  # Python's default raises KeyboardInterrupt where the fit is

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if seen:
        raise KeyboardInterrupt


def predict_scores(estimator, X: np.ndarray, task: str, n_classes: int) -> np.ndarray:
    """What `featx.metrics.evaluate` takes: probabilities for classification, values for
    regression (always (n, T))."""
    n = X.shape[0]  # X may be sparse (TF-IDF), which has no len()
    if TASKS[task].regression:
        return np.asarray(estimator.predict(X), dtype=np.float64).reshape(n, -1)
    proba = estimator.predict_proba(X)
    if TASKS[task].thresholded:
        # MultiOutputClassifier gives one (n, 2) array per label; MLPClassifier gives (n, L).
        return np.stack([p[:, 1] for p in proba], axis=1) if isinstance(proba, list) else proba
    classes = np.asarray(getattr(estimator, "classes_", np.arange(proba.shape[1])))
    full = np.zeros((n, n_classes))
    full[:, classes] = proba  # classes are label indices; a class missing from train stays at 0
    return full[:, 1] if task == "binary" else full
