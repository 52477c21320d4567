"""The read-out grid: the one mechanism every hand-built construction uses.

A key token carries ``(L_j * u, -L_j**2 / 2)`` and a query token ``(x, 1)``; their
dot product is ``L_j (u^T x) - L_j**2 / 2 = -(u^T x - L_j)**2 / 2 + (u^T x)**2 / 2``.
The last term is the same for every key, so a softmax with inverse temperature
``beta`` over the grid ``L_1 < ... < L_P`` puts the weights

    p_j(s) = exp(-beta (s - L_j)**2 / 2) / sum_k exp(-beta (s - L_k)**2 / 2),   s = u^T x,

a discrete Gaussian centred at ``s``.  A value table ``T_j`` on the grid tokens is
read out as ``sum_j p_j(s) T_j``.  With ``T_j = L_j`` this returns ``s`` itself,
up to two errors that this module quantifies:

* aliasing (Poisson summation): on an infinite even grid the mean of the discrete
  Gaussian is off by at most ``(4 pi / (beta D)) q / (1 - 2 q)`` with
  ``q = exp(-2 pi**2 / (beta D**2))``, D the spacing; tiny for ``beta D**2 <~ 1``,
  rounding-like for ``beta D**2 >~ 4``;
* truncation at the ends of the grid: the Gaussian mass beyond ``L_1`` / ``L_P``,
  about ``exp(-beta delta**2 / 2)`` for a value at distance ``delta`` from an end.

:func:`readout_bound` turns both into a rigorous bound for the sampled identity
table.  Non-linear tables ``F(L_j)`` are smoothed by the Gaussian (bias about
``F''(s) / (2 beta)``); :func:`make_table` with ``mode="interpolate"`` removes that
by solving for table values whose read-out equals ``F`` exactly at every grid
node (a discrete deconvolution), which makes the read-out of smooth ``F``
spectrally accurate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

TABLE_MODES = ("auto", "sample", "interpolate")


@dataclass(frozen=True)
class Grid:
    """``P`` evenly spaced grid values on ``[lo, hi]``: ``L_j = c + D j'`` with ``j' = j - (P + 1) / 2``, ``j = 1..P``."""

    lo: float
    hi: float
    P: int

    def __post_init__(self):
        if not (isinstance(self.P, (int, np.integer)) and self.P >= 2):
            raise ValueError(f"grid: P must be an integer >= 2, got {self.P!r}")
        if not (math.isfinite(self.lo) and math.isfinite(self.hi) and self.hi > self.lo):
            raise ValueError(f"grid: need finite lo < hi, got lo={self.lo!r}, hi={self.hi!r}")

    @classmethod
    def symmetric(cls, half_width: float, P: int) -> "Grid":
        return cls(-float(half_width), float(half_width), int(P))

    @property
    def D(self) -> float:
        """Spacing."""
        return (self.hi - self.lo) / (self.P - 1)

    @property
    def center(self) -> float:
        return 0.5 * (self.lo + self.hi)

    @property
    def centered_index(self) -> np.ndarray:
        """``j' = j - (P + 1) / 2`` for ``j = 1..P`` (exact in float64)."""
        return np.arange(1, self.P + 1, dtype=np.float64) - 0.5 * (self.P + 1)

    @property
    def values(self) -> np.ndarray:
        return self.center + self.D * self.centered_index

    def beta_for(self, beta_d2: float) -> float:
        """Inverse temperature with ``beta * D**2 = beta_d2``."""
        return float(beta_d2) / self.D**2


def softmax_weights(s: np.ndarray, grid: Grid, beta: float) -> np.ndarray:
    """Read-out weights ``p_j(s)`` for every value in ``s`` (shape ``s.shape + (P,)``), float64."""
    L = grid.values
    s = np.asarray(s, dtype=np.float64)[..., None]
    scores = beta * (L * s - 0.5 * L**2)  # the dot product the attention head computes
    scores = scores - scores.max(axis=-1, keepdims=True)
    w = np.exp(scores)
    return w / w.sum(axis=-1, keepdims=True)


def soft_readout(s: np.ndarray, grid: Grid, beta: float, table: np.ndarray | None = None) -> np.ndarray:
    """``sum_j p_j(s) T_j`` (identity table ``T_j = L_j`` when ``table`` is None)."""
    T = grid.values if table is None else np.asarray(table, dtype=np.float64)
    return softmax_weights(s, grid, beta) @ T


def _node_matrix(grid: Grid, beta: float) -> np.ndarray:
    """``A[k, j] = p_j(L_k)``: the read-out evaluated at the grid nodes."""
    return softmax_weights(grid.values, grid, beta)


def make_table(F: Callable[[np.ndarray], np.ndarray] | None, grid: Grid, beta: float, mode: str = "auto") -> np.ndarray:
    """Table values on the grid tokens for the function ``F`` (None: the identity).

    * ``sample``: ``T_j = F(L_j)``.
    * ``interpolate``: solve ``A T = F(L)`` with ``A[k, j] = p_j(L_k)``, so the read-out
      reproduces ``F`` at every node (and between nodes as a smooth Gaussian-kernel
      interpolant). Conditioning worsens as ``beta D**2`` falls (about 7e1 at 1,
      1e4 at 0.5, 1e8 at 0.25); the solve is in float64.
    * ``auto``: ``sample`` for the identity (the discrete Gaussian's mean is already
      exact up to aliasing), ``interpolate`` for any other ``F``.
    """
    if mode not in TABLE_MODES:
        raise ValueError(f"table mode must be one of {TABLE_MODES}, got {mode!r}")
    L = grid.values
    identity = F is None
    target = L.copy() if identity else np.asarray(F(L), dtype=np.float64)
    if target.shape != L.shape:
        raise ValueError(f"table function must map the grid ({L.shape}) to the same shape, got {target.shape}")
    if not np.all(np.isfinite(target)):
        bad = L[~np.isfinite(target)]
        raise ValueError(f"table function is not finite on the grid (e.g. at L = {bad[:3].tolist()})")
    if mode == "sample" or (mode == "auto" and identity):
        return target
    return np.linalg.solve(_node_matrix(grid, beta), target)


def readout_bound(s: np.ndarray, grid: Grid, beta: float, dot_abs: np.ndarray | None = None,
                  dot_len: int = 1) -> np.ndarray:
    """Bound on ``|soft_readout(s) - s|`` for the sampled identity table, ``s`` in ``[lo, hi]``.

    Let ``Z_inf`` be the weight sum over the infinite extension of the grid and
    ``e_inf`` its mean error (Poisson bound above).  The finite read-out is
    ``(e_inf Z_inf - A_out) / (Z_inf - Z_out)`` where ``Z_out``/``A_out`` are the weight
    and first-moment sums of the missing nodes; both tails are bounded by integrals
    of the Gaussian (plus the maximum of ``y exp(-beta y**2/2)`` when the tail starts
    before its mode).  This part is exact arithmetic.

    With ``dot_abs`` (``sum_i |u_i x_i|`` for each ``s = u^T x``, same shape as ``s``) and
    ``dot_len`` (the length of that dot product) a float64 rounding allowance is added,
    from the standard error bounds ``|fl(a.b) - a.b| <= k eps sum |a_i b_i|``: every score
    ``beta (L_j s - L_j^2/2)`` is off by at most ``delta = (dot_len + 4) eps beta (Lmax dot_abs + Lmax^2/2)``,
    which moves the read-out by at most ``(exp(2 delta) - 1) Lmax``, and the weighted sum of
    ``P`` table values adds ``(P + 4) eps Lmax`` (``Lmax = max(|lo|, |hi|)``).
    """
    s = np.asarray(s, dtype=np.float64)
    if np.any(s < grid.lo) or np.any(s > grid.hi):
        raise ValueError(f"readout_bound: values outside the grid [{grid.lo}, {grid.hi}]")
    D = grid.D
    q = math.exp(-2.0 * math.pi**2 / (beta * D * D))
    m = np.arange(1, 50)
    qm = q ** (m.astype(np.float64) ** 2)
    theta_lo = 1.0 - 2.0 * qm.sum()
    if theta_lo <= 0:
        return np.full(s.shape, grid.hi - grid.lo)
    e_inf = (4.0 * math.pi / (beta * D)) * float((m * qm).sum()) / theta_lo
    z_lo = math.sqrt(2.0 * math.pi / beta) / D * theta_lo  # lower bound of Z_inf

    def tails(delta):
        # missing nodes at distances delta + k D, k >= 1; sums bounded by (1/D) * integral from delta
        z = math.sqrt(math.pi / (2.0 * beta)) / D * _erfc(delta * math.sqrt(beta / 2.0))
        a = np.exp(-beta * delta**2 / 2.0) / (beta * D)
        a = a + np.where(delta < 1.0 / math.sqrt(beta), math.exp(-0.5) / math.sqrt(beta), 0.0)
        return z, a

    z1, a1 = tails(s - grid.lo)
    z2, a2 = tails(grid.hi - s)
    z_out, a_out = z1 + z2, a1 + a2
    ok = z_out < z_lo
    bound = np.where(ok, (e_inf * z_lo + a_out) / np.where(ok, z_lo - z_out, 1.0), grid.hi - grid.lo)
    if dot_abs is not None:
        eps = np.finfo(np.float64).eps
        lmax = max(abs(grid.lo), abs(grid.hi))
        delta = (dot_len + 4) * eps * beta * (lmax * np.asarray(dot_abs, dtype=np.float64) + 0.5 * lmax**2)
        bound = bound + np.expm1(2.0 * delta) * lmax + (grid.P + 4) * eps * lmax
    return np.minimum(bound, grid.hi - grid.lo)


def _erfc(x):
    from scipy.special import erfc

    return erfc(x)
