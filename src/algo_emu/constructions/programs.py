"""Programs for the frozen interpreter, their prompts, and the exact algorithms they emulate.

A *program* is a generalised attention head on a matrix of data features ``X~``
(``d_in x N_data``): rows ``u`` for ``h`` key slots, ``h`` query slots and ``d_v``
value slots, and for every slot a scalar function ``F`` (the identity unless
stated).  The interpreter computes, for every data query ``i``,

    sum_j V_j softmax_j(K_j^T Q_i),   K_j[r] = F_Kr(u_Kr^T x~_j),  Q_i[r] = F_Qr(u_Qr^T x~_i),  V_j[k] = F_Vk(u_Vk^T x~_j),

with every ``F`` read out from values on the grid tokens.  :func:`compile_prompt`
writes a program into a prompt (Definition 4.2's weights-as-data layout); the
compilers below build programs for

* an attention head ``W_V X softmax(beta (W_K X)^T W_Q X)`` (identity functions;
  Theorem 4.1),
* the Theorem 3.1 template ``f(w^T x_i - y_i) x_i`` for every sample, and one step of
  gradient descent ``(1 - eta lambda) w - eta (1/n) sum_i f(w^T x_i - y_i) x_i``
  (Corollaries 3.1.1-3.1.4), for any ``f`` given as a function.

The template needs a product ``f(r_i) * x_i`` of a read-out with data.  Attention
multiplies weights by values, so each sample becomes a *pair* of tokens: ``i+``
with value ``C x_i`` and key score ``log phi(r_i)``, ``i-`` with value ``-C x_i`` and
score ``log(1 - phi(r_i))``, where ``phi = (1 + f / C) / 2``.  The pair's softmax
weights are ``phi`` and ``1 - phi`` (they sum to one), so the pair contributes
``(2 phi - 1) C x_i = f(r_i) x_i``.  One key slot reads ``t = r_i + shift * s``
(``s = +1`` or ``-1`` for the two tokens) through one table that holds
``log phi`` on the upper half of the grid and ``log(1 - phi)`` on the lower half.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from algo_emu.constructions.grid import make_table
from algo_emu.constructions.interpreter import DTYPE, Interpreter

Fn = Callable[[np.ndarray], np.ndarray]


def _t(x) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x, dtype=DTYPE)


@dataclass
class Program:
    """A generalised head: data features and slot rows (batched over prompts), slot functions, outputs."""

    X: torch.Tensor  # (B, d_in, N_data)
    UK: torch.Tensor  # (B, h, d_in)
    UQ: torch.Tensor  # (B, h, d_in)
    UV: torch.Tensor  # (B, dv, d_in)
    tables: dict[tuple[str, int], Fn] = field(default_factory=dict)  # ("K"|"Q"|"V", index) -> F; identity if absent
    out_tokens: torch.Tensor | None = None  # data-token columns that hold the result
    name: str = "program"

    def __post_init__(self):
        self.X, self.UK, self.UQ, self.UV = map(_t, (self.X, self.UK, self.UQ, self.UV))
        if self.X.dim() != 3:
            raise ValueError(f"{self.name}: X must be (batch, d_in, tokens), got {tuple(self.X.shape)}")
        B, d_in, n = self.X.shape
        for nm, U in (("UK", self.UK), ("UQ", self.UQ), ("UV", self.UV)):
            if U.dim() != 3 or U.shape[0] != B or U.shape[2] != d_in:
                raise ValueError(f"{self.name}: {nm} must be (batch={B}, rows, d_in={d_in}), got {tuple(U.shape)}")
        if self.UK.shape[1] != self.UQ.shape[1]:
            raise ValueError(
                f"{self.name}: UK and UQ need the same number of rows, got {self.UK.shape[1]} and {self.UQ.shape[1]}"
            )
        if self.out_tokens is None:
            self.out_tokens = torch.arange(n)
        for key in self.tables:
            kind, idx = key
            lim = {"K": self.UK.shape[1], "Q": self.UQ.shape[1], "V": self.UV.shape[1]}.get(kind)
            if lim is None or not 0 <= idx < lim:
                raise ValueError(f"{self.name}: table key {key!r} names no slot of this program")

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.X.shape[1], self.UK.shape[1], self.UV.shape[1]


@dataclass
class Prompt:
    """A compiled prompt: the token matrix and where the result is read."""

    E: torch.Tensor  # (B, width, N_data + P)
    out_tokens: torch.Tensor
    dv: int
    name: str

    def decode(self, Y: torch.Tensor) -> torch.Tensor:
        """The program's output ``(B, dv, len(out_tokens))`` from the interpreter output ``Y``."""
        return Y[:, : self.dv, self.out_tokens]


def compile_prompt(interp: Interpreter, prog: Program, table_mode: str = "auto") -> Prompt:
    """Write ``prog`` into a prompt for ``interp`` (zero-padding to the interpreter's capacity)."""
    cap, lay, g = interp.cap, interp.layout, interp.grid
    d_in, h, dv = prog.shape
    if d_in > cap.d_in or h > cap.h or dv > cap.dv:
        raise ValueError(
            f"program {prog.name!r} needs d_in={d_in}, h={h}, dv={dv}; the interpreter's capacity is "
            f"d_in={cap.d_in}, h={cap.h}, dv={cap.dv}"
        )
    B, _, n = prog.X.shape
    P = g.P
    U = torch.zeros(B, cap.S, cap.d_in, dtype=DTYPE)
    U[:, :h, :d_in] = prog.UK
    U[:, cap.h : cap.h + h, :d_in] = prog.UQ
    U[:, 2 * cap.h : 2 * cap.h + dv, :d_in] = prog.UV
    T = torch.as_tensor(np.tile(make_table(None, g, interp.beta, table_mode), (cap.S, 1)), dtype=DTYPE)
    base = {"K": 0, "Q": cap.h, "V": 2 * cap.h}
    for (kind, idx), F in prog.tables.items():
        T[base[kind] + idx] = torch.as_tensor(make_table(F, g, interp.beta, table_mode), dtype=DTYPE)
    jp = torch.as_tensor(g.centered_index, dtype=DTYPE)
    E = torch.zeros(B, lay.width, n + P, dtype=DTYPE)
    E[:, lay.X.start : lay.X.start + d_in, :n] = prog.X
    JU = (U[..., None] * jp).reshape(B, cap.S * cap.d_in, P)
    E[:, lay.JU[0].start : lay.JU[-1].stop, n:] = JU
    E[:, lay.U[0].start : lay.U[-1].stop, n:] = U.reshape(B, cap.S * cap.d_in, 1).expand(B, cap.S * cap.d_in, P)
    E[:, lay.T : lay.T + cap.S, n:] = T[None].expand(B, cap.S, P)
    E[:, lay.POS, n:] = jp
    E[:, lay.POS2, n:] = jp**2
    E[:, lay.GRID, n:] = 1.0
    E[:, lay.ONE, :] = 1.0
    return Prompt(E=E, out_tokens=prog.out_tokens.clone(), dv=dv, name=prog.name)


def run(interp: Interpreter, prog: Program, table_mode: str = "auto", check: bool = True) -> torch.Tensor:
    """Compile, run the frozen interpreter, decode: ``(B, dv, n_out)``."""
    prompt = compile_prompt(interp, prog, table_mode)
    return prompt.decode(interp(prompt.E, check=check))


# ---------------------------------------------------------------------------------------- attention head
def attention_head(X, W_K, W_Q, W_V, beta: float = 1.0) -> torch.Tensor:
    """Exact target ``W_V X Softmax_beta((W_K X)^T W_Q X)``, softmax over keys (each column sums to 1)."""
    X, W_K, W_Q, W_V = map(_t, (X, W_K, W_Q, W_V))
    K, Q, V = W_K @ X, W_Q @ X, W_V @ X
    A = torch.softmax(beta * K.transpose(-1, -2) @ Q, dim=-2)
    return V @ A


def head_program(X, W_K, W_Q, W_V, beta: float = 1.0) -> Program:
    """The head as a program: rows of ``beta W_K``, ``W_Q``, ``W_V`` (the target's beta folded into the keys)."""
    X, W_K, W_Q, W_V = map(_t, (X, W_K, W_Q, W_V))
    if X.dim() == 2:
        X, W_K, W_Q, W_V = X[None], W_K[None], W_Q[None], W_V[None]
    d = X.shape[1]
    for nm, W in (("W_K", W_K), ("W_Q", W_Q), ("W_V", W_V)):
        if W.dim() != 3 or W.shape[0] != X.shape[0] or W.shape[2] != d:
            raise ValueError(f"head: {nm} must be (batch, rows, d={d}) to match X {tuple(X.shape)}, got {tuple(W.shape)}")
    if W_K.shape[1] != W_Q.shape[1]:
        raise ValueError(f"head: W_K and W_Q need the same number of rows, got {W_K.shape[1]} and {W_Q.shape[1]}")
    return Program(X=X, UK=beta * W_K, UQ=W_Q, UV=W_V, name="attention_head")


# ---------------------------------------------------------------------------------------- template
@dataclass(frozen=True)
class Loss:
    """A loss of the residual (or margin) ``r``; ``f = l'`` is what the template needs."""

    name: str
    f: Fn
    signed_labels: bool = False  # logistic: x -> y x, y -> 0 (labels +-1)

    def residual(self, w, X, y):
        if self.signed_labels:
            return torch.einsum("bd,bdn->bn", w, X) * y
        return torch.einsum("bd,bdn->bn", w, X) - y


def make_loss(name: str, huber_delta: float = 1.0) -> Loss:
    """``squared`` (f(r) = r; ridge adds lambda w in the step), ``huber`` (clip(r, -delta, delta)),
    ``logistic`` (labels +-1: x' = y x, f(m) = -1 / (1 + e^m), the derivative of log(1 + e^-m)),
    ``tanh`` (the Theorem 3.1 experiment's f)."""
    if name in ("squared", "ridge"):
        return Loss(name, lambda r: np.asarray(r, dtype=np.float64) * 1.0)
    if name == "huber":
        d = float(huber_delta)
        return Loss(name, lambda r: np.clip(np.asarray(r, dtype=np.float64), -d, d))
    if name == "logistic":
        return Loss(name, lambda m: -0.5 * (1.0 - np.tanh(0.5 * np.asarray(m, dtype=np.float64))), signed_labels=True)
    if name == "tanh":
        return Loss(name, np.tanh)
    raise ValueError(f"unknown loss {name!r} (squared, ridge, huber, logistic, tanh)")


def _prep(w, X, y, loss: Loss):
    w, X, y = _t(w), _t(X), _t(y)
    if X.dim() == 2:
        w, X, y = w[None], X[None], y[None]
    if X.dim() != 3 or w.shape != (X.shape[0], X.shape[1]) or y.shape != (X.shape[0], X.shape[2]):
        raise ValueError(
            f"template: need w (B, d), X (B, d, n), y (B, n); got {tuple(w.shape)}, {tuple(X.shape)}, {tuple(y.shape)}"
        )
    if loss.signed_labels:
        if not torch.all((y == 1) | (y == -1)):
            raise ValueError("logistic template: labels y must be +1 or -1")
        X = X * y[:, None, :]
        y = torch.zeros_like(y)
    return w, X, y


def template_exact(w, X, y, loss: Loss) -> torch.Tensor:
    """``f(w^T x_i - y_i) x_i`` for every sample: ``(B, d, n)``."""
    w, X, y = _prep(w, X, y, loss)
    r = torch.einsum("bd,bdn->bn", w, X) - y
    return _t(loss.f(r.numpy()))[:, None, :] * X


def gd_step_exact(w, X, y, loss: Loss, eta: float, ridge: float = 0.0) -> torch.Tensor:
    """``(1 - eta ridge) w - eta (1/n) sum_i f(w^T x_i - y_i) x_i``: ``(B, d)``."""
    w0 = _t(w) if _t(w).dim() == 2 else _t(w)[None]
    g = template_exact(w, X, y, loss).mean(dim=2)
    return (1.0 - eta * ridge) * w0 - eta * g


def smooth_step(x) -> np.ndarray:
    """C-infinity step: 0 for x <= 0, 1 for x >= 1 (``psi(x) / (psi(x) + psi(1 - x))``, ``psi(x) = exp(-1/x)``)."""
    x = np.asarray(x, dtype=np.float64)

    def psi(z):
        return np.where(z > 0, np.exp(-1.0 / np.maximum(z, 1e-300)), 0.0)

    a, b = psi(x), psi(1.0 - x)
    return a / (a + b)


_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(96)


def smooth_saturate(r, r_range: float, width: float) -> np.ndarray:
    """Identity on ``[-r_range, r_range]``, C-infinity, constant beyond ``r_range + width``.

    ``sat(r) = sign(r) (r_range + width * int_0^u (1 - smooth_step(z)) dz)``, ``u = (|r| - r_range) / width``
    (the integral by 96-point Gauss-Legendre quadrature, itself a smooth function of ``u``).
    """
    r = np.asarray(r, dtype=np.float64)
    u = np.clip((np.abs(r) - r_range) / width, 0.0, 1.0)
    z = 0.5 * u[..., None] * (_GL_NODES + 1.0)
    integral = 0.5 * u * ((1.0 - smooth_step(z)) * _GL_WEIGHTS).sum(-1)
    return np.where(np.abs(r) <= r_range, r, np.sign(r) * (r_range + width * integral))


@dataclass(frozen=True)
class TemplateLayout:
    """Where the template's quantities sit on the grid (derived from the interpreter's grid).

    The key slot reads ``t = c + r + shift * s`` (``c`` the grid centre, ``s = +-1``,
    ``shift`` a quarter of the grid width), so each half of the grid serves one token
    of a pair.  Residuals must satisfy ``|r| < r_range < shift``.  To keep the table
    smooth (the interpolated table is then spectrally accurate), ``f`` is evaluated
    at ``smooth_saturate(r)`` -- exactly ``r`` on the data range, constant from
    ``r_range + width`` on -- and the two halves are joined by a C-infinity blend of
    half-width ``width`` around the centre, where no data lands
    (``width = (shift - r_range) / 2``).  ``C = gate * max |f|`` over the saturated
    range, so ``phi = (1 + f / C) / 2`` stays in ``[1/2 - 1/(2 gate), 1/2 + 1/(2 gate)]``.
    """

    center: float
    shift: float
    r_range: float
    width: float
    C: float

    @classmethod
    def for_grid(cls, interp: Interpreter, f: Fn, gate: float = 2.0, r_range: float | None = None) -> "TemplateLayout":
        g = interp.grid
        shift = 0.25 * (g.hi - g.lo)
        r_range = 2.0 * shift / 3.0 if r_range is None else float(r_range)
        if not 0 < r_range < shift:
            raise ValueError(f"template: r_range must be in (0, {shift:g}) (a quarter of the grid width), got {r_range!r}")
        if not gate > 1:
            raise ValueError(f"template: gate must be > 1, got {gate!r}")
        width = 0.5 * (shift - r_range)
        r = np.linspace(-r_range - width, r_range + width, 8001)
        fmax = float(np.max(np.abs(f(smooth_saturate(r, r_range, width)))))
        if not math.isfinite(fmax):
            raise ValueError("template: f is not finite on the residual range")
        return cls(center=g.center, shift=shift, r_range=r_range, width=width, C=gate * fmax if fmax > 0 else 1.0)

    def phi(self, f: Fn, r):
        r = smooth_saturate(r, self.r_range, self.width)
        return 0.5 * (1.0 + np.asarray(f(r), dtype=np.float64) / self.C)

    def gate_table(self, f: Fn) -> Fn:
        """``t -> log phi(t - c - shift)`` above the centre, ``log(1 - phi(t - c + shift))`` below, blended smoothly."""

        def F(t):
            t = np.asarray(t, dtype=np.float64) - self.center
            up = np.log(self.phi(f, t - self.shift))
            lo = np.log(1.0 - self.phi(f, t + self.shift))
            s = smooth_step((t + self.width) / (2.0 * self.width))
            return s * up + (1.0 - s) * lo

        return F


def template_program(interp: Interpreter, w, X, y, loss: Loss, mode: str = "per_sample", eta: float = 0.1,
                     ridge: float = 0.0, gate: float = 2.0, route: float | None = None,
                     r_range: float | None = None) -> Program:
    """The Theorem 3.1 template as a program for ``interp``.

    ``mode="per_sample"``: output column ``i`` is ``f(w^T x_i - y_i) x_i`` (pairs routed by
    +-1 position codes, score gap ``4 route**2``; the ``I_n`` block of Definition 4.2).
    ``mode="gd_step"``: the single output column is ``(1 - eta ridge) w - eta mean_i f(.) x_i``;
    an extra token carries ``2 (1 - eta ridge) w`` with key score ``log n`` so that it
    gets weight 1/2 against the ``n`` pairs (whose weights sum to ``n``).
    """
    if mode not in ("per_sample", "gd_step"):
        raise ValueError(f"template mode must be per_sample or gd_step, got {mode!r}")
    w, X, y = _prep(w, X, y, loss)
    B, d, n = X.shape
    lay = TemplateLayout.for_grid(interp, loss.f, gate, r_range)
    r = torch.einsum("bd,bdn->bn", w, X) - y
    if torch.any(r.abs() >= lay.r_range):
        b, i = map(int, torch.nonzero(r.abs() >= lay.r_range)[0])
        raise ValueError(
            f"template: residual w^T x - y = {float(r[b, i]):.6g} (prompt {b}, sample {i}) is outside the table range "
            f"(-{lay.r_range:g}, {lay.r_range:g}) of this interpreter's grid [{interp.grid.lo:g}, {interp.grid.hi:g}]"
        )
    per = mode == "per_sample"
    nc = n if per else 0
    # features: x (d) | y | s | e | b | v (d) | codes (nc)
    ix, iy, is_, ie, ib = 0, d, d + 1, d + 2, d + 3
    iv = d + 4
    icode = 2 * d + 4
    d_in = 2 * d + 4 + nc
    n_tok = 2 * n + (0 if per else 1)
    Xt = torch.zeros(B, d_in, n_tok, dtype=DTYPE)
    C = lay.C
    vscale = C if per else -2.0 * eta * C
    vmax = float((vscale * X).abs().max())
    if vmax > interp.grid.hi - interp.grid.center:
        raise ValueError(
            f"template: the pair tokens' values C x reach {vmax:.4g} (C = gate * max|f| = {C:.4g}), beyond the grid's "
            f"half-width {interp.grid.hi - interp.grid.center:g}; need {'' if per else '2 eta '}C max|x| inside the grid "
            f"(lower r_range or gate, or widen the grid)"
        )
    for sgn, cols in ((1.0, slice(0, 2 * n, 2)), (-1.0, slice(1, 2 * n, 2))):
        Xt[:, ix : ix + d, cols] = X
        Xt[:, iy, cols] = y
        Xt[:, is_, cols] = sgn
        Xt[:, iv : iv + d, cols] = sgn * vscale * X
    Xt[:, ie, :] = 1.0
    if per:
        codes = 2.0 * torch.eye(n, dtype=DTYPE) - 1.0  # column i = code of sample i
        Xt[:, icode : icode + n, 0 : 2 * n : 2] = codes
        Xt[:, icode : icode + n, 1 : 2 * n : 2] = codes
    else:
        wt = 2 * n  # the w-token
        Xt[:, is_, wt] = 1.0  # reads t = c + shift, i.e. r = 0 on the upper half
        Xt[:, ib, wt] = math.log(n) - float(lay.gate_table(loss.f)(lay.center + lay.shift))
        Xt[:, iv : iv + d, wt] = 2.0 * (1.0 - eta * ridge) * w
    h = 1 + (n if per else 1)
    UK = torch.zeros(B, h, d_in, dtype=DTYPE)
    UQ = torch.zeros(B, h, d_in, dtype=DTYPE)
    UV = torch.zeros(B, d, d_in, dtype=DTYPE)
    UK[:, 0, ix : ix + d] = w
    UK[:, 0, iy] = -1.0
    UK[:, 0, is_] = lay.shift
    UK[:, 0, ie] = lay.center
    UQ[:, 0, ie] = 1.0
    if per:
        a = route if route is not None else min(5.0, 0.25 * (interp.grid.hi - interp.grid.lo))
        for k in range(n):
            UK[:, 1 + k, icode + k] = a
            UQ[:, 1 + k, icode + k] = a
        out = torch.arange(0, 2 * n, 2)
    else:
        UK[:, 1, ib] = 1.0
        UQ[:, 1, ie] = 1.0
        out = torch.tensor([2 * n])
    for k in range(d):
        UV[:, k, iv + k] = 1.0
    return Program(X=Xt, UK=UK, UQ=UQ, UV=UV, tables={("K", 0): lay.gate_table(loss.f)}, out_tokens=out,
                   name=f"template_{mode}_{loss.name}")


def gd_step_emulated(interp: Interpreter, w, X, y, loss: Loss, eta: float, ridge: float = 0.0,
                     table_mode: str = "auto", gate: float = 2.0, r_range: float | None = None) -> torch.Tensor:
    """One GD step through the frozen interpreter: ``(B, d)``."""
    prog = template_program(interp, w, X, y, loss, mode="gd_step", eta=eta, ridge=ridge, gate=gate, r_range=r_range)
    return run(interp, prog, table_mode)[:, :, 0]


def gd_multistep(interp: Interpreter, w0, X, y, loss: Loss, eta: float, steps: int, ridge: float = 0.0,
                 table_mode: str = "auto", gate: float = 2.0, r_range: float | None = None) -> dict[str, torch.Tensor]:
    """Stacked modules: step ``t`` runs the interpreter on a prompt carrying ``w^(t)`` (re-encoded
    between modules as Definition 4.2's ``(j' w, w)`` block).  Returns the emulated and the exact
    trajectories ``(steps + 1, B, d)`` and each step's local error ``||w^_(t+1) - GD(w^_t)||``."""
    w_hat = _t(w0) if _t(w0).dim() == 2 else _t(w0)[None]
    w_ex = w_hat.clone()
    traj_hat, traj_ex, local_inf, local_2 = [w_hat], [w_ex], [], []
    for _ in range(steps):
        nxt = gd_step_emulated(interp, w_hat, X, y, loss, eta, ridge, table_mode, gate, r_range)
        ref = gd_step_exact(w_hat, X, y, loss, eta, ridge)
        local_inf.append((nxt - ref).abs().amax(dim=1))
        local_2.append((nxt - ref).norm(dim=1))
        w_hat = nxt
        w_ex = gd_step_exact(w_ex, X, y, loss, eta, ridge)
        traj_hat.append(w_hat)
        traj_ex.append(w_ex)
    return {
        "w_hat": torch.stack(traj_hat),
        "w_exact": torch.stack(traj_ex),
        "local_inf": torch.stack(local_inf),
        "local_2": torch.stack(local_2),
    }
