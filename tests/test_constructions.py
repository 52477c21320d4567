"""E5: the hand-built frozen two-layer attention interpreter (no training anywhere).

Every test asserts numbers that a wrong construction would miss: exactness of the
read-out, the emulated head against the exact head, monotone error trends, one module
serving every algorithm with unchanged weights, clear errors on bad prompts, GD steps
against hand-written ones, and the multi-step bound.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from algo_emu.constructions import (
    Capacity,
    Grid,
    Interpreter,
    attention_head,
    compile_prompt,
    gd_multistep,
    gd_step_emulated,
    gd_step_exact,
    head_program,
    make_loss,
    readout_bound,
    run,
    soft_readout,
    template_exact,
    template_program,
)
from algo_emu.config import schema_defaults, validate_section
from algo_emu.constructions import studies
from algo_emu.constructions.grid import aliasing_error, end_error_bound, end_margin
from algo_emu.rng import torch_stream

F64 = torch.float64
REPO = Path(__file__).resolve().parents[1]


def heads(seed, B=6, n=12, d=4, h=8):
    return studies.draw_heads(seed, n, d, h, B, tag="test")


@pytest.fixture(scope="module")
def head_interp():
    g = Grid.symmetric(8.0, 100)
    return Interpreter(Capacity(4, 8, 4), g, g.beta_for(0.5))


@pytest.fixture(scope="module")
def library():
    lib = validate_section("constructions", {"library": {"P": 241}})["library"]  # D = 0.133 on [-16, 16]
    return lib, studies.library_interpreter(lib)


# ------------------------------------------------------------------------------------ read-out
def test_soft_readout_exact_inside_grid_and_bound_holds():
    g = Grid.symmetric(6.0, 61)  # D = 0.2
    s = np.linspace(-3.0, 3.0, 997)
    for bd, tol in [(0.5, 1e-13), (1.0, 1e-8)]:
        err = np.abs(soft_readout(s, g, g.beta_for(bd)) - s)
        assert err.max() < tol, (bd, err.max())
        assert np.all(err <= readout_bound(s, g, g.beta_for(bd), np.abs(s), 1))  # with the rounding allowance
        assert readout_bound(s, g, g.beta_for(bd)).max() < 1e-8  # exact-arithmetic part
    # sharp softmax rounds to the nearest grid point: error of order D/2 at mid-points
    err4 = np.abs(soft_readout(s, g, g.beta_for(16.0)) - s)
    assert 0.05 < err4.max() < 0.1
    # near the ends the bound grows and is still respected
    s_end = np.linspace(5.0, 6.0, 51)
    e_end = np.abs(soft_readout(s_end, g, g.beta_for(0.5)) - s_end)
    assert e_end.max() > 1e-4
    assert np.all(e_end <= readout_bound(s_end, g, g.beta_for(0.5)) + 1e-14)


def test_layer1_reads_out_kqv_to_1e12_and_head_output_matches(head_interp):
    X, WK, WQ, WV = heads(0)
    prompt = compile_prompt(head_interp, head_program(X, WK, WQ, WV, 1.0))
    Y, Z = head_interp(prompt.E, return_hidden=True)
    n = X.shape[2]
    exact = head_interp.readout_values(prompt.E)[:, : head_interp.cap.S, :n]
    assert torch.allclose(exact[:, :8], WK @ X)  # slot K[r] reads W_K[r] . x
    assert torch.allclose(exact[:, 16:], WV @ X)
    assert (Z[:, : head_interp.cap.S, :n] - exact).abs().max() < 1e-12
    # auxiliary heads: mask exactly 0 on data tokens, -M2 on grid tokens; 'one' is 1
    S = head_interp.cap.S
    assert torch.all(Z[:, S, :n] == 0)
    assert torch.allclose(Z[:, S, n:], torch.full_like(Z[:, S, n:], -Interpreter.M2))
    assert (Z[:, S + 1] - 1).abs().max() < 1e-14
    out, ref = prompt.decode(Y), attention_head(X, WK, WQ, WV, 1.0)
    assert ref.abs().mean() > 0.1
    assert (out - ref).abs().max() < 1e-12


def test_attention_head_reference_is_columnwise_softmax_over_keys():
    X, WK, WQ, WV = (t[0] for t in heads(1, B=1, n=5, d=3, h=2))
    Y = attention_head(X, WK, WQ, WV, 0.7)
    K, Q, V = WK @ X, WQ @ X, WV @ X
    for i in range(5):
        s = torch.tensor([0.7 * float(K[:, j] @ Q[:, i]) for j in range(5)], dtype=F64)
        w = torch.exp(s - s.max())
        w = w / w.sum()
        assert torch.allclose(Y[:, i], V @ w, atol=1e-14)


def test_fast_forward_equals_dense_forward_on_data_tokens(head_interp):
    X, WK, WQ, WV = heads(2, B=3)
    prompt = compile_prompt(head_interp, head_program(X, WK, WQ, WV, 1.0))
    fast = head_interp(prompt.E)
    dense = head_interp(prompt.E, dense=True)
    n = X.shape[2]
    assert torch.allclose(fast[:, :, :n], dense[:, :, :n], rtol=0, atol=1e-14)  # same sums, another order
    assert torch.isnan(fast[:, :, n:]).all() and torch.isfinite(dense).all()


def test_stated_head_bound_holds(head_interp):
    X, WK, WQ, WV = heads(3)
    res = studies.head_errors(head_interp, X, WK, WQ, WV, 1.0)
    assert torch.all(res["max_abs"] <= res["bound"])  # the bound includes a float64 rounding allowance
    assert torch.all(res["bound"] < 1e-7)  # worst-case rounding model: loose (measured ~1e-14)
    g = Grid.symmetric(8.0, 30)
    coarse = Interpreter(Capacity(4, 8, 4), g, g.beta_for(0.2), end_tol=None)  # measure the end error, not refuse
    res = studies.head_errors(coarse, X, WK, WQ, WV, 1.0)
    assert torch.all(res["max_abs"] > 1e-6)  # a real error, and the bound covers it
    assert torch.all(res["max_abs"] <= res["bound"])


# ------------------------------------------------------------------------------------ trends
def test_error_falls_monotonically_with_beta_in_the_truncation_regime():
    X, WK, WQ, WV = heads(4)
    g = Grid.symmetric(8.0, 100)
    mses = []
    for bd in [0.002, 0.005, 0.01, 0.02, 0.05]:
        it = Interpreter(Capacity(4, 8, 4), g, g.beta_for(bd), end_tol=None)  # the truncation regime, on purpose
        mses.append(float(studies.head_errors(it, X, WK, WQ, WV, 1.0)["mse"].mean()))
    assert all(b < a / 10 for a, b in zip(mses, mses[1:])), mses
    assert mses[-1] < 1e-20 and mses[0] > 1e-3
    # beyond beta D^2 ~ 1 the softmax rounds to the grid and the error rises again
    it = Interpreter(Capacity(4, 8, 4), g, g.beta_for(4.0), end_tol=None)
    assert float(studies.head_errors(it, X, WK, WQ, WV, 1.0)["mse"].mean()) > 1e-7


def test_error_falls_with_P_at_fixed_beta_d2_with_slope_minus_two():
    X, WK, WQ, WV = heads(5)
    Ps, mses = [25, 50, 100, 200], []
    for P in Ps:
        g = Grid.symmetric(8.0, P)
        it = Interpreter(Capacity(4, 8, 4), g, g.beta_for(8.0))
        mses.append(float(studies.head_errors(it, X, WK, WQ, WV, 1.0)["mse"].mean()))
    assert all(b < a for a, b in zip(mses, mses[1:])), mses
    slope = np.polyfit(np.log(np.array(Ps) - 1.0), np.log(mses), 1)[0]
    assert -2.5 < slope < -1.5, slope


# ------------------------------------------------------------------------------------ one module
def _snapshot(interp):
    return {k: v.clone() for k, v in interp.state_dict().items()}


def test_one_module_runs_many_heads_and_its_weights_do_not_change(head_interp):
    before = _snapshot(head_interp)
    fp = studies.module_fingerprint(head_interp)
    worst = 0.0
    for seed in range(5):  # 30 different random heads through the same object
        X, WK, WQ, WV = heads(10 + seed)
        out = run(head_interp, head_program(X, WK, WQ, WV, 1.0))
        worst = max(worst, float((out - attention_head(X, WK, WQ, WV, 1.0)).abs().max()))
    assert worst < 1e-12
    after = head_interp.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert studies.module_fingerprint(head_interp) == fp
    # a second module with the same constants is the same module (weights independent of any head)
    other = Interpreter(head_interp.cap, head_interp.grid, head_interp.beta)
    assert all(torch.equal(other.state_dict()[k], after[k]) for k in after)


def test_output_follows_the_weights_in_the_prompt(head_interp):
    """Data of head A with the weights of head B in the prompt gives head B's output, not A's."""
    XA, WKA, WQA, WVA = heads(20)
    XB, WKB, WQB, WVB = heads(21)
    n = XA.shape[2]
    pa = compile_prompt(head_interp, head_program(XA, WKA, WQA, WVA, 1.0))
    pb = compile_prompt(head_interp, head_program(XB, WKB, WQB, WVB, 1.0))
    spliced = pa.E.clone()
    spliced[:, :, n:] = pb.E[:, :, n:]  # A's data tokens, B's grid tokens (the weights block)
    # the weights live only on the grid tokens: the splice IS the prompt of (X_A, weights of B)
    assert torch.equal(spliced, compile_prompt(head_interp, head_program(XA, WKB, WQB, WVB, 1.0)).E)
    out = pa.decode(head_interp(spliced))
    ref_b = attention_head(XA, WKB, WQB, WVB, 1.0)
    ref_a = attention_head(XA, WKA, WQA, WVA, 1.0)
    err_b = (out - ref_b).abs().amax(dim=(1, 2))
    bound = studies.head_errors(head_interp, XA, WKB, WQB, WVB, 1.0)["bound"]  # the construction's stated bound
    assert torch.all(err_b <= bound) and torch.all(bound < 1e-7)
    assert float(err_b.max()) < 1e-13  # measured: float64 rounding (about 3e-15)
    assert float((out - ref_a).abs().amax(dim=(1, 2)).min()) > 1.0  # far from A's own output (measured 1.9-3.3)
    assert float((ref_b - ref_a).abs().mean()) > 0.5  # the two heads really differ on the same data
    # and the other way round, through the same module object
    back = pb.E.clone()
    back[:, :, n:] = pa.E[:, :, n:]
    assert float((pb.decode(head_interp(back)) - attention_head(XB, WKA, WQA, WVA, 1.0)).abs().max()) < 1e-13


def test_library_one_module_all_algorithms(library):
    lib, interp = library
    before = _snapshot(interp)
    errs = {}
    for name in studies.ALGORITHMS:
        emu, ref = studies.run_algorithm(interp, name, lib, [0, 1])
        assert emu.shape == ref.shape
        assert float((ref**2).mean()) > 1e-3
        errs[name] = float((emu - ref).abs().max())
    after = interp.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert errs["attention_head"] < 1e-12
    for name in ("gd_squared", "gd_ridge", "gd_logistic", "template_tanh"):
        assert errs[name] < 1e-6, errs
    assert errs["gd_huber"] < 1e-2, errs  # the kink of clip(r) limits the smooth read-out
    # the algorithms really differ: the same data through different prompts gives different steps
    X, y, w0 = studies.draw_regression(7, "t", 12, 4, 2, 0.1, 0.5, 0.5, "real")
    a = gd_step_emulated(interp, w0, X, y, make_loss("squared"), 0.1)
    b = gd_step_emulated(interp, w0, X, y, make_loss("huber", 0.1), 0.1)
    assert (a - b).abs().max() > 1e-3


# ------------------------------------------------------------------------------------ GD / template
def _hand_step(w, X, y, kind, eta, lam=0.0, delta=1.0):
    w, X, y = w.numpy(), X.numpy(), y.numpy()
    out = []
    for b in range(w.shape[0]):
        g = np.zeros_like(w[b])
        for i in range(X.shape[2]):
            x = X[b, :, i]
            if kind == "logistic":  # loss log(1 + exp(-y w.x)), labels +-1
                m = y[b, i] * (w[b] @ x)
                g += -y[b, i] * x / (1.0 + math.exp(m))
            else:
                r = w[b] @ x - y[b, i]
                g += (np.clip(r, -delta, delta) if kind == "huber" else r) * x
        out.append(w[b] - eta * (g / X.shape[2] + lam * w[b]))
    return torch.tensor(np.array(out), dtype=F64)


@pytest.mark.parametrize("kind", ["squared", "ridge", "logistic", "huber"])
def test_gd_step_equals_hand_written_step(kind, library):
    _, interp = library
    labels = "sign" if kind == "logistic" else "real"
    X, y, w0 = studies.draw_regression(3, "gd", 12, 4, 3, 0.1, 0.5, 0.5, labels)
    lam = 0.5 if kind == "ridge" else 0.0
    loss = make_loss(kind, huber_delta=0.3)
    hand = _hand_step(w0, X, y, kind, 0.1, lam, delta=0.3)
    exact = gd_step_exact(w0, X, y, loss, 0.1, lam)
    assert torch.allclose(exact, hand, atol=1e-14, rtol=0)
    assert (exact - w0).abs().max() > 1e-3  # the step moves
    emu = gd_step_emulated(interp, w0, X, y, loss, 0.1, lam)
    tol = 1e-3 if kind == "huber" else 1e-8
    assert (emu - hand).abs().max() < tol


def test_template_per_sample_any_f_from_the_prompt(library):
    _, interp = library
    X, y, w0 = studies.draw_regression(4, "tpl", 12, 4, 2, 0.1, 0.5, 0.5, "real")
    for f_name, f in [("sin", np.sin), ("bump", lambda r: np.exp(-np.asarray(r) ** 2) - 0.5)]:  # odd and even f
        loss = studies.make_loss("tanh")
        loss = type(loss)(f_name, f)
        out = run(interp, template_program(interp, w0, X, y, loss, "per_sample"))
        ref = template_exact(w0, X, y, loss)
        r = torch.einsum("bd,bdn->bn", w0, X) - y
        assert torch.allclose(ref, torch.as_tensor(f(r.numpy()))[:, None] * X)
        assert (out - ref).abs().max() < 1e-7, f_name


def test_multistep_error_within_t_eps():
    g = Grid.symmetric(16.0, 241)
    interp = Interpreter(Capacity(12, 2, 4), g, g.beta_for(0.5))
    X, y, w0 = studies.draw_regression(5, "ms", 12, 4, 3, 0.1, 0.5, 0.5, "real")
    T = 6
    tr = gd_multistep(interp, w0, X, y, make_loss("squared"), 0.1, T)
    w = w0.clone()
    for _ in range(T):
        w = _hand_step(w, X, y, "squared", 0.1)
    assert torch.allclose(tr["w_exact"][-1], w, atol=1e-13)
    assert (tr["w_exact"][-1] - w0).abs().max() > 1e-2
    err2 = (tr["w_hat"] - tr["w_exact"]).norm(dim=2)[1:]
    errinf = (tr["w_hat"] - tr["w_exact"]).abs().amax(dim=2)[1:]
    cum = torch.cumsum(tr["local_2"], dim=0)
    t = torch.arange(1, T + 1, dtype=F64)[:, None]
    assert torch.all(err2 <= cum * (1 + 1e-9))  # non-expansive GD map in l2: err_t <= sum of one-step errors
    assert torch.all(errinf <= t * tr["local_inf"].amax(dim=0) * (1 + 1e-9))
    assert 0 < float(errinf.max()) < 1e-7


# ------------------------------------------------------------------------------------ bad prompts
def test_bad_prompts_raise_clear_errors(head_interp):
    X, WK, WQ, WV = heads(6, B=2)
    good = compile_prompt(head_interp, head_program(X, WK, WQ, WV, 1.0)).E
    with pytest.raises(ValueError, match="embedding width"):
        head_interp(good[:, :-1])
    with pytest.raises(ValueError, match="float64"):
        head_interp(good.float())
    with pytest.raises(ValueError, match="shape"):
        head_interp(good[None])
    with pytest.raises(ValueError, match="grid tokens, this interpreter's grid has P = 100"):
        head_interp(good[:, :, :-1])
    with pytest.raises(ValueError, match="outside the grid range"):
        run(head_interp, head_program(X, 10 * WK, WQ, WV, 1.0))
    with pytest.raises(ValueError, match=r"outside the grid range \[-8, 8\]"):
        run(head_interp, head_program(X, WK, WQ, 10 * WV, 1.0))
    bad = good.clone()
    lay = head_interp.layout
    bad[:, lay.JU[3].start, -1] += 1.0
    with pytest.raises(ValueError, match=r"\(j' u, u\)"):
        head_interp(bad)
    bad = good.clone()
    bad[:, lay.POS, -1] = 1000.0
    with pytest.raises(ValueError, match="grid positions"):
        head_interp(bad)
    bad = good.clone()
    bad[:, lay.T, 0] = 1.0  # a data token with a table entry
    with pytest.raises(ValueError, match="data tokens must have zeros"):
        head_interp(bad)
    bad = good.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        head_interp(bad)
    with pytest.raises(ValueError, match="capacity"):
        compile_prompt(head_interp, head_program(*heads(6, B=1, d=4, h=9)[:4], 1.0))
    with pytest.raises(ValueError, match="W_K"):
        head_program(X, WK[:, :, :3], WQ, WV)


# ------------------------------------------------------------------------------------ grid ends
def test_end_margin_numbers_and_error_outside_it():
    g = Grid.symmetric(8.0, 100)  # the E5 default grid, beta D^2 = 0.5
    beta = g.beta_for(0.5)
    m = end_margin(g, beta, 1e-12)
    assert abs(m - 1.62378) < 1e-5, m  # 10.05 D
    # the bound falls like exp(-beta m^2 / 2) / sqrt(2 pi beta): the closed form agrees
    assert abs(m - math.sqrt(2.0 * math.log(1.0 / (1e-12 * math.sqrt(2.0 * math.pi * beta))) / beta)) < 1e-9
    assert float(end_error_bound(np.array([g.hi - m]), g, beta)[0]) <= 1e-12 * (1 + 1e-9)
    # inside [lo + m, hi - m] the measured error is below the tolerance (rounding only, ~3e-14) ...
    s = np.linspace(g.lo + m, g.hi - m, 4001)
    assert np.abs(soft_readout(s, g, beta) - s).max() < 1e-13
    # ... and outside it grows fast: measured 4.8e-9 at hi - 0.75 m, 3.3e-5 at hi - m/2, 9.4e-3 at 0.95 R, 0.136 at R
    for x, lo, hi in [(g.hi - 0.75 * m, 1e-9, 1e-8), (g.hi - 0.5 * m, 1e-5, 1e-4), (7.6, 5e-3, 2e-2), (8.0, 0.1, 0.2)]:
        err = abs(float(soft_readout(np.array([x]), g, beta)[0]) - x)
        assert lo < err < hi, (x, err)
        assert err <= float(end_error_bound(np.array([x]), g, beta)[0])  # the end bound covers it
    g2 = Grid.symmetric(16.0, 321)  # the library grid: D = 0.1, margin about 10 D as well
    assert abs(end_margin(g2, g2.beta_for(0.5), 1e-12) - 0.99511) < 1e-5
    # a grid too coarse for the tolerance: the margin covers it all (P = 20 on [-8, 8] at beta D^2 = 0.5)
    g3 = Grid.symmetric(8.0, 20)
    assert end_margin(g3, g3.beta_for(0.5), 1e-12) == 8.0
    with pytest.raises(ValueError, match="tol must be positive"):
        end_margin(g, beta, 0.0)


def _one_value_head(v):
    """A head whose value slot V[0] reads out exactly v on data token 3 (every other read-out value small)."""
    X = torch.zeros(1, 4, 6, dtype=F64)
    X[0, 0, :] = 0.1 * torch.arange(6, dtype=F64)
    X[0, 0, 3] = 1.0
    WK = 0.5 * torch.ones(1, 8, 4, dtype=F64)
    WQ = 0.25 * torch.ones(1, 8, 4, dtype=F64)
    WV = torch.zeros(1, 4, 4, dtype=F64)
    WV[0, 0, 0] = v
    return X, WK, WQ, WV


def test_values_near_the_grid_ends_are_refused(head_interp):
    assert head_interp.end_tol == 1e-12 and abs(head_interp.end_margin - 1.62378) < 1e-5
    X, WK, WQ, WV = _one_value_head(6.3)  # inside [-6.376, 6.376]: accepted and read out to rounding
    out = run(head_interp, head_program(X, WK, WQ, WV, 1.0))
    assert float((out - attention_head(X, WK, WQ, WV, 1.0)).abs().max()) < 1e-13
    for v in (7.6, 8.0, -6.5):  # inside the grid range, within the margin of an end
        X, WK, WQ, WV = _one_value_head(v)
        msg = (rf"slot V\[0\] reads out u\^T x = {v:g} on data token 3, within the end margin 1.624 of the grid "
               r"\[-8, 8\] \(accepted: \[-6.37622, 6.37622\]\); there the read-out error can exceed "
               r"constructions.end_tol = 1e-12")
        with pytest.raises(ValueError, match=msg):
            run(head_interp, head_program(X, WK, WQ, WV, 1.0))
    X, WK, WQ, WV = _one_value_head(8.5)
    with pytest.raises(ValueError, match=r"u\^T x = 8.5 on data token 3, outside the grid range \[-8, 8\]"):
        run(head_interp, head_program(X, WK, WQ, WV, 1.0))
    # without end_tol the same module reads 7.6 with the end error (measured 9.4e-3 on this slot), and flags it
    free = Interpreter(head_interp.cap, head_interp.grid, head_interp.beta, end_tol=None)
    X, WK, WQ, WV = _one_value_head(7.6)
    prompt = compile_prompt(free, head_program(X, WK, WQ, WV, 1.0))
    _, Z = free(prompt.E, return_hidden=True)
    v0 = free.cap.S - free.cap.dv  # slot V[0]
    assert 5e-3 < abs(float(Z[0, v0, 3]) - 7.6) < 2e-2
    near = free.near_end(prompt.E, 1e-12)
    assert bool(near[0, v0, 3]) and int(near.sum()) == 1
    res = studies.head_errors(free, X, WK, WQ, WV, 1.0, end_tol=1e-12)
    assert float(res["end_flagged"][0]) == pytest.approx(1.0 / (20 * 6))  # 1 of 20 slots x 6 tokens
    # a grid on which no value meets the tolerance is refused when the module is built
    g = Grid.symmetric(8.0, 20)
    with pytest.raises(ValueError, match=r"margin covers the whole grid.*constructions.end_tol"):
        Interpreter(Capacity(4, 8, 4), g, g.beta_for(0.5))


def test_aliasing_numbers_stated_in_the_docs():
    # (4 pi / (beta D^2)) q / (1 - 2 q), q = exp(-2 pi^2 / (beta D^2)), in units of D (docs/constructions.md, section 1)
    for bd, val in [(0.5, 1.8e-16), (1.0, 3.4e-8), (2.0, 3.3e-4), (4.0, 2.3e-2)]:
        q = math.exp(-2.0 * math.pi**2 / bd)
        assert aliasing_error(bd) == pytest.approx(4.0 * math.pi / bd * q / (1.0 - 2.0 * q), rel=1e-3)
        assert aliasing_error(bd) == pytest.approx(val, rel=0.02), bd
    docs = (REPO / "docs/constructions.md").read_text()
    assert "1.8e-16 D" in docs and "3.4e-8 D" in docs and "3.3e-4 D" in docs


def test_template_bad_inputs_raise(library):
    _, interp = library
    X, y, w0 = studies.draw_regression(8, "bad", 12, 4, 1, 0.1, 0.5, 0.5, "real")
    with pytest.raises(ValueError, match="residual .* outside the table range"):
        gd_step_emulated(interp, w0, X, y + 10.0, make_loss("squared"), 0.1)
    with pytest.raises(ValueError, match="labels y must be \\+1 or -1"):
        gd_step_emulated(interp, w0, X, y, make_loss("logistic"), 0.1)
    with pytest.raises(ValueError, match="beyond the grid's half-width"):
        run(interp, template_program(interp, w0, 3.0 * X, 3.0 * y, make_loss("squared"), "per_sample", r_range=4.0))
    with pytest.raises(ValueError, match="r_range"):
        template_program(interp, w0, X, y, make_loss("squared"), r_range=100.0)
    with pytest.raises(ValueError, match="unknown loss"):
        make_loss("hinge")
    with pytest.raises(ValueError, match="P must be"):
        Grid(-1.0, 1.0, 1)


# ------------------------------------------------------------------------------------ pipeline glue
def test_schema_defaults_match_code_defaults():
    from snakemake.utils import validate

    cfg: dict = {}
    validate(cfg, str(REPO / "workflow/schemas/constructions.schema.yaml"))
    assert cfg == schema_defaults("constructions")
    with pytest.raises(Exception):
        validate({"beta_d2": -1.0}, str(REPO / "workflow/schemas/constructions.schema.yaml"))
    with pytest.raises(ValueError, match="constructions.nonsense: unknown key"):
        validate_section("constructions", {"nonsense": 1})


def test_cli_study_library_multistep_and_figures(tmp_path):
    import json

    from algo_emu.cli import main

    params = validate_section("constructions", {
        "instances": 2,
        "beta_study": {"beta_d2": [0.01, 0.5, 4.0]},
        "library": {"P": 161, "instances": 1, "algorithms": ["attention_head", "gd_logistic"]},
        "multistep": {"P": 161, "instances": 1, "steps": 2, "losses": ["squared"]},
    })
    for step, extra in [("study", {"study": "beta"}), ("library", {}), ("multistep", {})]:
        kind = "beta" if step == "study" else step
        out = tmp_path / f"construction_{kind}.csv"
        job = {**extra, "params": params, "seeds": [0, 1], "out_csv": str(out),
               "out_per_seed": str(tmp_path / f"{kind}_per_seed.csv"), "out_meta": str(tmp_path / f"{kind}.json")}
        assert main(["constructions", step, json.dumps(job), "--threads", "1"]) == 0
        table = pd.read_csv(out)
        assert out.with_suffix(".md").exists() and out.with_suffix(".tex").exists()
        meta = json.loads((tmp_path / f"{kind}.json").read_text())
        assert meta["params"] == params and meta["seeds"] == [0, 1]  # every key of the section is some kind's
        fig = {"kind": kind, "table": str(out), "out": str(tmp_path / kind)}
        assert main(["constructions", "figure", json.dumps(fig)]) == 0
        assert (tmp_path / f"{kind}.pdf").stat().st_size > 0 and (tmp_path / f"{kind}.png").stat().st_size > 0
        if kind == "beta":
            assert list(table["beta_d2"].round(6)) == [0.01, 0.5, 4.0]
            mse = table["mse_mean"].to_numpy()
            assert mse[1] < 1e-25 and mse[0] > 1e-12 and mse[2] > 1e-8
            # at beta D^2 = 0.01 the end margin (1e-12) covers the whole grid: every value flagged; none at 0.5 or 4
            assert list(table["end_flagged_mean"]) == [1.0, 0.0, 0.0]
            assert table["end_margin"].iloc[0] == 8.0 and 1.6 < table["end_margin"].iloc[1] < 1.65
            assert (table["n_seeds"] == 2).all()
        if kind == "library":
            assert set(table["algorithm"]) == {"attention_head", "gd_logistic"}
            assert table["module_sha256"].nunique() == 1
            assert (table["end_tol"] == 1e-12).all() and (table["end_margin"] > 2.0).all()  # P = 161: 2.02
        if kind == "multistep":
            assert (table["within_inf"] == 1.0).all()


def test_cli_job_errors_name_the_argument():
    import json

    from algo_emu.cli import bind_job, main

    with pytest.raises(SystemExit, match="unknown argument.*out_cvs"):
        main(["constructions", "library", json.dumps({"seeds": [0], "out_cvs": "x.csv"})])
    with pytest.raises(SystemExit, match="missing argument.*study"):
        bind_job("constructions", "study", {"seeds": [0], "out_csv": "x.csv"})
    with pytest.raises(SystemExit, match="threads goes in --threads"):
        bind_job("constructions", "library", {"seeds": [0], "out_csv": "x.csv", "threads": 2})
    with pytest.raises(ValueError, match="unknown study 'q'"):
        main(["constructions", "study", json.dumps({"study": "q", "seeds": [0], "out_csv": "x.csv",
                                                    "params": schema_defaults("constructions")})])
    # params is required and holds the keys the table reads (its declaration), each gap named
    with pytest.raises(SystemExit, match=r"missing argument\(s\) params"):
        bind_job("constructions", "multistep", {"seeds": [0], "out_csv": "x.csv"}, threads=2)
    with pytest.raises(SystemExit, match=r"constructions table reads constructions.table, constructions.end_tol, "
                                         "missing from params"):
        bind_job("constructions", "library", {"params": {"any": 1}, "seeds": [0], "out_csv": "x"})
    section = schema_defaults("constructions")
    got = bind_job("constructions", "library", {"params": section | {"any": 1}, "seeds": [0], "out_csv": "x"})
    assert got["params"] == section  # keys beyond the declaration are dropped


def test_seed_streams_are_reproducible_and_distinct():
    a = studies.draw_heads(0, 12, 4, 8, 2)
    b = studies.draw_heads(0, 12, 4, 8, 2)
    c = studies.draw_heads(1, 12, 4, 8, 2)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0])
    assert float(a[0].abs().max()) <= math.sqrt(3.0)  # uniform entries: bounded read-out values
    assert isinstance(torch_stream(0, "constructions"), torch.Generator)
