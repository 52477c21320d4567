"""Theorem 3.1 data: exact targets, GD read-out, distributions, determinism, errors."""

from __future__ import annotations

import math

import pytest
import torch

from algo_emu.data import theorem31 as t31


@pytest.fixture(scope="module")
def batch64():
    return t31.generate(seed=7, n_prompts=64, n_tokens=6, d=5, dtype=torch.float64)


def test_shapes_and_layout(batch64):
    b = batch64
    assert b["X"].shape == (64, 6, 5)
    assert b["y"].shape == (64, 6)
    assert b["w"].shape == (64, 5)
    assert b["inputs"].shape == (64, 6, 11)
    assert b["target"].shape == (64, 6, 5)
    # token i = [x_i; y_i; w]
    assert torch.equal(b["inputs"][..., :5], b["X"])
    assert torch.equal(b["inputs"][..., 5], b["y"])
    for i in range(6):
        assert torch.equal(b["inputs"][:, i, 6:], b["w"])


def test_target_matches_independent_per_token_formula(batch64):
    b = batch64
    for p in (0, 13, 63):
        for i in range(6):
            x = b["X"][p, i].tolist()
            w = b["w"][p].tolist()
            r = sum(a * c for a, c in zip(w, x)) - float(b["y"][p, i])
            expect = [math.tanh(r) * xj for xj in x]
            got = b["target"][p, i].tolist()
            assert got == pytest.approx(expect, rel=1e-12, abs=1e-12)
            assert float(b["residual"][p, i]) == pytest.approx(r, rel=1e-12, abs=1e-12)


def test_sign_is_minus_y():
    # If the code used +y the target would differ: check on a case where it matters.
    b = t31.generate(seed=3, n_prompts=8, n_tokens=4, d=3, f="identity", dtype=torch.float64)
    wx = torch.einsum("bnd,bd->bn", b["X"], b["w"])
    assert torch.allclose(b["target"], (wx - b["y"]).unsqueeze(-1) * b["X"], atol=1e-12)
    assert not torch.allclose(b["target"], (wx + b["y"]).unsqueeze(-1) * b["X"], atol=1e-3)


def test_input_never_contains_target(batch64):
    inp = batch64["inputs"].reshape(-1, batch64["inputs"].shape[-1])
    tgt = batch64["target"].reshape(-1, batch64["target"].shape[-1])
    for j in range(tgt.shape[1]):
        for k in range(inp.shape[1]):
            assert not torch.allclose(tgt[:, j], inp[:, k], atol=1e-6)


@pytest.mark.parametrize("name", ["identity", "sigmoid", "step"])
def test_other_f(name):
    b = t31.generate(seed=1, n_prompts=16, n_tokens=3, d=4, f=name, dtype=torch.float64)
    r = b["residual"]
    ref = {
        "identity": r,
        "sigmoid": 1.0 / (1.0 + torch.exp(-r)),
        "step": 1.0 / (1.0 + torch.exp(-t31.STEP_SHARPNESS * r)),
    }[name]
    assert torch.allclose(b["target"], ref.unsqueeze(-1) * b["X"], atol=1e-12)


def test_gd_step_matches_hand_loop(batch64):
    b = batch64
    eta = 0.3
    out = t31.gd_step(b["w"], b["X"], b["y"], "tanh", eta)
    for p in (0, 40):
        w = b["w"][p].tolist()
        n, d = b["X"].shape[1:]
        grad = [0.0] * d
        for i in range(n):
            x = b["X"][p, i].tolist()
            r = sum(a * c for a, c in zip(w, x)) - float(b["y"][p, i])
            for j in range(d):
                grad[j] += math.tanh(r) * x[j] / n
        expect = [w[j] - eta * grad[j] for j in range(d)]
        assert out[p].tolist() == pytest.approx(expect, rel=1e-12, abs=1e-12)


def test_aggregate_of_exact_outputs_is_gd_step(batch64):
    b = batch64
    agg = t31.aggregate_gd(b["target"], b["w"], 0.05)
    ref = t31.gd_step(b["w"], b["X"], b["y"], "tanh", 0.05)
    assert torch.allclose(agg, ref, atol=1e-13)
    # a perturbed per-sample output changes the step by eta/n times the perturbation
    pert = b["target"].clone()
    pert[:, 2, 1] += 1.0
    diff = t31.aggregate_gd(pert, b["w"], 0.05) - ref
    assert torch.allclose(diff[:, 1], torch.full((64,), -0.05 / 6, dtype=torch.float64), atol=1e-13)


def test_identity_gd_is_least_squares_gradient_step(batch64):
    b = batch64
    X, y, w = b["X"], b["y"], b["w"]
    n = X.shape[1]
    grad = torch.einsum("bnd,bn->bd", X, torch.einsum("bnd,bd->bn", X, w) - y) / n
    assert torch.allclose(t31.gd_step(w, X, y, "identity", 0.1), w - 0.1 * grad, atol=1e-12)
    its = t31.gd_steps(w, X, y, "identity", 0.01, 3)
    assert its.shape == (4, 64, 5)
    assert torch.equal(its[0], w)
    assert torch.allclose(its[2], t31.gd_step(its[1], X, y, "identity", 0.01), atol=1e-14)


def test_uniform_moments():
    b = t31.generate(seed=11, n_prompts=2000, n_tokens=10, d=10, dtype=torch.float64)
    X = b["X"]
    assert X.min() >= -5.0 and X.max() <= 5.0
    assert X.min() < -4.99 and X.max() > 4.99
    assert abs(X.mean().item()) < 0.02  # se ~ 0.0065
    assert X.var().item() == pytest.approx(25.0 / 3.0, rel=0.01)  # se ~ 0.26 %
    assert abs(b["y"].mean().item()) < 0.02 and b["y"].var().item() == pytest.approx(1.0, rel=0.03)
    assert abs(b["w"].mean().item()) < 0.03 and b["w"].var().item() == pytest.approx(1.0, rel=0.04)


def test_normal_x_and_scale():
    b = t31.generate(seed=11, n_prompts=2000, n_tokens=10, d=10, x_dist="normal", x_scale=2.0, dtype=torch.float64)
    assert abs(b["X"].mean().item()) < 0.01
    assert b["X"].std().item() == pytest.approx(2.0, rel=0.01)
    u = t31.generate(seed=11, n_prompts=10, n_tokens=10, d=10, x_scale=1.5)
    assert u["X"].abs().max() <= 1.5
    # x_dist has its own stream: y and w do not move when it changes
    v = t31.generate(seed=11, n_prompts=10, n_tokens=10, d=10, x_dist="normal")
    assert torch.equal(u["y"], v["y"]) and torch.equal(u["w"], v["w"])


def test_determinism_and_seed_dependence():
    a = t31.generate(seed=5, n_prompts=8, n_tokens=4, d=3)
    b = t31.generate(seed=5, n_prompts=8, n_tokens=4, d=3)
    c = t31.generate(seed=6, n_prompts=8, n_tokens=4, d=3)
    for k in a:
        assert torch.equal(a[k], b[k])
        assert not torch.equal(a[k], c[k])


def test_float32_is_rounded_float64():
    a = t31.generate(seed=5, n_prompts=8, n_tokens=4, d=3, dtype=torch.float32)
    b = t31.generate(seed=5, n_prompts=8, n_tokens=4, d=3, dtype=torch.float64)
    assert a["X"].dtype == torch.float32 and a["target"].dtype == torch.float32
    assert torch.equal(a["X"], b["X"].float())
    assert torch.allclose(a["target"].double(), b["target"], rtol=1e-5, atol=1e-5)


def test_bad_keys():
    with pytest.raises(ValueError, match="relu.*allowed"):
        t31.generate(seed=0, n_prompts=2, n_tokens=2, d=2, f="relu")
    with pytest.raises(ValueError, match="laplace.*allowed"):
        t31.generate(seed=0, n_prompts=2, n_tokens=2, d=2, x_dist="laplace")
    with pytest.raises(ValueError, match="n_tokens"):
        t31.generate(seed=0, n_prompts=2, n_tokens=0, d=2)
    with pytest.raises(ValueError, match="nope"):
        t31.gd_step(torch.zeros(2), torch.zeros(3, 2), torch.zeros(3), "nope", 0.1)
