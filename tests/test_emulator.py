"""The optimised ensemble block computes exactly the protocol's block."""

import pytest
import torch

from algo_emu.models import kernel
from algo_emu.models.emulator import EnsembleEmulator, reference_forward

# the C kernel is tested where it can be built (tests/test_kernel.py says why not, when not)
KERNEL = pytest.param("kernel", marks=pytest.mark.skipif(not kernel.available()[0], reason="no C kernel here"))


def _gens(k, base=0):
    return [torch.Generator().manual_seed(base + i) for i in range(k)]


@pytest.mark.parametrize("attention", ["matmul", "sdpa", "fused", KERNEL])
@pytest.mark.parametrize("heads,p", [(1, 60), (4, 60), (12, 60), (1, 20), (6, 33)])
def test_forward_equals_plain_full_p_block(attention, heads, p):
    model = EnsembleEmulator(_gens(3), d_in=24, d_out=[48, 48, 24], n_tokens=20, hidden=48, heads=heads,
                             p=p, dtype=torch.float64, attention=attention)
    with torch.no_grad():  # make the learnable gain and appended tokens non-trivial
        model.gain.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(9))
        model.ext.add_(0.1 * torch.randn(model.ext.shape, generator=torch.Generator().manual_seed(8), dtype=torch.float64))
    x = torch.randn(3, 7, 20, 24, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    y = model(x)
    assert y.shape == (3, 7, 20, 48)
    for e in range(3):
        ref = reference_forward(model.member_state(e), x[e], heads)
        torch.testing.assert_close(y[e, ..., : model.d_outs[e]], ref, rtol=0, atol=1e-12)
    assert torch.count_nonzero(y[2, ..., 24:]) == 0  # padding columns of the narrower member stay zero


def test_init_matches_protocol():
    model = EnsembleEmulator(_gens(2), d_in=5, d_out=4, n_tokens=3, hidden=8, heads=2, p=7)
    assert torch.equal(model.gain, torch.ones(2, 3, 8))
    torch.testing.assert_close(model.ext[1, :, 0], torch.linspace(-1, 1, 4))
    assert torch.equal(model.ext[:, :, 0:1].expand(-1, -1, 8), model.ext)  # every channel of token k equal
    bound = 1 / 5 ** 0.5  # nn.Linear default bound 1/sqrt(fan_in)
    assert model.w_in.abs().max() <= bound and model.w_in.abs().max() > 0.8 * bound


def test_member_does_not_depend_on_its_neighbours():
    alone = EnsembleEmulator([torch.Generator().manual_seed(5)], 4, 3, 2, 6, 3, 5)
    inside = EnsembleEmulator([torch.Generator().manual_seed(1), torch.Generator().manual_seed(5)], 4, 3, 2, 6, 3, 5)
    for (name, a), (_, b) in zip(alone.named_parameters(), inside.named_parameters()):
        assert torch.equal(a[0], b[1]), name


@pytest.mark.parametrize(
    "kwargs,match",
    [({"heads": 5}, "heads=5 must divide hidden=12"), ({"p": 3}, "p=3 must be >= n_tokens"),
     ({"attention": "flash"}, "unknown implementation")],
)
def test_bad_shapes_raise(kwargs, match):
    args = dict(d_in=2, d_out=2, n_tokens=4, hidden=12, heads=2, p=6) | kwargs
    with pytest.raises(ValueError, match=match):
        EnsembleEmulator(_gens(1), **args)


def test_wrong_input_shape_is_named():
    model = EnsembleEmulator(_gens(2), d_in=3, d_out=2, n_tokens=4, hidden=4, heads=1, p=6)
    with pytest.raises(ValueError, match="does not match"):
        model(torch.zeros(2, 1, 5, 3))


def test_fused_attention_gradients():
    from algo_emu.models.emulator import TwoSetAttention

    g = torch.Generator().manual_seed(3)
    shapes = [(3, 2, 2, 4, 3)] * 3 + [(3, 2, 5, 3)] * 2
    inputs = [torch.randn(s, generator=g, dtype=torch.float64, requires_grad=True) for s in shapes]
    assert torch.autograd.gradcheck(lambda *a: TwoSetAttention.apply(*a, 2), inputs)


def test_fused_training_step_matches_matmul():
    x = torch.randn(2, 3, 4, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    grads = {}
    for attention in ("matmul", "fused", "kernel") if kernel.available()[0] else ("matmul", "fused"):
        model = EnsembleEmulator(_gens(2), 5, 3, 4, 12, 3, 9, dtype=torch.float64, attention=attention)
        model(x).square().sum().backward()
        grads[attention] = {k: v.grad for k, v in model.named_parameters()}
    for impl in [a for a in grads if a != "matmul"]:
        for k in grads["matmul"]:
            torch.testing.assert_close(grads[impl][k], grads["matmul"][k], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("attention", ["matmul", "sdpa", "fused", KERNEL])
@pytest.mark.parametrize("heads,keep", [(1, slice(4, 9)), (4, slice(0, 3)), (12, slice(5, 9)), (2, slice(0, 9))])
def test_kept_queries_equal_full_forward_then_slice(attention, heads, keep):
    """forward(x, keep) (queries of the kept tokens only) = forward(x)[:, :, keep] = the plain block, in
    value and in every parameter's gradient, at float64 tolerance."""
    model = EnsembleEmulator(_gens(3), d_in=5, d_out=[1, 2, 1], n_tokens=9, hidden=24, heads=heads,
                             p=14, dtype=torch.float64, attention=attention)
    with torch.no_grad():
        model.gain.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(9))
        model.ext.add_(0.1 * torch.randn(model.ext.shape, generator=torch.Generator().manual_seed(8), dtype=torch.float64))
    x = torch.randn(3, 6, 9, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    w = torch.randn(3, 6, keep.stop - keep.start, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    grads = {}
    for how in ("full", "kept"):
        model.zero_grad()
        y = model(x)[:, :, keep] if how == "full" else model(x, keep=keep)
        (y * w).sum().backward()
        grads[how] = {k: v.grad.clone() for k, v in model.named_parameters()}
        if how == "kept":
            for e in range(3):
                ref = reference_forward(model.member_state(e), x[e], heads)[:, keep]
                torch.testing.assert_close(y[e, ..., : model.d_outs[e]], ref, rtol=0, atol=1e-12)
    for k in grads["full"]:
        torch.testing.assert_close(grads["kept"][k], grads["full"][k], rtol=1e-10, atol=1e-12)


def test_auto_attention_falls_back_to_fused_with_a_warning_where_the_kernel_cannot_be_built(monkeypatch, caplog):
    monkeypatch.setattr(kernel, "available", lambda: (False, "no C compiler: 'cc' is not on PATH"))
    monkeypatch.setattr(kernel, "_warned", False)
    with caplog.at_level("WARNING", logger="algo_emu.models.kernel"):
        model = EnsembleEmulator(_gens(1), 3, 2, 4, 48, 12, 60)
        EnsembleEmulator(_gens(1), 3, 2, 4, 48, 12, 60)
    assert model.resolved_attention("cpu") == "fused"
    warnings = [r.getMessage() for r in caplog.records if "kernel is not available" in r.getMessage()]
    assert len(warnings) == 1 and "'cc' is not on PATH" in warnings[0]  # once per process, naming the reason


@pytest.mark.parametrize("attention", ["matmul", "fused", "kernel", "sdpa"])
def test_published_readout_equals_the_plain_block_then_a_second_linear(attention):
    """``readout_hidden = h``: the block's output projection Linear(h -> h), then Linear(h -> d_out), as the published
    code's Appendix C read-out stacks them; every attention path equals the plain full-p block followed by the second
    map (float64), the kept-query forward equals the sliced full one, and a member's padded output columns stay zero.
    Stacking two such ensembles and copying back is exact; mixing read-outs is refused."""
    gens = [torch.Generator().manual_seed(s) for s in (1, 2, 3)]
    model = EnsembleEmulator(gens, d_in=5, d_out=[1, 2, 1], n_tokens=4, hidden=12, heads=3, p=9,
                             dtype=torch.float64, attention=attention, readout_hidden=12)
    assert model.w_o.shape == (3, 12, 12) and model.w_r.shape == (3, 12, 2) and model.o_width == 12
    x = torch.randn(3, 7, 4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        y = model(x)
        for e in range(3):
            do = model.d_outs[e]
            ref = reference_forward(model.member_state(e), x[e], 3)
            assert torch.allclose(y[e, ..., :do], ref, atol=1e-12, rtol=0)
            assert torch.count_nonzero(y[e, ..., do:]) == 0
        assert torch.allclose(model(x, keep=slice(1, 3)), y[:, :, 1:3], atol=1e-12, rtol=0)
    # the same generator streams without the second map give another model: the read-out is a real change
    plain = EnsembleEmulator([torch.Generator().manual_seed(s) for s in (1, 2, 3)], d_in=5, d_out=[1, 2, 1],
                             n_tokens=4, hidden=12, heads=3, p=9, dtype=torch.float64, attention=attention)
    assert not hasattr(plain, "w_r") and plain.o_width == 2
    both = EnsembleEmulator.stacked([model, model])
    copy = EnsembleEmulator([torch.Generator() for _ in range(3)], d_in=5, d_out=[1, 2, 1], n_tokens=4, hidden=12,
                            heads=3, p=9, dtype=torch.float64, attention=attention, readout_hidden=12)
    both.unstack([model, copy])
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), copy.parameters()))
    with pytest.raises(ValueError, match="readout_hidden"):
        EnsembleEmulator.stacked([model, plain])
    with pytest.raises(ValueError, match="readout_hidden must be >= 1"):
        EnsembleEmulator(gens, d_in=5, d_out=1, n_tokens=4, hidden=12, heads=3, p=9, readout_hidden=0)
