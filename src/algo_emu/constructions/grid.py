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


def _poisson_terms(grid: Grid, beta: float):
    """``(e_inf, z_lo)`` of the infinite-grid extension (aliasing bound on its mean error, lower bound of its
    weight sum), or None where the Poisson series gives no bound (``beta D**2`` above 25.13)."""
    D = grid.D
    q = math.exp(-2.0 * math.pi**2 / (beta * D * D))
    m = np.arange(1, 50)
    qm = q ** (m.astype(np.float64) ** 2)
    theta_lo = 1.0 - 2.0 * qm.sum()
    if theta_lo <= 0:
        return None
    e_inf = (4.0 * math.pi / (beta * D)) * float((m * qm).sum()) / theta_lo
    z_lo = math.sqrt(2.0 * math.pi / beta) / D * theta_lo  # lower bound of Z_inf
    return e_inf, z_lo


def _tail_sums(s: np.ndarray, grid: Grid, beta: float):
    """Bounds ``(z_out, a_out)`` on the weight and first-moment sums of the nodes missing beyond both ends."""
    D = grid.D

    def tails(delta):
        # missing nodes at distances delta + k D, k >= 1; sums bounded by (1/D) * integral from delta
        z = math.sqrt(math.pi / (2.0 * beta)) / D * _erfc(delta * math.sqrt(beta / 2.0))
        a = np.exp(-beta * delta**2 / 2.0) / (beta * D)
        a = a + np.where(delta < 1.0 / math.sqrt(beta), math.exp(-0.5) / math.sqrt(beta), 0.0)
        return z, a

    z1, a1 = tails(s - grid.lo)
    z2, a2 = tails(grid.hi - s)
    return z1 + z2, a1 + a2


def _check_inside(s: np.ndarray, grid: Grid, who: str) -> None:
    if np.any(s < grid.lo) or np.any(s > grid.hi):
        raise ValueError(f"{who}: values outside the grid [{grid.lo}, {grid.hi}]")


def readout_bound(s: np.ndarray, grid: Grid, beta: float, dot_abs: np.ndarray | None = None,
                  dot_len: int = 1) -> np.ndarray:
    """Bound on ``|soft_readout(s) - s|`` for the sampled identity table, ``s`` in ``[lo, hi]``.

    Let ``Z_inf`` be the weight sum over the infinite extension of the grid and
    ``e_inf`` its mean error (Poisson bound above).  The finite read-out is
    ``(e_inf Z_inf - A_out) / (Z_inf - Z_out)`` where ``Z_out``/``A_out`` are the weight
    and first-moment sums of the missing nodes; both tails are bounded by integrals
    of the Gaussian (plus the maximum of ``y exp(-beta y**2/2)`` when the tail starts
    before its mode).  This part is exact arithmetic; it equals ``e_inf`` plus
    :func:`end_error_bound`.

    With ``dot_abs`` (``sum_i |u_i x_i|`` for each ``s = u^T x``, same shape as ``s``) and
    ``dot_len`` (the length of that dot product) a float64 rounding allowance is added,
    from the standard error bounds ``|fl(a.b) - a.b| <= k eps sum |a_i b_i|``: every score
    ``beta (L_j s - L_j^2/2)`` is off by at most ``delta = (dot_len + 4) eps beta (Lmax dot_abs + Lmax^2/2)``,
    which moves the read-out by at most ``(exp(2 delta) - 1) Lmax``, and the weighted sum of
    ``P`` table values adds ``(P + 4) eps Lmax`` (``Lmax = max(|lo|, |hi|)``).
    """
    s = np.asarray(s, dtype=np.float64)
    _check_inside(s, grid, "readout_bound")
    terms = _poisson_terms(grid, beta)
    if terms is None:
        return np.full(s.shape, grid.hi - grid.lo)
    e_inf, z_lo = terms
    z_out, a_out = _tail_sums(s, grid, beta)
    ok = z_out < z_lo
    bound = np.where(ok, (e_inf * z_lo + a_out) / np.where(ok, z_lo - z_out, 1.0), grid.hi - grid.lo)
    if dot_abs is not None:
        eps = np.finfo(np.float64).eps
        lmax = max(abs(grid.lo), abs(grid.hi))
        delta = (dot_len + 4) * eps * beta * (lmax * np.asarray(dot_abs, dtype=np.float64) + 0.5 * lmax**2)
        bound = bound + np.expm1(2.0 * delta) * lmax + (grid.P + 4) * eps * lmax
    return np.minimum(bound, grid.hi - grid.lo)


def end_error_bound(s: np.ndarray, grid: Grid, beta: float) -> np.ndarray:
    """Bound on the part of the read-out error that the grid's ends cause (exact arithmetic).

    The finite read-out minus the infinite-grid one is ``(e_inf Z_out - A_out) / (Z_inf - Z_out)``
    (notation of :func:`readout_bound`), so its size is at most
    ``(e_inf z_out + a_out) / (z_lo - z_out)``: the missing Gaussian mass beyond ``L_1`` and ``L_P``.
    It does not contain the interior (aliasing) error ``e_inf``, which every value has.  Infinite
    where no bound is available (``beta D**2`` above 25.13, or a grid narrower than the Gaussian).
    """
    s = np.asarray(s, dtype=np.float64)
    _check_inside(s, grid, "end_error_bound")
    terms = _poisson_terms(grid, beta)
    if terms is None:
        return np.full(s.shape, np.inf)
    e_inf, z_lo = terms
    z_out, a_out = _tail_sums(s, grid, beta)
    ok = z_out < z_lo
    return np.where(ok, (e_inf * z_out + a_out) / np.where(ok, z_lo - z_out, 1.0), np.inf)


def end_margin(grid: Grid, beta: float, tol: float, samples: int = 4096) -> float:
    """Distance from the ends inside which the read-out is refused or flagged at tolerance ``tol``.

    The smallest ``m`` such that :func:`end_error_bound` is at most ``tol`` for every value at
    distance ``>= m`` from both ends of the grid (the worst value at a given distance from the
    nearer end is on the grid's symmetric axis, so ``s = hi - delta`` is scanned).  The bound
    falls like ``exp(-beta delta**2 / 2) / sqrt(2 pi beta)``, so roughly
    ``m ~= sqrt(2 ln(1 / (tol sqrt(2 pi beta))) / beta)``, i.e. ``m / D ~= sqrt(2 ln(...) / (beta D**2))``.
    Returns the half-width ``(hi - lo) / 2`` when no value of the grid meets ``tol``.
    """
    if not (math.isfinite(tol) and tol > 0):
        raise ValueError(f"end_margin: tol must be positive and finite, got {tol!r}")
    half = 0.5 * (grid.hi - grid.lo)
    delta = np.linspace(0.0, half, samples + 1)
    bad = end_error_bound(grid.hi - delta, grid, beta) > tol
    if not bad.any():
        return 0.0
    i = int(np.nonzero(bad)[0][-1])
    if i == samples:
        return half
    lo, hi = float(delta[i]), float(delta[i + 1])  # bound > tol at lo, <= tol at hi
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if end_error_bound(np.array(grid.hi - mid), grid, beta) > tol:
            lo = mid
        else:
            hi = mid
    return hi


def aliasing_error(beta_d2: float) -> float:
    """Poisson bound on the mean error of the discrete Gaussian on an infinite even grid, in units of D.

    ``(4 pi / (beta D**2)) sum_m m q**(m**2) / (1 - 2 sum_m q**(m**2))`` with ``q = exp(-2 pi**2 / (beta D**2))``
    (leading term ``(4 pi / (beta D**2)) q / (1 - 2 q)``): 1.8e-16 at ``beta D**2 = 0.5``, 3.4e-8 at 1,
    3.3e-4 at 2 (docs/constructions.md).  Infinite where the series gives no bound.
    """
    g = Grid(0.0, 1.0, 2)  # D = 1
    terms = _poisson_terms(g, float(beta_d2))
    return float("inf") if terms is None else terms[0]


def _erfc(x):
    from scipy.special import erfc

    return erfc(x)
