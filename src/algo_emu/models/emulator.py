"""The paper's emulator block, as an ensemble with a leading member axis.

The block (as the published code at commit 6d39297 builds it):

1. token map: ``Linear(d_in -> h)`` on each of the n input tokens, times a
   learnable per-token, per-channel gain (n x h, initialised to 1);
2. extension: (p - n) learnable tokens of width h, token k initialised with
   every channel equal to ``linspace(-1, 1, p - n)[k]``;
3. multi-head softmax self-attention over the p tokens (q, k, v: ``Linear(h -> h)``
   with bias; H heads of width h/H; scores scaled by ``1/sqrt(h/H)``; softmax
   over keys; heads concatenated; output ``Linear(h -> d_out)``);
4. keep the first n tokens.

No feed-forward block, no layer norm, no residual. ``readout_hidden`` (optional) builds the read-out the published
code stacks after the block in its Appendix C experiments: the block's output projection is ``Linear(h -> r)`` and a
second ``Linear(r -> d_out)`` follows (the same function class as one affine map ``h -> d_out``; another
parameterisation, so another optimisation path).

:class:`EnsembleEmulator` holds E independent copies (members) of the block;
every parameter has a leading axis of size E and member ``e`` is initialised
from its own generator, so a member's numbers do not depend on which other
members share the ensemble. Members may have different ``d_out``; outputs are
padded to the largest one and the padding columns stay exactly zero.

The forward pass computes only what the kept n outputs need: queries, scores
and the output projection of the n data tokens, and keys/values of the
appended tokens once per step (they are the same for every prompt of the
batch). :func:`reference_forward` is the plain full-p block for one member;
a test proves both give the same outputs.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn


ATTENTION = ("auto", "matmul", "sdpa", "fused", "kernel")
#: ``auto`` attends with the kernel (CPU) or sdpa (CUDA) for heads narrower than this, with plain matmuls from it on:
#: at the paper's shapes on the CPU the kernel's training step is faster at head width 24 (E1 and E3 at H = 2), level
#: at 48 and slower at 69 (E4) (docs/speed.md).
KERNEL_HEAD_WIDTH = 32


def _uniform(gen: torch.Generator, shape, bound: float, dtype) -> torch.Tensor:
    return (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1).mul_(bound).to(dtype)


class EnsembleEmulator(nn.Module):
    """E members of the emulator block, trained as one program.

    Args:
        generators: one ``torch.Generator`` per member (its init stream).
        d_in: input width of a token.
        d_out: output width of each member (an int for all, or one per member).
        n_tokens: n, the data tokens of a prompt.
        hidden: h.
        heads: H (must divide h).
        p: the prompt's tokens, p >= n (p - n appended learnable tokens).
    """

    def __init__(
        self,
        generators: Sequence[torch.Generator],
        d_in: int,
        d_out: int | Sequence[int],
        n_tokens: int,
        hidden: int,
        heads: int,
        p: int,
        dtype: torch.dtype = torch.float32,
        attention: str = "auto",
        readout_hidden: int | None = None,
    ) -> None:
        super().__init__()
        E = len(generators)
        if E < 1:
            raise ValueError("EnsembleEmulator: need at least one member generator")
        if hidden % heads:
            raise ValueError(f"heads={heads} must divide hidden={hidden}")
        if p < n_tokens:
            raise ValueError(f"p={p} must be >= n_tokens (n={n_tokens})")
        if attention not in ATTENTION:
            raise ValueError(f"attention: unknown implementation {attention!r} ({', '.join(ATTENTION)})")
        self.attention = attention  # "auto" is resolved per device: see resolved_attention
        # whether "auto" may use the C kernel on the CPU: decided here, once (building it on first use),
        # so that a compiled forward does not trace the check
        self._kernel_ok = False
        if attention == "auto" and hidden // heads < KERNEL_HEAD_WIDTH:
            from algo_emu.models import kernel

            self._kernel_ok = p <= kernel.MAX_KEYS and kernel.usable()
        d_outs = [int(d_out)] * E if isinstance(d_out, int) else [int(v) for v in d_out]
        if len(d_outs) != E:
            raise ValueError(f"d_out has {len(d_outs)} entries for {E} members")
        self.E, self.d_in, self.n, self.h, self.H, self.p = E, d_in, n_tokens, hidden, heads, p
        self.m = p - n_tokens
        self.d_outs = d_outs
        self.d_out = max(d_outs)
        if readout_hidden is not None and readout_hidden < 1:
            raise ValueError(f"readout_hidden must be >= 1, got {readout_hidden}")
        self.readout_hidden = readout_hidden
        #: width of the block's own output projection: d_out, or r before the second read-out Linear(r -> d_out)
        self.o_width = readout_hidden or self.d_out
        h, m = hidden, self.m

        w_in, b_in, w_qkv, b_qkv, w_o, b_o, w_r, b_r = [], [], [], [], [], [], [], []
        for gen, do in zip(generators, d_outs):
            # nn.Linear's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias.
            bi = 1.0 / math.sqrt(d_in)
            w_in.append(_uniform(gen, (d_in, h), bi, dtype))
            b_in.append(_uniform(gen, (h,), bi, dtype))
            bh = 1.0 / math.sqrt(h)
            ws, bs = [], []
            for _ in range(3):  # q, k, v
                ws.append(_uniform(gen, (h, h), bh, dtype))
                bs.append(_uniform(gen, (h,), bh, dtype))
            w_qkv.append(torch.cat(ws, dim=1))
            b_qkv.append(torch.cat(bs))
            if readout_hidden is None:
                wo = torch.zeros(h, self.d_out, dtype=dtype)
                wo[:, :do] = _uniform(gen, (h, do), bh, dtype)
                bo = torch.zeros(self.d_out, dtype=dtype)
                bo[:do] = _uniform(gen, (do,), bh, dtype)
            else:
                r = readout_hidden
                wo, bo = _uniform(gen, (h, r), bh, dtype), _uniform(gen, (r,), bh, dtype)
                wr = torch.zeros(r, self.d_out, dtype=dtype)
                wr[:, :do] = _uniform(gen, (r, do), 1.0 / math.sqrt(r), dtype)
                br = torch.zeros(self.d_out, dtype=dtype)
                br[:do] = _uniform(gen, (do,), 1.0 / math.sqrt(r), dtype)
                w_r.append(wr)
                b_r.append(br)
            w_o.append(wo)
            b_o.append(bo)
        self.w_in = nn.Parameter(torch.stack(w_in))            # (E, d_in, h)
        self.b_in = nn.Parameter(torch.stack(b_in))            # (E, h)
        self.gain = nn.Parameter(torch.ones(E, n_tokens, h, dtype=dtype))
        ext = torch.linspace(-1.0, 1.0, m, dtype=torch.float64).to(dtype) if m else torch.zeros(0, dtype=dtype)
        self.ext = nn.Parameter(ext[None, :, None].expand(E, m, h).clone())  # (E, m, h)
        self.w_qkv = nn.Parameter(torch.stack(w_qkv))          # (E, h, 3h): [q | k | v]
        self.b_qkv = nn.Parameter(torch.stack(b_qkv))          # (E, 3h)
        self.w_o = nn.Parameter(torch.stack(w_o))              # (E, h, o_width), zero-padded
        self.b_o = nn.Parameter(torch.stack(b_o))              # (E, o_width)
        if readout_hidden is not None:
            self.w_r = nn.Parameter(torch.stack(w_r))          # (E, r, d_out), zero-padded
            self.b_r = nn.Parameter(torch.stack(b_r))          # (E, d_out)
        mask = torch.zeros(E, self.d_out, dtype=dtype)
        for e, do in enumerate(d_outs):
            mask[e, :do] = 1
        self.register_buffer("out_mask", mask, persistent=False)

    def resolved_attention(self, device: torch.device | str) -> str:
        """The implementation ``auto`` stands for on ``device``: plain matmuls for heads
        :data:`KERNEL_HEAD_WIDTH` or more wide; for narrower heads, on CUDA PyTorch's fused sdpa, on the CPU the C kernel
        (:mod:`algo_emu.models.kernel`; ``benchmarks/attention.json``), or, where it cannot be built or
        the prompt has more keys than it takes, the cache-blocked ``fused`` attention in PyTorch."""
        if self.attention != "auto":
            return self.attention
        if self.h // self.H >= KERNEL_HEAD_WIDTH:
            return "matmul"
        if torch.device(device).type == "cuda":
            return "sdpa"
        return "kernel" if self._kernel_ok else "fused"

    @classmethod
    def stacked(cls, models: Sequence["EnsembleEmulator"]) -> "EnsembleEmulator":
        """One ensemble holding the members of ``models`` in order, their parameters copied: the block's shape
        (n, h, H, p, attention, dtype) must agree; ``d_in`` and ``d_out`` may differ, and are zero-padded to the
        widest (a padded input column meets a zero row of ``w_in``, so its gradient is zero and the row stays
        zero; padded output columns are masked out of the loss). Each member keeps its own numbers:
        :meth:`unstack` copies them back."""
        first = models[0]
        shape = ("n", "h", "H", "p", "attention", "readout_hidden")
        for m in models[1:]:
            bad = [k for k in shape if getattr(m, k) != getattr(first, k)]
            if bad or m.w_in.dtype != first.w_in.dtype:
                raise ValueError(f"stacked: members of another shape ({', '.join(bad) or 'dtype'} differ)")
        d_in = max(m.d_in for m in models)
        out = cls([torch.Generator() for m in models for _ in range(m.E)], d_in, [d for m in models for d in m.d_outs],
                  first.n, first.h, first.H, first.p, dtype=first.w_in.dtype, attention=first.attention,
                  readout_hidden=first.readout_hidden)
        out = out.to(first.w_in.device)
        out._kernel_ok = first._kernel_ok
        out.d_ins = [getattr(m, "d_ins", [m.d_in] * m.E)[e] for m in models for e in range(m.E)]
        with torch.no_grad():
            for name, param in out.named_parameters():
                param.zero_()
                e0 = 0
                for m in models:
                    src = getattr(m, name).detach()
                    param[(slice(e0, e0 + m.E), *(slice(0, s) for s in src.shape[1:]))] = src
                    e0 += m.E
        return out

    def unstack(self, models: Sequence["EnsembleEmulator"]) -> None:
        """Copy this stacked ensemble's parameters back into ``models`` (the ones :meth:`stacked` was made of,
        or models of their shapes), each member cut to its own widths."""
        with torch.no_grad():
            e0 = 0
            for m in models:
                for name, param in m.named_parameters():
                    src = getattr(self, name)
                    param.copy_(src[(slice(e0, e0 + m.E), *(slice(0, s) for s in param.shape[1:]))])
                e0 += m.E
        if e0 != self.E:
            raise ValueError(f"unstack: {e0} members in the models, {self.E} in the stacked ensemble")

    def member_state(self, e: int) -> dict[str, torch.Tensor]:
        """Parameters of member ``e`` as plain tensors (unpadded output)."""
        do = self.d_outs[e]
        h = self.h
        return {
            "w_in": self.w_in[e].detach().clone(), "b_in": self.b_in[e].detach().clone(),
            "gain": self.gain[e].detach().clone(), "ext": self.ext[e].detach().clone(),
            "w_q": self.w_qkv[e, :, :h].detach().clone(), "b_q": self.b_qkv[e, :h].detach().clone(),
            "w_k": self.w_qkv[e, :, h:2 * h].detach().clone(), "b_k": self.b_qkv[e, h:2 * h].detach().clone(),
            "w_v": self.w_qkv[e, :, 2 * h:].detach().clone(), "b_v": self.b_qkv[e, 2 * h:].detach().clone(),
            **({"w_o": self.w_o[e, :, :do].detach().clone(), "b_o": self.b_o[e, :do].detach().clone()}
               if self.readout_hidden is None else
               {"w_o": self.w_o[e].detach().clone(), "b_o": self.b_o[e].detach().clone(),
                "w_r": self.w_r[e, :, :do].detach().clone(), "b_r": self.b_r[e, :do].detach().clone()}),
        }

    def forward(self, x: torch.Tensor, keep: slice | None = None) -> torch.Tensor:
        """``x``: (E, B, n, d_in) -> (E, B, n, d_out) (padding columns are zero): the block, then the second
        read-out Linear(r -> d_out) where the ensemble has one (``readout_hidden``)."""
        y = self._block(x, keep)
        if self.readout_hidden is None:
            return y
        E, B, nq, r = y.shape
        return torch.baddbmm(self.b_r[:, None, :], y.reshape(E, B * nq, r), self.w_r).view(E, B, nq, self.d_out)

    def _block(self, x: torch.Tensor, keep: slice | None = None) -> torch.Tensor:
        """``x``: (E, B, n, d_in) -> (E, B, n, o_width): the block (its output projection's width).

        ``keep``: a slice of the n data tokens whose outputs are wanted (e.g. the query tokens a loss
        reads); only their queries, scores and output projection are computed (every token still
        serves as a key and value). Returns (E, B, len(keep), d_out); equal to ``forward(x)[:, :, keep]``
        (a test proves it).
        """
        E, B, n, d_in = x.shape
        if E != self.E or n != self.n or d_in != self.d_in:
            raise ValueError(f"input shape {tuple(x.shape)} does not match (E={self.E}, B, n={self.n}, d_in={self.d_in})")
        h, H, m = self.h, self.H, self.m
        dh = h // H
        # 1. token map with per-token gain
        t = torch.baddbmm(self.b_in[:, None, :], x.reshape(E, B * n, d_in), self.w_in)
        t = (t.view(E, B, n, h) * self.gain[:, None]).view(E, B * n, h)
        impl = self.resolved_attention(x.device)
        if impl == "kernel" and m:
            return self._kernel(t, B, keep)
        if keep is None or keep == slice(None):
            # 3a. q, k, v of the n data tokens
            qkv = torch.baddbmm(self.b_qkv[:, None, :], t, self.w_qkv)         # (E, B*n, 3h)
            qkv = qkv.view(E, B, n, 3, H, dh).permute(3, 0, 4, 1, 2, 5)         # (3, E, H, B, n, dh)
            q, k_d, v_d = qkv.unbind(0)  # unbind: its backward is one stack, not three zero-filled copies
            nq = n
        else:
            # 3a. keys/values of every data token, queries only of the kept ones
            kv = torch.baddbmm(self.b_qkv[:, None, h:], t, self.w_qkv[:, :, h:])  # (E, B*n, 2h)
            k_d, v_d = kv.view(E, B, n, 2, H, dh).permute(3, 0, 4, 1, 2, 5).unbind(0)
            tq = t.view(E, B, n, h)[:, :, keep]
            nq = tq.shape[2]
            q = torch.baddbmm(self.b_qkv[:, None, :h], tq.reshape(E, B * nq, h), self.w_qkv[:, :, :h])
            q = q.view(E, B, nq, H, dh).permute(0, 3, 1, 2, 4)                  # (E, H, B, nq, dh)
        q = q * (1.0 / math.sqrt(dh))
        if impl in ("sdpa", "fused") and m:
            o = self._sdpa(q, k_d, v_d) if impl == "sdpa" else self._fused(q, k_d, v_d)
            o = o.permute(0, 2, 3, 1, 4).reshape(E, B * nq, h)
            return torch.baddbmm(self.b_o[:, None, :], o, self.w_o).view(E, B, nq, self.o_width)
        s_d = torch.matmul(q, k_d.transpose(-1, -2))                        # (E, H, B, nq, n)
        if m:
            # 3b. keys/values of the appended tokens: once per step, shared by the batch
            kv_e = torch.baddbmm(self.b_qkv[:, None, h:], self.ext, self.w_qkv[:, :, h:])  # (E, m, 2h)
            kv_e = kv_e.view(E, m, 2, H, dh).permute(2, 0, 3, 1, 4)        # (2, E, H, m, dh)
            k_e, v_e = kv_e.unbind(0)
            s_e = torch.matmul(q.reshape(E, H, B * nq, dh), k_e.transpose(-1, -2)).view(E, H, B, nq, m)
            a = torch.softmax(torch.cat([s_d, s_e], dim=-1), dim=-1)
            a_d, a_e = a[..., :n], a[..., n:]
            o = torch.matmul(a_d, v_d) + torch.matmul(a_e.reshape(E, H, B * nq, m), v_e).view(E, H, B, nq, dh)
        else:
            o = torch.matmul(torch.softmax(s_d, dim=-1), v_d)
        # concat heads, output projection of the kept tokens
        o = o.permute(0, 2, 3, 1, 4).reshape(E, B * nq, h)
        out = torch.baddbmm(self.b_o[:, None, :], o, self.w_o)
        return out.view(E, B, nq, self.o_width)

    def _fused(self, q: torch.Tensor, k_d: torch.Tensor, v_d: torch.Tensor) -> torch.Tensor:
        E, H, B, n, dh = q.shape
        h, m = self.h, self.m
        kv_e = torch.baddbmm(self.b_qkv[:, None, h:], self.ext, self.w_qkv[:, :, h:])   # (E, m, 2h)
        k_e, v_e = kv_e.view(E, m, 2, H, dh).permute(2, 0, 3, 1, 4).unbind(0)          # (E, H, m, dh) each
        return TwoSetAttention.apply(q.contiguous(), k_d.contiguous(), v_d.contiguous(), k_e.contiguous(),
                                     v_e.contiguous(), _fused_chunk(E, H, B, n, k_d.shape[3] + m))

    def _kernel(self, t: torch.Tensor, B: int, keep: slice | None) -> torch.Tensor:
        """Steps 3-4 through the C kernel (:mod:`algo_emu.models.kernel`), which reads the projections
        in their own layout (heads side by side): keys/values of every data token, queries of the kept
        ones, keys/values of the appended tokens once per step; no head-splitting copies."""
        from algo_emu.models import kernel

        E, n, h, H, m = self.E, self.n, self.h, self.H, self.m
        kv = torch.baddbmm(self.b_qkv[:, None, h:], t, self.w_qkv[:, :, h:]).view(E, B, n, 2 * h)
        tq = t if keep is None or keep == slice(None) else t.view(E, B, n, h)[:, :, keep].reshape(E, -1, h)
        nq = tq.shape[1] // B
        q = torch.baddbmm(self.b_qkv[:, None, :h], tq, self.w_qkv[:, :, :h]).view(E, B, nq, h)
        kv_e = torch.baddbmm(self.b_qkv[:, None, h:], self.ext, self.w_qkv[:, :, h:])    # (E, m, 2h)
        o = kernel.two_set_attention(q, kv, kv_e, H, 1.0 / math.sqrt(h // H))
        return torch.baddbmm(self.b_o[:, None, :], o.view(E, B * nq, h), self.w_o).view(E, B, nq, self.o_width)

    def _sdpa(self, q: torch.Tensor, k_d: torch.Tensor, v_d: torch.Tensor) -> torch.Tensor:
        """Fused attention of the n queries over [n data keys | m appended keys].

        The appended keys/values are computed once and broadcast over the batch
        (a view, not a recomputation); ``q`` is already scaled by 1/sqrt(dh).
        """
        E, H, B, nq, dh = q.shape
        n = k_d.shape[3]
        h, m = self.h, self.m
        kv_e = torch.baddbmm(self.b_qkv[:, None, h:], self.ext, self.w_qkv[:, :, h:])   # (E, m, 2h)
        k_e, v_e = kv_e.view(E, m, 2, H, dh).permute(2, 0, 3, 1, 4)[:, :, :, None].unbind(0)  # (E, H, 1, m, dh)
        k = torch.cat([k_d, k_e.expand(E, H, B, m, dh)], dim=3)
        v = torch.cat([v_d, v_e.expand(E, H, B, m, dh)], dim=3)
        return torch.nn.functional.scaled_dot_product_attention(
            q.reshape(E * H * B, 1, nq, dh), k.reshape(E * H * B, 1, n + m, dh), v.reshape(E * H * B, 1, n + m, dh),
            scale=1.0,
        ).view(E, H, B, nq, dh)


class TwoSetAttention(torch.autograd.Function):
    """softmax attention of n queries over [n per-prompt keys | m keys shared by the batch].

    Memory-lean: the forward keeps only the log-sum-exp per query, the backward
    recomputes the attention weights; both loop over chunks of members so the
    (chunk, H, B, n, n + m) score block stays in cache. Inputs: q (E, H, B, n, dh)
    (already scaled; its n may be fewer than the keys' when only some outputs are kept),
    k_d, v_d (E, H, B, n_keys, dh), k_e, v_e (E, H, m, dh).
    Gradient-checked in float64 by the tests.
    """
    @staticmethod
    def forward(ctx, q, k_d, v_d, k_e, v_e, chunk):
        E,H,B,n,dh = q.shape; m = k_e.shape[2]
        o = torch.empty_like(q)
        lse = torch.empty(E,H,B,n,1,dtype=q.dtype)
        for c0 in range(0,E,chunk):
            sl=slice(c0,c0+chunk); ce=min(chunk,E-c0)
            qc=q[sl]
            s_d = torch.matmul(qc, k_d[sl].transpose(-1,-2))
            s_e = torch.matmul(qc.reshape(ce,H,B*n,dh), k_e[sl].transpose(-1,-2)).view(ce,H,B,n,m)
            mx = torch.maximum(s_d.amax(-1,keepdim=True), s_e.amax(-1,keepdim=True))
            s_d.sub_(mx).exp_(); s_e.sub_(mx).exp_()
            z = s_d.sum(-1,keepdim=True).add_(s_e.sum(-1,keepdim=True))
            lse[sl] = z.log().add_(mx)
            oc = torch.matmul(s_d, v_d[sl])
            oc.add_(torch.matmul(s_e.view(ce,H,B*n,m), v_e[sl]).view(ce,H,B,n,dh))
            o[sl] = oc.div_(z)
        ctx.save_for_backward(q,k_d,v_d,k_e,v_e,o,lse)
        ctx.chunk=chunk
        return o
    @staticmethod
    def backward(ctx, do):
        q,k_d,v_d,k_e,v_e,o,lse = ctx.saved_tensors
        chunk=ctx.chunk
        E,H,B,n,dh = q.shape; m = k_e.shape[2]
        dq=torch.empty_like(q); dk_d=torch.empty_like(k_d); dv_d=torch.empty_like(v_d)
        dk_e=torch.empty_like(k_e); dv_e=torch.empty_like(v_e)
        D = (do*o).sum(-1,keepdim=True)
        for c0 in range(0,E,chunk):
            sl=slice(c0,c0+chunk); ce=min(chunk,E-c0)
            qc=q[sl]; doc=do[sl]
            a_d = torch.matmul(qc, k_d[sl].transpose(-1,-2)).sub_(lse[sl]).exp_()
            a_e = torch.matmul(qc.reshape(ce,H,B*n,dh), k_e[sl].transpose(-1,-2)).view(ce,H,B,n,m).sub_(lse[sl]).exp_()
            dv_d[sl] = torch.matmul(a_d.transpose(-1,-2), doc)
            dv_e[sl] = torch.matmul(a_e.view(ce,H,B*n,m).transpose(-1,-2), doc.reshape(ce,H,B*n,dh))
            ds_d = torch.matmul(doc, v_d[sl].transpose(-1,-2)).sub_(D[sl]).mul_(a_d)
            ds_e = torch.matmul(doc.reshape(ce,H,B*n,dh), v_e[sl].transpose(-1,-2)).view(ce,H,B,n,m).sub_(D[sl]).mul_(a_e)
            dqc = torch.matmul(ds_d, k_d[sl])
            dqc.add_(torch.matmul(ds_e.view(ce,H,B*n,m), k_e[sl]).view(ce,H,B,n,dh))
            dq[sl]=dqc
            dk_d[sl] = torch.matmul(ds_d.transpose(-1,-2), qc)
            dk_e[sl] = torch.matmul(ds_e.view(ce,H,B*n,m).transpose(-1,-2), qc.reshape(ce,H,B*n,dh))
        return dq,dk_d,dv_d,dk_e,dv_e,None

def _fused_chunk(E: int, H: int, B: int, n: int, p: int, budget_bytes: int = 8 << 20) -> int:
    """Members per chunk so that one chunk's score block stays near ``budget_bytes``."""
    per_member = H * B * n * p * 4
    return max(1, min(E, budget_bytes // max(per_member, 1)))


def reference_forward(state: dict[str, torch.Tensor], x: torch.Tensor, heads: int) -> torch.Tensor:
    """The plain block for ONE member, over all p tokens, then keep the first n.

    ``state`` as returned by :meth:`EnsembleEmulator.member_state`; ``x``: (B, n, d_in).
    Written independently of the optimised forward, to test it.
    """
    B, n, _ = x.shape
    t = (x @ state["w_in"] + state["b_in"]) * state["gain"]               # (B, n, h)
    z = torch.cat([t, state["ext"].expand(B, -1, -1)], dim=1)               # (B, p, h)
    p, h = z.shape[1], z.shape[2]
    dh = h // heads
    q = (z @ state["w_q"] + state["b_q"]).view(B, p, heads, dh).transpose(1, 2)
    k = (z @ state["w_k"] + state["b_k"]).view(B, p, heads, dh).transpose(1, 2)
    v = (z @ state["w_v"] + state["b_v"]).view(B, p, heads, dh).transpose(1, 2)
    a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dh), dim=-1)     # (B, H, p, p)
    o = (a @ v).transpose(1, 2).reshape(B, p, h)
    y = o @ state["w_o"] + state["b_o"]
    if "w_r" in state:  # the second read-out Linear(r -> d_out)
        y = y @ state["w_r"] + state["b_r"]
    return y[:, :n]
