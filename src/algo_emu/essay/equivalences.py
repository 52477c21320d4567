"""Exact equivalences between attention and in-context least squares, in float64, with no training.

Tokens are ``e_j = (x_j, y_j)`` for the k context examples and ``e_q = (x_q, 0)`` for the query.
A linear self-attention (LSA) layer, keys and values from the context tokens only, is

    e_i  <-  e_i + (1/k) * sum_j (W_V e_j) (e_j^T W_K^T W_Q e_i)        (von Oswald et al. 2023)

With ``W_K^T W_Q = [[I, 0], [0, 0]]`` (scores are x_j . x_i) and ``W_V = [[0, 0], [0, -eta]]`` (the value is
-eta times the y-slot, written into the y-slot), the y-slot of every token after the layer is ``y_i - w_1 . x_i``
where ``w_1`` is ONE gradient-descent step from w = 0 on L(w) = (1/2k) sum_j (y_j - w.x_j)^2; the query's
y-slot starts at 0 and ends at ``-w_1 . x_q``, so the prediction is minus the query's y-slot. Stacking L such layers (the context tokens' y-slots hold the
residuals y_j - w_t . x_j) gives exactly L GD steps. Appending d "prior" tokens (sqrt(lam) e_i, 0) to the
context turns the least-squares loss into the ridge loss (the posterior mean when lam = sigma^2/tau^2),
so the same layers run GD on the ridge objective and converge to the posterior mean.

The softmax version replaces the scores s_ij by softmax(eps * s_ij) over the context. On the symmetrised
context {(x_j, y_j), (-x_j, -y_j)} its output is sum_j y_j sinh(eps a_j) / sum_j cosh(eps a_j)
(a_j = x_j . x_q) = (eps/k) sum_j y_j a_j + O(eps^3), so (eta / eps) times it equals the linear layer's step up to O(eps^2):
:func:`softmax_deviation` measures that deviation against eps.
"""

from __future__ import annotations

import numpy as np


def _as64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def gd_layer_weights(d: int, eta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(W_K, W_Q, W_V) of the LSA layer that performs one GD step with learning rate ``eta``.

    Tokens have d + 1 entries (x, y). Keys and queries read x; the value is -eta times the y-slot placed
    in the y-slot (the layer ADDS its output, so the residual y_i - w.x_i moves by -eta/k sum_j r_j x_j.x_i).
    """
    if d < 1:
        raise ValueError(f"d must be >= 1, got {d}")
    W_K = np.zeros((d, d + 1))
    W_K[:, :d] = np.eye(d)
    W_Q = W_K.copy()
    W_V = np.zeros((d + 1, d + 1))
    W_V[d, d] = -float(eta)
    return W_K, W_Q, W_V


def lsa_layer(tokens: np.ndarray, n_context: int, W_K, W_Q, W_V, softmax_scale: float | None = None,
              normaliser: float | None = None) -> np.ndarray:
    """One self-attention layer with a residual connection; keys/values from the first ``n_context`` tokens.

    ``softmax_scale=None``: linear attention, weights s_ij / normaliser (normaliser defaults to n_context).
    Otherwise softmax over the context of softmax_scale * s_ij (the weights then sum to one; no normaliser).
    ``tokens`` is (..., n_tokens, d+1); everything is float64.
    """
    E = _as64(tokens)
    ctx = E[..., :n_context, :]
    K = ctx @ _as64(W_K).T
    Q = E @ _as64(W_Q).T
    V = ctx @ _as64(W_V).T
    S = Q @ np.swapaxes(K, -1, -2)  # (..., n_tokens, n_context)
    if softmax_scale is None:
        A = S / float(normaliser if normaliser is not None else n_context)
    else:
        Z = softmax_scale * S
        Z = Z - Z.max(axis=-1, keepdims=True)
        A = np.exp(Z)
        A = A / A.sum(axis=-1, keepdims=True)
    return E + A @ V


def build_tokens(X: np.ndarray, y: np.ndarray, x_query: np.ndarray) -> np.ndarray:
    """Context tokens (x_j, y_j) followed by query tokens (x_q, 0). X: (..., k, d), y: (..., k), x_query: (..., m, d)."""
    X, y, xq = _as64(X), _as64(y), _as64(x_query)
    ctx = np.concatenate([X, y[..., None]], axis=-1)
    qry = np.concatenate([xq, np.zeros(xq.shape[:-1] + (1,))], axis=-1)
    return np.concatenate([ctx, qry], axis=-2)


def lsa_predict(X, y, x_query, eta: float, layers: int = 1) -> np.ndarray:
    """Prediction of ``layers`` stacked GD layers: minus the query tokens' y-slot."""
    X = _as64(X)
    k, d = X.shape[-2], X.shape[-1]
    W = gd_layer_weights(d, eta)
    E = build_tokens(X, y, x_query)
    for _ in range(layers):
        E = lsa_layer(E, k, *W)
    return -E[..., k:, d]


def gd_predict(X, y, x_query, eta: float, steps: int = 1, lam: float = 0.0) -> np.ndarray:
    """Reference: ``steps`` explicit GD steps from w = 0 on (1/2k)[sum_j (y_j - w.x_j)^2 + lam |w|^2]."""
    X, y, xq = _as64(X), _as64(y), _as64(x_query)
    k = X.shape[-2]
    w = np.zeros(X.shape[:-2] + (X.shape[-1],))
    for _ in range(steps):
        r = y - np.einsum("...kd,...d->...k", X, w)
        grad = -(np.einsum("...k,...kd->...d", r, X) - lam * w) / k
        w = w - eta * grad
    return np.einsum("...md,...d->...m", xq, w)


def prior_tokens(d: int, lam: float, batch_shape=()) -> tuple[np.ndarray, np.ndarray]:
    """d pseudo-examples (sqrt(lam) e_i, 0): appended to the context they add lam |w|^2 to the squared loss."""
    Xp = np.sqrt(float(lam)) * np.eye(d)
    Xp = np.broadcast_to(Xp, tuple(batch_shape) + (d, d)).copy()
    return Xp, np.zeros(tuple(batch_shape) + (d,))


def ridge_lsa_predict(X, y, x_query, lam: float, eta: float, layers: int) -> np.ndarray:
    """GD on the ridge objective by the same LSA layers: context augmented by the d prior tokens.

    The layer normalises by k (the real examples), not k + d, so it is GD on
    (1/2k)[sum_j (y_j - w.x_j)^2 + lam |w|^2] exactly (compare :func:`gd_predict` with ``lam``).
    """
    X, y = _as64(X), _as64(y)
    k, d = X.shape[-2], X.shape[-1]
    Xp, yp = prior_tokens(d, lam, X.shape[:-2])
    Xa = np.concatenate([X, Xp], axis=-2)
    ya = np.concatenate([y, yp], axis=-1)
    W = gd_layer_weights(d, eta)
    E = build_tokens(Xa, ya, x_query)
    for _ in range(layers):
        E = lsa_layer(E, k + d, *W, normaliser=k)
    return -E[..., k + d:, d]


def ridge_predict(X, y, x_query, lam: float) -> np.ndarray:
    """Closed-form ridge (the posterior mean of w ~ N(0, tau^2 I), noise sigma, when lam = sigma^2 / tau^2)."""
    X, y, xq = _as64(X), _as64(y), _as64(x_query)
    d = X.shape[-1]
    A = np.swapaxes(X, -1, -2) @ X + lam * np.eye(d)
    b = np.einsum("...kd,...k->...d", X, y)
    w = np.linalg.solve(A, b[..., None])[..., 0]
    return np.einsum("...md,...d->...m", xq, w)


def softmax_step_predict(X, y, x_query, eta: float, eps: float) -> np.ndarray:
    """The softmax counterpart of one GD step: (eta / eps) * softmax attention over the symmetrised context.

    Uses the same keys/queries/values as :func:`gd_layer_weights` (value +y), softmax of eps * x_j.x_q.
    """
    X, y, xq = _as64(X), _as64(y), _as64(x_query)
    k, d = X.shape[-2], X.shape[-1]
    Xs = np.concatenate([X, -X], axis=-2)
    ys = np.concatenate([y, -y], axis=-1)
    W_K, W_Q, W_V = gd_layer_weights(d, -1.0)  # value = +y into the y-slot
    E = build_tokens(Xs, ys, xq)
    out = lsa_layer(E, 2 * k, W_K, W_Q, W_V, softmax_scale=eps)
    return (eta / eps) * out[..., 2 * k:, d]


def softmax_deviation(X, y, x_query, eta: float, eps_values) -> list[dict]:
    """Relative deviation |softmax - linear| / |linear| (RMS over the batch) for each eps."""
    lin = lsa_predict(X, y, x_query, eta, 1)
    rows = []
    for eps in eps_values:
        soft = softmax_step_predict(X, y, x_query, eta, eps)
        rows.append({"eps": float(eps),
                     "rel_dev": float(np.sqrt(np.mean((soft - lin) ** 2)) / np.sqrt(np.mean(lin ** 2)))})
    return rows


def outlier_shift(X, y, x_query, eta: float, eps: float, sizes, where: str = "y") -> list[dict]:
    """Prediction shift when context example 0 becomes an outlier: y_0 + delta (``where='y'``) or x_0 * (1 + delta)
    (``where='x'``), for the linear GD layer and its softmax counterpart (RMS over the batch)."""
    X, y = _as64(X), _as64(y)
    base_lin = lsa_predict(X, y, x_query, eta, 1)
    base_soft = softmax_step_predict(X, y, x_query, eta, eps)
    rows = []
    for delta in sizes:
        X2, y2 = X.copy(), y.copy()
        if where == "y":
            y2[..., 0] += delta
        elif where == "x":
            X2[..., 0, :] *= 1.0 + delta
        else:
            raise ValueError(f"where must be 'x' or 'y', got {where!r}")
        lin = lsa_predict(X2, y2, x_query, eta, 1)
        soft = softmax_step_predict(X2, y2, x_query, eta, eps)
        rows.append({"where": where, "delta": float(delta),
                     "shift_linear": float(np.sqrt(np.mean((lin - base_lin) ** 2))),
                     "shift_softmax": float(np.sqrt(np.mean((soft - base_soft) ** 2)))})
    return rows
