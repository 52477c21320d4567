"""E3 (Appendix C.1): frozen evaluation leaves the model bit-identical, query-only loss, CLI steps end to end."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
import torch

from algo_emu import paper_values
from algo_emu.config import ConfigError, _validate, load_schema
from algo_emu.specs.statistical import check as check_statistical
from algo_emu.data import statistical as st
from algo_emu.experiments import statistical as e3
from algo_emu.experiments import statistical_tables
from algo_emu.data import statistical_sets as sets
from algo_emu.frozen import RECORD_KEYS, FrozenFile, FrozenModelError, frozen, load_frozen, parameter_digest
from algo_emu.runtime import REPO_ROOT
from algo_emu.train import TrainConfig, member_losses, train_ensemble

TINY = {
    "modes": ["fitted", "reference_code"], "n_prompts": 40, "n_context": 5, "n_query": 2, "d": 3, "hidden": 12, "p": 8,
    "heads_sweep": [1, 2], "algorithms": {"fitted": ["ols", "ridge", "lasso", "gd"], "reference_code": ["linear", "ridge", "lasso"]},
    "data_params": {"fitted": {}, "reference_code": {}}, "epochs": 2, "batch_size": 8, "lr": 1e-3, "eval_prompts": 16,
    "eval_chunk": 5, "checkpoint_every": 1, "compile": False, "attention": "auto", "readout": "block",
}


@pytest.fixture
def params():
    return copy.deepcopy(TINY)


def _cli(step: str, job: dict, threads: int | None = None):
    """``python -m algo_emu statistical <step> JOB [--threads N]``, in this process."""
    from algo_emu.cli import main

    return main(["statistical", step, json.dumps(job)] + (["--threads", str(threads)] if threads else []))


def _snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("mode", ["fitted", "reference_code"])
def test_frozen_evaluation_leaves_parameters_bit_identical(params, tmp_path, mode):
    path = tmp_path / "model.pt"
    saved = e3.train_setting(params, mode, 2, [0, 1], path, None, "cpu", 1)
    model, info = load_frozen(path, e3.build_model)
    assert info["param_digest"] == saved["param_digest"]
    assert not any(p.requires_grad for p in model.parameters()) and not model.training
    before = _snapshot(model)
    record: dict = {}
    with frozen(model, record):
        result = e3.evaluate_model(params, model, mode, [0, 1], chunk=5)
    after = _snapshot(model)
    assert before.keys() == after.keys()
    for key in before:
        assert torch.equal(before[key], after[key]), key   # bit-identical, not just close
    assert record["bit_identical"]
    assert record["param_digest_before"] == record["param_digest_after"] == parameter_digest(model)
    out = e3.evaluate_setting(params, mode, 2, [0, 1], path, tmp_path / "runs", "cpu", 1)
    fz = out[1]["frozen"]
    assert sorted(fz) == sorted(RECORD_KEYS)   # the one record schema of algo_emu.frozen (E4 writes the same)
    assert fz["bit_identical"] and fz["file_unchanged"] and fz["matches_saved"]
    assert fz["param_digest_before"] == fz["param_digest_after"] == fz["param_digest_at_save"] == saved["param_digest"]
    assert fz["file_sha256_before"] == fz["file_sha256_after"] == fz["sha256"] == saved["sha256"]
    assert sorted(out[0]["errors"]) == sorted(e3.algorithms(params, mode))
    assert out[0]["timing"]["eval_seconds"] > 0 and out[0]["timing"]["train"]["epoch_seconds"]  # one timing shape


def test_a_frozen_file_written_under_the_old_name_of_p_loads(params, tmp_path):
    """Frozen files written before the prompt length was named p everywhere hold it as ``total_tokens`` in their
    meta; they load as they are (the file is not rewritten: its checksum still matches its sidecar)."""
    from algo_emu.frozen import save_frozen

    path = tmp_path / "model.pt"
    e3.train_setting(params, "reference_code", 1, [0], path, None, "cpu", 1)
    model, info = load_frozen(path, e3.build_model)
    old = dict(info["meta"])
    old["total_tokens"] = old.pop("p")
    save_frozen(tmp_path / "old.pt", model, old)
    assert "p" not in torch.load(tmp_path / "old.pt", weights_only=True)["meta"]
    again, _ = load_frozen(tmp_path / "old.pt", e3.build_model)
    assert again.p == model.p == params["p"] and parameter_digest(again) == parameter_digest(model)


def test_frozen_detects_a_changed_parameter_and_a_tampered_file(params, tmp_path):
    path = tmp_path / "model.pt"
    e3.train_setting(params, "reference_code", 1, [0], path, None, "cpu", 1)
    model, _ = load_frozen(path, e3.build_model)
    record: dict = {}
    with pytest.raises(FrozenModelError, match="changed"):
        with frozen(model, record):
            model.w_o.data[0, 0, 0] += 1e-7
    assert record["bit_identical"] is False
    blob = torch.load(path, weights_only=True)
    blob["state_dict"]["b_o"] += 1.0
    torch.save(blob, path)
    with pytest.raises(FrozenModelError, match="sha256"):
        load_frozen(path, e3.build_model)


def test_frozen_file_proof_catches_a_file_changed_during_evaluation(params, tmp_path):
    path = tmp_path / "model.pt"
    e3.train_setting(params, "reference_code", 1, [0], path, None, "cpu", 1)
    ff = FrozenFile(path, e3.build_model)
    with pytest.raises(FrozenModelError, match="before any evaluation"):
        ff.proof()
    with ff.evaluating() as model:
        e3.evaluate_model(params, model, "reference_code", [0], chunk=5)
        with open(path, "ab") as fh:   # another process appends to the file mid-evaluation
            fh.write(b"x")
    with pytest.raises(FrozenModelError, match="changed during evaluation") as info:
        ff.proof()
    assert "'file_unchanged': False" in str(info.value) and "'bit_identical': True" in str(info.value)


def test_fitted_task_loss_sees_only_the_query_tokens(params):
    task = e3.StatisticalTask([0, 1], "fitted", params, torch.device("cpu"))
    assert task.inputs.shape == (2, 40, 7, 8) and task.targets.shape == (2, 40, 2, 1)
    assert task.loss_positions.tolist() == [5, 6]
    data = st.generate("fitted", e3.algorithms(params, "fitted"), seed=1, n_prompts=40, n_context=5, n_query=2, d=3)
    assert torch.equal(task.inputs[1], data["inputs"]) and torch.equal(task.targets[1, ..., 0], data["target"])
    ref = e3.StatisticalTask([0], "reference_code", params, torch.device("cpu"))
    assert ref.loss_positions is None and ref.inputs.shape == (1, 40, 5, 6) and ref.targets.shape == (1, 40, 5, 1)

    # One engine step equals one hand-made Adam step on the query-position loss.
    meta = e3.model_meta(params, "fitted", 1, [0, 1])
    gens = lambda: [torch.Generator().manual_seed(s) for s in (0, 1)]  # noqa: E731
    model, manual = e3.build_model(meta, gens()), e3.build_model(meta, gens())
    params1 = copy.deepcopy(params) | {"n_prompts": 8}
    small = e3.StatisticalTask([0, 1], "fitted", params1, torch.device("cpu"))
    train_ensemble(model, small, TrainConfig(epochs=1, batch_size=8, lr=1e-2, stream="statistical/shuffle"))
    x, t = small.batch(torch.stack([torch.arange(8)] * 2))
    opt = torch.optim.Adam(manual.parameters(), lr=1e-2)
    member_losses(manual(x)[:, :, 5:7], t, manual.out_mask).sum().backward()
    opt.step()
    h = params["hidden"]
    for (name, a), (_, b) in zip(model.named_parameters(), manual.named_parameters()):
        if name == "b_qkv":  # the key bias has an exactly-zero true gradient: Adam amplifies rounding noise
            a, b = torch.cat([a[:, :h], a[:, 2 * h:]], 1), torch.cat([b[:, :h], b[:, 2 * h:]], 1)
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    moved = e3.build_model(meta, gens())
    assert not torch.equal(moved.w_o, model.w_o)  # it really trained


def test_evaluation_data_is_fresh_and_paired_across_algorithms(params):
    assert e3.eval_seed(0) != 0 and e3.eval_seed(0) != e3.eval_seed(1)
    a = sets.eval_data(params, "fitted", "ridge", 0)
    b = sets.eval_data(params, "fitted", "lasso", 0)
    train = st.generate("fitted", e3.algorithms(params, "fitted"), seed=0, n_prompts=16, n_context=5, n_query=2, d=3)
    assert torch.equal(a["X"], b["X"]) and not torch.equal(a["X"], train["X"])
    assert a["inputs"].shape == (16, 7, 8) and (a["algorithm"] == 0).all()


def test_evaluation_refuses_data_the_model_was_not_trained_on(params, tmp_path):
    path = tmp_path / "model.pt"
    e3.train_setting(params, "fitted", 1, [0], path, None, "cpu", 1)
    other = copy.deepcopy(params)
    other["data_params"]["fitted"] = {"lasso_alpha": 0.5}
    with pytest.raises(ValueError, match="retrain"):
        e3.evaluate_setting(other, "fitted", 1, [0], path, tmp_path / "runs", "cpu", 1)
    with pytest.raises(ValueError, match="holds members"):
        e3.evaluate_setting(params, "fitted", 2, [0], path, tmp_path / "runs", "cpu", 1)


@pytest.mark.parametrize("mode", ["fitted", "reference_code"])
def test_a_shared_data_file_trains_the_model_the_job_would_have_generated_data_for(params, tmp_path, mode):
    paths = [tmp_path / f"seed{s}" / "dataset.pt" for s in (0, 1)]
    for s, path in zip((0, 1), paths):
        _cli("data", dict(params=params, mode=mode, seed=s, path=str(path)))
        loaded, meta = st.load_dataset(path, {"seed": s})
        assert meta["mode"] == mode and meta["params"] == json.loads(json.dumps(sets.data_spec(params, mode)))
        fresh = e3.generate_data(params, mode, s)
        for key in st.DATASET_KEYS:
            assert torch.equal(loaded[key], fresh[key]) and loaded[key].dtype == fresh[key].dtype, key
    here = e3.train_setting(params, mode, 2, [0, 1], tmp_path / "here.pt", None, "cpu", 1)
    shared = e3.train_setting(params, mode, 2, [0, 1], tmp_path / "shared.pt", None, "cpu", 1, data_paths=paths)
    assert shared["param_digest"] == here["param_digest"] and shared["history"] == here["history"]
    assert shared["data_sha256"] == here["data_sha256"] and shared["algorithm_counts"] == here["algorithm_counts"]
    # a file of another seed, of other data parameters or changed on disk is refused
    with pytest.raises(ValueError, match="generated with seed=1"):
        e3.load_data(params, mode, [0, 1], paths[::-1])
    other = copy.deepcopy(params) | {"n_prompts": 41}
    with pytest.raises(ValueError, match="rerun the data rule"):
        e3.load_data(other, mode, [0, 1], paths)
    paths[1].write_bytes(paths[1].read_bytes() + b"x")
    with pytest.raises(ValueError, match="sha256"):
        e3.load_data(params, mode, [0, 1], paths)


def test_train_evaluate_aggregate_figure_through_the_cli(params, tmp_path):
    metrics = []
    for mode in params["modes"]:
        data = [str(tmp_path / "data" / mode / f"seed{s}" / "dataset.pt") for s in (0, 1)]
        for s, path in zip((0, 1), data):
            _cli("data", dict(params=params, mode=mode, seed=s, path=path))
        for H in params["heads_sweep"]:
            model = tmp_path / "models" / f"{mode}_H{H}.pt"
            blind = tmp_path / "models" / f"{mode}_H{H}_blind.pt"
            for path, extra in ((model, {}), (blind, {"blind": True})):
                _cli("train", dict(params=params, mode=mode, H=H, seeds=[0, 1], model_path=str(path), data_paths=data,
                                   device_spec="cpu", **extra), threads=1)
            out = tmp_path / "runs" / f"{mode}_H{H}"
            _cli("evaluate", dict(params=params, mode=mode, H=H, seeds=[0, 1], model_path=str(model),
                                  blind_path=str(blind), out_dir=str(out), device_spec="cpu"), threads=1)
            metrics += [str(out / f"seed{s}" / "metrics.json") for s in (0, 1)]
    m = json.loads(open(metrics[0]).read())
    assert m["mode"] == "fitted" and m["headline"] == "emulation" and len(m["train_history"]) == 2
    assert set(m["errors"]["lasso"]) == {"emulation", "prediction", "algorithm"}
    assert m["ablation_mse"]["lasso"]["none"] == m["mse"]["lasso"]
    assert set(m["ablation_mse"]["lasso"]) == {"none", "other_prompt", "permuted", "random", "zeros", "other_algorithm",
                                               "context_zeroed"}
    assert m["blind"]["budget"] == m["budget"] and m["blind"]["frozen"]["bit_identical"] is True
    assert m["blind"]["input"].endswith("d_in=4, no weights in the prompt")  # [x; y] of width d + 1 = 4
    m_ref = json.loads(open(metrics[-1]).read())
    assert "context_zeroed" not in m_ref["ablation_mse"]["ridge"] and "other_algorithm" in m_ref["ablation_mse"]["ridge"]
    tables = tmp_path / "tables"
    job = dict(params=params, metrics=metrics, runs_csv=str(tables / "runs.csv"),
               table_csv=str(tables / "statistical_emulation.csv"), ablation_csv=str(tables / "abl.csv"),
               ablation_runs_csv=str(tables / "abl_runs.csv"))
    _cli("aggregate", job)
    tab = pd.read_csv(tables / "statistical_emulation.csv")
    assert list(tab.columns) == statistical_tables.COLUMNS and len(tab) == (4 + 3) * 2 and (tab.n_seeds == 2).all()
    abl = pd.read_csv(tables / "abl.csv")
    assert list(abl.columns) == ["experiment", "mode", "algorithm", "heads", "ablation", "mse_mean", "mse_std",
                                 "mse_ci_low", "mse_ci_high", "n_seeds", "mse_over_blind"]
    assert len(abl) == 4 * 2 * 8 + 3 * 2 * 7 and (abl.n_seeds == 2).all()
    none = abl[abl.ablation == "none"].set_index(["mode", "algorithm", "heads"])
    assert none.loc[list(zip(tab["mode"], tab.algorithm, tab.heads)), "mse_over_blind"].tolist() == pytest.approx(
        tab.mse_over_blind.tolist(), rel=1e-12)
    _cli("ablation-figure", dict(table=str(tables / "abl.csv"), runs_csv=str(tables / "abl_runs.csv"),
                                 out=str(tmp_path / "abl_fig")))
    assert (tmp_path / "abl_fig.png").stat().st_size > 1000
    # a metrics file whose baseline had another budget is refused, naming the key
    bad = json.loads(open(metrics[0]).read())
    bad["blind"]["budget"]["lr"] = 0.01
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"bad.json: the weight-blind baseline's training budget differs from the "
                                         r"model's: lr: model 0.001, baseline 0.01"):
        _cli("aggregate", job | {"metrics": [str(tmp_path / "bad.json"), *metrics[1:]]})
    # the baseline given as the model to ablate (its prompt has no weights), and the reverse
    with pytest.raises(ValueError, match="a weight-blind baseline \\(its prompt has no weights\\) was given as the model"):
        e3.evaluate_setting(params, "fitted", 1, [0, 1], tmp_path / "models" / "fitted_H1_blind.pt", tmp_path / "x",
                            "cpu", 1, blind_path=tmp_path / "models" / "fitted_H1.pt")
    ref = tab[tab["mode"] == "reference_code"].set_index(["algorithm", "heads"])
    pv = paper_values.STATISTICAL_HEADS
    assert ref.loc[("lasso", 2), "paper_mse"] == pv["lasso"]["mean"][1]
    assert ref.loc[("linear", 1), "paper_std"] == pv["linear"]["std"][0]
    assert (ref.mse_mean == ref.prediction_mean).all() and (ref.mse_is == "prediction").all()
    fit = tab[tab["mode"] == "fitted"]
    assert fit.paper_mse.isna().all() and (fit.mse_mean == fit.emulation_mean).all()
    assert (fit.alg_error_mean > 0).all()
    _cli("figure", dict(table=str(tables / "statistical_emulation.csv"), runs_csv=str(tables / "runs.csv"),
                        out=str(tmp_path / "fig")))
    assert (tmp_path / "fig.png").stat().st_size > 1000 and (tmp_path / "fig.pdf").stat().st_size > 1000


def test_the_steps_are_listed_with_their_arguments_and_docstrings():
    from algo_emu.cli import describe

    listing = describe("statistical")
    for step, func in e3.STEPS.items():
        assert f"  {step}(" in listing and func.__doc__.strip().splitlines()[0] in listing
    assert set(e3.PARAMS_OF) == {"data", "train", "evaluate", "aggregate"}


def test_the_cli_names_a_bad_mode_or_argument(params, tmp_path):
    # a mode outside MODES is refused before any work, naming the argument and the allowed values
    for step, job in (("data", dict(seed=0, path=str(tmp_path / "d.pt"))),
                      ("train", dict(H=1, seeds=[0], model_path=str(tmp_path / "m.pt"), device_spec="cpu")),
                      ("evaluate", dict(H=1, seeds=[0], model_path=str(tmp_path / "m.pt"), out_dir=str(tmp_path),
                                        device_spec="cpu"))):
        with pytest.raises(ValueError, match=r"mode must be one of \['reference_code', 'fitted'\], got 'published'"):
            _cli(step, dict(params=params, mode="published", **job), threads=1 if step != "data" else None)
    assert list(tmp_path.iterdir()) == []
    # the old flag's name is not an argument (the function's is: H); a declared key missing from params is named
    with pytest.raises(SystemExit, match=r"statistical train: unknown argument\(s\) heads; missing argument\(s\) H"):
        _cli("train", dict(params=params, mode="fitted", heads=1, seeds=[0], model_path=str(tmp_path / "m.pt")))
    with pytest.raises(SystemExit, match="statistical data: .*n_prompts"):
        _cli("data", dict(params={k: v for k, v in params.items() if k != "n_prompts"}, mode="fitted", seed=0,
                          path=str(tmp_path / "d.pt")))
    assert list(tmp_path.iterdir()) == []


def test_config_checks(params):
    check_statistical(params, {})
    for key, value, match in [("heads_sweep", [5], "do not divide"), ("p", 6, "smaller than the 7 tokens")]:
        with pytest.raises(ConfigError, match=match):
            check_statistical(copy.deepcopy(params) | {key: value}, {})


def test_schema_defaults_are_the_protocol_and_the_data_layers():
    cfg: dict = {}
    path = REPO_ROOT / "workflow" / "schemas" / "statistical.schema.yaml"
    _validate(cfg, path, "statistical")
    assert {k: cfg[k] for k in ("n_prompts", "n_context", "d", "hidden", "p", "batch_size", "lr", "epochs", "eval_prompts")} == {
        "n_prompts": 50000, "n_context": 20, "d": 24, "hidden": 48, "p": 60, "batch_size": 32, "lr": 0.001,
        "epochs": 300, "eval_prompts": 1000}
    assert cfg["heads_sweep"] == [1, 2, 4, 6, 8, 12] and cfg["modes"][0] == "fitted"
    # the published protocol's data: label noise 0.05, ridge lambda 5, lasso zeroes a coordinate with probability 1/2
    assert cfg["data_params"]["reference_code"] == {"noise_std": 0.05, "ridge_lambda": 5.0, "lasso_zero_prob": 0.5}
    assert st.DEFAULT_PARAMS == cfg["data_params"]  # the data layer reads the schema's
    for mode in st.MODES:
        assert tuple(cfg["algorithms"][mode]) == st.MIXED[mode], mode
    schema = load_schema(path)   # the shared training keys resolved (training.schema.yaml)
    assert schema["additionalProperties"] is False
    for key, spec in schema["properties"].items():
        assert "description" in spec and "default" in spec, key


def test_published_readout_trains_evaluates_and_is_named_only_where_chosen(params, tmp_path):
    """statistical.readout = published: the frozen model carries the second read-out (meta readout_hidden = h) and
    evaluates from its file; its record's parameters name the read-out, so its hash differs from the default's,
    while a default run's parameters do not name the key at all (its records and hashes are as before)."""
    default = e3.train_setting(params, "reference_code", 2, [0], tmp_path / "block.pt", None, "cpu", 1)
    published = e3.train_setting(params | {"readout": "published"}, "reference_code", 2, [0], tmp_path / "pub.pt", None,
                                 "cpu", 1)
    assert "readout" not in default["params"] and published["params"]["readout"] == "published"
    assert default["config_hash"] != published["config_hash"]
    model, info = load_frozen(tmp_path / "pub.pt", e3.build_model)
    assert info["meta"]["readout_hidden"] == params["hidden"] and model.w_r.shape == (1, params["hidden"], 1)
    plain, info0 = load_frozen(tmp_path / "block.pt", e3.build_model)
    assert "readout_hidden" not in info0["meta"] and not hasattr(plain, "w_r")
    out = e3.evaluate_setting(params | {"readout": "published"}, "reference_code", 2, [0], tmp_path / "pub.pt",
                              tmp_path / "runs", "cpu", 1)
    assert out[0]["frozen"]["bit_identical"] and sorted(out[0]["errors"]) == sorted(e3.algorithms(params, "reference_code"))
