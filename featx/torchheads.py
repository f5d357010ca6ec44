"""The logistic and MLP probes in torch: full-batch L-BFGS and minibatch Adam, on CPU threads or
CUDA, as scikit-learn estimators.

| estimator | outputs | fit |
|---|---|---|
| TorchLogistic | binary: one logit; multiclass: softmax; multilabel (2-D 0/1 y): one sigmoid per column | full-batch L-BFGS on mean log-loss + ||W||^2 / (2 C n): LogisticRegression(C)'s objective |
| TorchRidge | regression, one or more targets | the closed form of Ridge(alpha), float64 |
| TorchMLPClassifier, TorchMLPRegressor | as TorchLogistic; regression | one hidden ReLU layer, Adam on minibatches, early stopping on a seeded held-out part |

Torch is imported by `fit` only. A fitted head holds numpy arrays and numbers, nothing of torch:
`predict` runs in numpy (a saved head predicts without torch, exactly as the fitted one did), and
`featx.serialize` stores it as arrays and JSON like every other head. `fit` is deterministic given
`random_state`, the device and the thread count (`n_jobs`; 0 keeps torch's own).

Losses and penalties are scikit-learn's, so the heads' grids mean what the scikit-learn heads'
grids mean: C and alpha keep their scale.
"""
from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from typing import Callable

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from featx.errors import check_choice


@contextlib.contextmanager
def _torch(device: str, n_jobs: int):
    """(torch, the device) for one fit, with torch's thread count set to `n_jobs` for its
    length (the probe's processes x threads = cores)."""
    # Threads that sleep while they wait instead of spinning, unless the user said otherwise. It
    # counts only where this import is torch's first (a probe worker's): read when torch's
    # OpenMP starts. On a busy machine spinning threads burn the time slices their peers wait
    # for, and a fit took several times as long (docs/benchmarks.md, Heads).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif not (isinstance(device, str) and (device in ("cpu", "cuda") or
                                           (device.startswith("cuda:") and device[5:].isdigit()))):
        check_choice(str(device), ("auto", "cpu", "cuda", "cuda:N"), "torch head device")
    threads = torch.get_num_threads()
    if n_jobs > 0:
        torch.set_num_threads(n_jobs)
    try:
        yield torch, torch.device(device)
    finally:
        torch.set_num_threads(threads)


def _check_params(estimator, **rules) -> None:
    """Refuse a parameter outside its range before any fit (scikit-learn's heads do): a NaN C
    or alpha gave NaN probabilities, and a negative block size a model of zeros, silently.
    `rules`: name -> (lowest, highest, whether the lowest is allowed, integer)."""
    for name, (low, high, closed, integer) in rules.items():
        value = getattr(estimator, name)
        ok = (isinstance(value, (int, np.integer)) if integer
              else isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool))
        ok = ok and math.isfinite(value) and (value >= low if closed else value > low) and value <= high
        if not ok:
            bound = f"{'>=' if closed else '>'} {low}" + ("" if high == math.inf else f" and <= {high}")
            raise ValueError(f"{type(estimator).__name__}: {name} = {value!r} must be "
                             f"{'an integer' if integer else 'a finite number'} {bound}")


def _warn_unconverged(estimator, why: str) -> None:
    """scikit-learn's warning for a fit stopped at its iteration cap (the probe silences it, as
    for its own heads; a direct user sees it)."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    warnings.warn(f"{type(estimator).__name__}: {why}; raise max_iter, or standardise the "
                  "features", ConvergenceWarning, stacklevel=3)


def _tensor(torch, array: np.ndarray, device):
    """A float32 tensor on `device` from a numpy array (copied when numpy holds it read-only)."""
    array = np.ascontiguousarray(array, dtype=np.float32)
    return torch.from_numpy(array if array.flags.writeable else array.copy()).to(device)


def _multi_output_tags(tags, sparse: bool = False):
    """Several outputs (multilabel columns, regression targets) are these heads' own case."""
    tags.target_tags.multi_output = True
    if tags.classifier_tags is not None:
        tags.classifier_tags.multi_label = True
    tags.input_tags.sparse = sparse
    return tags


# ---------------------------------------------------------------------------------------------
# What the outputs are: one entry per kind of target, the one place the kinds differ


@dataclass(frozen=True)
class _Output:
    units: Callable[[int], int]
    """classes (or columns) -> output units."""
    loss: Callable
    """(torch functional, Z (n, units), target) -> the mean loss over rows (a torch scalar)."""
    proba: Callable[[np.ndarray], np.ndarray]
    """Z (n, units) in numpy -> predict_proba's (n, classes) (regression: the values)."""
    target: Callable[[np.ndarray], np.ndarray]
    """The encoded y -> what `loss` takes (class codes, 0/1 columns, values)."""


def _softmax(Z: np.ndarray) -> np.ndarray:
    from scipy.special import softmax

    return softmax(Z, axis=1)


def _binary(Z: np.ndarray) -> np.ndarray:
    from scipy.special import expit

    p = expit(Z[:, 0])
    return np.stack([1 - p, p], axis=1)


def _sigmoid(Z: np.ndarray) -> np.ndarray:
    from scipy.special import expit

    return expit(Z)


OUTPUTS = {
    # scikit-learn's losses: the multinomial's mean cross-entropy; binary and multilabel log-loss
    # summed over outputs and averaged over rows; half the squared error for regression.
    "multiclass": _Output(lambda k: k, lambda F, Z, t: F.cross_entropy(Z, t), _softmax,
                          lambda y: y.astype(np.int64)),
    "binary": _Output(lambda k: 1, lambda F, Z, t: F.binary_cross_entropy_with_logits(Z[:, 0], t), _binary,
                      lambda y: y.astype(np.float32)),
    "multilabel": _Output(lambda k: k, lambda F, Z, t: F.binary_cross_entropy_with_logits(
        Z, t, reduction="sum") / len(Z), _sigmoid, lambda y: y.astype(np.float32)),
    "regression": _Output(lambda k: k, lambda F, Z, t: 0.5 * F.mse_loss(Z, t, reduction="sum") / len(Z),
                          lambda Z: Z, lambda y: y.astype(np.float32)),
}


class _TorchClassifier(ClassifierMixin, BaseEstimator):
    """What the classifiers share: classes from y (a 1-D y of labels, or 2-D 0/1 columns for
    multilabel), probabilities and decisions from the numpy forward pass `_logits`."""

    _sparse = False
    """Whether X may be a scipy sparse matrix (TF-IDF features)."""

    def _encode(self, X, y):
        X, y = validate_data(self, X, y, multi_output=True, dtype=np.float32,
                             accept_sparse="csr" if self._sparse else False)
        if y.ndim == 2 and y.shape[1] > 1:  # (n, 1) is one binary label, as scikit-learn reads it
            if not np.isin(y, (0, 1)).all():
                raise ValueError(f"{type(self).__name__}: a 2-D y is multilabel and must be 0/1")
            self.kind_, self.classes_, codes = "multilabel", np.arange(y.shape[1]), y
        else:
            y = np.ravel(y)
            check_classification_targets(y)
            self.classes_, codes = np.unique(y, return_inverse=True)
            if len(self.classes_) < 2:
                raise ValueError(f"{type(self).__name__} needs samples of at least 2 classes in the data, "
                                 f"but the data contains only one class: {self.classes_[0]!r}")
            self.kind_ = "binary" if len(self.classes_) == 2 else "multiclass"
        return X, codes

    def __sklearn_tags__(self):
        return _multi_output_tags(super().__sklearn_tags__(), self._sparse)

    def _checked(self, X):
        check_is_fitted(self)
        return validate_data(self, X, reset=False, dtype=np.float32, accept_sparse="csr" if self._sparse else False)

    def predict_proba(self, X):
        Z = self._logits(self._checked(X))  # first: it checks the head is fitted
        return OUTPUTS[self.kind_].proba(Z)

    def decision_function(self, X):
        Z = self._logits(self._checked(X))
        return Z[:, 0] if self.kind_ == "binary" else Z

    def predict(self, X):
        proba = self.predict_proba(X)
        if self.kind_ == "multilabel":
            return (proba >= 0.5).astype(int)
        return self.classes_[proba.argmax(axis=1)]


# ---------------------------------------------------------------------------------------------
# The linear probe


# L-BFGS also stops when the loss changes by less than this in an iteration: below the float32
# products' noise it would only spin.
TOLERANCE_CHANGE = 1e-12


class TorchLogistic(_TorchClassifier):
    """L2-regularised logistic regression by full-batch L-BFGS: binary (one logit, as
    scikit-learn), multinomial, or one sigmoid per column of a 2-D 0/1 y (the multilabel
    heads' joint fit). The objective is LogisticRegression(C)'s: mean log-loss + ||W||^2 / (2 C n),
    the intercepts unpenalised; the run stops when the largest gradient entry is below `tol`
    (scikit-learn's lbfgs criterion) or after `max_iter` iterations. `warm_start` starts from
    the previous fit's solution (the probe walks its C path so)."""

    def __init__(self, *, C: float = 1.0, max_iter: int = 1000, tol: float = 1e-4, warm_start: bool = False,
                 device: str = "cpu", n_jobs: int = 0):
        self.C = C
        self.max_iter = max_iter
        self.tol = tol
        self.warm_start = warm_start
        self.device = device
        self.n_jobs = n_jobs

    _sparse = True

    def fit(self, X, y):
        import scipy.sparse as sp

        _check_params(self, C=(0, math.inf, False, False), max_iter=(1, math.inf, True, True),
                      tol=(0, math.inf, True, False))
        previous = (self.coef_, self.intercept_, self.classes_) if hasattr(self, "coef_") else None
        X, codes = self._encode(X, y)
        output = OUTPUTS[self.kind_]
        n, d = X.shape
        k = output.units(len(self.classes_))
        warm = (self.warm_start and previous is not None and previous[0].shape == (k, d)
                and np.array_equal(previous[2], self.classes_))
        with _torch(self.device, self.n_jobs) as (torch, device):
            import torch.nn.functional as F

            if sp.issparse(X):  # TF-IDF: a CSR tensor, the products cost its non-zeros
                Xt = torch.sparse_csr_tensor(torch.from_numpy(X.indptr.astype(np.int64)),
                                             torch.from_numpy(X.indices.astype(np.int64)),
                                             torch.from_numpy(X.data.astype(np.float32)), size=X.shape
                                             ).to(device)  # (n, d)
                logits = lambda: (Xt @ W.float() + b.float()).double()  # noqa: E731  (n, k)
            else:
                Xt = _tensor(torch, X, device)  # (n, d)
                logits = lambda: torch.addmm(b.float(), Xt, W.float()).double()  # noqa: E731  (n, k)
            # The (n, d) products run in float32 (half the time of float64); the loss is summed and
            # the solver's state kept in float64, so the line search sees a smooth objective (in
            # float32 it stalls where the loss stops changing in its 7th digit).
            target = torch.from_numpy(output.target(codes)).to(device)
            if target.is_floating_point():
                target = target.double()
            W = torch.zeros(d, k, dtype=torch.float64, device=device)  # (d, k)
            b = torch.zeros(k, dtype=torch.float64, device=device)  # (k,)
            if warm:
                W.copy_(torch.from_numpy(previous[0].T.astype(np.float64)))
                b.copy_(torch.from_numpy(previous[1].astype(np.float64)))
            W.requires_grad_(True)
            b.requires_grad_(True)
            penalty = 1.0 / (self.C * n)
            # max_eval: torch's default (max_iter * 5/4 evaluations) ended runs before max_iter
            # iterations, the line search taking several a step.
            optimizer = torch.optim.LBFGS([W, b], lr=1.0, max_iter=self.max_iter, max_eval=25 * self.max_iter,
                                          tolerance_grad=self.tol,
                                          tolerance_change=TOLERANCE_CHANGE, history_size=10, line_search_fn="strong_wolfe")

            def closure():
                optimizer.zero_grad()
                loss = output.loss(F, logits(), target) + 0.5 * penalty * (W * W).sum()
                loss.backward()
                return loss

            optimizer.step(closure)
            self.n_iter_ = int(optimizer.state[W].get("n_iter", 0))
            # torch's L-BFGS also stops on a tiny change of the loss or step: below the float32
            # products' noise (a gradient a few times `tol` when tol is tight), or far from the
            # optimum (features on a scale of 1e10 stopped it after one step, a gradient of 2e10).
            closure()
            largest = max(float(W.grad.abs().max()), float(b.grad.abs().max()))
            if not math.isfinite(largest) or largest > (self.tol if self.n_iter_ >= self.max_iter else 100 * self.tol):
                _warn_unconverged(self, f"stopped after {self.n_iter_} iterations with a gradient "
                                  f"of {largest:.3g} (tol {self.tol:g})")
            # (k, d), as scikit-learn's; C order, as a saved head is read back (the same products)
            self.coef_ = np.ascontiguousarray(W.detach().T.cpu().numpy())
            self.intercept_ = b.detach().cpu().numpy()  # (k,)
        return self

    def _logits(self, X) -> np.ndarray:
        # float64, as scikit-learn's: a row's score does not depend on the rows beside it
        return np.asarray(X.astype(np.float64) @ self.coef_.T) + self.intercept_  # (n, k)


class TorchRidge(RegressorMixin, BaseEstimator):
    """Ridge(alpha) in closed form: (Xc^T Xc + alpha I) W = Xc^T yc on centred columns, the
    intercept unpenalised; the Gram matrix is summed in float64 over blocks of rows (bounded
    memory at any row count) on CPU or CUDA."""

    def __sklearn_tags__(self):
        return _multi_output_tags(super().__sklearn_tags__())

    def __init__(self, *, alpha: float = 1.0, device: str = "cpu", n_jobs: int = 0, block_rows: int = 65_536):
        self.alpha = alpha
        self.device = device
        self.n_jobs = n_jobs
        self.block_rows = block_rows

    def fit(self, X, y):
        _check_params(self, alpha=(0, math.inf, True, False), block_rows=(1, math.inf, True, True))
        X, y = validate_data(self, X, y, y_numeric=True, multi_output=True, dtype=np.float32)
        Y = np.asarray(y, dtype=np.float64).reshape(len(X), -1)  # (n, T)
        x_mean, y_mean = X.mean(axis=0, dtype=np.float64), Y.mean(axis=0)
        with _torch(self.device, self.n_jobs) as (torch, device):
            d = X.shape[1]
            gram = torch.zeros(d, d, dtype=torch.float64, device=device)  # (d, d)
            cross = torch.zeros(d, Y.shape[1], dtype=torch.float64, device=device)  # (d, T)
            mean = torch.from_numpy(x_mean).to(device)
            for start in range(0, len(X), self.block_rows):
                block = torch.from_numpy(X[start:start + self.block_rows].astype(np.float64)).to(device) - mean
                gram += block.T @ block
                cross += block.T @ torch.from_numpy(Y[start:start + self.block_rows] - y_mean).to(device)
            gram += self.alpha * torch.eye(d, dtype=torch.float64, device=device)
            W = torch.linalg.solve(gram, cross).cpu().numpy()  # (d, T)
        self.coef_ = np.ascontiguousarray(W.T if np.ndim(y) == 2 else W[:, 0])  # (T, d) or (d,), as scikit-learn's
        self.intercept_ = (y_mean - x_mean @ W) if np.ndim(y) == 2 else float(y_mean[0] - x_mean @ W[:, 0])
        return self

    def predict(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float32)
        return X.astype(np.float64) @ self.coef_.T + self.intercept_


# ---------------------------------------------------------------------------------------------
# The MLP probe


class _TorchMLP(BaseEstimator):
    """One hidden ReLU layer, Adam on shuffled minibatches, with scikit-learn's MLP recipe:
    Glorot-uniform weights, the L2 penalty alpha * ||W||^2 / (2 batch rows), the same defaults.
    Early stopping holds out `validation_fraction` of the rows (seeded; stratified for a single
    column of classes when every class can be split) and stops once the held-out loss has not
    improved by `tol` for `n_iter_no_change` rounds, keeping the best round's weights (scikit-learn
    scores accuracy there; the loss moves before the accuracy does, and serves every task). A
    round is an epoch, or `round_rows` rows when an epoch is longer (a million rows need not
    wait ten epochs to stop). Where the held-out part cannot be made (fewer than 2 rows), the
    training loss decides, as in scikit-learn."""

    def __init__(self, *, hidden: int = 256, alpha: float = 1e-4, learning_rate: float = 1e-3,
                 batch_size: int = 200, max_iter: int = 200, early_stopping: bool = True,
                 validation_fraction: float = 0.1, n_iter_no_change: int = 10, tol: float = 1e-4,
                 round_rows: int = 50_000, random_state: int = 0, device: str = "cpu", n_jobs: int = 0):
        self.hidden = hidden
        self.alpha = alpha
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.round_rows = round_rows
        self.random_state = random_state
        self.device = device
        self.n_jobs = n_jobs

    def _split(self, n: int, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(rows fitted, rows held out for early stopping or None)."""
        from sklearn.model_selection import train_test_split

        held = int(math.ceil(self.validation_fraction * n))
        if not self.early_stopping or held < 2 or n - held < 1:
            return np.arange(n), None
        if self.kind_ in ("binary", "multiclass"):
            # A held-out row of a class with no row left to fit scores a class the network never
            # saw: with 50 classes of one row each, the held-out loss only rose and the first
            # round's untrained weights were kept (2% accuracy). The split is stratified, or not
            # made (the training loss decides), as MLPHead does for scikit-learn's MLP.
            counts = np.bincount(codes)
            counts = counts[counts > 0]
            if counts.min() < 2 or min(held, n - held) < len(counts):
                return np.arange(n), None
            stratify = codes
        else:
            stratify = None
        fit, val = train_test_split(np.arange(n), test_size=held, random_state=self.random_state,
                                    stratify=stratify)
        return np.sort(fit), np.sort(val)

    def _train(self, X: np.ndarray, codes: np.ndarray, k: int):
        """Fit on float32 X (n, d) and encoded targets, with k output units."""
        _check_params(self, hidden=(1, math.inf, True, True), alpha=(0, math.inf, True, False),
                      learning_rate=(0, math.inf, False, False), batch_size=(1, math.inf, True, True),
                      max_iter=(1, math.inf, True, True), validation_fraction=(0, 1, False, False),
                      n_iter_no_change=(1, math.inf, True, True), tol=(0, math.inf, True, False),
                      round_rows=(1, math.inf, True, True))
        if not isinstance(self.random_state, (int, np.integer)) or isinstance(self.random_state, bool):
            raise ValueError(f"{type(self).__name__}: random_state = {self.random_state!r} must be an "
                             "integer seed (the fit is reproducible only so)")
        output = OUTPUTS[self.kind_]
        n, d = X.shape
        fit_rows, val_rows = self._split(n, codes)
        with _torch(self.device, self.n_jobs) as (torch, device):
            import torch.nn.functional as F

            generator = torch.Generator().manual_seed(int(self.random_state))
            params = _glorot(torch, generator, (d, self.hidden, k), device)
            W1, b1, W2, b2 = params  # (d, h), (h,), (h, k), (k,)
            forward = lambda x: torch.addmm(b2, torch.relu(torch.addmm(b1, x, W1)), W2)  # noqa: E731  (n, k)
            target = torch.from_numpy(output.target(codes))
            X_fit, t_fit = _tensor(torch, X[fit_rows], device), target[fit_rows].to(device)
            if val_rows is not None:
                X_val, t_val = _tensor(torch, X[val_rows], device), target[val_rows].to(device)
            optimizer = torch.optim.Adam(params, lr=self.learning_rate, betas=(0.9, 0.999), eps=1e-8)
            batch = int(min(self.batch_size, len(fit_rows)))
            steps = max(1, math.ceil(min(len(fit_rows), self.round_rows) / batch))  # per round
            order, position = None, len(fit_rows)
            best, best_params, stale, curve = math.inf, None, 0, []
            for _ in range(self.max_iter):
                total, seen = torch.zeros((), device=device), 0
                for _ in range(steps):
                    if position >= len(fit_rows):  # a new epoch: a new seeded order
                        order, position = torch.randperm(len(fit_rows), generator=generator).to(device), 0
                    rows = order[position:position + batch]
                    position += batch
                    loss = output.loss(F, forward(X_fit[rows]), t_fit[rows])
                    penalty = 0.5 * self.alpha * ((W1 * W1).sum() + (W2 * W2).sum()) / len(rows)
                    optimizer.zero_grad(set_to_none=True)
                    (loss + penalty).backward()
                    optimizer.step()
                    if val_rows is None:
                        total += loss.detach() * len(rows)
                        seen += len(rows)
                if val_rows is not None:
                    with torch.no_grad():
                        value = float(output.loss(F, forward(X_val), t_val))
                else:
                    value = float(total) / seen
                curve.append(value)
                if not math.isfinite(value):
                    break
                # scikit-learn's rule: a round counts as no change unless it beats the best by
                # `tol`, and the weights kept are the best round's, however small its lead.
                stale = stale + 1 if value > best - self.tol else 0
                if value < best:
                    best, best_params = value, [p.detach().clone() for p in params]
                if stale >= self.n_iter_no_change:
                    break
            else:
                _warn_unconverged(self, f"the loss still changed after max_iter = {self.max_iter} rounds")
            if best_params is None:  # no round had a finite loss: NaN weights, never a model
                raise ValueError(f"{type(self).__name__}: the loss was {curve[0]} from the first round "
                                 "on (the fit diverged): standardise the features (and regression "
                                 "targets), or lower learning_rate")
            chosen = best_params
            self.coefs_ = [chosen[0].cpu().numpy(), chosen[2].cpu().numpy()]  # (d, h), (h, k)
            self.intercepts_ = [chosen[1].cpu().numpy(), chosen[3].cpu().numpy()]  # (h,), (k,)
        self.n_iter_ = len(curve)
        self.loss_curve_ = curve  # the held-out loss per round (the training loss without one)
        self.best_loss_ = best
        return self

    def _logits(self, X: np.ndarray) -> np.ndarray:
        W1, W2 = (w.astype(np.float64) for w in self.coefs_)  # float64 as in TorchLogistic
        hidden = np.maximum(X.astype(np.float64) @ W1 + self.intercepts_[0], 0)  # (n, h)
        return hidden @ W2 + self.intercepts_[1]  # (n, k)


def _glorot(torch, generator, widths: tuple[int, int, int], device) -> list:
    """[W1, b1, W2, b2] of a (d, h, k) MLP, trainable on `device`: scikit-learn's init (Glorot
    uniform, factor 6 for ReLU), weights and biases alike; drawn on the CPU from the seeded
    generator, so every device starts the same."""
    d, hidden, k = widths
    params = []
    for fan_in, fan_out in ((d, hidden), (hidden, k)):
        bound = math.sqrt(6.0 / (fan_in + fan_out))
        for shape in ((fan_in, fan_out), (fan_out,)):
            values = (torch.rand(shape, generator=generator) * 2 - 1) * bound
            params.append(values.to(device).requires_grad_(True))
    return params


class TorchMLPClassifier(_TorchClassifier, _TorchMLP):
    """The MLP probe for classes (softmax), a binary label (one sigmoid), or the columns of a 2-D
    0/1 y (one sigmoid each)."""

    def fit(self, X, y):
        X, codes = self._encode(X, y)
        return self._train(X, codes, OUTPUTS[self.kind_].units(len(self.classes_)))


class TorchMLPRegressor(RegressorMixin, _TorchMLP):
    """The MLP probe for regression: linear outputs, half the squared error (give it
    standardised targets, as the probe does)."""

    def __sklearn_tags__(self):
        return _multi_output_tags(super().__sklearn_tags__())

    def fit(self, X, y):
        X, y = validate_data(self, X, y, y_numeric=True, multi_output=True, dtype=np.float32)
        self.kind_ = "regression"
        self.n_outputs_ = 1 if np.ndim(y) == 1 else y.shape[1]
        return self._train(X, np.asarray(y, dtype=np.float32).reshape(len(X), -1), self.n_outputs_)

    def predict(self, X):
        check_is_fitted(self)
        out = self._logits(validate_data(self, X, reset=False, dtype=np.float32))
        return out[:, 0] if self.n_outputs_ == 1 else out
