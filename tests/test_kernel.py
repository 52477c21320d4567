"""The narrow-head attention kernel (C, ctypes) computes the attention of the plain block: float64 to
1e-12 and by gradcheck, float32 to float rounding, the same numbers at any thread count, and it refuses
input it cannot take, by name."""

import pytest
import torch

from algo_emu.models import kernel
from algo_emu.models.emulator import EnsembleEmulator

pytestmark = pytest.mark.skipif(not kernel.available()[0], reason="no C compiler here: " + kernel.available()[1])


def _plain(q, kv, kv_e, heads, scale):
    """softmax over [data keys | shared keys] per head, written out the slow way."""
    E, B, nq, h = q.shape
    dh, m = h // heads, kv_e.shape[1]
    kv_all = torch.cat([kv, kv_e[:, None].expand(E, B, m, 2 * h)], dim=2)          # (E, B, P, 2h)
    k = kv_all[..., :h].reshape(E, B, -1, heads, dh).transpose(2, 3)                 # (E, B, H, P, dh)
    v = kv_all[..., h:].reshape(E, B, -1, heads, dh).transpose(2, 3)
    qh = q.reshape(E, B, nq, heads, dh).transpose(2, 3)
    o = torch.softmax(scale * qh @ k.transpose(-1, -2), dim=-1) @ v                  # (E, B, H, nq, dh)
    return o.transpose(2, 3).reshape(E, B, nq, h)


def _inputs(E, H, B, nq, nk, m, dh, dtype, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    h = H * dh
    shapes = [(E, B, nq, h), (E, B, nk, 2 * h), (E, m, 2 * h)]
    return [(2 * torch.randn(s, generator=g, dtype=dtype)).requires_grad_(grad) for s in shapes]


# dh 4, 6, 8, 12 (compiled for each), 5 and 3 (the generic path), 20 (wider than the batched sums take); key counts
# across the 16-key blocks, from 1 block to 9 (the blocks are compiled for 1-8; 9 is the generic path)
@pytest.mark.parametrize("E,H,B,nq,nk,m,dh", [(2, 3, 4, 5, 5, 7, 4), (1, 2, 3, 20, 20, 40, 4), (2, 1, 2, 3, 9, 8, 6),
                                             (1, 2, 2, 4, 6, 11, 8), (2, 2, 2, 7, 7, 30, 12), (1, 1, 3, 2, 4, 1, 5),
                                             (1, 2, 1, 3, 3, 100, 3), (1, 1, 2, 3, 40, 100, 8), (1, 1, 2, 3, 5, 6, 20)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_kernel_equals_plain_attention_value_and_gradients(E, H, B, nq, nk, m, dh, dtype):
    ins = _inputs(E, H, B, nq, nk, m, dh, dtype, grad=True)
    scale = dh ** -0.5
    w = torch.randn(E, B, nq, H * dh, generator=torch.Generator().manual_seed(7), dtype=dtype)
    out = {}
    for name in ("kernel", "plain"):
        for t in ins:
            t.grad = None
        if name == "kernel":
            y = kernel.two_set_attention(*ins, H, scale)
        else:  # the reference in float64 whatever the kernel's dtype
            y = _plain(*[t.double() for t in ins], H, scale)
        (y * w.to(y.dtype)).sum().backward()
        out[name] = [y.detach().double()] + [t.grad.double() for t in ins]
    tol = dict(rtol=0, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-4, atol=3e-5)
    for a, b in zip(out["kernel"], out["plain"]):
        torch.testing.assert_close(a, b, **tol)


def test_kernel_gradcheck():
    ins = _inputs(2, 2, 3, 4, 5, 6, 4, torch.float64, seed=3, grad=True)
    assert torch.autograd.gradcheck(lambda *a: kernel.two_set_attention(*a, 2, 0.7), ins)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kernel_is_the_same_at_any_thread_count(dtype):
    ins = _inputs(3, 4, 5, 6, 6, 9, 4, dtype, seed=5)
    before = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            o, lse = kernel.two_set_attention_op(*ins, 4, 0.5)
            grads = kernel.two_set_attention_backward_op(torch.ones_like(o), *ins, o, lse, 4, 0.5)
            results.append([o, lse, *grads])
    finally:
        torch.set_num_threads(before)
    for other in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0], other))


def test_kernel_refuses_what_it_cannot_take():
    q, kv, kv_e = _inputs(1, 1, 2, 3, 3, 4, 4, torch.float32)
    with pytest.raises(ValueError, match="shapes q .* do not fit"):
        kernel.two_set_attention(q, kv[..., :4], kv_e, 1, 1.0)
    with pytest.raises(ValueError, match="must all be float32 or all float64"):
        kernel.two_set_attention(q.double(), kv, kv_e, 1, 1.0)
    with pytest.raises(ValueError, match="heads=3 must divide h=4"):
        kernel.two_set_attention(q, kv, kv_e, 3, 1.0)
    big = _inputs(1, 1, 1, 2, 2, kernel.MAX_KEYS, 4, torch.float32)
    with pytest.raises(ValueError, match=f"more than the {kernel.MAX_KEYS}"):
        kernel.two_set_attention(*big, 1, 1.0)


def test_auto_attention_takes_the_kernel_for_narrow_heads_on_cpu():
    g = [torch.Generator().manual_seed(0)]
    assert EnsembleEmulator(g, 3, 2, 4, 48, 12, 60).resolved_attention("cpu") == "kernel"
    assert EnsembleEmulator(g, 3, 2, 4, 48, 1, 60).resolved_attention("cpu") == "matmul"     # 48-wide head
    assert EnsembleEmulator(g, 3, 2, 4, 48, 12, 300).resolved_attention("cpu") == "fused"    # > MAX_KEYS keys
    assert EnsembleEmulator(g, 3, 2, 4, 48, 12, 60).resolved_attention("cuda") == "sdpa"


def test_kernel_turned_off_by_the_environment_is_not_built(monkeypatch, tmp_path):
    """ALGO_EMU_KERNEL=off: not available (saying why), nothing built, and auto falls back to PyTorch's attention."""
    monkeypatch.setenv("ALGO_EMU_KERNEL", "off")
    monkeypatch.setenv("ALGO_EMU_KERNEL_DIR", str(tmp_path))
    kernel.available.cache_clear()
    try:
        assert kernel.available() == (False, "turned off by ALGO_EMU_KERNEL=off")
        g = [torch.Generator().manual_seed(0)]
        assert EnsembleEmulator(g, 3, 2, 4, 48, 12, 60).resolved_attention("cpu") == "fused"
        assert EnsembleEmulator(g, 3, 2, 4, 48, 12, 60).resolved_attention("cuda") == "sdpa"
        assert list(tmp_path.iterdir()) == []
    finally:
        kernel.available.cache_clear()


def test_compiled_training_step_through_the_kernel_equals_eager():
    """torch.compile sees the kernel as one custom operator: the same loss and gradients as eager."""
    x = torch.randn(2, 3, 4, 5, generator=torch.Generator().manual_seed(0))
    res = {}
    for how in ("eager", "compiled"):
        model = EnsembleEmulator([torch.Generator().manual_seed(i) for i in range(2)], 5, 3, 4, 12, 3, 9,
                                 attention="kernel")
        f = (lambda xx: model(xx).square().sum()) if how == "eager" else torch.compile(lambda xx: model(xx).square().sum())
        loss = f(x)
        loss.backward()
        res[how] = [loss.detach()] + [p.grad for p in model.parameters()]
    for a, b in zip(res["eager"], res["compiled"]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
