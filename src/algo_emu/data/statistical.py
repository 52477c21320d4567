"""Data for emulating statistical algorithms from the prompt (paper, Appendix C.1).

Two modes.

``reference_code`` -- the published protocol, stated in our own words
    (the published code at commit 6d39297; arXiv 2508.17550v2, Appendix C.1). Per prompt: X (n x d) with entries
    2z - 1 (z standard normal), w standard normal in R^d, then by algorithm

    * ``linear``: w as drawn;
    * ``lasso``:  each coordinate of w zeroed independently with probability 1/2
      (no L1 fit happens);
    * ``ridge``:  y0 = X w + noise_std * e0, then w := (X^T X + lam I)^{-1} X^T y0;

    finally y = X w + noise_std * e. Token i is [x_i; w] (w tiled onto every
    token) and the target is y_i, so every task is x_i^T w plus noise.

``fitted`` (default) -- a real in-context version. Per prompt: n labelled
    context examples y = X w* + noise_std * e (w* standard normal), the weights
    (w_A, b_A) that algorithm A fitted *on those examples*, and m fresh query
    points. Tokens:

    * context i: [x_i; y_i; w_A; b_A]
    * query   q: [x_q; 0;   w_A; b_A]

    (width 2d + 2; b_A is the intercept, 0 for algorithms without one). The
    target is the algorithm's own prediction x_q^T w_A + b_A at the queries.
    ``y_query`` (noisy labels of the queries) is returned too, so three errors
    can be reported (:func:`errors`): emulation (model vs algorithm),
    prediction (model vs noisy y) and the algorithm's own (algorithm vs noisy y).

Algorithms of the fitted mode (X: n x d context, y: n labels), batched in :mod:`algo_emu.data.solvers`:
``ols`` (minimum-norm least squares when n < d; ``linear`` is accepted as an alias), ``ridge``
(argmin ||y - Xw||^2 + lam ||w||^2: scikit-learn's Ridge objective, ``alpha`` == ``lam``, no 1/n factor),
``lasso`` (scikit-learn ``Lasso``, objective (1/2n)||y - Xw||^2 + alpha ||w||_1, from zero, per prompt),
``gd`` (k steps of gradient descent from w = 0 with step eta on (1/2n)||Xw - y||^2, no intercept).

Randomness: ``algo_emu.rng.torch_stream(seed, "statistical", mode, name)``
with one stream per quantity (X, w, noise, algorithm draw, ...). All
quantities are drawn for every prompt whatever its algorithm, so prompt i of
``generate_for("ridge", seed=s)`` and of ``generate_for("lasso", seed=s)``
share X, w*, the noise and the queries (paired comparisons across algorithms).
Draws are made in float64, rounded to the requested dtype, and every fit and
target is computed in float64 from the rounded data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import torch

from algo_emu.config import schema_defaults
from algo_emu.io import load_tensors, write_tensors
from algo_emu.data.solvers import fit_gd, fit_lasso, fit_ols, fit_ridge
from algo_emu.rng import torch_stream

__all__ = [
    "MODES",
    "ALGORITHMS",
    "ALIASES",
    "MIXED",
    "DEFAULT_PARAMS",
    "X_DISTS",
    "canonical_algorithms",
    "resolve_params",
    "fit_ols",
    "fit_ridge",
    "fit_lasso",
    "fit_gd",
    "fit",
    "generate",
    "generate_for",
    "errors",
    "DATASET_KEYS",
    "write_dataset",
    "load_dataset",
]

MODES = ("reference_code", "fitted")

ALGORITHMS: dict[str, tuple[str, ...]] = {
    "reference_code": ("linear", "ridge", "lasso"),
    "fitted": ("ols", "ridge", "lasso", "gd"),
}

#: Accepted alternative names, per mode.
ALIASES: dict[str, dict[str, str]] = {
    "reference_code": {},
    "fitted": {"linear": "ols"},
}

#: What ``algorithms="mixed"`` expands to (the paper's mixture is linear / ridge / lasso).
MIXED: dict[str, tuple[str, ...]] = {
    "reference_code": ("linear", "ridge", "lasso"),
    "fitted": ("ols", "ridge", "lasso", "gd"),
}

#: Distributions of the entries of x in the fitted mode. "shifted_normal" = 2z - 1,
#: z ~ N(0, 1) (mean -1, variance 4; the protocol's choice); "normal" = z.
X_DISTS = ("shifted_normal", "normal")

#: Each mode's data parameters, from workflow/schemas/statistical.schema.yaml (``data_params``: the one place they
#: are written, with what each means); ``params`` of the functions below overrides them key by key.
DEFAULT_PARAMS: dict[str, dict[str, Any]] = schema_defaults("statistical")["data_params"]


# ----------------------------------------------------------------------------- validation


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; allowed: {list(MODES)}")


def canonical_algorithms(mode: str, algorithms: str | Iterable[str]) -> tuple[str, ...]:
    """Canonical names, in order, for ``algorithms`` (a name, "mixed", or a sequence of names).

    The per-prompt ``algorithm`` index returned by :func:`generate` refers to this tuple.
    """
    _check_mode(mode)
    if isinstance(algorithms, str):
        algorithms = MIXED[mode] if algorithms == "mixed" else (algorithms,)
    allowed = ALGORITHMS[mode]
    out = []
    for name in algorithms:
        canon = ALIASES[mode].get(name, name)
        if canon not in allowed:
            extra = sorted(ALIASES[mode])
            raise ValueError(
                f"unknown algorithm {name!r} for mode {mode!r}; allowed: {list(allowed)}"
                + (f" (aliases: {extra})" if extra else "")
                + ' or "mixed"'
            )
        if canon in out:
            raise ValueError(f"algorithm {name!r} listed twice (as {canon!r})")
        out.append(canon)
    if not out:
        raise ValueError("algorithms must not be empty")
    return tuple(out)


def resolve_params(mode: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The mode's defaults overridden by ``params``; unknown keys -> ValueError."""
    _check_mode(mode)
    out = dict(DEFAULT_PARAMS[mode])
    for key, value in (params or {}).items():
        if key not in out:
            raise ValueError(f"unknown param {key!r} for mode {mode!r}; allowed: {sorted(out)}")
        out[key] = value
    if mode == "fitted" and out["x_dist"] not in X_DISTS:
        raise ValueError(f"unknown x_dist {out['x_dist']!r}; allowed: {list(X_DISTS)}")
    if out["noise_std"] < 0:
        raise ValueError("noise_std must be >= 0")
    return out


def _positive_int(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


# ----------------------------------------------------------------------------- algorithms (solvers: data.solvers)


def fit(algorithm: str, X: np.ndarray, y: np.ndarray, params: Mapping[str, Any] | None = None):
    """Fit one fitted-mode algorithm on a batch of prompts; returns (w (B, d), b (B,))."""
    (name,) = canonical_algorithms("fitted", (algorithm,))
    p = resolve_params("fitted", params)
    if name == "ols":
        return fit_ols(X, y, p["ols_intercept"], p["ols_rtol"])
    if name == "ridge":
        return fit_ridge(X, y, p["ridge_lambda"], p["ridge_intercept"])
    if name == "lasso":
        w, b, _ = fit_lasso(X, y, p["lasso_alpha"], p["lasso_intercept"], p["lasso_tol"], p["lasso_max_iter"])
        return w, b
    return fit_gd(X, y, p["gd_eta"], p["gd_steps"])


# ----------------------------------------------------------------------------- generators


def _stream(seed: int, mode: str, name: str) -> torch.Generator:
    return torch_stream(seed, "statistical", mode, name)


def _randn(seed, mode, name, shape, dtype) -> torch.Tensor:
    """Standard normal draws in float64, rounded to ``dtype``, returned as float64."""
    z = torch.randn(shape, generator=_stream(seed, mode, name), dtype=torch.float64)
    return z.to(dtype).to(torch.float64)


def _draw_algorithm(seed, mode, n_algs: int, N: int) -> torch.Tensor:
    return torch.randint(n_algs, (N,), generator=_stream(seed, mode, "algorithm"), dtype=torch.int64)


def _generate_reference(algs, seed, N, n, d, p, dtype) -> dict[str, torch.Tensor]:
    mode = "reference_code"
    X = (2.0 * torch.randn((N, n, d), generator=_stream(seed, mode, "X"), dtype=torch.float64) - 1.0)
    X = X.to(dtype).to(torch.float64)
    w = _randn(seed, mode, "w", (N, d), dtype)
    zero = torch.rand((N, d), generator=_stream(seed, mode, "lasso_mask"), dtype=torch.float64) < p["lasso_zero_prob"]
    e0 = _randn(seed, mode, "ridge_noise", (N, n), dtype)
    e = _randn(seed, mode, "noise", (N, n), dtype)
    alg = _draw_algorithm(seed, mode, len(algs), N)

    for k, name in enumerate(algs):
        idx = alg == k
        if not bool(idx.any()) or name == "linear":
            continue
        if name == "lasso":
            w[idx] = torch.where(zero[idx], torch.zeros(()), w[idx])
        elif name == "ridge":
            Xi = X[idx]
            y0 = torch.einsum("bnd,bd->bn", Xi, w[idx]) + p["noise_std"] * e0[idx]
            w_r, _ = fit_ridge(Xi.numpy(), y0.numpy(), p["ridge_lambda"], intercept=False)
            w[idx] = torch.from_numpy(w_r)

    w = w.to(dtype).to(torch.float64)  # the tokens carry the rounded w; y is computed from it
    y_clean = torch.einsum("bnd,bd->bn", X, w)
    y = y_clean + p["noise_std"] * e
    inputs = torch.cat([X, w.unsqueeze(1).expand(N, n, d)], dim=-1)
    return {
        "X": X.to(dtype),
        "w": w.to(dtype),
        "y": y.to(dtype),
        "y_clean": y_clean.to(dtype),
        "inputs": inputs.to(dtype),
        "target": y.to(dtype),
        "algorithm": alg,
    }


def _generate_fitted(algs, seed, N, n, m, d, p, dtype) -> dict[str, torch.Tensor]:
    mode = "fitted"

    def draw_x(name, shape):
        z = _randn(seed, mode, name, shape, torch.float64)
        if p["x_dist"] == "shifted_normal":
            z = 2.0 * z - 1.0
        return z.to(dtype).to(torch.float64)

    X = draw_x("X", (N, n, d))
    Xq = draw_x("X_query", (N, m, d))
    w_star = _randn(seed, mode, "w_star", (N, d), dtype)
    e = _randn(seed, mode, "noise", (N, n), dtype)
    eq = _randn(seed, mode, "query_noise", (N, m), dtype)
    alg = _draw_algorithm(seed, mode, len(algs), N)

    sigma = p["noise_std"]
    y = (torch.einsum("bnd,bd->bn", X, w_star) + sigma * e).to(dtype).to(torch.float64)
    y_query = torch.einsum("bmd,bd->bm", Xq, w_star) + sigma * eq

    w_alg = torch.zeros((N, d), dtype=torch.float64)
    b_alg = torch.zeros((N,), dtype=torch.float64)
    Xn, yn = X.numpy(), y.numpy()
    for k, name in enumerate(algs):
        idx = (alg == k).numpy()
        if not idx.any():
            continue
        w_k, b_k = fit(name, Xn[idx], yn[idx], p)
        w_alg[torch.from_numpy(idx)] = torch.from_numpy(w_k)
        b_alg[torch.from_numpy(idx)] = torch.from_numpy(b_k)

    target = torch.einsum("bmd,bd->bm", Xq, w_alg) + b_alg[:, None]
    fit_context = torch.einsum("bnd,bd->bn", X, w_alg) + b_alg[:, None]
    wb = torch.cat([w_alg, b_alg[:, None]], dim=-1)  # (N, d + 1)
    ctx = torch.cat([X, y.unsqueeze(-1), wb.unsqueeze(1).expand(N, n, d + 1)], dim=-1)
    qry = torch.cat([Xq, torch.zeros((N, m, 1), dtype=torch.float64), wb.unsqueeze(1).expand(N, m, d + 1)], dim=-1)
    inputs = torch.cat([ctx, qry], dim=1)

    out = {
        "X": X,
        "y": y,
        "X_query": Xq,
        "y_query": y_query,
        "w_star": w_star,
        "w_alg": w_alg,
        "b_alg": b_alg,
        "inputs": inputs,
        "target": target,
        "fit_context": fit_context,
        "alg_residual": target - y_query,
    }
    out = {k: v.to(dtype) for k, v in out.items()}
    out["algorithm"] = alg
    return out


def generate(
    mode: str = "fitted",
    algorithms: str | Sequence[str] = "mixed",
    seed: int = 0,
    n_prompts: int = 1000,
    n_context: int = 20,
    n_query: int | None = None,
    d: int = 24,
    params: Mapping[str, Any] | None = None,
    dtype: torch.dtype = torch.float32,
) -> dict[str, torch.Tensor]:
    """Draw a data set; each prompt's algorithm is uniform over ``algorithms``.

    ``algorithms``: a name, a sequence of names, or "mixed" (see :data:`MIXED`); the int64
    tensor ``algorithm`` (N,) indexes :func:`canonical_algorithms(mode, algorithms)`.

    ``reference_code`` (n_query must be None or 0) returns X (N, n, d), w (N, d) (after the
    lasso/ridge transform), y (N, n) noisy labels, y_clean = X w, inputs (N, n, 2d) with token
    [x_i; w], target = y, algorithm.

    ``fitted`` (n_query >= 1, default 1) returns X (N, n, d), y (N, n), X_query (N, m, d),
    y_query (N, m) noisy, w_star (N, d), w_alg (N, d), b_alg (N,), inputs (N, n + m, 2d + 2),
    target (N, m) = X_query w_alg + b_alg, fit_context (N, n) = X w_alg + b_alg,
    alg_residual (N, m) = target - y_query, algorithm.
    """
    _check_mode(mode)
    algs = canonical_algorithms(mode, algorithms)
    p = resolve_params(mode, params)
    N = _positive_int("n_prompts", n_prompts)
    n = _positive_int("n_context", n_context)
    d = _positive_int("d", d)
    if mode == "reference_code":
        if n_query not in (None, 0):
            raise ValueError("reference_code mode has no query tokens; n_query must be None or 0")
        return _generate_reference(algs, seed, N, n, d, p, dtype)
    m = _positive_int("n_query", 1 if n_query is None else n_query)
    return _generate_fitted(algs, seed, N, n, m, d, p, dtype)


def generate_for(algorithm: str, mode: str = "fitted", **kwargs: Any) -> dict[str, torch.Tensor]:
    """Every prompt uses ``algorithm`` (per-algorithm evaluation); other arguments as :func:`generate`."""
    if isinstance(algorithm, str) and algorithm == "mixed":
        raise ValueError('generate_for takes one algorithm, not "mixed"')
    return generate(mode, (algorithm,), **kwargs)


def errors(pred: torch.Tensor, batch: Mapping[str, torch.Tensor]) -> dict[str, float]:
    """Mean squared errors of a model's predictions against a batch from :func:`generate`.

    fitted: ``pred`` is (N, m) at the queries, or (N, n + m) over all tokens (the last m are
    used). Returns emulation (pred vs algorithm), prediction (pred vs noisy y_query) and
    algorithm (algorithm vs noisy y_query; independent of pred).
    reference_code: ``pred`` (N, n); returns mse (vs the noisy target y) and mse_clean (vs X w).
    """
    pred = pred.detach().to(torch.float64).cpu()
    if "y_query" in batch:
        m = batch["target"].shape[-1]
        if pred.shape[-1] != m:
            pred = pred[..., -m:]
        t = batch["target"].to(torch.float64)
        yq = batch["y_query"].to(torch.float64)
        return {
            "emulation": float(((pred - t) ** 2).mean()),
            "prediction": float(((pred - yq) ** 2).mean()),
            "algorithm": float(((t - yq) ** 2).mean()),
        }
    t = batch["target"].to(torch.float64)
    return {
        "mse": float(((pred - t) ** 2).mean()),
        "mse_clean": float(((pred - batch["y_clean"].to(torch.float64)) ** 2).mean()),
    }


# ----------------------------------------------------------------------------- data set files

#: Format of the data set files :func:`write_dataset` writes (their sidecar's ``format_version``).
FORMAT_VERSION = 1
#: The tensors of a generated data set a training job needs (what :func:`write_dataset` keeps).
DATASET_KEYS = ("inputs", "target", "algorithm")


def write_dataset(path: str | Path, data: Mapping[str, torch.Tensor], meta: Mapping[str, Any]) -> dict:
    """Save ``data``'s :data:`DATASET_KEYS` with a JSON sidecar (:func:`algo_emu.io.write_tensors`): ``meta``
    (the generation parameters, under ``params``) plus the format version, shapes and the file's sha256."""
    return write_tensors(path, {k: data[k] for k in DATASET_KEYS}, {**meta, "format_version": FORMAT_VERSION})


def load_dataset(path: str | Path, expect: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], dict]:
    """(tensors, sidecar) of a file of :func:`write_dataset`; its sha256, format version, :data:`DATASET_KEYS`
    and every entry of ``expect`` (e.g. mode, seed, the generation ``params``) checked
    (:func:`algo_emu.io.load_tensors`: ValueError naming the difference)."""
    return load_tensors(path, expect, keys=DATASET_KEYS, format_version=FORMAT_VERSION)
