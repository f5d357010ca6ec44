"""The MLP probe in torch, as scikit-learn estimators: TorchMLPClassifier and TorchMLPRegressor,
one hidden ReLU layer trained by Adam on minibatches with early stopping on a seeded held-out
part, on CPU threads or CUDA (`_TorchMLP` is the training both share).

Torch is imported by `fit` only; a fitted head holds numpy arrays and predicts in numpy, as the
linear probes of featx/heads/torchheads.py do. `fit` is deterministic given `random_state`, the
device and the thread count (`n_jobs`; 0 keeps torch's own). The loss and the L2 penalty are
scikit-learn's MLP's, so alpha keeps its scale.
"""
from __future__ import annotations

import math

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from featx.heads.torchbase import (OUTPUTS, _check_params, _multi_output_tags, _tensor, _torch, _TorchClassifier,
                                   _warn_unconverged)


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
            # saw: with 50 classes of one row each, the held-out loss only rises and the first
            # round's untrained weights would be kept. The split is stratified, or not
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
        self._check_settings()
        output = OUTPUTS[self.kind_]
        n, d = X.shape
        fit_rows, val_rows = self._split(n, codes)
        with _torch(self.device, self.n_jobs) as (torch, device):
            generator = torch.Generator().manual_seed(int(self.random_state))
            params = _glorot(torch, generator, (d, self.hidden, k), device)
            target = torch.from_numpy(output.target(codes))
            fitted = _tensor(torch, X[fit_rows], device), target[fit_rows].to(device)
            held = None if val_rows is None else (_tensor(torch, X[val_rows], device), target[val_rows].to(device))
            best, best_params, curve, stopped = self._descend(torch, device, generator, params, output, fitted, held)
            if not stopped:
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

    def _check_settings(self) -> None:
        """Refuse a hyperparameter out of its range, or a seed that is not an integer, before any fit."""
        _check_params(self, hidden=(1, math.inf, True, True), alpha=(0, math.inf, True, False),
                      learning_rate=(0, math.inf, False, False), batch_size=(1, math.inf, True, True),
                      max_iter=(1, math.inf, True, True), validation_fraction=(0, 1, False, False),
                      n_iter_no_change=(1, math.inf, True, True), tol=(0, math.inf, True, False),
                      round_rows=(1, math.inf, True, True))
        if not isinstance(self.random_state, (int, np.integer)) or isinstance(self.random_state, bool):
            raise ValueError(f"{type(self).__name__}: random_state = {self.random_state!r} must be an "
                             "integer seed (the fit is reproducible only so)")

    def _descend(self, torch, device, generator, params: list, output, fitted: tuple, held: tuple | None):
        """Adam on minibatches of the `fitted` (X, target) tensors, a round at a time, for at most
        `max_iter` rounds: (the best round's loss, its parameters (None when no round's loss was
        finite), the loss per round, whether it stopped before `max_iter`). The loss per round is
        the `held` part's when there is one, else the training loss of the round's minibatches."""
        import torch.nn.functional as F

        W1, b1, W2, b2 = params  # (d, h), (h,), (h, k), (k,)
        forward = lambda x: torch.addmm(b2, torch.relu(torch.addmm(b1, x, W1)), W2)  # noqa: E731  (n, k)
        X_fit, t_fit = fitted
        optimizer = torch.optim.Adam(params, lr=self.learning_rate, betas=(0.9, 0.999), eps=1e-8)
        batch = int(min(self.batch_size, len(X_fit)))
        steps = max(1, math.ceil(min(len(X_fit), self.round_rows) / batch))  # per round
        batches = _batches(torch, generator, len(X_fit), batch, device)
        best, best_params, stale, curve = math.inf, None, 0, []
        for _ in range(self.max_iter):
            total, seen = torch.zeros((), device=device), 0
            for _ in range(steps):
                rows = next(batches)
                loss = output.loss(F, forward(X_fit[rows]), t_fit[rows])
                penalty = 0.5 * self.alpha * ((W1 * W1).sum() + (W2 * W2).sum()) / len(rows)
                optimizer.zero_grad(set_to_none=True)
                (loss + penalty).backward()
                optimizer.step()
                if held is None:
                    total += loss.detach() * len(rows)
                    seen += len(rows)
            if held is not None:
                with torch.no_grad():
                    value = float(output.loss(F, forward(held[0]), held[1]))
            else:
                value = float(total) / seen
            curve.append(value)
            if not math.isfinite(value):
                return best, best_params, curve, True
            # scikit-learn's rule: a round counts as no change unless it beats the best by
            # `tol`, and the weights kept are the best round's, however small its lead.
            stale = stale + 1 if value > best - self.tol else 0
            if value < best:
                best, best_params = value, [p.detach().clone() for p in params]
            if stale >= self.n_iter_no_change:
                return best, best_params, curve, True
        return best, best_params, curve, False

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


def _batches(torch, generator, n: int, batch: int, device):
    """The row indices (on `device`) of successive minibatches of `batch` of n rows, endlessly:
    each epoch in a new order drawn from the seeded generator when its first batch is asked for;
    an epoch's last batch may be shorter, and never runs into the next epoch."""
    while True:
        order = torch.randperm(n, generator=generator).to(device)
        for position in range(0, n, batch):
            yield order[position:position + batch]


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
