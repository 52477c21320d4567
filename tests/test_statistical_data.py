"""Statistical-algorithm data (Appendix C.1): fits against scikit-learn / numpy, layout,
distributions, determinism and errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import Lasso, LinearRegression, Ridge

from algo_emu.data import statistical as st

F64 = torch.float64


def _np(t):
    return t.numpy()


def _fitted(alg, **kw):
    kw.setdefault("seed", 3)
    kw.setdefault("n_prompts", 40)
    kw.setdefault("n_context", 20)
    kw.setdefault("n_query", 4)
    kw.setdefault("d", 24)
    kw.setdefault("dtype", F64)
    return st.generate_for(alg, "fitted", **kw)


# ----------------------------------------------------------------------------- fitted: algorithms


@pytest.mark.parametrize("n_context", [20, 40])
def test_ridge_equals_sklearn(n_context):
    lam = 5.0
    b = _fitted("ridge", n_context=n_context, params={"ridge_lambda": lam})
    for p in range(0, 40, 7):
        m = Ridge(alpha=lam, fit_intercept=False, solver="svd").fit(_np(b["X"][p]), _np(b["y"][p]))
        np.testing.assert_allclose(_np(b["w_alg"][p]), m.coef_, atol=1e-8, rtol=0)
        np.testing.assert_allclose(_np(b["target"][p]), m.predict(_np(b["X_query"][p])), atol=1e-8, rtol=0)
    assert torch.all(b["b_alg"] == 0)


def test_ridge_with_intercept_equals_sklearn():
    b = _fitted("ridge", params={"ridge_lambda": 2.0, "ridge_intercept": True, "x_dist": "normal"})
    assert torch.any(b["b_alg"] != 0)
    for p in range(0, 40, 9):
        m = Ridge(alpha=2.0, fit_intercept=True, solver="svd").fit(_np(b["X"][p]), _np(b["y"][p]))
        assert float(b["b_alg"][p]) == pytest.approx(m.intercept_, abs=1e-8)
        np.testing.assert_allclose(_np(b["target"][p]), m.predict(_np(b["X_query"][p])), atol=1e-8, rtol=0)


def test_ridge_convention_not_normalised():
    # lambda is NOT divided by n: a fit with lambda * n would differ.
    b = _fitted("ridge", params={"ridge_lambda": 5.0})
    m = Ridge(alpha=5.0 * 20, fit_intercept=False).fit(_np(b["X"][0]), _np(b["y"][0]))
    assert np.abs(_np(b["w_alg"][0]) - m.coef_).max() > 1e-3


def test_ols_underdetermined_is_min_norm_pinv():
    b = _fitted("ols")  # n = 20 < d = 24
    X, y = _np(b["X"]), _np(b["y"])
    for p in range(0, 40, 5):
        np.testing.assert_allclose(_np(b["w_alg"][p]), np.linalg.pinv(X[p]) @ y[p], atol=1e-9, rtol=0)
        w_ls = np.linalg.lstsq(X[p], y[p], rcond=None)[0]
        np.testing.assert_allclose(_np(b["w_alg"][p]), w_ls, atol=1e-9, rtol=0)
    # interpolates the context exactly
    np.testing.assert_allclose(_np(b["fit_context"]), y, atol=1e-8)


def test_ols_overdetermined_and_intercept_equal_sklearn():
    b = _fitted("linear", n_context=40, params={"ols_intercept": True})  # alias of ols
    for p in range(0, 40, 8):
        m = LinearRegression(fit_intercept=True).fit(_np(b["X"][p]), _np(b["y"][p]))
        np.testing.assert_allclose(_np(b["w_alg"][p]), m.coef_, atol=1e-9, rtol=0)
        assert float(b["b_alg"][p]) == pytest.approx(m.intercept_, abs=1e-9)


def test_ols_underdetermined_intercept_is_min_norm_on_centred_data():
    b = _fitted("ols", params={"ols_intercept": True})  # n = 20 < d = 24
    X, y = _np(b["X"]), _np(b["y"])
    for p in range(0, 40, 10):
        Xc = X[p] - X[p].mean(0)
        yc = y[p] - y[p].mean()
        w = np.linalg.pinv(Xc, rcond=1e-10) @ yc
        np.testing.assert_allclose(_np(b["w_alg"][p]), w, atol=1e-8, rtol=0)
        assert float(b["b_alg"][p]) == pytest.approx(y[p].mean() - X[p].mean(0) @ w, abs=1e-8)
    np.testing.assert_allclose(_np(b["fit_context"]), y, atol=1e-7)


@pytest.mark.parametrize("intercept", [False, True])
def test_lasso_equals_independent_sklearn(intercept):
    alpha = 0.5
    b = _fitted("lasso", n_prompts=30, params={"lasso_alpha": alpha, "lasso_intercept": intercept})
    for p in range(30):
        m = Lasso(alpha=alpha, fit_intercept=intercept, tol=1e-8, max_iter=10_000)
        m.fit(_np(b["X"][p]), _np(b["y"][p]))
        np.testing.assert_allclose(_np(b["w_alg"][p]), m.coef_, atol=1e-7, rtol=0)
        assert float(b["b_alg"][p]) == pytest.approx(float(m.intercept_), abs=1e-7)
        np.testing.assert_allclose(_np(b["target"][p]), m.predict(_np(b["X_query"][p])), atol=1e-6, rtol=0)
    # genuinely sparse (at most n nonzeros when n < d, and the L1 penalty removes more)
    assert (_np(b["w_alg"]) == 0).mean() > 0.2


def test_gd_equals_hand_loop():
    eta, k = 0.015, 7
    b = _fitted("gd", params={"gd_eta": eta, "gd_steps": k})
    for p in (0, 17, 39):
        X, y = _np(b["X"][p]), _np(b["y"][p])
        n, d = X.shape
        w = [0.0] * d
        for _ in range(k):
            r = [sum(X[i, j] * w[j] for j in range(d)) - y[i] for i in range(n)]
            w = [w[j] - eta * sum(X[i, j] * r[i] for i in range(n)) / n for j in range(d)]
        np.testing.assert_allclose(_np(b["w_alg"][p]), w, atol=1e-12, rtol=0)
    assert torch.all(b["b_alg"] == 0)


# ----------------------------------------------------------------------------- fitted: layout


def test_fitted_tokens_targets_and_errors():
    b = st.generate("fitted", "mixed", seed=9, n_prompts=60, n_context=5, n_query=3, d=4, dtype=F64)
    N, n, m, d = 60, 5, 3, 4
    assert b["inputs"].shape == (N, n + m, 2 * d + 2)
    inp = b["inputs"]
    assert torch.equal(inp[:, :n, :d], b["X"])
    assert torch.equal(inp[:, n:, :d], b["X_query"])
    assert torch.equal(inp[:, :n, d], b["y"])
    assert torch.all(inp[:, n:, d] == 0)
    for t in range(n + m):
        assert torch.equal(inp[:, t, d + 1 : 2 * d + 1], b["w_alg"])
        assert torch.equal(inp[:, t, 2 * d + 1], b["b_alg"])
    expect = torch.einsum("bmd,bd->bm", b["X_query"], b["w_alg"]) + b["b_alg"][:, None]
    assert torch.allclose(b["target"], expect, atol=1e-12)
    # the target and the noisy query labels never appear in the input
    flat = inp.reshape(N, -1)
    for q in range(m):
        for col in (b["target"][:, q], b["y_query"][:, q]):
            assert not any(torch.allclose(col, flat[:, k], atol=1e-6) for k in range(flat.shape[1]))
    # y = X w* + noise with the stated std
    resid = b["y"] - torch.einsum("bnd,bd->bn", b["X"], b["w_star"])
    assert resid.std().item() == pytest.approx(0.05, rel=0.2)
    # algorithm index covers the mixed set
    assert st.canonical_algorithms("fitted", "mixed") == ("ols", "ridge", "lasso", "gd")
    assert set(b["algorithm"].tolist()) == {0, 1, 2, 3}
    # three errors
    e = st.errors(b["target"], b)
    assert e["emulation"] == 0.0
    assert e["prediction"] == pytest.approx(e["algorithm"])
    assert e["algorithm"] == pytest.approx(float((b["alg_residual"] ** 2).mean()))
    full = torch.cat([torch.zeros(N, n, dtype=F64), b["y_query"]], dim=1)  # full-length prediction
    e2 = st.errors(full, b)
    assert e2["prediction"] == 0.0 and e2["emulation"] == pytest.approx(e["algorithm"])


def test_mixture_matches_per_algorithm_fits():
    """A mixed prompt's fit equals the same algorithm applied to that prompt alone."""
    b = st.generate("fitted", ["ridge", "gd"], seed=4, n_prompts=30, n_context=6, n_query=2, d=3, dtype=F64)
    X, y = _np(b["X"]), _np(b["y"])
    for p in range(30):
        name = ("ridge", "gd")[int(b["algorithm"][p])]
        w, _ = st.fit(name, X[p : p + 1], y[p : p + 1])
        np.testing.assert_allclose(_np(b["w_alg"][p]), w[0], atol=1e-12)


def test_fitted_x_moments_and_pairing():
    a = _fitted("ridge", n_prompts=500, n_query=2, seed=12)
    X = a["X"]
    assert X.mean().item() == pytest.approx(-1.0, abs=0.02)  # se ~ 0.0065
    assert X.var().item() == pytest.approx(4.0, rel=0.02)
    c = _fitted("gd", n_prompts=500, n_query=2, seed=12)
    for k in ("X", "y", "X_query", "y_query", "w_star"):
        assert torch.equal(a[k], c[k])  # same seed -> paired prompts across algorithms
    assert not torch.equal(a["w_alg"], c["w_alg"])
    z = _fitted("ridge", n_prompts=500, n_query=2, seed=12, params={"x_dist": "normal"})
    assert abs(z["X"].mean().item()) < 0.01 and z["X"].var().item() == pytest.approx(1.0, rel=0.02)


# ----------------------------------------------------------------------------- reference_code mode


@pytest.fixture(scope="module")
def ref():
    return st.generate("reference_code", "mixed", seed=2, n_prompts=3000, n_context=20, d=24, dtype=F64)


def test_reference_layout_and_moments(ref):
    b = ref
    N, n, d = 3000, 20, 24
    assert b["inputs"].shape == (N, n, 2 * d)
    assert torch.equal(b["inputs"][..., :d], b["X"])
    for i in (0, 19):
        assert torch.equal(b["inputs"][:, i, d:], b["w"])
    assert torch.equal(b["target"], b["y"])
    X = b["X"]
    assert X.mean().item() == pytest.approx(-1.0, abs=0.01)  # se ~ 0.0013
    assert X.var().item() == pytest.approx(4.0, rel=0.01)
    assert torch.allclose(b["y_clean"], torch.einsum("bnd,bd->bn", X, b["w"]), atol=1e-12)
    assert (b["y"] - b["y_clean"]).std().item() == pytest.approx(0.05, rel=0.02)
    frac = torch.bincount(b["algorithm"], minlength=3).double() / N
    assert torch.allclose(frac, torch.full((3,), 1 / 3, dtype=F64), atol=0.03)


def test_reference_lasso_sparsity_and_linear_w(ref):
    b = ref
    lasso = b["w"][b["algorithm"] == 2]
    assert (lasso == 0).double().mean().item() == pytest.approx(0.5, abs=0.02)
    lin = b["w"][b["algorithm"] == 0]
    assert (lin == 0).sum() == 0
    assert lin.var().item() == pytest.approx(1.0, rel=0.05)
    # kept lasso coordinates are unshrunk standard normals
    kept = lasso[lasso != 0]
    assert kept.var().item() == pytest.approx(1.0, rel=0.07)


def test_reference_ridge_weights_are_ridge_estimates(ref):
    """Ridge prompts carry (X^T X + 5 I)^{-1} X^T y0 for some y0 = X w0 + noise: the
    weights lie in the row space of X (n < d) and are shrunk relative to a standard normal."""
    b = ref
    idx = (b["algorithm"] == 1).nonzero()[:, 0][:50]
    for p in idx.tolist():
        X = _np(b["X"][p])
        w = _np(b["w"][p])
        # w = X^T a for some a  <=>  projection onto the row space reproduces w
        proj = X.T @ np.linalg.lstsq(X.T, w, rcond=None)[0]
        np.testing.assert_allclose(proj, w, atol=1e-9)
    assert b["w"][idx].var().item() < 0.95


def test_reference_determinism_and_errors():
    a = st.generate("reference_code", "mixed", seed=1, n_prompts=20, n_context=4, d=3)
    b = st.generate("reference_code", "mixed", seed=1, n_prompts=20, n_context=4, d=3)
    c = st.generate("reference_code", "mixed", seed=2, n_prompts=20, n_context=4, d=3)
    for k in a:
        assert torch.equal(a[k], b[k])
        assert not torch.equal(a[k], c[k])
    e = st.errors(a["y_clean"], a)
    assert e["mse_clean"] == 0.0 and e["mse"] == pytest.approx(float(((a["y"] - a["y_clean"]) ** 2).double().mean()))
    only = st.generate_for("lasso", "reference_code", seed=1, n_prompts=20, n_context=4, d=3)
    assert torch.all(only["algorithm"] == 0)


def test_fitted_determinism_and_seed_dependence():
    a = st.generate("fitted", "mixed", seed=1, n_prompts=12, n_context=4, n_query=2, d=3)
    b = st.generate("fitted", "mixed", seed=1, n_prompts=12, n_context=4, n_query=2, d=3)
    c = st.generate("fitted", "mixed", seed=2, n_prompts=12, n_context=4, n_query=2, d=3)
    for k in a:
        assert torch.equal(a[k], b[k])
        if k != "b_alg":  # zero without intercepts
            assert not torch.equal(a[k], c[k])
    assert a["inputs"].dtype == torch.float32 and a["algorithm"].dtype == torch.int64


# ----------------------------------------------------------------------------- bad keys


def test_bad_keys():
    with pytest.raises(ValueError, match="'fancy'.*allowed.*reference_code"):
        st.generate("fancy", "mixed", seed=0, n_prompts=2)
    with pytest.raises(ValueError, match="'elasticnet'.*allowed.*ols"):
        st.generate_for("elasticnet", "fitted", seed=0, n_prompts=2)
    with pytest.raises(ValueError, match="'ols'.*reference_code.*linear"):
        st.generate_for("ols", "reference_code", seed=0, n_prompts=2)
    with pytest.raises(ValueError, match="'lamda'.*allowed"):
        st.generate("fitted", "mixed", seed=0, n_prompts=2, params={"lamda": 1.0})
    with pytest.raises(ValueError, match="x_dist"):
        st.generate("fitted", "mixed", seed=0, n_prompts=2, params={"x_dist": "uniform"})
    with pytest.raises(ValueError, match="n_query"):
        st.generate("reference_code", "mixed", seed=0, n_prompts=2, n_query=3)
    with pytest.raises(ValueError, match="n_query"):
        st.generate("fitted", "mixed", seed=0, n_prompts=2, n_query=0)
    with pytest.raises(ValueError, match="twice"):
        st.generate("fitted", ["ols", "linear"], seed=0, n_prompts=2)
