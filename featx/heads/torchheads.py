"""The linear probes in torch, as scikit-learn estimators: TorchLogistic by full-batch L-BFGS and
TorchRidge in closed form, on CPU threads or CUDA. The MLP probe is featx/heads/torchmlp.py's;
what the torch heads share, featx/heads/torchbase.py's.

| estimator | outputs | fit |
|---|---|---|
| TorchLogistic | binary: one logit; multiclass: softmax; multilabel (2-D 0/1 y): one sigmoid per column | full-batch L-BFGS on mean log-loss + ||W||^2 / (2 C n): LogisticRegression(C)'s objective |
| TorchRidge | regression, one or more targets | the closed form of Ridge(alpha), float64 |
| TorchMLPClassifier, TorchMLPRegressor (torchmlp.py) | as TorchLogistic; regression | one hidden ReLU layer, Adam on minibatches, early stopping on a seeded held-out part |

Torch is imported by `fit` only. A fitted head holds numpy arrays and numbers, nothing of torch:
`predict` runs in numpy (a saved head predicts without torch, exactly as the fitted one did), and
`featx.heads.serialize` stores it as arrays and JSON like every other head. `fit` is deterministic given
`random_state`, the device and the thread count (`n_jobs`; 0 keeps torch's own).

Losses and penalties are scikit-learn's, so the heads' grids mean what the scikit-learn heads'
grids mean: C and alpha keep their scale.
"""
from __future__ import annotations

import math

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from featx.heads.torchbase import (OUTPUTS, _check_params, _multi_output_tags, _tensor, _torch, _TorchClassifier,
                                   _warn_unconverged)


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
            # The (n, d) products run in float32 (half the time of float64); the loss is summed and
            # the solver's state kept in float64, so the line search sees a smooth objective (in
            # float32 it stalls where the loss stops changing in its 7th digit).
            products = _linear_products(torch, X, device)
            target = torch.from_numpy(output.target(codes)).to(device)
            if target.is_floating_point():
                target = target.double()
            W, b = _starting_weights(torch, (d, k), device, previous if warm else None)
            largest = self._minimise(torch, lambda: products(W, b), output, target, (W, b), n)
            if not math.isfinite(largest) or largest > (self.tol if self.n_iter_ >= self.max_iter else 100 * self.tol):
                _warn_unconverged(self, f"stopped after {self.n_iter_} iterations with a gradient "
                                  f"of {largest:.3g} (tol {self.tol:g})")
            # (k, d), as scikit-learn's; C order, as a saved head is read back (the same products)
            self.coef_ = np.ascontiguousarray(W.detach().T.cpu().numpy())
            self.intercept_ = b.detach().cpu().numpy()  # (k,)
        return self

    def _minimise(self, torch, logits, output, target, weights, n: int) -> float:
        """Run L-BFGS on the mean loss of `logits()` + ||W||^2 / (2 C n) from `weights` (W, b),
        updated in place; set `n_iter_`. Returns the largest entry of the gradient at the end."""
        import torch.nn.functional as F

        W, b = weights
        penalty = 1.0 / (self.C * n)
        # max_eval: torch's default (max_iter * 5/4 evaluations) ends runs before max_iter
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
        # optimum (features on a scale of 1e10 stop it after one step, a gradient of 2e10).
        closure()
        return max(float(W.grad.abs().max()), float(b.grad.abs().max()))

    def _logits(self, X) -> np.ndarray:
        # float64, as scikit-learn's: a row's score does not depend on the rows beside it
        return np.asarray(X.astype(np.float64) @ self.coef_.T) + self.intercept_  # (n, k)


def _linear_products(torch, X, device):
    """(W, b) -> the float64 logits X W + b (n, k) of X, copied to `device` once, its products in
    float32: a CSR tensor for sparse X (TF-IDF: the products cost its non-zeros)."""
    import scipy.sparse as sp

    if sp.issparse(X):
        Xt = torch.sparse_csr_tensor(torch.from_numpy(X.indptr.astype(np.int64)),
                                     torch.from_numpy(X.indices.astype(np.int64)),
                                     torch.from_numpy(X.data.astype(np.float32)), size=X.shape
                                     ).to(device)  # (n, d)
        return lambda W, b: (Xt @ W.float() + b.float()).double()  # (n, k)
    Xt = _tensor(torch, X, device)  # (n, d)
    return lambda W, b: torch.addmm(b.float(), Xt, W.float()).double()  # (n, k)


def _starting_weights(torch, shape: tuple[int, int], device, previous):
    """Trainable float64 (W (d, k), b (k,)) on `device`: zeros, or `previous` (coef_ (k, d),
    intercept_ (k,), ...) when the fit starts warm."""
    d, k = shape
    W = torch.zeros(d, k, dtype=torch.float64, device=device)  # (d, k)
    b = torch.zeros(k, dtype=torch.float64, device=device)  # (k,)
    if previous is not None:
        W.copy_(torch.from_numpy(previous[0].T.astype(np.float64)))
        b.copy_(torch.from_numpy(previous[1].astype(np.float64)))
    W.requires_grad_(True)
    b.requires_grad_(True)
    return W, b

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
