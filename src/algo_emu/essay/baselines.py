"""The in-context baselines of E6 (float64, batched over prompts).

Every function takes the k context examples X (B, k, d), y (B, k) and queries Xq (B, m, d) and returns
predictions (B, m). With k = 0 every baseline predicts the prior mean 0.
"""

from __future__ import annotations

import math

import torch


def prior_mean(X, y, Xq) -> torch.Tensor:
    return torch.zeros(Xq.shape[:-1], dtype=Xq.dtype)


def ols(X, y, Xq) -> torch.Tensor:
    """Least squares; the minimum-norm solution when k < d (pseudo-inverse)."""
    if X.shape[1] == 0:
        return prior_mean(X, y, Xq)
    w = torch.linalg.pinv(X) @ y[..., None]
    return (Xq @ w)[..., 0]


def ridge(X, y, Xq, lam: float) -> torch.Tensor:
    """Ridge; with lam = sigma^2 / tau^2 the posterior mean under w ~ N(0, tau^2 I)."""
    if X.shape[1] == 0:
        return prior_mean(X, y, Xq)
    d = X.shape[-1]
    A = X.transpose(1, 2) @ X + lam * torch.eye(d, dtype=X.dtype)
    w = torch.linalg.solve(A, (X.transpose(1, 2) @ y[..., None]))
    return (Xq @ w)[..., 0]


def gd(X, y, Xq, steps: int, eta: float) -> torch.Tensor:
    """``steps`` GD steps from w = 0 on (1/2k) sum_j (y_j - w.x_j)^2 with step size ``eta``."""
    B, k, d = X.shape
    if k == 0:
        return prior_mean(X, y, Xq)
    w = torch.zeros(B, d, dtype=X.dtype)
    for _ in range(steps):
        r = y - torch.einsum("bkd,bd->bk", X, w)
        w = w + eta / k * torch.einsum("bk,bkd->bd", r, X)
    return torch.einsum("bmd,bd->bm", Xq, w)


def nearest_neighbour(X, y, Xq) -> torch.Tensor:
    """Copy the label of the context example whose x is nearest (Euclidean) to the query."""
    if X.shape[1] == 0:
        return prior_mean(X, y, Xq)
    dist = torch.cdist(Xq, X)  # (B, m, k)
    idx = dist.argmin(dim=-1)
    return torch.gather(y, 1, idx)


def discrete_bayes(X, y, Xq, tasks: torch.Tensor, sigma: float) -> torch.Tensor:
    """Posterior mean under a uniform prior on the M rows of ``tasks`` and Gaussian noise sigma."""
    if X.shape[1] == 0:
        return (Xq @ tasks.mean(0))
    pred_ctx = torch.einsum("bkd,md->bmk", X, tasks)  # (B, M, k)
    logp = -((y[:, None, :] - pred_ctx) ** 2).sum(-1) / (2 * sigma ** 2)
    post = torch.softmax(logp, dim=-1)  # (B, M)
    w = post @ tasks  # (B, d)
    return torch.einsum("bmd,bd->bm", Xq, w)


def tune_gd_eta(X, y, Xq, yq, steps: int, grid=None) -> float:
    """The step size (from a log grid) with the lowest MSE on a calibration draw (never the test draw)."""
    grid = grid if grid is not None else [math.exp(v) for v in torch.linspace(math.log(0.02), math.log(2.0), 25).tolist()]
    errs = [float(((gd(X, y, Xq, steps, eta) - yq) ** 2).mean()) for eta in grid]
    return float(grid[min(range(len(grid)), key=errs.__getitem__)])


FITTING = ("ols", "ridge", "gd")  # baselines that fit a function to the context ("algorithmic ICL")
RETRIEVAL = ("nn",)  # nearest-example label copying ("retrieval ICL")
