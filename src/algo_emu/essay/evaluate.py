"""Per-seed measurements of E6 on the trained models (everything the claims table needs, per prompt).

:func:`evaluate_seed` returns (summary dict, raw arrays). The raw arrays keep one entry per evaluation
prompt so that :mod:`algo_emu.essay.claims` can bootstrap over seeds and prompts jointly. Every draw
comes from a named stream ``essay/eval/...`` of the seed; the test draws are never used for tuning
(GD's step size is tuned on a separate ``calib`` draw).
"""

from __future__ import annotations

import numpy as np
import torch

from algo_emu.essay import baselines as bl
from algo_emu.essay import equivalences as eq
from algo_emu.essay import tasks
from algo_emu.essay.train import TrainedICL
from algo_emu.rng import torch_stream


def _stream(seed, *names):
    return torch_stream(seed, "essay", "eval", *names)


def baseline_predictions(X, y, params: dict, etas: dict, k: int, tasks_M: torch.Tensor | None = None) -> dict:
    """Each baseline's k-shot prediction for query x_k (X, y: (B, K+1, ...); uses examples 0..k-1)."""
    lam = params["sigma"] ** 2 / params["tau"] ** 2
    Xc, yc, Xq = X[:, :k], y[:, :k], X[:, k:k + 1]
    out = {"prior_mean": bl.prior_mean(Xc, yc, Xq)[:, 0], "ols": bl.ols(Xc, yc, Xq)[:, 0],
           "ridge": bl.ridge(Xc, yc, Xq, lam)[:, 0], "nn": bl.nearest_neighbour(Xc, yc, Xq)[:, 0]}
    for steps in params["eval"]["gd_steps"]:
        out[f"gd{steps}"] = bl.gd(Xc, yc, Xq, steps, etas[(steps, k)])[:, 0]
    if tasks_M is not None:
        out["dmmse"] = bl.discrete_bayes(Xc, yc, Xq, tasks_M, params["sigma"])[:, 0]
    return out


def tune_etas(params: dict, seed: int) -> dict:
    d, K, sigma = params["d"], params["k_max"], params["sigma"]
    cal = tasks.sample_prompts(tasks.make_prior("gaussian", params["tau"]), params["eval"]["n_prompts"], K + 1, d,
                               sigma, _stream(seed, "calib"), seed)
    etas = {}
    for steps in params["eval"]["gd_steps"]:
        for k in range(1, K + 1):
            etas[(steps, k)] = bl.tune_gd_eta(cal["X"][:, :k], cal["y"][:, :k], cal["X"][:, k:k + 1],
                                              cal["y"][:, k:k + 1], steps)
        etas[(steps, 0)] = 1.0
    return etas


def curves(model: TrainedICL, params: dict, seed: int, prior: dict, etas: dict, name: str,
           tasks_M: torch.Tensor | None = None, allow_ood: bool = False) -> tuple[dict, bool]:
    """Per prompt and k: squared errors of the model and every baseline, and squared model-baseline distances."""
    d, K, sigma = params["d"], params["k_max"], params["sigma"]
    te = tasks.sample_prompts(prior, params["eval"]["n_prompts"], K + 1, d, sigma, _stream(seed, name), seed)
    X, y = te["X"], te["y"]
    pred, in_dist = model.predict_all(X, y, prior, allow_ood=allow_ood)
    raw = {"err_model": ((pred - y) ** 2).numpy()}
    per_k: dict[str, list] = {}
    for k in range(K + 1):
        for b, p in baseline_predictions(X, y, params, etas, k, tasks_M).items():
            per_k.setdefault(f"err_{b}", []).append(((p - y[:, k]) ** 2).numpy())
            per_k.setdefault(f"dist_{b}", []).append(((p - pred[:, k]) ** 2).numpy())
    raw.update({key: np.stack(v, axis=1) for key, v in per_k.items()})
    return raw, in_dist


def ordering(model: TrainedICL, params: dict, seed: int, prior: dict) -> dict:
    """Per prompt: error with the drawn order, with R random reorderings, and of the average over them."""
    d, sigma, R = params["d"], params["sigma"], params["eval"]["orderings"]
    n = params["eval"]["n_prompts"]
    out = {}
    for k in params["eval"]["order_ks"]:
        te = tasks.sample_prompts(prior, n, k + 1, d, sigma, _stream(seed, "order", k), seed)
        X, y = te["X"], te["y"]
        gen = _stream(seed, "order", k, "perm")
        preds = []
        for r in range(R + 1):
            perm = torch.arange(k).expand(n, k) if r == 0 else torch.argsort(torch.rand(n, k, generator=gen), dim=1)
            Xp = torch.cat([torch.gather(X[:, :k], 1, perm[..., None].expand(n, k, d)), X[:, k:]], dim=1)
            yp = torch.cat([torch.gather(y[:, :k], 1, perm), y[:, k:]], dim=1)
            preds.append(model.predict_all(Xp, yp, prior)[0][:, k])
        P = torch.stack(preds, dim=1)  # (n, R+1); column 0 = drawn order
        err = (P - y[:, k:k + 1]) ** 2
        out[f"order_k{k}_err"] = err.numpy()
        out[f"order_k{k}_ens_err"] = ((P[:, 1:].mean(1) - y[:, k]) ** 2).numpy()
    return out


def outlier(model: TrainedICL, params: dict, seed: int, prior: dict) -> dict:
    """Prediction shift |f(prompt with y_0 + delta * sd_y) - f(prompt)| of the model and of ridge/OLS."""
    d, K, sigma = params["d"], params["k_max"], params["sigma"]
    k = params["eval"]["outlier_k"]
    lam = sigma ** 2 / params["tau"] ** 2
    te = tasks.sample_prompts(prior, params["eval"]["n_prompts"], k + 1, d, sigma, _stream(seed, "outlier"), seed)
    X, y = te["X"], te["y"]
    sd_y = float(np.sqrt(params["tau"] ** 2 * d + sigma ** 2))
    base = model.predict_all(X, y, prior)[0][:, k]
    base_r = bl.ridge(X[:, :k], y[:, :k], X[:, k:k + 1], lam)[:, 0]
    out = {}
    for delta in params["eval"]["outlier_sizes"]:
        y2 = y.clone()
        y2[:, 0] += delta * sd_y
        out[f"outlier_{delta:g}_model"] = (model.predict_all(X, y2, prior, allow_ood=True)[0][:, k] - base).abs().numpy()
        out[f"outlier_{delta:g}_ridge"] = (bl.ridge(X[:, :k], y2[:, :k], X[:, k:k + 1], lam)[:, 0] - base_r).abs().numpy()
    return out


def ood_priors(model: TrainedICL, params: dict, seed: int, etas: dict) -> tuple[dict, list]:
    """The main model on Gaussian priors with other tau (reported out-of-distribution): error vs Bayes (ridge at
    the TEST prior's lam) at k = k_max."""
    d, K, sigma = params["d"], params["k_max"], params["sigma"]
    raw, rows = {}, []
    for tau in params["eval"]["ood_tau"]:
        prior = tasks.make_prior("gaussian", tau)
        te = tasks.sample_prompts(prior, params["eval"]["n_prompts"], K + 1, d, sigma, _stream(seed, "ood", tau), seed)
        X, y = te["X"], te["y"]
        pred, in_dist = model.predict_all(X, y, prior, allow_ood=True)
        bayes = bl.ridge(X[:, :K], y[:, :K], X[:, K:], sigma ** 2 / tau ** 2)[:, 0]
        raw[f"ood_{tau:g}_model"] = ((pred[:, K] - y[:, K]) ** 2).numpy()
        raw[f"ood_{tau:g}_bayes"] = ((bayes - y[:, K]) ** 2).numpy()
        rows.append({"tau": tau, "in_distribution": in_dist, "kl": tasks.kl_gaussian_priors(tau, params["tau"], d)})
    return raw, rows


def evaluate_seed(models: dict[str, TrainedICL], params: dict, seed: int) -> tuple[dict, dict]:
    tau, d = params["tau"], params["d"]
    gauss = tasks.make_prior("gaussian", tau)
    etas = tune_etas(params, seed)
    raw: dict[str, np.ndarray] = {}
    summary: dict = {"seed": seed, "gd_etas": {f"gd{s}_k{k}": v for (s, k), v in etas.items()}}
    main = models["gaussian"]
    c, _ = curves(main, params, seed, gauss, etas, "main")
    raw.update({f"gaussian/{k}": v for k, v in c.items()})
    raw.update(ordering(main, params, seed, gauss))
    raw.update(outlier(main, params, seed, gauss))
    o, rows = ood_priors(main, params, seed, etas)
    raw.update(o)
    summary["ood"] = rows
    if "shallow" in models:
        c, _ = curves(models["shallow"], params, seed, gauss, etas, "main")
        raw.update({f"shallow/{k}": v for k, v in c.items()})
    for name, model in models.items():
        if name.startswith("M"):
            M = int(name[1:])
            tm = tasks.discrete_tasks(seed, d, M, tau)
            c, _ = curves(model, params, seed, model.prior, etas, f"div{M}", tasks_M=tm)
            raw.update({f"{name}/{k}": v for k, v in c.items() if k in ("err_model", "dist_dmmse", "dist_ridge",
                                                                          "err_dmmse", "err_ridge")})
            c, flag = curves(model, params, seed, gauss, etas, "main", allow_ood=True)
            raw[f"{name}/gauss_err_model"] = c["err_model"]
            summary.setdefault("diversity_on_gaussian_in_distribution", {})[name] = flag
    narrow_prior = tasks.make_prior(params["narrow"]["family"], tau)
    for name in ("gaussian", "narrow", "control"):
        if name in models:
            for fam, prior in (("other", gauss), ("narrow", narrow_prior)):
                te = tasks.sample_prompts(prior, params["eval"]["n_prompts"], params["k_max"] + 1, d, params["sigma"],
                                          _stream(seed, "family", fam), seed)
                pred, flag = models[name].predict_all(te["X"], te["y"], prior, allow_ood=True)
                raw[f"family_{fam}/{name}_err"] = ((pred - te["y"]) ** 2).numpy()
                raw[f"family_{fam}/prior_err"] = (te["y"] ** 2).numpy()
                summary.setdefault("family_in_distribution", {})[f"{name}_on_{fam}"] = flag
    return summary, raw


def construction_rows(params: dict, seeds) -> list[dict]:
    """Exact float64 equivalences (no training) on random prompts of every seed: one row per check."""
    cfg = params["equivalence"]
    d, k, lam = cfg["d"], cfg["k"], params["sigma"] ** 2 / params["tau"] ** 2
    rows = []
    for seed in seeds:
        rng = np.random.default_rng(int(torch_stream(seed, "essay", "equiv").initial_seed()))
        X = rng.normal(size=(cfg["instances"], k, d))
        w = params["tau"] * rng.normal(size=(cfg["instances"], d))
        y = np.einsum("bkd,bd->bk", X, w) + params["sigma"] * rng.normal(size=(cfg["instances"], k))
        xq = rng.normal(size=(cfg["instances"], 4, d))
        eta = cfg["eta"]
        for L in cfg["layers"]:
            err = np.abs(eq.lsa_predict(X, y, xq, eta, L) - eq.gd_predict(X, y, xq, eta, L)).max()
            rows.append({"seed": seed, "check": "lsa_vs_gd", "param": "layers", "value": L, "measure": "max_abs_err", "result": float(err)})
            err = np.abs(eq.ridge_lsa_predict(X, y, xq, lam, eta, L) - eq.gd_predict(X, y, xq, eta, L, lam=lam)).max()
            rows.append({"seed": seed, "check": "ridge_lsa_vs_ridge_gd", "param": "layers", "value": L,
                         "measure": "max_abs_err", "result": float(err)})
        for L in cfg["ridge_layers"]:
            err = np.abs(eq.ridge_lsa_predict(X, y, xq, lam, cfg["ridge_eta"], L) - eq.ridge_predict(X, y, xq, lam)).max()
            rows.append({"seed": seed, "check": "ridge_lsa_vs_posterior_mean", "param": "layers", "value": L,
                         "measure": "max_abs_err", "result": float(err)})
        for r in eq.softmax_deviation(X, y, xq, eta, cfg["softmax_eps"]):
            rows.append({"seed": seed, "check": "softmax_vs_linear", "param": "eps", "value": r["eps"],
                         "measure": "rel_rms_dev", "result": r["rel_dev"]})
        for where in ("y", "x"):
            for r in eq.outlier_shift(X, y, xq, eta, cfg["outlier_eps"], cfg["outlier_sizes"], where):
                rows.append({"seed": seed, "check": f"outlier_{where}_linear", "param": "delta", "value": r["delta"],
                             "measure": "rms_shift", "result": r["shift_linear"]})
                rows.append({"seed": seed, "check": f"outlier_{where}_softmax", "param": "delta", "value": r["delta"],
                             "measure": "rms_shift", "result": r["shift_softmax"]})
    return rows
