"""Data for the Theorem 3.1 experiment: one softmax head approximating f(w^T x - y) x.

The theorem (paper, Section 3) takes a prompt of n tokens whose i-th column is
``z_i = [x_i; y_i; w]`` (width 2d + 1: the data point, its label and the
*current weights carried as data*) and asks a single softmax attention head
plus a column-wise affine map to output, at every position i,

    target_i = f(w^T x_i - y_i) x_i            (a d-vector).

With f = l' (the scalar derivative of a loss) this is the per-sample gradient;
averaging the n outputs with u = (1/n) 1 and subtracting eta times the average
from w is one step of gradient descent (Corollaries 3.1.1-3.1.2), see
:func:`gd_step` and :func:`aggregate_gd`.

This module builds the experiment the theorem states. It departs on purpose
from the published script in two places (see docs/statistical_and_theorem31_data.md):
the target at token i depends on token i only (the script mixed all tokens),
and the target is never part of the emulator's input (the script fed it in).
The sign is the paper's ``w^T x - y`` (the script used ``+ y``).

All randomness comes from ``algo_emu.rng.torch_stream(seed, "theorem31", name)``
with one named stream each for X, y and w, so changing e.g. the x
distribution never changes y or w. Values are drawn in float64 and rounded to
the requested dtype; the target is computed in float64 from the *rounded*
inputs and then rounded, so it is the correctly rounded exact function of the
returned X, y, w.
"""

from __future__ import annotations

from typing import Callable, Union

import torch

from algo_emu.rng import torch_stream

__all__ = [
    "F_REGISTRY",
    "STEP_SHARPNESS",
    "X_DISTS",
    "resolve_f",
    "generate",
    "per_sample",
    "gd_step",
    "gd_steps",
    "aggregate_gd",
]

#: Sharpness k of the smooth step used for perceptron-like updates: step(t) = sigmoid(k t).
#: With x uniform on [-5, 5] and d = 24 the residual w^T x - y has std ~14, so k = 10 makes
#: the step essentially a hard 0/1 switch except for |t| < ~0.5.
STEP_SHARPNESS = 10.0


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t


def _step(t: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(STEP_SHARPNESS * t)


#: Scalar functions f applied to the residual t = w^T x - y.
#: "tanh"     - the paper's experiment;
#: "identity" - the raw residual: f(t) x is the per-sample gradient of (1/2)(w^T x - y)^2
#:              (least squares);
#: "sigmoid"  - logistic sigmoid;
#: "step"     - smooth step sigmoid(STEP_SHARPNESS * t), a differentiable stand-in for the
#:              perceptron's 0/1 update indicator.
F_REGISTRY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "tanh": torch.tanh,
    "identity": _identity,
    "sigmoid": torch.sigmoid,
    "step": _step,
}

#: Distributions for the entries of x: "uniform" on [-x_scale, x_scale] (paper: [-5, 5]),
#: "normal" with mean 0 and std x_scale.
X_DISTS = ("uniform", "normal")

FLike = Union[str, Callable[[torch.Tensor], torch.Tensor]]


def resolve_f(f: FLike) -> Callable[[torch.Tensor], torch.Tensor]:
    """The function for a registry key (or the callable itself); unknown key -> ValueError."""
    if callable(f):
        return f
    if isinstance(f, str) and f in F_REGISTRY:
        return F_REGISTRY[f]
    raise ValueError(f"unknown f {f!r}; allowed: {sorted(F_REGISTRY)}")


def _check_x_dist(x_dist: str) -> None:
    if x_dist not in X_DISTS:
        raise ValueError(f"unknown x_dist {x_dist!r}; allowed: {list(X_DISTS)}")


def _positive_int(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def per_sample(w: torch.Tensor, X: torch.Tensor, y: torch.Tensor, f: FLike) -> torch.Tensor:
    """Per-token outputs f(w^T x_i - y_i) x_i.

    Shapes: w (..., d), X (..., n, d), y (..., n) -> (..., n, d).
    """
    fn = resolve_f(f)
    residual = torch.einsum("...nd,...d->...n", X, w) - y
    return fn(residual).unsqueeze(-1) * X


def aggregate_gd(per_sample_outputs: torch.Tensor, w: torch.Tensor, eta: float) -> torch.Tensor:
    """Turn per-token outputs g_i (..., n, d) into a GD step: w - eta * sum_i u_i g_i, u = (1/n) 1.

    This is the read-out of Corollary 3.1.2. Given a model's approximations of
    f(w^T x_i - y_i) x_i it yields the model's GD step, comparable with :func:`gd_step`.
    """
    n = per_sample_outputs.shape[-2]
    u = torch.full((n,), 1.0 / n, dtype=per_sample_outputs.dtype, device=per_sample_outputs.device)
    return w - eta * torch.einsum("n,...nd->...d", u, per_sample_outputs)


def gd_step(w: torch.Tensor, X: torch.Tensor, y: torch.Tensor, f: FLike, eta: float) -> torch.Tensor:
    """Exact step w - eta * (1/n) sum_i f(w^T x_i - y_i) x_i (batched over leading dims)."""
    return aggregate_gd(per_sample(w, X, y, f), w, eta)


def gd_steps(w0: torch.Tensor, X: torch.Tensor, y: torch.Tensor, f: FLike, eta: float, k: int) -> torch.Tensor:
    """k exact GD steps from w0 (the stacked-layer construction); returns the iterates (k + 1, ..., d)."""
    iterates = [w0]
    w = w0
    for _ in range(k):
        w = gd_step(w, X, y, f, eta)
        iterates.append(w)
    return torch.stack(iterates)


def generate(
    seed: int,
    n_prompts: int,
    n_tokens: int,
    d: int,
    f: str = "tanh",
    x_dist: str = "uniform",
    x_scale: float = 5.0,
    dtype: torch.dtype = torch.float32,
) -> dict[str, torch.Tensor]:
    """Draw a Theorem 3.1 data set.

    Returns a dict of CPU tensors (N = n_prompts, n = n_tokens):

    * ``X`` (N, n, d): entries uniform on [-x_scale, x_scale] or normal with std x_scale;
    * ``y`` (N, n): standard normal labels;
    * ``w`` (N, d): standard normal weights, one per prompt, shared by its tokens;
    * ``inputs`` (N, n, 2d + 1): token i is [x_i; y_i; w] -- the emulator's input. It holds
      the weights as data and never the target;
    * ``residual`` (N, n): w^T x_i - y_i (float64-exact, rounded);
    * ``target`` (N, n, d): row i is f(w^T x_i - y_i) x_i.

    ``f`` must be a key of :data:`F_REGISTRY` (kept a string so a config can name it).
    """
    if not isinstance(f, str) or f not in F_REGISTRY:
        raise ValueError(f"unknown f {f!r}; allowed: {sorted(F_REGISTRY)}")
    _check_x_dist(x_dist)
    N = _positive_int("n_prompts", n_prompts)
    n = _positive_int("n_tokens", n_tokens)
    d = _positive_int("d", d)
    if not x_scale > 0:
        raise ValueError(f"x_scale must be positive, got {x_scale!r}")

    g64 = torch.float64
    gx = torch_stream(seed, "theorem31", "X")
    if x_dist == "uniform":
        X = (2.0 * torch.rand((N, n, d), generator=gx, dtype=g64) - 1.0) * x_scale
    else:
        X = torch.randn((N, n, d), generator=gx, dtype=g64) * x_scale
    y = torch.randn((N, n), generator=torch_stream(seed, "theorem31", "y"), dtype=g64)
    w = torch.randn((N, d), generator=torch_stream(seed, "theorem31", "w"), dtype=g64)

    # Round the draws first, then compute the target exactly (float64) from the rounded values.
    Xo, yo, wo = (t.to(dtype) for t in (X, y, w))
    X, y, w = (t.to(g64) for t in (Xo, yo, wo))
    residual = torch.einsum("bnd,bd->bn", X, w) - y
    target = F_REGISTRY[f](residual).unsqueeze(-1) * X
    del X
    # Concatenating already-rounded values is exact in any dtype.
    inputs = torch.cat([Xo, yo.unsqueeze(-1), wo.unsqueeze(1).expand(N, n, d)], dim=-1)

    return {
        "X": Xo,
        "y": yo,
        "w": wo,
        "inputs": inputs,
        "residual": residual.to(dtype),
        "target": target.to(dtype),
    }
