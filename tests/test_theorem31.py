"""E2 (Theorem 3.1): task == data layer, exact read-out, determinism, CLI steps end to end."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
import torch

from algo_emu.config import ConfigError, _validate, load_schema
from algo_emu.specs.theorem31 import check as check_theorem31
from algo_emu.data import theorem31 as t31
from algo_emu.experiments import theorem31 as e2
from algo_emu.experiments import theorem31_tables
from algo_emu.runtime import REPO_ROOT
from algo_emu.train import Member, epoch_order

TINY = {
    "n_prompts": 40, "n_tokens": 4, "d": 3, "hidden": 8, "heads": 1, "fs": ["tanh", "identity", "sigmoid", "step"],
    "p_sweep": [4, 6], "x_dist": "uniform", "x_scale": 5.0, "gd_eta": 0.1, "epochs": 2, "batch_size": 8, "lr": 1e-3,
    "test_fraction": 0.25, "eval_chunk": 7, "checkpoint_every": 1, "compile": False, "attention": "auto",
}


@pytest.fixture
def params():
    return copy.deepcopy(TINY)


def _cli(step: str, job: dict, threads: int | None = None):
    """``python -m algo_emu theorem31 <step> JOB [--threads N]``, in this process."""
    from algo_emu.cli import main

    return main(["theorem31", step, json.dumps(job)] + (["--threads", str(threads)] if threads else []))


def test_task_batches_are_the_data_layers_prompts_and_targets(params):
    task = e2.Theorem31Task([3, 5], params, torch.device("cpu"))
    assert task.members == [Member(s, f) for s in (3, 5) for f in params["fs"]]
    assert task.inputs_train.shape == (2, 30, 4, 7) and task.inputs_test.shape == (2, 10, 4, 7)
    index = torch.stack([torch.arange(e, e + 6) for e in range(len(task.members))])  # (E, 6)
    x, y = task.batch(index)
    assert x.shape == (8, 6, 4, 7) and y.shape == (8, 6, 4, 3) and x.dtype == y.dtype == torch.float32
    for e, m in enumerate(task.members):
        data = t31.generate(m.seed, 40, 4, 3, f=m.name, dtype=torch.float32)
        train_idx, _ = e2.split(m.seed, 40, 0.25)
        rows = train_idx[index[e]]
        assert torch.equal(x[e], data["inputs"][rows])
        torch.testing.assert_close(y[e], data["target"][rows], rtol=1e-6, atol=1e-6)
    X, yv, w = e2.unpack(x[0], 3)
    data = t31.generate(3, 40, 4, 3, dtype=torch.float32)
    rows = e2.split(3, 40, 0.25)[0][index[0]]
    assert torch.equal(X, data["X"][rows]) and torch.equal(yv, data["y"][rows]) and torch.equal(w, data["w"][rows])


def _per_step_batch(task, index):
    """What a training step computed before the targets were precomputed: gather the tokens, compute the targets."""
    x = task.inputs_train[task.member_seed[:, None], index]
    return x.to(task.dtype), task.targets(x).to(task.dtype)


@pytest.mark.parametrize("shape", ["tiny", "paper"])
def test_precomputed_batches_equal_the_per_step_computation_bit_for_bit(params, shape):
    seeds = [3, 5]
    if shape == "paper":  # the paper's batch shapes: 10 seeds x 4 f, n = 20, d = 24, B = 32 (and a short last batch)
        params |= {"n_prompts": 100, "n_tokens": 20, "d": 24, "batch_size": 32, "test_fraction": 0.2}
        seeds = list(range(10))
    task = e2.Theorem31Task(seeds, params, torch.device("cpu"))
    assert task.targets_train.shape == (len(task.members), task.n_train, params["n_tokens"], params["d"])
    B = params["batch_size"]
    for epoch in range(2):
        order = epoch_order(task.members, task.n_train, epoch, "theorem31/shuffle", "cpu")
        for start in range(0, task.n_train, B):
            index = order[:, start:start + B]
            (x, y), (x_old, y_old) = task.batch(index), _per_step_batch(task, index)
            assert torch.equal(x, x_old) and torch.equal(y, y_old)
            assert x.dtype == y.dtype == torch.float32


class _Exact(torch.nn.Module):
    """A stand-in 'model' that outputs the exact per-token targets (or a scaled copy)."""

    def __init__(self, task, scale=1.0):
        super().__init__()
        self.dummy = torch.nn.Parameter(torch.zeros(()))
        self.task, self.scale = task, scale

    def forward(self, x):
        return (self.scale * self.task.targets(x)).to(x.dtype)


def test_evaluation_of_an_exact_model_is_zero_and_of_a_zero_model_is_one(params):
    params["n_prompts"] = 400
    params["x_dist"], params["x_scale"] = "normal", 1.0
    task = e2.Theorem31Task([0], params, torch.device("cpu"))
    for r in task.evaluate(_Exact(task), eta=0.3, chunk=33):
        assert r["mse"] < 1e-10 and r["gd_rel"] < 1e-10 and r["gd_mse"] < 1e-10
    for r in task.evaluate(_Exact(task, scale=0.0), eta=0.3):
        # predicting 0: MSE = E[target^2] ~ Var(target); the GD step does not move w (gd_rel = 1)
        assert r["gd_rel"] == pytest.approx(1.0, rel=1e-6)
        assert 0.9 < r["rel_mse"] < 1.5
        assert r["gd_mse"] == pytest.approx(r["step_sq_norm"] / params["d"], rel=1e-6)


def test_train_aggregate_figure_through_the_cli(params, tmp_path):
    for p in params["p_sweep"]:
        _cli("train", dict(params=params, p=p, seeds=[0, 1], out_dir=str(tmp_path / f"p{p}"),
                           checkpoint=str(tmp_path / f"ckpt{p}.pt"), device_spec="cpu"), threads=1)
        _cli("train", dict(blind=True, params=params, p=p, seeds=[0, 1], out_dir=str(tmp_path / f"blind{p}"),
                           device_spec="cpu"), threads=1)
    metrics = [str(tmp_path / f"p{p}" / f"seed{s}" / "metrics.json") for p in params["p_sweep"] for s in (0, 1)]
    blind = [str(tmp_path / f"blind{p}" / f"seed{s}" / "metrics.json") for p in params["p_sweep"] for s in (0, 1)]
    m = json.loads(open(metrics[1]).read())
    assert m["seed"] == 1 and m["setting"] == {"p": 4, "heads": 1} and sorted(m["by_f"]) == sorted(params["fs"])
    assert m["ensemble"]["members"] == 8 and len(m["by_f"]["tanh"]["train_loss"]) == 2
    from algo_emu.frozen import RECORD_KEYS

    assert m["frozen"]["bit_identical"] is True and set(m["frozen"]) == set(RECORD_KEYS)  # evaluated from its frozen file
    assert m["frozen"]["file"] == str(tmp_path / "p4" / "model.pt") and m["frozen"]["matches_saved"] is True
    assert m["by_f"]["tanh"]["ablation_mse"]["none"] == m["by_f"]["tanh"]["mse"]
    assert sorted(m["by_f"]["tanh"]["ablation_mse"]) == sorted(["none", "other_prompt", "permuted", "random", "zeros"])
    mb = json.loads(open(blind[1]).read())
    assert mb["weight_blind"] is True and mb["budget"] == m["budget"] and mb["data_sha256"] == m["data_sha256"]
    tables = tmp_path / "tables"
    job = dict(params=params, metrics=metrics, blind_metrics=blind, runs_csv=str(tables / "runs.csv"),
               f_csv=str(tables / "f_emulation.csv"), gd_csv=str(tables / "f_gd_step.csv"),
               ablation_csv=str(tables / "abl.csv"), ablation_runs_csv=str(tables / "abl_runs.csv"))
    _cli("aggregate", job)
    f_tab = pd.read_csv(tables / "f_emulation.csv")
    assert list(f_tab.columns) == theorem31_tables.F_COLUMNS and len(f_tab) == 8 and (f_tab.n_seeds == 2).all()
    abl = pd.read_csv(tables / "abl.csv")
    assert list(abl.columns) == ["experiment", "mode", "f", "p", "heads", "ablation", "mse_mean", "mse_std",
                                 "mse_ci_low", "mse_ci_high", "n_seeds", "mse_over_blind"]
    assert len(abl) == 8 * 6 and (abl.n_seeds == 2).all()
    none = abl[abl.ablation == "none"].set_index(["f", "p"])
    assert none.loc[list(zip(f_tab.f, f_tab.p)), "mse_over_blind"].tolist() == pytest.approx(
        f_tab.mse_over_blind.tolist(), rel=1e-12)
    _cli("ablation-figure", dict(table=str(tables / "abl.csv"), runs_csv=str(tables / "abl_runs.csv"),
                                 out=str(tmp_path / "abl_fig")))
    assert (tmp_path / "abl_fig.png").stat().st_size > 1000
    # a baseline trained with another budget is refused, naming the key
    bad = json.loads(open(blind[0]).read())
    bad["budget"]["epochs"] = 3
    bad_path = tmp_path / "bad_blind.json"
    bad_path.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"p=4, seed=0\): the weight-blind baseline's training budget differs "
                                         r"from the model's: epochs: model 2, baseline 3"):
        _cli("aggregate", job | {"blind_metrics": [str(bad_path), *blind[1:]]})
    assert f_tab.f.tolist() == [f for f in params["fs"] for _ in params["p_sweep"]]
    assert (f_tab.rel_mse_mean > 0).all() and (f_tab.mse_ci_low <= f_tab.mse_ci_high).all()
    gd_tab = pd.read_csv(tables / "f_gd_step.csv")
    assert list(gd_tab.columns) == theorem31_tables.GD_COLUMNS and (gd_tab.eta == 0.1).all()
    for ext in ("md", "tex"):
        assert "Theorem 3.1" in (tables / f"f_emulation.{ext}").read_text()
    _cli("figure", dict(table=str(tables / "f_emulation.csv"), gd_table=str(tables / "f_gd_step.csv"),
                        runs_csv=str(tables / "runs.csv"), out=str(tmp_path / "fig")))
    assert (tmp_path / "fig.png").stat().st_size > 1000 and (tmp_path / "fig.pdf").stat().st_size > 1000


def test_same_seed_twice_is_identical_and_seeds_differ(params, tmp_path):
    a = e2.train_setting(params, 5, [0, 1], tmp_path / "a", None, "cpu", 1)
    b = e2.train_setting(params, 5, [0, 1], tmp_path / "b", None, "cpu", 1)
    for s in (0, 1):
        assert a[s]["by_f"] == b[s]["by_f"] and a[s]["data_sha256"] == b[s]["data_sha256"]
    assert a[0]["by_f"]["tanh"]["mse"] != a[1]["by_f"]["tanh"]["mse"]
    assert a[0]["data_sha256"] != a[1]["data_sha256"]


def test_config_checks(params):
    check_theorem31(params, {})
    for key, value, match in [("heads", 3, "do not divide"), ("p_sweep", [3], "smaller than"),
                              ("test_fraction", 0.001, "empty train or test")]:
        bad = copy.deepcopy(params) | {key: value}
        with pytest.raises(ConfigError, match=match):
            check_theorem31(bad, {})


def test_schema_defaults_are_the_published_scale():
    cfg: dict = {}
    _validate(cfg, REPO_ROOT / "workflow" / "schemas" / "theorem31.schema.yaml", "theorem31")
    assert {k: cfg[k] for k in ("n_prompts", "n_tokens", "d", "hidden", "batch_size", "lr", "epochs")} == {
        "n_prompts": 50000, "n_tokens": 20, "d": 24, "hidden": 64, "batch_size": 32, "lr": 0.001, "epochs": 100}
    assert 60 in cfg["p_sweep"] and cfg["fs"][0] == "tanh" and (cfg["x_dist"], cfg["x_scale"]) == ("uniform", 5.0)
    schema = load_schema(REPO_ROOT / "workflow" / "schemas" / "theorem31.schema.yaml")   # shared training keys resolved
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]["fs"]["items"]["enum"]) == set(t31.F_REGISTRY)
    for key, spec in schema["properties"].items():
        assert "description" in spec and "default" in spec, key
