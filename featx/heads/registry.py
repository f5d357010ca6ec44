"""Heads on cached features: real scikit-learn estimators, one registry, small documented grids.

| head | binary / multiclass | multilabel | regression | grid |
|---|---|---|---|---|
| ridge | RidgeClassifierHead (featx/heads/ridge.py): least squares on the one-hot classes, a softmax with a temperature and per-class offsets fitted on train | the same on each label's 0/1, sigmoid | StandardScaler + Ridge (logistic's model) | alpha in 0.1..1000 (5 values), one eigendecomposition for the whole path |
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
touches the backbone. The torch heads (featx/heads/torchheads.py, torchmlp.py) import torch
when they fit, never when they predict. The trained regression heads (all but identity and
majority, whose arithmetic is float64) fit standardised targets (StandardisedTarget), their
predictions mapped back in float64 (featx/heads/targets.py). The LightGBM heads are
featx/heads/boosting.py's, the TF-IDF baseline lexical.py's, VaryingLabels varying.py's, the
MLP heads mlp.py's and MultilabelLogistic and MultinomialLogistic logistic.py's; this module
is the registry, IncreasingScore, and fitting and scoring any head.
"""
from __future__ import annotations

import contextlib
import signal
import threading
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.dummy import DummyClassifier, DummyRegressor
from sklearn.exceptions import ConvergenceWarning, DataConversionWarning
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.validation import check_is_fitted, validate_data

from featx.heads import boosting
from featx.heads import lexical
from featx.errors import check_choice
from featx.heads.logistic import MultilabelLogistic, MultinomialLogistic
from featx.heads.mlp import MLPHead, MLPRegressorHead
from featx.heads.ridge import RidgeClassifierHead
from featx.heads.targets import StandardisedTarget
from featx.tasks import TASKS
from featx.heads.torchheads import TorchLogistic, TorchRidge
from featx.heads.torchmlp import TorchMLPClassifier, TorchMLPRegressor
from featx.heads.varying import VaryingLabels


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
    """True when the seed cannot change what a fit is for (one fit serves every seed). TF-IDF's
    liblinear takes the seed for the order of its coordinate steps only, toward the one optimum
    of a strictly convex problem (reached within its tolerance, or its 50-pass cap)."""
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
    on dev (TREC coarse and fine, CoLA, 3 seeds each: bench/HISTORY.md), so a lead it has is
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
    "tfidf": Head("tfidf", lexical.tfidf, deterministic=True, cost=5, path=True, prepare=lexical.LexicalFeatures,
                  baseline="lexical", grid=lexical.tfidf_grid),
}


# What a head is on a regression task where its registry name says otherwise: `logistic` and
# `logistic-torch` fit Ridge there (the table above). Records and head files keep the registry's
# name; what users read names the model (`shown_head`), and `featx predict --head` takes either.
REGRESSION_NAMES = {"logistic": "ridge", "logistic-torch": "ridge-torch"}


def shown_head(head: str, task: str) -> str:
    """A head's name as tables, plots and the verdict show it on `task`: on a regression task
    `logistic` is `ridge` (and `logistic-torch` `ridge-torch`); every other name as it is."""
    return REGRESSION_NAMES.get(head, head) if TASKS[task].regression else head


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
    """What `featx.stats.metrics.evaluate` takes: probabilities for classification, values for
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
