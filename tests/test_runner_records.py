"""The one runner, run record, aggregation and step declaration."""

from __future__ import annotations

import importlib
import inspect
import json
import math

import numpy as np
import pandas as pd
import pytest

from algo_emu import cli, tables
from algo_emu.tables import Get, KEY, RunSpec, summarise, summarise_by


def _write(tmp_path, name, record):
    path = tmp_path / name
    path.write_text(json.dumps(record))
    return str(path)


SPEC = RunSpec(
    experiment="demo", rows="by_f",
    columns={"f": KEY, "p": "setting.p", "seed": "seed", "mse": "@.mse", "var": Get("@.var", math.nan),
             "final": tables.last("@.loss"), "device": "environment.device"},
    setting=("f", "p"), metrics=("mse", "var", "final"),
)


def _record(seed, p=4, mse=(1.0, 2.0)):
    return {"seed": seed, "setting": {"p": p}, "environment": {"device": "cpu"},
            "by_f": {"tanh": {"mse": mse[0], "var": 3.0, "loss": [5.0, 4.0]}, "relu": {"mse": mse[1], "loss": []}}}


def test_load_runs_rows_columns_defaults_and_tidy(tmp_path):
    paths = [_write(tmp_path, f"s{s}.json", _record(s, mse=(1.0 + s, 2.0 * s))) for s in (0, 1)]
    runs = tables.load_runs(paths, SPEC)
    assert list(runs.columns) == ["f", "p", "seed", "mse", "var", "final", "device"]
    assert len(runs) == 4
    row = runs[(runs.f == "relu") & (runs.seed == 1)].iloc[0]
    assert row.mse == 2.0 and math.isnan(row["var"]) and math.isnan(row.final)   # defaults and an empty list
    assert runs[(runs.f == "tanh") & (runs.seed == 0)].iloc[0].final == 4.0          # the last loss
    long = tables.tidy(runs, SPEC)
    assert list(long.columns) == ["experiment", "f", "p", "seed", "metric", "value"]
    assert len(long) == 4 * 3 and set(long.metric) == {"mse", "var", "final"}
    assert long[(long.f == "tanh") & (long.seed == 1) & (long.metric == "mse")].value.item() == 2.0


def test_load_runs_errors_name_the_file_and_field(tmp_path):
    bad = _record(0)
    del bad["setting"]
    path = _write(tmp_path, "bad.json", bad)
    with pytest.raises(ValueError, match=r"bad\.json: the record has no field 'setting\.p'"):
        tables.load_runs([path], SPEC)
    with pytest.raises(ValueError, match="no metrics files given"):
        tables.load_runs([], SPEC)
    no_loss = _record(0)
    del no_loss["by_f"]["relu"]["loss"]
    with pytest.raises(ValueError, match=r"noloss\.json: the record has no field '@\.loss'"):
        tables.load_runs([_write(tmp_path, "noloss.json", no_loss)], SPEC)

    def refuse(record, source):
        raise ValueError(f"{source}: refused")

    spec = RunSpec("demo", "by_f", SPEC.columns, SPEC.setting, SPEC.metrics, check=refuse)
    with pytest.raises(ValueError, match="ok.json: refused"):
        tables.load_runs([_write(tmp_path, "ok.json", _record(0))], spec)
    with pytest.raises(ValueError, match=r"setting/metric column\(s\) \['nope'\]"):
        RunSpec("demo", "by_f", SPEC.columns, ("nope",), ())


def test_summarise_by_equals_summarise_per_setting_in_seed_order():
    rng = np.random.default_rng(3)
    rows = [{"f": f, "p": p, "seed": s, "mse": float(rng.normal()), "var": float(rng.normal())}
            for f in ("a", "b") for p in (4, 8) for s in (2, 0, 1)]  # seeds out of order on purpose
    runs = pd.DataFrame(rows)
    order = [("b", 8), ("a", 4)]
    table = summarise_by(runs, ["f", "p"], {"mse": "err"}, order, means=["var"])
    assert list(table[["f", "p"]].itertuples(index=False, name=None)) == order
    for (f, p), got in zip(order, table.to_dict("records")):
        sel = runs[(runs.f == f) & (runs.p == p)].sort_values("seed")
        want = summarise(sel.mse.to_numpy(), prefix="err")
        assert {k: got[k] for k in want} == want  # bit for bit, the bootstrap CI included
        assert got["var_mean"] == float(sel["var"].mean())
    # the CI depends on the seed order: shuffled input gives the same numbers
    shuffled = summarise_by(runs.sample(frac=1, random_state=0), ["f", "p"], {"mse": "err"}, order, means=["var"])
    pd.testing.assert_frame_equal(table, shuffled)


def test_summarise_by_missing_and_duplicate_settings():
    runs = pd.DataFrame([{"f": "a", "seed": 0, "mse": 1.0}, {"f": "a", "seed": 1, "mse": 2.0}])
    with pytest.raises(ValueError, match="no runs for f=b"):
        summarise_by(runs, ["f"], ["mse"], [("a",), ("b",)])
    missing: list[str] = []
    table = summarise_by(runs, ["f"], ["mse"], [("b",), ("a",)], missing=missing)
    assert missing == [("b",)] and table.f.tolist() == ["a"] and table.n_seeds.tolist() == [2]
    twice = pd.concat([runs, runs.iloc[:1]])
    with pytest.raises(ValueError, match="seed listed twice for f=a"):
        summarise_by(twice, ["f"], ["mse"])
    with pytest.raises(ValueError, match=r"summarise_by: missing column\(s\) \['nope'\]"):
        summarise_by(runs, ["f"], ["nope"])


# --------------------------------------------------------------------------- steps declared once


def _experiment_steps():
    for name, modname in cli.EXPERIMENTS.items():
        module = importlib.import_module(modname)
        yield name, module, getattr(module, "STEPS", None)


def test_every_experiment_declares_its_steps_and_each_step_is_a_documented_function():
    from algo_emu.specs import READS

    for name, module, steps in _experiment_steps():
        assert isinstance(steps, dict) and steps, f"{name}: no STEPS declared"
        for step, func in steps.items():
            assert callable(func) and (func.__doc__ or "").strip(), f"{name} {step}: no docstring (its line in the listing)"
        for step, reads_as in getattr(module, "PARAMS_OF", {}).items():
            assert step in steps and (name, reads_as) in READS, f"{name} {step}: PARAMS_OF names no declared step"
            assert "params" in inspect.signature(steps[step]).parameters, f"{name} {step}"
    from algo_emu.report import steps as report

    assert set(report.STEPS) == {"replication", "manifest"} and all(f.__doc__ for f in report.STEPS.values())


def test_train_steps_take_the_seeds_the_device_and_threads():
    train_steps = {("heads", "train"), ("theorem31", "train"), ("statistical", "train"),
                   ("statistical", "evaluate"), ("ames", "train"), ("ames", "evaluate")}
    steps = {name: steps for name, _, steps in _experiment_steps()}
    for name, step in train_steps:
        parameters = inspect.signature(steps[name][step]).parameters
        assert {"seeds", "device_spec", "threads"} <= set(parameters), f"{name} {step}"


def test_every_weight_blind_baseline_is_its_models_train_step_with_blind():
    """One baseline path: each experiment with a weight-blind baseline trains it with its model's own train step
    and ``blind`` (a boolean, off by default; the same budget keys), never with a step or an output of its own."""
    with_baseline = {"theorem31", "statistical", "ames"}
    for name, _, steps in _experiment_steps():
        assert "blind" not in steps, f"{name}: a separate baseline step"
        for step, func in steps.items():
            parameters = inspect.signature(func).parameters
            assert "out_blind" not in parameters, f"{name} {step}"
            if step == "train" and name in with_baseline:
                assert parameters["blind"].default is False, name


def _fake_experiment(monkeypatch, calls):
    import sys
    import types

    def go(params, H, out_dir, device_spec="auto", threads=None, flag=False):
        """Demo step."""
        calls.append((dict(params), H, out_dir, device_spec, threads, flag))

    def table(metrics, out):
        """Demo table."""
        calls.append((metrics, out))

    module = types.ModuleType("demo_experiment")
    module.STEPS, module.PARAMS_OF = {"go": go, "table": table}, {"go": "train"}
    monkeypatch.setitem(sys.modules, "demo_experiment", module)
    monkeypatch.setitem(cli.STEP_MODULES, "theorem31", "demo_experiment")  # its params declaration: theorem31 train


def test_a_step_is_called_with_its_job_and_threads_and_bad_jobs_are_refused_naming_the_argument(monkeypatch):
    from algo_emu.specs import reads

    calls = []
    _fake_experiment(monkeypatch, calls)
    keys = {k: 1 for k in reads("theorem31", "train").keys}
    assert cli.main(["theorem31", "go", json.dumps({"params": keys | {"other": 2}, "H": 3, "out_dir": "x"}),
                     "--threads", "2"]) == 0
    assert calls == [(keys, 3, "x", "auto", 2, False)]  # a key beyond the declaration dropped, threads from --threads
    assert cli.main(["theorem31", "table", json.dumps({"metrics": ["a"], "out": "t"})]) == 0  # no threads parameter
    assert calls[-1] == (["a"], "t")
    bad = {
        '{"H": 3, "out_dir": "x"}': "missing argument\\(s\\) params",
        json.dumps({"params": keys, "H": 3, "out_dir": "x", "heads": 2}): "unknown argument\\(s\\) heads",
        json.dumps({"params": keys, "H": 3, "out_dir": "x", "threads": 2}): "threads goes in --threads",
        json.dumps({"params": {"d": 1}, "H": 3, "out_dir": "x"}): "theorem31 train reads theorem31.n_prompts",
    }
    for job, message in bad.items():
        with pytest.raises(SystemExit, match=message):
            cli.main(["theorem31", "go", job])
    with pytest.raises(SystemExit, match="no step 'nope' \\(steps: go, table\\)"):
        cli.main(["theorem31", "nope", "{}"])
    with pytest.raises(SystemExit, match="no experiment 'nope'"):
        cli.main(["nope", "go", "{}"])
    with pytest.raises(SystemExit):  # argparse: JOB must be a JSON object
        cli.main(["theorem31", "go", "[1, 2]"])
    assert len(calls) == 2


def test_an_experiment_without_a_step_lists_its_steps(capsys):
    assert cli.main(["theorem31"]) == 0
    out = capsys.readouterr().out
    assert "train(params" in out and "ablation-figure(table" in out and "Error vs p, one line per f" in out


# --------------------------------------------------------------------------- the runner


def test_train_config_reads_the_section_then_the_schema_defaults():
    from algo_emu.train import train_config
    from algo_emu.train import TrainConfig

    cfg = train_config("heads", {"epochs": 3, "lr": 0.5})
    assert cfg == TrainConfig(epochs=3, batch_size=32, lr=0.5, checkpoint_every=1, compile=False)
    assert train_config("theorem31", {"epochs": 2}, stream="theorem31/shuffle").stream == "theorem31/shuffle"
    from algo_emu.config import schema_defaults

    assert train_config("heads", {}).epochs == schema_defaults("heads")["epochs"]  # the schema, not a Python literal


def test_runner_fingerprint_resumes_only_the_same_run_and_writes_records(tmp_path):
    import torch

    from algo_emu.train import Runner, train_config
    from algo_emu.train import Member

    class Task:
        members = [Member(0, "a")]
        n_train = 8

        def __init__(self):
            g = torch.Generator().manual_seed(0)
            self.x = torch.randn(1, 8, 2, generator=g)

        def batch(self, index):
            x = self.x[:, index]
            return x, x.sum(-1, keepdim=True)

    def model():
        torch.manual_seed(0)
        return torch.nn.Linear(2, 1)

    class Ens(torch.nn.Module):  # (E, B, d) -> (E, B, 1)
        def __init__(self):
            super().__init__()
            self.lin = model()
            self.out_mask = torch.ones(1, 1)

        def forward(self, x):
            return self.lin(x)

    from algo_emu.runtime import config_hash

    run = Runner("cpu", 1)
    cfg = train_config("heads", {"epochs": 2, "batch_size": 4})
    ckpt = tmp_path / "ck.pt"
    first = run.train(Ens(), Task(), cfg, {"a": 1}, ckpt, seeds=[0])
    assert first.epochs_run == 2
    # the fingerprint: the run's parameters with its seeds (and any extra), then the code version
    assert torch.load(ckpt, weights_only=False)["fingerprint"].split("|")[0] == config_hash({"a": 1, "seeds": [0]})
    run.train(Ens(), Task(), cfg, {"a": 1}, ckpt, fingerprint_extra={"group": 2})
    assert torch.load(ckpt, weights_only=False)["fingerprint"].split("|")[0] == config_hash({"a": 1, "group": 2})
    timing = run.timing(first, eval_seconds=1.0)
    assert timing["epochs_run_this_call"] == 2 and timing["eval_seconds"] == 1.0 and timing["wall_seconds_job"] > 0
    assert run.restarted().device == run.device and run.restarted().t0 > run.t0
    out = run.write_records(tmp_path / "out", {0: {"seed": 0, **run.provenance({"a": 1})}})
    written = json.loads((tmp_path / "out" / "seed0" / "metrics.json").read_text())
    assert written == out[0] and written["params"] == {"a": 1} and len(written["config_hash"]) == 16


def test_every_trained_experiment_declares_where_its_records_are_and_their_curves(monkeypatch):
    """refset reads learning curves through the RunSpecs (records glob, curves) each experiment's spec names
    (``Spec.runs``), not through a list of its own: a made-up experiment's records are read too."""
    import dataclasses

    from algo_emu import specs as spec_registry
    from tools import refset

    toy = spec_registry.Spec(section="toy", label="E9", reads=(), targets=(),
                             runs=("algo_emu.experiments.statistical_tables:RUNS",))
    monkeypatch.setattr(spec_registry, "SPECS", spec_registry.SPECS + (toy,))
    specs = refset.curve_specs()
    assert [label for label, _ in specs] == ["E1", "E2", "E2", "E3", "E4", "E9"]
    for label, spec in specs:
        assert spec.records.endswith("seed*/metrics.json") and callable(spec.curves), label
    with pytest.raises(ValueError, match="RunSpec 'heads' declares no learning curves"):
        tables.load_curves(".", dataclasses.replace(specs[0][1], curves=None), "E1")


def test_a_records_commit_is_read_from_either_environment_shape():
    """E3's records keep one environment per job ({train, eval}); the others one. A reader of the commit must see
    both (the campaign refused a finished E3 setting as made by commit None before this was shared)."""
    flat = {"environment": {"git_commit": "abc", "code_version": "v1", "device": "cpu"}}
    nested = {"environment": {"train": {"git_commit": "abc", "code_version": "v1"},
                              "eval": {"git_commit": "def", "code_version": "v1"}}}
    assert tables.record_commits(flat) == {"abc"} and tables.record_commits(nested) == {"abc", "def"}
    assert [e["code_version"] for e in tables.environments(nested)] == ["v1", "v1"]
    assert tables.record_commits({}) == {None} and tables.record_commits({"environment": {"device": "cpu"}}) == {None}
