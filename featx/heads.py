"""Heads on cached features: real scikit-learn estimators, one registry, small documented grids.

| head | binary / multiclass | multilabel | regression | grid |
|---|---|---|---|---|
| ridge | RidgeClassifierHead (featx/ridge.py): least squares on the one-hot classes, a softmax with a temperature and per-class offsets fitted on train | the same on each label's 0/1, sigmoid | StandardScaler + Ridge (logistic's model) | alpha in 0.1..1000 (5 values), one eigendecomposition for the whole path |
| logistic | StandardScaler + LogisticRegression (binary); MultinomialLogistic (multiclass: its objective, float32 products) | MultilabelLogistic: one per label, fitted jointly | StandardScaler + Ridge | C in 1e-3..10, alpha in 0.1..1000 (5 values each), a warm-started path |
| mlp | StandardScaler + MLPClassifier, 1 hidden layer of 256, early stopping on 10% of train (MLPHead: none where that part cannot be made) | the same (sigmoid outputs) | the same MLPRegressor (MLPRegressorHead), standardised targets | L2 alpha in {1e-4, 1e-2, 1} |
| lightgbm | LGBMClassifier (max_bin 63, lr 0.1), early stopping on 10% of train | one model per label | LGBMRegressor (one per target) | num_leaves in {7, 31} |
| logistic-torch | StandardScaler + TorchLogistic (L-BFGS, the same objective) | VaryingLabels(TorchLogistic): one sigmoid per label, jointly | StandardScaler + TorchRidge | logistic's |
| mlp-torch | StandardScaler + TorchMLPClassifier (Adam, early stopping on the held-out loss) | VaryingLabels(the same) | TorchMLPRegressor, standardised targets | mlp's |

Two baselines under the backbone read the texts instead of its vectors:

| baseline | binary / multiclass / multilabel | regression | grid |
|---|---|---|---|
| majority | class priors (the majority class) | the training mean | - |
| tfidf | TF-IDF of word 1-2-grams and char 2-5-grams + LogisticRegression (liblinear, one-vs-rest: primal for binary, dual per class and per label) | + Ridge | C in 1..100 (3; multilabel 1..1000, 4), alpha in 0.1..100 (4) |

A multilabel label never (or always) present in the rows a head is fitted on gets no
estimator: its probability is that constant (MultilabelLogistic does it itself, the other
heads through VaryingLabels). Every head takes `random_state` and a thread count; nothing
touches the backbone. The torch heads (featx/torchheads.py) import torch when they fit, never
when they predict. The trained regression heads (all but identity and majority, whose
arithmetic is float64) fit standardised targets (StandardisedTarget), their predictions mapped
back in float64 (featx/targets.py). The LightGBM heads are featx/boosting.py's, the TF-IDF
baseline featx/lexical.py's and VaryingLabels featx/varying.py's; this module is the registry
and the other heads.
"""
from __future__ import annotations

import contextlib
import signal
import threading
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.dummy import DummyClassifier, DummyRegressor
from sklearn.exceptions import ConvergenceWarning, DataConversionWarning
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.neural_network import MLPClassifier, MLPRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from featx import boosting, lexical
from featx.errors import check_choice
from featx.ridge import RidgeClassifierHead
from featx.targets import StandardisedTarget
from featx.tasks import TASKS
from featx.torchheads import TorchLogistic, TorchMLPClassifier, TorchMLPRegressor, TorchRidge
from featx.varying import CONSTANT_LOGIT, VaryingLabels, constant_labels


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
        # dev scores, docs/benchmarks.md, Probe cost); the loss is summed and the solver's
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
    probe's logistic fits: about 1.5x faster (docs/benchmarks.md, Probe cost).
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


# ---------------------------------------------------------------------------------------------
# The registry: how each head is built per task, and the grid its hyperparameters come from


def _ridge(task: str, seed: int, threads: int, alpha: float = 1.0):
    if TASKS[task].regression:
        return _logistic(task, seed, threads, alpha=alpha)
    # warm_start: along the grid's alpha path, each fit reuses the first one's eigendecomposition.
    return RidgeClassifierHead(alpha=alpha, warm_start=True)


def _logistic(task: str, seed: int, threads: int, C: float = 1.0, alpha: float = 1.0):
    if TASKS[task].regression:  # the linear probe of a regression task: ridge regression
        return make_pipeline(StandardScaler(), StandardisedTarget(Ridge(alpha=alpha)))
    if TASKS[task].thresholded:
        return make_pipeline(StandardScaler(), MultilabelLogistic(C=C, warm_start=True))
    # warm_start: along the grid's C path, each fit starts from the previous solution.
    if TASKS[task].n_classes is None:  # multiclass: the softmax, in float32 products
        return make_pipeline(StandardScaler(), MultinomialLogistic(C=C, warm_start=True))
    return make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=2000, random_state=seed,
                                                              warm_start=True))


def _mlp(task: str, seed: int, threads: int, alpha: float = 1e-4, hidden: int = 256):
    common = dict(hidden_layer_sizes=(hidden,), alpha=alpha, early_stopping=True,
                  validation_fraction=0.1, n_iter_no_change=10, max_iter=200, random_state=seed)
    if TASKS[task].regression:
        return make_pipeline(StandardScaler(), StandardisedTarget(MLPRegressorHead(**common)))
    if TASKS[task].thresholded:  # one sigmoid output per label that varies
        return make_pipeline(StandardScaler(), VaryingLabels(MLPHead(**common)))
    return make_pipeline(StandardScaler(), MLPHead(**common))


def _logistic_torch(task: str, seed: int, threads: int, C: float = 1.0, alpha: float = 1.0):
    # The same objectives as `_logistic`'s: ridge in closed form, L-BFGS for the logistic losses.
    if TASKS[task].regression:
        return make_pipeline(StandardScaler(), StandardisedTarget(TorchRidge(alpha=alpha, n_jobs=threads)))
    linear = TorchLogistic(C=C, warm_start=True, n_jobs=threads)
    return make_pipeline(StandardScaler(), VaryingLabels(linear) if TASKS[task].thresholded else linear)


def _mlp_torch(task: str, seed: int, threads: int, alpha: float = 1e-4, hidden: int = 256):
    common = dict(hidden=hidden, alpha=alpha, random_state=seed, n_jobs=threads)
    if TASKS[task].regression:
        return make_pipeline(StandardScaler(), StandardisedTarget(TorchMLPRegressor(**common)))
    network = TorchMLPClassifier(**common)
    return make_pipeline(StandardScaler(), VaryingLabels(network) if TASKS[task].thresholded else network)


def _identity(task: str, seed: int, threads: int):
    if not TASKS[task].regression:
        raise ValueError("the identity head scores similarity targets (regression) only")
    return IncreasingScore()


def _majority(task: str, seed: int, threads: int):
    # Ignores its input: the floor every other row of the report must clear.
    if TASKS[task].regression:
        return DummyRegressor(strategy="mean")
    if TASKS[task].thresholded:
        return VaryingLabels(DummyClassifier(strategy="prior"))
    return DummyClassifier(strategy="prior")


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
    warm: bool = False
    """True for a path head whose fit starts from its estimator's previous solution whatever the
    rows: its fits beyond the search (the other folds, the final fit on all of train) start from
    the chosen candidate's solution and reach the same optimum in fewer steps. Not the TF-IDF
    head: one-vs-rest refits fresh clones."""
    max_outputs: int | None = None
    """The staged grid leaves the head out past this many classes or labels (its cost grows with
    them); None: no limit."""
    prepare: Callable | None = None
    """An unsupervised transformer fitted once on the training inputs before the grid (TF-IDF);
    the saved head is the Pipeline of it and the fitted estimator."""
    baseline: str | None = None
    """What a baseline stands for ("majority", "lexical"); None for heads on backbone features.
    Baselines read the texts, not the cached vectors."""
    cost: int = 0
    """Rank of a fit's cost beside the other heads' on the same rows (higher: longer). A probe
    stage dispatches its longest jobs first, so the short ones fill the workers around them
    instead of one long job starting last and running alone."""
    complexity: int = 0
    """Rank of simplicity for choosing among candidates within noise of the best (lower is
    simpler): no training, then the linear and MLP heads alike, then boosted trees. The small,
    early-stopped MLP on the same features as a linear head was better on test whenever it led
    on dev (TREC coarse and fine, CoLA, 3 seeds each: docs/benchmarks.md), so a lead it has is
    taken; trees on dense embeddings are where a noisy top score misled (a held-out sentiment
    set: LightGBM first on dev, 5 points under a linear head on test)."""


HEADS = {
    "identity": Head("identity", _identity, deterministic=True, grid=lambda task: [{}], complexity=0),
    "ridge": Head("ridge", _ridge, deterministic=True, cost=1, path=True, warm=True, complexity=1,
                  grid=lambda task: [{"alpha": a} for a in (1e-1, 1.0, 10.0, 100.0, 1000.0)]),
    "logistic": Head("logistic", _logistic, deterministic=True, cost=2, path=True, warm=True, complexity=1, grid=lambda task: (
        [{"alpha": a} for a in (1e-1, 1.0, 10.0, 100.0, 1000.0)] if TASKS[task].regression
        else [{"C": c} for c in (1e-3, 1e-2, 1e-1, 1.0, 10.0)])),
    "mlp": Head("mlp", _mlp, deterministic=False, cost=3, complexity=1,
                grid=lambda task: [{"alpha": a} for a in (1e-4, 1e-2, 1.0)]),
    "lightgbm": Head("lightgbm", boosting.lightgbm, deterministic=False, cost=4, max_outputs=20, complexity=2,
                     grid=lambda task: [{"num_leaves": n} for n in (7, 31)]),
    "logistic-torch": Head("logistic-torch", _logistic_torch, deterministic=True, cost=2, path=True, warm=True, complexity=1,
                           grid=lambda task: HEADS["logistic"].grid(task)),
    "mlp-torch": Head("mlp-torch", _mlp_torch, deterministic=False, cost=3, complexity=1,
                      grid=lambda task: HEADS["mlp"].grid(task)),
    "majority": Head("majority", _majority, deterministic=True, grid=lambda task: [{}],
                     baseline="majority"),
    "tfidf": Head("tfidf", lexical.tfidf, deterministic=False, cost=5, path=True, prepare=lexical.LexicalFeatures,
                  baseline="lexical", grid=lexical.tfidf_grid),
}


def build(head: str, task: str, params: dict, seed: int = 0, threads: int = 1):
    check_choice(head, HEADS, "head")
    return HEADS[head].build(task, seed, threads, **params)


def step(head: str, task: str, params: dict, seed: int = 0, threads: int = 1, *, previous=None):
    """The next candidate along a head's grid: `previous` with new hyperparameters when the head
    is a regularisation path (its fit then warm-starts), else a fresh estimator."""
    if previous is not None and HEADS[head].path:
        final = previous[-1] if hasattr(previous, "steps") else previous
        # A wrapper (VaryingLabels, MultiOutputClassifier) takes its estimator's parameters by
        # prefix, one "estimator__" per level (and refits clones).
        prefix, inner = "", final
        while "estimator" in inner.get_params(deep=False):
            prefix, inner = prefix + "estimator__", inner.estimator
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
        # Every multilabel head gives (n, L); a list (one (n, 2) array per label) is a
        # MultiOutputClassifier saved by a featx before VaryingLabels.
        return np.stack([p[:, 1] for p in proba], axis=1) if isinstance(proba, list) else proba
    classes = np.asarray(getattr(estimator, "classes_", np.arange(proba.shape[1])))
    full = np.zeros((n, n_classes))
    full[:, classes] = proba  # classes are label indices; a class missing from train stays at 0
    return TASKS[task].from_probabilities(full)
