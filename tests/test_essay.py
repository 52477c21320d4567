"""E6 (the essay's claims): exact float64 constructions, baselines, the model's guards, determinism, verdict helpers."""

import math

import numpy as np
import pytest
import torch

from algo_emu.essay import baselines as bl
from algo_emu.essay import equivalences as eq
from algo_emu.essay import tasks
from algo_emu.essay.claims import CLAIM_COLUMNS, band_verdict, fit_exponent, last_retrieval_k, transition_k
from algo_emu.essay.model import ICLTransformer, encode
from algo_emu.essay.train import OutOfDistributionError, TrainedICL, train_variant


def _problem(seed=0, B=16, k=12, d=4, m=3, sigma=0.3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(B, k, d))
    w = rng.normal(size=(B, d))
    y = np.einsum("bkd,bd->bk", X, w) + sigma * rng.normal(size=(B, k))
    return X, y, rng.normal(size=(B, m, d))


@pytest.mark.parametrize("layers", [1, 2, 7])
def test_linear_attention_layers_equal_gd_steps(layers):
    X, y, xq = _problem()
    lsa = eq.lsa_predict(X, y, xq, eta=0.15, layers=layers)
    gd = eq.gd_predict(X, y, xq, eta=0.15, steps=layers)
    assert np.abs(lsa - gd).max() < 1e-12
    # the explicit one-step formula (eta/k) sum_j y_j x_j.x_q, written out independently
    if layers == 1:
        ref = 0.15 / X.shape[1] * np.einsum("bk,bkd,bmd->bm", y, X, xq)
        assert np.abs(lsa - ref).max() < 1e-12
    # it is a real check: a different step size is far off
    assert np.abs(eq.lsa_predict(X, y, xq, eta=0.2, layers=layers) - gd).max() > 1e-3


def test_ridge_construction_is_ridge_gd_and_converges_to_the_posterior_mean():
    X, y, xq = _problem(seed=1, k=20, d=5)
    lam = 0.3 ** 2 / 1.0 ** 2
    for L in (1, 5, 20):
        assert np.abs(eq.ridge_lsa_predict(X, y, xq, lam, 0.1, L) - eq.gd_predict(X, y, xq, 0.1, L, lam=lam)).max() < 1e-12
    post = eq.ridge_predict(X, y, xq, lam)
    # ridge(lam = sigma^2/tau^2) is the Bayesian posterior mean, computed here from the posterior's own formula
    s2, t2 = 0.3 ** 2, 1.0
    prec = np.swapaxes(X, 1, 2) @ X / s2 + np.eye(5) / t2
    mu = np.linalg.solve(prec, np.einsum("bkd,bk->bd", X, y)[..., None] / s2)[..., 0]
    assert np.abs(post - np.einsum("bmd,bd->bm", xq, mu)).max() < 1e-10
    assert np.abs(eq.ridge_lsa_predict(X, y, xq, lam, 0.5, 400) - post).max() < 1e-10
    assert np.abs(eq.ridge_lsa_predict(X, y, xq, lam, 0.5, 5) - post).max() > 1e-3  # not there after 5 layers


def test_softmax_layer_approaches_the_linear_layer_as_eps_squared():
    X, y, xq = _problem(seed=2)
    rows = eq.softmax_deviation(X, y, xq, 0.1, [0.01, 0.001])
    assert rows[1]["rel_dev"] < 1e-5
    ratio = rows[0]["rel_dev"] / rows[1]["rel_dev"]
    assert 90 < ratio < 110  # O(eps^2): ten times smaller eps, a hundred times smaller deviation


def test_outlier_shift_is_proportional_for_linear_and_bounded_for_softmax_inputs():
    X, y, xq = _problem(seed=3)
    ry = eq.outlier_shift(X, y, xq, 0.1, 0.3, [1.0, 100.0], "y")
    assert ry[1]["shift_linear"] / ry[0]["shift_linear"] == pytest.approx(100, rel=1e-10)
    rx = eq.outlier_shift(X, y, xq, 0.1, 0.3, [10.0, 100.0, 1000.0], "x")
    assert rx[2]["shift_linear"] / rx[1]["shift_linear"] == pytest.approx(10, rel=1e-3)
    # the softmax weight of the outlier saturates at 1: the shift is bounded by (eta/eps) max|y|
    assert rx[2]["shift_softmax"] < 1.5 * rx[1]["shift_softmax"]
    assert rx[2]["shift_softmax"] < rx[2]["shift_linear"]


def test_baselines():
    torch.manual_seed(0)
    X = torch.randn(8, 3, 5, dtype=torch.float64)
    y = torch.randn(8, 3, dtype=torch.float64)
    # min-norm OLS for k < d interpolates the context
    assert torch.allclose(bl.ols(X, y, X), y, atol=1e-10)
    # nearest neighbour copies the label of an identical query
    assert torch.equal(bl.nearest_neighbour(X, y, X[:, 1:2])[:, 0], y[:, 1])
    # ridge -> OLS as lambda -> 0 when k >= d
    X2 = torch.randn(8, 20, 5, dtype=torch.float64)
    y2 = torch.randn(8, 20, dtype=torch.float64)
    q = torch.randn(8, 2, 5, dtype=torch.float64)
    assert torch.allclose(bl.ridge(X2, y2, q, 1e-12), bl.ols(X2, y2, q), atol=1e-8)
    assert np.allclose(bl.gd(X2, y2, q, 3, 0.2).numpy(), eq.gd_predict(X2.numpy(), y2.numpy(), q.numpy(), 0.2, 3))
    # discrete-prior Bayes concentrates on the true task
    tasks_M = torch.randn(4, 5, dtype=torch.float64)
    yt = torch.einsum("bkd,d->bk", X2, tasks_M[2])
    assert torch.allclose(bl.discrete_bayes(X2, yt, q, tasks_M, 0.1), q @ tasks_M[2], atol=1e-8)
    # k = 0: every baseline is the prior mean
    assert torch.equal(bl.ridge(X2[:, :0], y2[:, :0], q, 0.25), torch.zeros(8, 2, dtype=torch.float64))


def test_model_is_causal_and_encodes_previous_example():
    torch.manual_seed(0)
    m = ICLTransformer(d=3, k_max=6, d_model=16, layers=2, heads=2, ff=32).eval()
    X, y = torch.randn(2, 7, 3), torch.randn(2, 7)
    t = encode(X, y)
    assert torch.equal(t[:, 3, 3:6], X[:, 2]) and torch.equal(t[:, 3, 6], y[:, 2]) and t[0, 0].abs()[3:].sum() == 0
    p = m(X, y)
    X2, y2 = X.clone(), y.clone()
    X2[:, 5:] += 10
    y2[:, 4:] -= 10  # y_4 is first seen by token 5
    p2 = m(X2, y2)
    assert torch.equal(p[:, :5], p2[:, :5]) and not torch.allclose(p[:, 5], p2[:, 5])
    with pytest.raises(ValueError, match=r"prompt with k = 7 examples exceeds the trained context k_max = 6"):
        m(torch.randn(1, 8, 3), torch.randn(1, 8))


TINY = {"d": 2, "k_max": 8, "tau": 1.0, "sigma": 0.3, "seeds": [0], "shallow_layers": 0,
        "model": {"d_model": 16, "layers": 2, "heads": 2, "ff": 32},
        "train": {"steps": 600, "batch_size": 64, "lr": 3e-3, "warmup": 10, "cosine": True, "grad_clip": 1.0,
                  "val_prompts": 64, "log_every": 0},
        "diversity": {"M": [], "small_max": 4, "steps": 10}, "narrow": {"family": "sparse", "finetune_steps": 0, "lr": 1e-3}}


@pytest.fixture(scope="module")
def tiny_model():
    torch.set_num_threads(1)
    ckpt, metrics = train_variant(TINY, "gaussian", 0, torch.device("cpu"))
    return ckpt, metrics


def test_training_is_deterministic_and_learns_from_the_prompt(tiny_model):
    ckpt, metrics = tiny_model
    small = {**TINY, "train": {**TINY["train"], "steps": 3}}
    a, _ = train_variant(small, "gaussian", 0, torch.device("cpu"))
    b, _ = train_variant(small, "gaussian", 0, torch.device("cpu"))
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
    model = TrainedICL.from_checkpoint(ckpt)
    prior = tasks.make_prior("gaussian", 1.0)
    te = tasks.sample_prompts(prior, 500, 9, 2, 0.3, torch.Generator().manual_seed(5), 0)
    pred, flag = model.predict_all(te["X"], te["y"], prior)
    assert flag is True
    mse_model = float(((pred[:, 8] - te["y"][:, 8]) ** 2).mean())
    mse_prior = float((te["y"][:, 8] ** 2).mean())  # prior-mean baseline
    assert mse_model < 0.5 * mse_prior
    # ablation: labels from other prompts (the prompt no longer says anything about this w) -> much worse
    y_shuf = te["y"].clone()
    y_shuf[:, :8] = te["y"][torch.roll(torch.arange(500), 1), :8]
    pred_s, _ = model.predict_all(te["X"], y_shuf, prior)
    assert float(((pred_s[:, 8] - te["y"][:, 8]) ** 2).mean()) > 1.5 * mse_model


def test_out_of_distribution_use_is_refused_or_reported(tiny_model):
    model = TrainedICL.from_checkpoint(tiny_model[0])
    prior = tasks.make_prior("gaussian", 1.0)
    X, y = torch.randn(4, 10, 2, dtype=torch.float64), torch.randn(4, 10, dtype=torch.float64)
    with pytest.raises(OutOfDistributionError, match=r"k = 9 examples exceeds the trained context k_max = 8"):
        model.predict_all(X, y, prior)
    with pytest.raises(OutOfDistributionError, match=r"k = 9 examples exceeds"):
        model.predict_all(X, y, prior, allow_ood=True)  # never extrapolated, even on request
    other = tasks.make_prior("gaussian", 2.0)
    with pytest.raises(OutOfDistributionError,
                       match=r"prior gaussian\(tau=2\) is not the training prior gaussian\(tau=1\)"):
        model.predict_all(X[:, :9], y[:, :9], other)
    with pytest.raises(OutOfDistributionError, match=r"prior discrete\(tau=1,M=4\) is not"):
        model.predict(X[:, :3], y[:, :3], X[:, 3], tasks.make_prior("discrete", 1.0, 4))
    _, flag = model.predict_all(X[:, :9], y[:, :9], other, allow_ood=True)
    assert flag is False


def test_priors():
    g = torch.Generator().manual_seed(0)
    w = tasks.sample_w(tasks.make_prior("sparse", 1.0), 2000, 4, g, 0)
    assert ((w != 0).sum(1) == 1).all() and abs(float((w ** 2).sum(1).mean()) - 4.0) < 0.4
    t1, t2 = tasks.discrete_tasks(3, 4, 8, 1.0), tasks.discrete_tasks(3, 4, 8, 1.0)
    assert torch.equal(t1, t2) and not torch.equal(t1, tasks.discrete_tasks(4, 4, 8, 1.0))
    w = tasks.sample_w(tasks.make_prior("discrete", 1.0, 8), 100, 4, g, 3)
    assert all(any(torch.equal(r, t) for t in t1) for r in w)
    assert tasks.kl_gaussian_priors(1.0, 1.0, 5) == 0 and tasks.kl_gaussian_priors(2.0, 1.0, 5) > 0
    with pytest.raises(ValueError, match="discrete prior needs M >= 1"):
        tasks.make_prior("discrete", 1.0)


def test_verdict_helpers():
    k = np.arange(5, 40)
    assert fit_exponent(k, 3.0 / k) == pytest.approx(1.0, abs=1e-12)
    assert math.isnan(fit_exponent(k, np.r_[-1.0, 1.0 / k[1:]]))
    closest = ["prior_mean", "nn", "nn", "ridge", "nn", "ridge", "ols", "gd1"]
    assert last_retrieval_k(closest) == 4 and transition_k(closest) == 5
    assert last_retrieval_k(["prior_mean", "ridge", "ridge"]) == 0 and transition_k(["prior_mean", "ridge"]) == 1
    assert band_verdict(0.01, 0.02, (0.0, 0.03)) == "supported"
    assert band_verdict(0.04, 0.08, (0.0, 0.03)) == "not supported"
    assert band_verdict(0.003, 0.095, (0.0, 0.03), 0.042) == "inconclusive"
    assert CLAIM_COLUMNS == ["claim", "essay_prediction", "measured", "ci_low", "ci_high", "verdict", "scale"]


def test_config_check_names_the_key():
    import yaml

    from algo_emu.config import SCHEMA_DIR, ConfigError, _validate
    from algo_emu.specs.essay import check

    sec = {"k_max": 8, "eval": {"order_ks": [4, 16]}}
    _validate(sec, SCHEMA_DIR / "essay.schema.yaml", "essay")
    with pytest.raises(ConfigError, match=r"essay.eval.order_ks: 16 exceeds the trained context essay.k_max = 8"):
        check(sec, {"seeds": [0]})
    with pytest.raises(ConfigError, match=r"essay.k_max"):
        _validate({"k_max": 1}, SCHEMA_DIR / "essay.schema.yaml", "essay")
    assert yaml.safe_load((SCHEMA_DIR / "essay.schema.yaml").read_text())["properties"]["k_max"]["default"] == 32


def test_a_saved_model_is_a_frozen_file_that_predicts_as_trained(tiny_model, tmp_path):
    from algo_emu.essay.train import build_frozen, save_trained
    from algo_emu.frozen import FrozenFile, FrozenModelError

    ckpt, _ = tiny_model
    path = tmp_path / "gaussian" / "seed0.pt"
    side = save_trained(path, ckpt)
    assert side["meta"]["variant"] == "gaussian" and "state_dict" not in side["meta"]
    frozen = FrozenFile(path, build_frozen)
    model, direct = TrainedICL.from_frozen(frozen), TrainedICL.from_checkpoint(ckpt)
    prior = tasks.make_prior("gaussian", 1.0)
    te = tasks.sample_prompts(prior, 64, 9, 2, 0.3, torch.Generator().manual_seed(7), 0)
    with frozen.evaluating():
        pred, _ = model.predict_all(te["X"], te["y"], prior)
    assert torch.equal(pred, direct.predict_all(te["X"], te["y"], prior)[0])
    assert frozen.proof()["bit_identical"] and (model.k_max, model.d, model.prior) == (direct.k_max, direct.d, direct.prior)
    blob = bytearray(path.read_bytes())
    blob[-100] ^= 1  # one flipped bit in the file: refused, naming it
    path.write_bytes(bytes(blob))
    with pytest.raises(FrozenModelError, match="seed0.pt: sha256 .* does not match its sidecar"):
        FrozenFile(path, build_frozen)


def test_training_leaves_the_global_generator_alone():
    small = {**TINY, "train": {**TINY["train"], "steps": 2}}
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a, _ = train_variant(small, "gaussian", 0, torch.device("cpu"))
    assert torch.equal(torch.random.get_rng_state(), before)
    torch.manual_seed(999)  # another global state: the same model (its init has its own seed)
    b, _ = train_variant(small, "gaussian", 0, torch.device("cpu"))
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])


def test_cli_jobs_bind_to_the_step_functions(tmp_path):
    import json

    from algo_emu.cli import bind_job, describe, main
    from algo_emu.config import schema_defaults
    from algo_emu.experiments import essay

    listing = describe("essay")
    for step, func in essay.STEPS.items():
        assert f"  {step}(" in listing and func.__doc__.strip().splitlines()[0] in listing
    section = schema_defaults("essay")
    job = {"params": section, "variant": "narrow", "seed": 0, "init": "g.pt", "out_model": "m.pt",
           "out_metrics": "m.json", "device_spec": "cpu"}
    kwargs = bind_job("essay", "train", job, threads=3)
    assert kwargs["threads"] == 3 and kwargs["init"] == "g.pt" and set(kwargs["params"]) <= set(section)
    with pytest.raises(SystemExit, match=r"essay evaluate reads .*essay\.eval.*missing from params"):
        bind_job("essay", "evaluate", {"params": {}, "seed": 0, "models": [], "out_raw": "r", "out_metrics": "m"})
    with pytest.raises(SystemExit, match="unknown argument.*out_csvs"):
        bind_job("essay", "equivalences", {"params": section, "seeds": [0], "out_csvs": "x.csv"})
    # models stays a list of <variant>=<checkpoint path> strings
    with pytest.raises(SystemExit, match="models entries are <variant>=<path>, got 'gaussian'"):
        main(["essay", "evaluate", json.dumps({"params": section, "seed": 0, "models": ["gaussian"], "device_spec": "cpu",
                                               "out_raw": str(tmp_path / "r.pt"), "out_metrics": str(tmp_path / "m.json")}),
              "--threads", "1"])
    with pytest.raises(ValueError, match="kind must be icl or equivalences, got 'curves'"):
        main(["essay", "figure", json.dumps({"params": {}, "kind": "curves", "out": str(tmp_path / "f")})])
