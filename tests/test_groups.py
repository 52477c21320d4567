"""Shape groups: settings of one shape trained as one ensemble equal the settings trained alone, K optimiser
steps per call equal a per-step loop, and a grouped run resumes from its checkpoint to the same numbers."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from algo_emu import ablation as ab
from algo_emu.data import heads as hd
from algo_emu.experiments import heads as e1
from algo_emu.experiments import statistical as e3
from algo_emu.experiments.heads import HeadsTask
from algo_emu.models.emulator import EnsembleEmulator
from algo_emu.rng import torch_stream
from algo_emu.train import FAIL_ENV, Job, Runner, StackedTask, TrainConfig, train_ensemble

F64 = torch.float64
#: E3's tiny section (as tests/test_statistical.py's)
E3_TINY = {
    "modes": ["fitted", "reference_code"], "n_prompts": 40, "n_context": 5, "n_query": 2, "d": 3, "hidden": 12, "p": 8,
    "heads_sweep": [1, 2], "algorithms": {"fitted": ["ols", "ridge", "lasso", "gd"], "reference_code": ["linear", "ridge", "lasso"]},
    "data_params": {"fitted": {}, "reference_code": {}}, "epochs": 2, "batch_size": 8, "lr": 1e-3, "eval_prompts": 16,
    "eval_chunk": 5, "checkpoint_every": 1, "compile": False, "attention": "auto", "readout": "block",
}
CPU = torch.device("cpu")


def _heads_job(params, protocol, seeds, H=2, p=7, cfg=None):
    """A float64 E1 setting: the published protocol's one data set for every seed, or one per seed."""
    if protocol == "published":
        shared = hd.generate(hd.PUBLISHED_SEED, params["n_prompts"], params["n_tokens"], params["d"],
                             params["target_hidden"], "published")
        datasets = {s: shared for s in seeds}
    else:
        datasets = {s: hd.generate(s, params["n_prompts"], params["n_tokens"], params["d"], params["target_hidden"])
                    for s in seeds}
    task = HeadsTask(datasets, params, CPU, dtype=F64)
    model = EnsembleEmulator([torch_stream(m.seed, "heads", "init", m.name) for m in task.members], params["d"],
                             task.d_outs, params["n_tokens"], params["hidden"], H, p, dtype=F64)
    return Job(model, task, cfg or TrainConfig(epochs=3, batch_size=params["batch_size"], lr=1e-2), {"protocol": protocol},
               seeds)


def _params(model):
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def test_grouped_heads_protocols_equal_each_setting_alone_bit_for_bit(heads_params):
    """E1's published and independent settings of one (H, p), as one ensemble, in float64: every parameter and
    every epoch's train loss is the one each setting has alone (bit for bit: equal shapes, nothing padded)."""
    alone = [_heads_job(heads_params, protocol, [0, 1]) for protocol in ("published", "independent")]
    histories = [Runner("cpu").train(j.model, j.task, j.cfg, j.run_params, None, seeds=j.seeds).history for j in alone]
    grouped = [_heads_job(heads_params, protocol, [0, 1]) for protocol in ("published", "independent")]
    results = Runner("cpu").train_group(grouped, None, steps_per_call=2)
    moved = 0.0
    for a, g, h, r in zip(alone, grouped, histories, results):
        assert [e["train_loss"] for e in r.history] == [e["train_loss"] for e in h]
        for name, value in _params(a.model).items():
            assert torch.equal(value, _params(g.model)[name]), name
        moved = max(moved, float((a.model.w_qkv.detach() - _heads_job(heads_params, "published", [0, 1]).model.w_qkv.detach()).abs().max()))
    assert moved > 1e-3  # they really trained


def _stat_jobs(params, mode, seeds):
    """E3's model and weight-blind baseline of one (mode, H) in float64 (the baseline's tokens are narrower)."""
    task = e3.StatisticalTask(seeds, mode, params, CPU, dtype=F64)
    cfg = TrainConfig(epochs=2, batch_size=8, lr=1e-2, stream="statistical/shuffle")
    jobs = []
    for blind in (False, True):
        meta = e3.model_meta(params, mode, 2, seeds, blind)
        gens = [torch_stream(s, "statistical", "init_blind" if blind else "init", mode) for s in seeds]
        model = EnsembleEmulator(gens, meta["d_in"], 1, meta["n_tokens"], meta["hidden"], 2, meta["p"], dtype=F64)
        jobs.append(Job(model, ab.WeightBlindTask(task, e3.prompt_layout(params, mode)) if blind else task, cfg,
                        {"blind": blind}, seeds))
    return jobs


@pytest.mark.parametrize("mode", ["fitted", "reference_code"])
def test_grouped_model_and_padded_blind_baseline_equal_each_alone(mode):
    """E3's model and its weight-blind baseline as one ensemble: the baseline's tokens are zero-padded to the
    model's width (and its input layer with zero rows, which stay zero). Equal to training each alone within
    1e-12 in float64 (a longer sum in the input layer's matmul may round differently), and within 1e-8 for
    the key bias, which the output ignores (softmax drops a per-query constant: Adam amplifies its rounding
    noise)."""
    params = copy.deepcopy(E3_TINY)
    alone = _stat_jobs(params, mode, [0, 1])
    for j in alone:
        train_ensemble(j.model, j.task, j.cfg)
    grouped = _stat_jobs(params, mode, [0, 1])
    model, blind = (j.model for j in grouped)
    assert blind.d_in < model.d_in  # really padded
    stacked = EnsembleEmulator.stacked([model, blind])
    train_ensemble(stacked, StackedTask([j.task for j in grouped], stacked.d_in, stacked.d_out), grouped[0].cfg)
    assert torch.equal(stacked.w_in[2:, blind.d_in:], torch.zeros_like(stacked.w_in[2:, blind.d_in:]))
    stacked.unstack([model, blind])
    h = model.h
    for a, g in zip(alone, grouped):
        for name, value in _params(a.model).items():
            other = _params(g.model)[name]
            if name == "b_qkv":  # [q | k | v]: the key bias apart
                assert float((value[:, h:2 * h] - other[:, h:2 * h]).abs().max()) < 1e-8
                value, other = torch.cat([value[:, :h], value[:, 2 * h:]], 1), torch.cat([other[:, :h], other[:, 2 * h:]], 1)
            assert float((value - other).abs().max()) < 1e-12, name


@pytest.mark.parametrize("k", [2, 3, 5, 8])
def test_k_steps_per_call_equal_a_per_step_loop(heads_params, k):
    """36 training prompts, batch 8: 5 steps an epoch, the last partial; K steps per call give the loop's
    parameters and train losses bit for bit (float32, the engine's own dtype)."""
    datasets = {s: hd.generate(s, 48, 4, 3, 6) for s in (0, 1)}
    runs = {}
    for steps in (1, k):
        task = HeadsTask(datasets, heads_params, CPU)
        model = EnsembleEmulator([torch_stream(m.seed, "heads", "init", m.name) for m in task.members], 3, task.d_outs,
                                 4, 12, 2, 7)
        res = train_ensemble(model, task, TrainConfig(epochs=2, batch_size=8, lr=1e-2, steps_per_call=steps,
                                                      lr_schedule="cosine"))
        runs[steps] = (_params(model), [h["train_loss"] for h in res.history])
    assert runs[1][1] == runs[k][1]
    for name, value in runs[1][0].items():
        assert torch.equal(value, runs[k][0][name]), name


def _datasets(params, tmp_path):
    paths = {"published": [str(tmp_path / "published.pt")], "independent": []}
    hd.write_dataset(paths["published"][0], hd.PUBLISHED_SEED, params, "published")
    for s in (0, 1):
        paths["independent"].append(str(tmp_path / f"seed{s}.pt"))
        hd.write_dataset(paths["independent"][-1], s, params)
    return paths


#: What differs between two records of the same numbers: the clock, the machine and the job.
VOLATILE = ("timing", "environment")


def _same(a: dict, b: dict) -> None:
    """Equal records but for the clock, the machine and where the model file lies (its digest is compared)."""
    def kept(r):
        return {k: v for k, v in r.items() if k not in VOLATILE} | {"frozen": {k: v for k, v in r["frozen"].items()
                                                                               if k != "file"}}
    assert kept(a) == kept(b)


def test_grouped_heads_job_writes_the_per_setting_records_and_resumes(heads_params, tmp_path, monkeypatch):
    """The grouped CLI step writes each protocol's records as its own job would (every key but the clock and the
    machine; float32); killed after its first epoch, it resumes from its checkpoint to the same records."""
    heads_params |= {"epochs": 3, "eval_every": 2}
    paths = _datasets(heads_params, tmp_path)
    alone = {protocol: e1.train_setting(heads_params, 2, 7, [0, 1], paths[protocol], tmp_path / "alone" / protocol,
                                        None, "cpu", 1, protocol) for protocol in ("published", "independent")}
    data = paths["published"] + paths["independent"]
    straight = e1.train_group(heads_params, 2, 7, [0, 1], ["published", "independent"], data, tmp_path / "straight",
                              None, "cpu", 1, steps_per_call=3)
    for protocol in alone:
        for s in (0, 1):
            _same(alone[protocol][s], straight[protocol][s])
            assert any("test_mse" in h for h in straight[protocol][s]["history"])
    ckpt = tmp_path / "group.pt"
    job = dict(params=heads_params, H=2, p=7, seeds=[0, 1], protocols=["published", "independent"], data_paths=data,
               out_root=str(tmp_path / "resumed"), checkpoint=str(ckpt), device_spec="cpu", steps_per_call=2)
    monkeypatch.setenv(FAIL_ENV, "1")
    with pytest.raises(RuntimeError, match="injected failure"):
        _cli("heads", "train-group", job)
    assert torch.load(ckpt, weights_only=False)["epoch"] == 1
    monkeypatch.delenv(FAIL_ENV)
    _cli("heads", "train-group", job)
    for protocol in alone:
        for s in (0, 1):
            resumed = json.loads((tmp_path / "resumed" / protocol / "runs" / "H2_p7" / f"seed{s}" / "metrics.json").read_text())
            assert resumed["timing"]["resumed_from_epoch"] == 1 and resumed["timing"]["epochs_run_this_call"] == 2
            _same(straight[protocol][s], resumed)


def _cli(experiment, step, job):
    """``python -m algo_emu <experiment> <step> JOB --threads 1``, in this process."""
    from algo_emu.cli import main

    return main([experiment, step, json.dumps(job), "--threads", "1"])


def test_grouped_statistical_job_saves_the_per_setting_models(tmp_path):
    """E3's grouped step saves the model and the baseline each as its own job would, float32: their weights
    within float32 rounding of the padded sum (the baseline's) or bit for bit (the model's), the same sidecars
    apart from the clock and the machine."""
    params = copy.deepcopy(E3_TINY)
    alone = [e3.train_setting(params, "fitted", 1, [0, 1], tmp_path / f"alone{b}.pt", None, "cpu", 1, blind=b)
             for b in (False, True)]
    _cli("statistical", "train", dict(params=params, mode="fitted", H=1, seeds=[0, 1], model_path=str(tmp_path / "model.pt"),
                                      blind_path=str(tmp_path / "blind.pt"), checkpoint=None, device_spec="cpu",
                                      steps_per_call=4))
    for a, name in zip(alone, ("model", "blind")):
        g = json.loads((tmp_path / f"{name}.pt.json").read_text())
        assert a["meta"] == g["meta"] and a["params"] == g["params"] and a["config_hash"] == g["config_hash"]
        if name == "model":
            assert a["param_digest"] == g["param_digest"] and a["history"] == g["history"]
        else:
            for s in a["history"]:
                torch.testing.assert_close(torch.tensor(a["history"][s]), torch.tensor(g["history"][s]), rtol=1e-5, atol=0)


def test_grouped_theorem31_job_writes_the_per_setting_records(tmp_path):
    """E2's model and weight-blind baseline of one p as one job (the baseline's tokens [x_i; y_i] zero-padded to
    [x_i; y_i; w]): the model's records are its own job's, bit for bit; the baseline's the same keys, its numbers
    within float32 rounding of the padded sum."""
    from algo_emu.experiments import theorem31 as e2
    from algo_emu.config import schema_defaults

    params = schema_defaults("theorem31") | {"n_prompts": 40, "n_tokens": 4, "d": 3, "hidden": 8,
                                             "fs": ["tanh", "identity"], "epochs": 2, "batch_size": 8}
    alone = {b: e2.train_setting(params, 6, [0, 1], tmp_path / f"alone{b}", None, "cpu", 1, blind=b) for b in (False, True)}
    _cli("theorem31", "train", dict(params=params, p=6, seeds=[0, 1], out_dir=str(tmp_path / "model"), checkpoint=None,
                                    blind_out_dir=str(tmp_path / "blind"), device_spec="cpu", steps_per_call=3))
    for s in (0, 1):
        model = json.loads((tmp_path / "model" / f"seed{s}" / "metrics.json").read_text())
        blind = json.loads((tmp_path / "blind" / f"seed{s}" / "metrics.json").read_text())
        _same(alone[False][s], model)
        assert blind.keys() == alone[True][s].keys() and blind["params"] == alone[True][s]["params"]
        for f, r in alone[True][s]["by_f"].items():
            torch.testing.assert_close(torch.tensor(blind["by_f"][f]["train_loss"]), torch.tensor(r["train_loss"]),
                                       rtol=1e-5, atol=0)
            assert blind["by_f"][f]["mse"] == pytest.approx(r["mse"], rel=1e-4)


def test_grouping_resolves_from_the_device_without_torch(monkeypatch):
    """auto: grouped where the device resolves to CUDA (cuda[:N], or auto with a GPU visible), per setting
    elsewhere; true and false as given. The workflow's choice of rules follows it."""
    from algo_emu import grouping

    monkeypatch.setattr(grouping, "visible_gpus", lambda: 0)
    assert [grouping.grouping_on({"grouping": g, "device": d}) for g, d in
            (("auto", "cpu"), ("auto", "auto"), ("auto", "cuda"), ("auto", "cuda:1"), (True, "cpu"), (False, "cuda"))] == [
        False, False, True, True, True, False]
    monkeypatch.setattr(grouping, "visible_gpus", lambda: None)  # a GPU interface of unknown count
    assert grouping.grouping_on({"grouping": "auto", "device": "auto"})
    assert grouping.heads_groups([("published", 1, 8), ("independent", 1, 8), ("published", 1, 4)]) == {
        (1, 8): ["published", "independent"], (1, 4): ["published"]}


def test_tf32_is_a_cuda_switch_and_leaves_a_cpu_run_as_it_was(heads_params, tmp_path):
    """On the CPU ``tf32`` changes nothing: not the arithmetic, not the records' params (on CUDA they would say
    ``tf32: true``)."""
    paths = _datasets(heads_params, tmp_path)
    a = e1.train_group(heads_params, 1, 7, [0], ["independent"], paths["independent"][:1], tmp_path / "a", None, "cpu", 1)
    b = e1.train_group(heads_params, 1, 7, [0], ["independent"], paths["independent"][:1], tmp_path / "b", None, "cpu", 1,
                       tf32=True)
    assert not Runner("cpu", tf32=True).tf32 and "tf32" not in b["independent"][0]["params"]
    _same(a["independent"][0], b["independent"][0])
