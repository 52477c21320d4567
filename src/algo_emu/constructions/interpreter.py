"""The frozen two-layer softmax-attention interpreter (Theorem 4.1/4.2, built by hand).

One :class:`Interpreter` object is a fixed network ``Attn_s o Attn_m``: a multi-head
softmax attention layer followed by a single-head softmax attention layer, no
feed-forward block, no residual connection, no normalisation.  Every weight
matrix is written down below from the mathematics; nothing is trained and nothing
depends on the algorithm being run.  The algorithm arrives in the prompt.

Prompt (columns are tokens, rows are features; see :class:`Layout`):

* data tokens ``t``: the data features ``x~_t`` (width ``d_in``) and the flag ``one = 1``;
* ``P`` grid tokens ``j = 1..P`` (Definition 4.2's weights-as-data block): for every
  slot ``r`` the pair ``(j' * u_r, u_r)`` -- ``u_r`` is one row of the program, e.g.
  one row of ``W_K``, ``W_Q`` or ``W_V``, and ``j' = j - (P + 1) / 2`` is the index
  counted from the grid's centre -- the slot's table value ``T_r[j]``, the position
  scalars ``(j', j'**2)`` and the flags ``grid = 1``, ``one = 1``.  (Definition 4.2
  writes ``(j w, w)``; centring the index changes nothing in the mechanism and keeps
  ``L_j**2 / 2`` free of cancellation in float64.)

Layer 1 (``S + 2`` heads, ``S = 2 h + d_v`` slots):

* read-out head ``r``: query ``beta * (x~_t, 1, 1)``; key of grid token ``j``
  ``(D * (j' u_r) + c * u_r, -(c + D j')**2 / 2, 0) = (L_j u_r, -L_j**2 / 2, 0)``
  (``c`` the grid's centre); key of a data token ``(0, 0, -M1)`` (masked, weight
  exactly 0); value ``T_r[j]``.  Output on data token ``t``:
  ``sum_j p_j(u_r^T x~_t) T_r[j] ~= F_r(u_r^T x~_t)`` (see :mod:`.grid`).
* mask head: data tokens attend to data tokens, grid tokens to grid tokens (score
  gap ``Gamma = 1000``, so the cross weights underflow to exactly 0); value
  ``-M2 * grid``.  Output: 0 on data tokens, ``-M2`` on grid tokens.
* one head: uniform attention, value ``one``; output 1 on every token.

Layer-1 output per token: ``z = (K_1..K_h, Q_1..Q_h, V_1..V_dv, mask, one)``.

Layer 2 (one head): key ``(K, mask)``, query ``(Q, one)``, value ``V``, output
``V``.  For a data query ``i`` the score of key ``j`` is ``K_j^T Q_i + mask_j``: the
target's bilinear score on data keys and ``-M2`` (weight exactly 0) on grid keys,
so the output is ``sum_j V_j softmax_j(K_j^T Q_i)`` -- the target head, with the
softmax over keys (the paper's column-wise definition).

The module's constants (grid ``lo, hi, P``, read-out ``beta``, masks) are fixed at
construction.  :meth:`Interpreter.check_prompt` rejects malformed prompts with a
``ValueError`` that names the problem (wrong width, broken grid block, a value to
be read out that lies outside the grid, or so close to an end that the missing
Gaussian mass makes its read-out error exceed ``end_tol``, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from algo_emu.constructions.grid import Grid, end_margin

DTYPE = torch.float64
DEFAULT_END_TOL = 1e-12  # the schema's default of constructions.end_tol
END_TOL_KEY = "constructions.end_tol"


@dataclass(frozen=True)
class Capacity:
    """Shape of the programs an interpreter can run: data width, score slots, value slots."""

    d_in: int
    h: int
    dv: int

    def __post_init__(self):
        for name in ("d_in", "h", "dv"):
            v = getattr(self, name)
            if not (isinstance(v, (int, np.integer)) and v >= 1):
                raise ValueError(f"capacity: {name} must be a positive integer, got {v!r}")

    @property
    def S(self) -> int:
        """Number of read-out slots: K (h), Q (h), V (dv)."""
        return 2 * self.h + self.dv


class Layout:
    """Row indices of the prompt's features (the embedding of one token)."""

    def __init__(self, cap: Capacity):
        self.cap = cap
        d, S = cap.d_in, cap.S
        self.X = slice(0, d)
        off = d
        self.JU = [slice(off + r * d, off + (r + 1) * d) for r in range(S)]
        off += S * d
        self.U = [slice(off + r * d, off + (r + 1) * d) for r in range(S)]
        off += S * d
        self.T = off  # table rows T .. T + S - 1
        off += S
        self.POS, self.POS2, self.GRID, self.ONE = off, off + 1, off + 2, off + 3
        self.width = off + 4

    def slot_K(self, r: int) -> int:
        return r

    def slot_Q(self, r: int) -> int:
        return self.cap.h + r

    def slot_V(self, k: int) -> int:
        return 2 * self.cap.h + k


class Interpreter:
    """A fixed ``Attn_s o Attn_m`` (multi-head then single-head softmax attention) that runs prompted programs.

    Parameters
    ----------
    capacity: data width ``d_in``, score slots ``h`` and value slots ``dv`` of the programs it accepts.
    grid: the read-out grid (its ``lo, hi, P``); prompts must carry exactly ``P`` grid tokens.
    beta: inverse temperature of the read-out heads (use ``grid.beta_for(0.5)`` for ``beta D**2 = 0.5``).
    end_tol: tolerance on the read-out error that the ends of the grid cause (:func:`.grid.end_error_bound`).
        Prompts with a value ``u^T x~`` within :attr:`end_margin` of an end are refused; a grid on which no
        value meets it is refused at construction.  ``None`` accepts every value inside ``[lo, hi]`` (the
        error studies, which measure that error, use it and flag such values with :meth:`near_end`).
        Not part of the module: its weights do not depend on it.
    """

    M1 = 1.0e6  # data tokens' key offset in the read-out heads
    M2 = 1.0e6  # grid tokens' key offset in layer 2 (via the mask head)
    GAMMA = 1.0e3  # type-routing gap of the mask head (exp(-1000) == 0 in float64)

    def __init__(self, capacity: Capacity, grid: Grid, beta: float, end_tol: float | None = DEFAULT_END_TOL):
        if not (np.isfinite(beta) and beta > 0):
            raise ValueError(f"interpreter: beta must be positive and finite, got {beta!r}")
        self.cap = capacity
        self.grid = grid
        self.beta = float(beta)
        self.end_tol = None if end_tol is None else float(end_tol)
        self.end_margin = None if end_tol is None else self.margin_for(self.end_tol)
        if self.end_margin is not None and self.end_margin >= 0.5 * (grid.hi - grid.lo):
            raise ValueError(
                f"interpreter: no value on the grid [{grid.lo:g}, {grid.hi:g}] (P = {grid.P}, beta D^2 = "
                f"{self.beta * grid.D**2:.4g}) has a read-out end error below {END_TOL_KEY} = {self.end_tol:g}: the "
                f"margin covers the whole grid; widen the grid, add grid tokens, choose beta D^2 near 0.5 (no bound "
                f"is stated above 25.1) or relax {END_TOL_KEY}"
            )
        self.layout = Layout(capacity)
        self._build()

    def margin_for(self, tol: float) -> float:
        """Distance from each end of the grid inside which the end error bound exceeds ``tol`` (:func:`.grid.end_margin`)."""
        return end_margin(self.grid, self.beta, tol)

    def near_end(self, E: torch.Tensor, tol: float | None = None) -> torch.Tensor:
        """Which values ``u_r^T x~_t`` lie within the end margin for ``tol`` (default ``end_tol``): ``(B, S, N)``
        booleans, False on grid tokens.  Such values are read out with an error the stated tolerance does not cover."""
        tol = self.end_tol if tol is None else tol
        if tol is None:
            raise ValueError(f"near_end: this interpreter has no end_tol; pass tol ({END_TOL_KEY})")
        m = self.margin_for(tol) if tol != self.end_tol else self.end_margin
        s = self.readout_values(E)
        data = (E if E.dim() == 3 else E[None])[:, self.layout.GRID, :] == 0
        return ((s < self.grid.lo + m) | (s > self.grid.hi - m)) & data[:, None, :]

    # ------------------------------------------------------------------ weights
    def _build(self) -> None:
        cap, lay, g = self.cap, self.layout, self.grid
        E, d, S = lay.width, cap.d_in, cap.S
        H1 = S + 2
        dk = d + 2
        Zdim = S + 2
        Wq = torch.zeros(H1, dk, E, dtype=DTYPE)
        Wk = torch.zeros(H1, dk, E, dtype=DTYPE)
        Wv = torch.zeros(H1, 1, E, dtype=DTYPE)
        Wo = torch.zeros(H1, Zdim, 1, dtype=DTYPE)
        c, D, beta = g.center, g.D, self.beta
        eye = torch.eye(d, dtype=DTYPE)
        for r in range(S):
            # query  beta * (x~, 1, 1)
            Wq[r, :d, lay.X] = beta * eye
            Wq[r, d, lay.ONE] = beta
            Wq[r, d + 1, lay.ONE] = beta
            # key  (L_j u_r, -L_j^2/2, 0) on grid tokens, (0, 0, -M1) on data tokens; L_j = c + D j'
            Wk[r, :d, lay.JU[r]] = D * eye
            Wk[r, :d, lay.U[r]] = c * eye
            Wk[r, d, lay.GRID] = -0.5 * c * c
            Wk[r, d, lay.POS] = -c * D
            Wk[r, d, lay.POS2] = -0.5 * D * D
            Wk[r, d + 1, lay.ONE] = -self.M1  # -M1 * (one - grid): exactly 0 on grid tokens
            Wk[r, d + 1, lay.GRID] = self.M1
            Wv[r, 0, lay.T + r] = 1.0
            Wo[r, r, 0] = 1.0
        hm, ho = S, S + 1
        # mask head: same-type routing (score Gamma for equal types, 0 otherwise), value -M2 * grid
        Wq[hm, 0, lay.GRID] = self.GAMMA
        Wq[hm, 1, lay.ONE] = self.GAMMA
        Wq[hm, 1, lay.GRID] = -self.GAMMA
        Wk[hm, 0, lay.GRID] = 1.0
        Wk[hm, 1, lay.ONE] = 1.0
        Wk[hm, 1, lay.GRID] = -1.0
        Wv[hm, 0, lay.GRID] = -self.M2
        Wo[hm, S, 0] = 1.0
        # one head: zero scores (uniform weights), value = one
        Wv[ho, 0, lay.ONE] = 1.0
        Wo[ho, S + 1, 0] = 1.0
        h, dv = cap.h, cap.dv
        Wq2 = torch.zeros(1, h + 1, Zdim, dtype=DTYPE)
        Wk2 = torch.zeros(1, h + 1, Zdim, dtype=DTYPE)
        Wv2 = torch.zeros(1, dv, Zdim, dtype=DTYPE)
        Wo2 = torch.eye(dv, dtype=DTYPE)[None]
        for r in range(h):
            Wk2[0, r, lay.slot_K(r)] = 1.0
            Wq2[0, r, lay.slot_Q(r)] = 1.0
        Wk2[0, h, S] = 1.0  # mask
        Wq2[0, h, S + 1] = 1.0  # one
        for k in range(dv):
            Wv2[0, k, lay.slot_V(k)] = 1.0
        self.layer1 = {"W_Q": Wq, "W_K": Wk, "W_V": Wv, "W_O": Wo}
        self.layer2 = {"W_Q": Wq2, "W_K": Wk2, "W_V": Wv2, "W_O": Wo2}

    def state_dict(self) -> dict[str, torch.Tensor]:
        """All weight tensors (a frozen module: these never change)."""
        out = {f"layer1.{k}": v for k, v in self.layer1.items()}
        out.update({f"layer2.{k}": v for k, v in self.layer2.items()})
        return out

    @property
    def n_heads(self) -> tuple[int, int]:
        return self.layer1["W_Q"].shape[0], self.layer2["W_Q"].shape[0]

    @cached_property
    def _compact1(self):
        """Layer 1 regrouped for speed: heads with equal column support are stacked, each with the
        columns its Q/K/V matrices touch (identical arithmetic on the non-zero part of the weights).
        Each group records whether it holds read-out heads (indices < S)."""
        W = self.layer1
        groups: dict[int, list] = {}
        for hd in range(W["W_Q"].shape[0]):
            nz = (W["W_Q"][hd] != 0).any(0) | (W["W_K"][hd] != 0).any(0) | (W["W_V"][hd] != 0).any(0)
            idx = torch.nonzero(nz).flatten()
            groups.setdefault((len(idx), hd < self.cap.S), []).append((hd, idx))
        out = []
        for (_, readout), members in groups.items():
            heads = torch.tensor([hd for hd, _ in members])
            idx = torch.stack([i for _, i in members])  # (G, s)
            gather = lambda M: torch.stack([M[hd][:, i] for hd, i in members])  # noqa: E731
            out.append((readout, idx, gather(W["W_Q"]), gather(W["W_K"]), gather(W["W_V"]), W["W_O"][heads]))
        return out

    # ------------------------------------------------------------------ forward
    @staticmethod
    def attention(E: torch.Tensor, W: dict[str, torch.Tensor], queries: torch.Tensor | None = None) -> torch.Tensor:
        """Multi-head softmax attention on token columns: ``sum_h W_O^h W_V^h E softmax_keys((W_K^h E)^T W_Q^h E)``.

        With ``queries`` (column indices) only those output columns are computed; the others are NaN.
        """
        Eq = E if queries is None else E[:, :, queries]
        q = torch.einsum("hke,ben->bhkn", W["W_Q"], Eq)
        k = torch.einsum("hke,ben->bhkn", W["W_K"], E)
        v = torch.einsum("hve,ben->bhvn", W["W_V"], E)
        scores = torch.einsum("bhkj,bhki->bhji", k, q)  # [key j, query i]
        A = torch.softmax(scores, dim=2)
        out = torch.einsum("hov,bhvi->boi", W["W_O"], torch.einsum("bhvj,bhji->bhvi", v, A))
        if queries is None:
            return out
        full = torch.full((E.shape[0], out.shape[1], E.shape[2]), float("nan"), dtype=E.dtype)
        full[:, :, queries] = out
        return full

    def _layer1_fast(self, E: torch.Tensor, data_cols: torch.Tensor, max_elems: float = 2e7) -> torch.Tensor:
        """Layer 1 with the read-out heads evaluated on data-token queries only.

        The read-out heads' outputs on grid tokens are never used: in layer 2 those tokens are keys
        whose score carries -M2 (from the mask head, computed on every token), so their weight is
        exactly 0 whatever their K and V; they are left at 0 here.  The data-token outputs of the
        module equal those of the dense forward up to float64 summation order (tested to 1e-14).
        """
        B, _, N = E.shape
        Z = torch.zeros(B, self.layer1["W_O"].shape[1], N, dtype=E.dtype)
        for readout, idx, wq, wk, wv, wo in self._compact1:
            cols = data_cols if readout else torch.arange(N)
            chunk = max(1, int(max_elems // (idx.shape[0] * N * len(cols))))  # bound the score tensor's memory
            for b0 in range(0, B, chunk):
                Es = E[b0 : b0 + chunk][:, idx, :]  # (b, G, s, N)
                q = torch.einsum("gks,bgsn->bgkn", wq, Es[..., cols])
                k = torch.einsum("gks,bgsn->bgkn", wk, Es)
                v = torch.einsum("gvs,bgsn->bgvn", wv, Es)
                A = torch.softmax(torch.einsum("bgkj,bgki->bgji", k, q), dim=2)
                Z[b0 : b0 + chunk, :, cols] += torch.einsum("gov,bgvi->boi", wo, torch.einsum("bgvj,bgji->bgvi", v, A))
        return Z

    def forward(self, E: torch.Tensor, *, check: bool = True, dense: bool = False, return_hidden: bool = False):
        """Run the two layers on prompts ``E`` of shape ``(B, width, N)`` (or ``(width, N)``).

        Returns the layer-2 output ``(B, dv, N)`` (and the layer-1 output when ``return_hidden``).
        ``dense=True`` multiplies by the full weight tensors and computes every token.  The default
        (fast) path uses each head's column support and computes only the data-token queries of the
        read-out heads and of layer 2 (grid-token columns of the output are NaN there); its outputs
        on data tokens equal the dense ones up to float64 summation order.
        """
        squeeze = E.dim() == 2
        if squeeze:
            E = E[None]
        if check:
            self.check_prompt(E)
        grid = E[:, self.layout.GRID, :]
        same = bool(torch.all(grid == grid[:1]))
        with torch.no_grad():
            if dense or not same:
                Z = self.attention(E, self.layer1)
                Y = self.attention(Z, self.layer2)
            else:
                data_cols = torch.nonzero(grid[0] == 0).flatten()
                Z = self._layer1_fast(E, data_cols)
                Y = self.attention(Z, self.layer2, data_cols)
        if squeeze:
            Y, Z = Y[0], Z[0]
        return (Y, Z) if return_hidden else Y

    __call__ = forward

    # ------------------------------------------------------------------ checks
    def check_prompt(self, E: torch.Tensor, *, atol: float = 1e-9) -> None:
        """Raise ``ValueError`` naming the problem unless ``E`` is a well-formed prompt for this interpreter.

        Checks the shape and dtype, the flags, the grid block (positions ``j'`` and ``j'**2``,
        the same ``u_r`` on every grid token, ``(j' u_r, u_r)`` as in Definition 4.2, zero data
        features), zero weight rows on data tokens, every value to be read out inside
        ``[lo, hi]`` (outside, the read-out would silently return a value near the end of the
        grid) and, with ``end_tol`` set, at least :attr:`end_margin` from both ends (closer, the
        missing Gaussian mass beyond the end makes the error exceed ``end_tol``), and table values
        small enough for the layer-2 mask.
        """
        lay, cap, g = self.layout, self.cap, self.grid
        if not isinstance(E, torch.Tensor):
            raise ValueError(f"prompt must be a torch.Tensor, got {type(E).__name__}")
        if E.dim() != 3:
            raise ValueError(f"prompt must have shape (batch, {lay.width}, tokens), got {tuple(E.shape)}")
        if E.shape[1] != lay.width:
            raise ValueError(
                f"prompt has embedding width {E.shape[1]}, this interpreter expects {lay.width} "
                f"(capacity d_in={cap.d_in}, h={cap.h}, dv={cap.dv})"
            )
        if E.dtype != DTYPE:
            raise ValueError(f"prompt must be float64, got {E.dtype}")
        if not torch.isfinite(E).all():
            raise ValueError("prompt contains NaN or infinite entries")
        B, _, N = E.shape
        one, grid = E[:, lay.ONE, :], E[:, lay.GRID, :]
        if not torch.all(one == 1):
            raise ValueError("prompt: the 'one' flag must be 1 on every token")
        if not torch.all((grid == 0) | (grid == 1)):
            raise ValueError("prompt: the 'grid' flag must be 0 or 1")
        n_grid = grid.sum(1)
        if not torch.all(n_grid == g.P):
            counts = sorted(set(n_grid.long().tolist()))
            raise ValueError(f"prompt has {counts} grid tokens, this interpreter's grid has P = {g.P}")
        if N <= g.P:
            raise ValueError("prompt has no data token")
        Et = E.transpose(1, 2)
        gm = grid == 1
        G = Et[gm].reshape(B, g.P, lay.width)  # grid tokens
        Dt = Et[~gm].reshape(B, N - g.P, lay.width)  # data tokens
        pos = G[..., lay.POS]
        if not torch.equal(torch.sort(pos, dim=1).values, torch.as_tensor(g.centered_index).expand(B, g.P)):
            raise ValueError(f"prompt: grid positions must be j' = j - (P+1)/2 for j = 1..{g.P}, each once")
        if not torch.allclose(G[..., lay.POS2], pos**2, rtol=0, atol=atol):
            raise ValueError("prompt: grid tokens must carry j'**2 next to j'")
        if torch.any(G[..., lay.X] != 0):
            raise ValueError("prompt: grid tokens must have zero data features")
        if torch.any(Dt[..., lay.X.stop : lay.GRID] != 0):
            raise ValueError("prompt: data tokens must have zeros in the weight/table/position rows")
        S, d = cap.S, cap.d_in
        U = G[..., lay.U[0].start : lay.U[-1].stop].reshape(B, g.P, S, d)
        u = U[:, :1]
        if not torch.allclose(U, u.expand_as(U), rtol=0, atol=atol):
            r = int(torch.nonzero((U - u).abs().amax(dim=(0, 1, 3)) > atol)[0])
            raise ValueError(f"prompt: grid tokens carry different weights u in slot {self.slot_name(r)}")
        JU = G[..., lay.JU[0].start : lay.JU[-1].stop].reshape(B, g.P, S, d)
        scale = atol * (1.0 + float(u.abs().max()) * g.P)
        err = (JU - pos[..., None, None] * u).abs().amax(dim=(0, 1, 3))
        if torch.any(err > scale):
            r = int(torch.nonzero(err > scale)[0])
            raise ValueError(f"prompt: slot {self.slot_name(r)} must carry (j' u, u) on grid token j (Definition 4.2)")
        s = torch.einsum("brd,btd->brt", u[:, 0], Dt[..., lay.X])  # (B, S, data tokens)
        bad = (s < g.lo) | (s > g.hi)
        if torch.any(bad):
            b, r, t = map(int, torch.nonzero(bad)[0])
            raise ValueError(
                f"prompt {b}: slot {self.slot_name(r)} reads out u^T x = {float(s[b, r, t]):.6g} on data token {t}, "
                f"outside the grid range [{g.lo:g}, {g.hi:g}]; widen the grid or rescale the program"
            )
        if self.end_margin is not None:
            m = self.end_margin
            near = (s < g.lo + m) | (s > g.hi - m)
            if torch.any(near):
                b, r, t = map(int, torch.nonzero(near)[0])
                v = float(s[b, r, t])
                raise ValueError(
                    f"prompt {b}: slot {self.slot_name(r)} reads out u^T x = {v:.6g} on data token {t}, within the "
                    f"end margin {m:.4g} of the grid [{g.lo:g}, {g.hi:g}] (accepted: [{g.lo + m:.6g}, {g.hi - m:.6g}]); "
                    f"there the read-out error can exceed {END_TOL_KEY} = {self.end_tol:g}. Widen the grid, rescale "
                    f"the program or relax {END_TOL_KEY}"
                )
        # layer-1 outputs are convex combinations of table values, so every layer-2 score
        # K_j^T Q_i lies within h * tmax**2 of 0; the grid keys' -M2 must win by > 800.
        tmax = float(G[..., lay.T : lay.T + S].abs().max())
        if 2 * cap.h * tmax**2 + 1000 > self.M2:
            raise ValueError(
                f"prompt: table values up to {tmax:.3g} are too large for the layer-2 mask "
                f"(need 2 h max|T|^2 + 1000 < M2 = {self.M2:g})"
            )

    def slot_name(self, r: int) -> str:
        h = self.cap.h
        if r < h:
            return f"K[{r}]"
        if r < 2 * h:
            return f"Q[{r - h}]"
        return f"V[{r - 2 * h}]"

    def readout_values(self, E: torch.Tensor) -> torch.Tensor:
        """The exact scalars ``u_r^T x~_t`` the read-out heads approximate, shape ``(B, S, N)`` (0 on grid tokens)."""
        lay = self.layout
        if E.dim() == 2:
            E = E[None]
        gm = E[:, lay.GRID, :] == 1
        first = torch.argmax(gm.to(torch.int64), dim=1)  # any grid token carries every u_r
        rows = torch.arange(E.shape[0])
        col = E[rows, :, first]  # (B, width)
        out = []
        for r in range(self.cap.S):
            out.append(torch.einsum("bd,bdn->bn", col[:, lay.U[r]], E[:, lay.X, :]) * (~gm))
        return torch.stack(out, dim=1)
