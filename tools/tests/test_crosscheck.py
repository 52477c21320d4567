"""tools/crosscheck/table.py: the published code's numbers beside ours, and the read-out rule, on synthetic records
against a small fake set (no published code needed)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pandas as pd
import pytest

from algo_emu import paper_values
from tools.crosscheck import table

ALGOS = ("lasso", "ridge", "linear")
I6 = paper_values.STATISTICAL_HEADS["heads"].index(6)
PAPER = {a: paper_values.STATISTICAL_HEADS[a]["mean"][I6] for a in ALGOS}


def _set(tmp_path: Path, default_scale: float) -> Path:
    """A set whose reference_code H = 6 models sit at ``default_scale`` x the paper's value (10 seeds, 10 % spread)."""
    rows = [{"mode": "reference_code", "heads": 6, "seed": s, "algorithm": a,
             "mse": PAPER[a] * default_scale * (1 + 0.1 * (s - 4.5) / 4.5)} for s in range(10) for a in ALGOS]
    (tmp_path / "set" / "tables").mkdir(parents=True)
    pd.DataFrame(rows).to_csv(tmp_path / "set" / "tables" / "statistical_runs.csv", index=False)
    return tmp_path / "set"


def _readout(tmp_path: Path, scale: float) -> Path:
    rec = {"seeds": [0, 1, 2], "epochs": 300, "readout_hidden": 48, "commit": "0" * 40, "commit_dirty": False,
           "test_mse_vs_noisy_y": {str(s): {a: PAPER[a] * scale * (1 + 0.05 * (s - 1)) for a in ALGOS}
                                   for s in range(3)},
           "train_loss_per_epoch": {str(s): [1.0 / (e + 1) for e in range(300)] for s in range(3)}}
    (tmp_path / "records").mkdir(exist_ok=True)
    (tmp_path / "records" / "e3_readout_H6.json").write_text(json.dumps(rec))
    return tmp_path / "records"


@pytest.mark.parametrize("scale, answer", [
    (1.0, "explains it"),  # the read-out lands on the paper's values
    (0.5, "does not explain it"),  # negative control: the read-out changes nothing (same as the default)
    (0.6, "explains part of it"),  # moves toward the paper, not all the way (lasso still inconsistent)
])
def test_readout_rule_says_yes_no_and_part(tmp_path, scale, answer):
    set_dir = _set(tmp_path, 0.5)
    rows, lines = table.e3_readout(_readout(tmp_path, scale), set_dir)
    assert len(rows) == 3
    verdict = next(line for line in lines if line.startswith("**Verdict"))
    assert f"the published read-out {answer}**" in verdict
    assert any(table.READOUT_RULE in line for line in lines)  # the rule is printed before the numbers
    assert lines.index(next(line for line in lines if table.READOUT_RULE in line)) < lines.index(verdict)
    for r in rows:
        assert r["paper_over_default"] == pytest.approx(2.0, rel=0.05)


@pytest.mark.parametrize("scale, spread, reading", [
    (1.0, 0.05, "explains it"),  # the read-out closes the whole gap (share 1 +- 0.24)
    (0.5, 0.05, "does not explain it"),  # negative control: it closes none of it, a whole-gap move excluded
    (0.75, 0.05, "explains part of it"),  # half the gap, the interval inside (0, 1)
    (0.75, 0.5, "cannot tell"),  # half the gap again, but models spread too widely to tell 0 from 1
])
def test_readout_share_says_all_part_none_and_cannot_tell(tmp_path, scale, spread, reading):
    records = _readout(tmp_path, scale)
    rec = json.loads((records / "e3_readout_H6.json").read_text())
    rec["test_mse_vs_noisy_y"] = {str(s): {a: PAPER[a] * scale * (1 + spread * (s - 1)) for a in ALGOS} for s in range(3)}
    (records / "e3_readout_H6.json").write_text(json.dumps(rec))
    rows, lines = table.e3_readout(records, _set(tmp_path, 0.5))
    said = next(line for line in lines if line.startswith("**Reading by [readout-share]"))
    assert said.startswith(f"**Reading by [readout-share]: {reading}**")
    assert lines.index(next(line for line in lines if table.READOUT_SHARE_RULE in line)) < lines.index(said)
    for r in rows:  # the share and its interval are Welch's t interval of the difference of means, over the gap
        from scipy import stats
        ours = [PAPER[r["setting"].split(",")[0]] * 0.5 * (1 + 0.1 * (s - 4.5) / 4.5) for s in range(10)]
        algo = r["setting"].split(",")[0]
        ro = [rec["test_mse_vs_noisy_y"][str(s)][algo] for s in range(3)]
        ci = stats.ttest_ind(ro, ours, equal_var=False).confidence_interval(0.95)
        s = table.readout_share(r["readout_mean"], r["readout_sd"], r["readout_n"], r["ours_mean"], r["ours_sd"],
                                r["ours_n"], r["paper_mean"])
        gap = PAPER[algo] * 0.5
        assert (s["low"], s["share"], s["high"]) == pytest.approx(
            (ci.low / gap, (statistics.fmean(ro) - statistics.fmean(ours)) / gap, ci.high / gap), rel=1e-9, abs=1e-12)


def test_readout_share_needs_two_models_a_side_and_a_gap(tmp_path):
    with pytest.raises(ValueError, match="2 or more models on each side"):
        table.readout_share(1.0, 0.1, 1, 0.5, 0.1, 10, 2.0)
    s = table.readout_share(1.0, 0.1, 5, 2.5, 0.1, 10, 2.0)  # our default already past the paper: no gap
    assert s["says"] == "no gap" and table.share_reading([s["says"], "all of it", "part of it"]) == "cannot tell"
    wide = table.readout_share(1.0, 0.5, 5, 0.5, 0.3, 3, 1.0)  # the default's own spread: no count of read-out is enough
    assert wide["needed"] is None
    def width(n: int) -> float:
        s = table.readout_share(0.75, 0.2, n, 0.5, 0.01, 10, 1.0)
        return s["high"] - s["low"]

    n = table.readout_share(0.75, 0.2, 3, 0.5, 0.01, 10, 1.0)["needed"]
    assert n > 3 and width(n) < 1.0 <= width(n - 1)


def test_readout_moving_away_from_the_paper_is_not_an_explanation(tmp_path):
    set_dir = _set(tmp_path, 0.5)
    rows, lines = table.e3_readout(_readout(tmp_path, 0.25), set_dir)
    assert not any(r["moves_toward_paper"] for r in rows)
    assert any("does not explain it**" in line for line in lines)


def test_no_readout_record_no_section(tmp_path):
    (tmp_path / "records").mkdir()
    assert table.e3_readout(tmp_path / "records", _set(tmp_path, 0.5)) == ([], [])


@pytest.mark.parametrize("scale, reading", [
    (1.0, "contradicted**"),  # the published code's own 300-epoch model lands on the paper's values
    (0.5, "not contradicted**"),  # negative control: it lands where ours do, half the paper's
])
def test_published_model_rule_contradicts_the_epoch_hypothesis_only_at_the_papers_level(tmp_path, scale, reading):
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "e3_H6_data0.json").write_text(json.dumps(
        {"data_seed": 0, "train_loss_per_epoch": [1.0 / (e + 1) for e in range(300)],
         "test_loss_per_eval_seed": {a: [PAPER[a] * scale * (1 + 0.01 * k) for k in range(5)] for a in ALGOS}}))
    lines = table.e3_published_model(tmp_path / "records", _set(tmp_path, 0.5))
    rule = next(i for i, line in enumerate(lines) if table.PUBLISHED_MODEL_RULE in line)
    (verdict,) = [i for i, line in enumerate(lines) if line.startswith("**Reading")]
    assert rule < verdict and lines[verdict].startswith(f"**Reading (data seed 0): the epoch hypothesis is {reading}")
    assert sum("not at the paper's level" in line for line in lines) == (0 if scale == 1.0 else 3)
    assert not any(table.PUBLISHED_MODELS_RULE in line for line in lines)  # one model: no reading over models


@pytest.mark.parametrize("scales, reading", [
    ({a: (0.5, 0.55) for a in ALGOS}, "one-model variance"),  # the published models land where ours do
    ({a: (1.0, 1.05) for a in ALGOS}, "a difference of implementation"),  # negative control: both at the paper's
    ({"lasso": (1.0, 1.05), "ridge": (0.5, 0.55), "linear": (0.5, 0.55)}, "not decided"),  # one of three higher
])
def test_published_models_rule_reads_their_spread_against_ours(tmp_path, scales, reading):
    (tmp_path / "records").mkdir()
    for seed in (0, 1):
        (tmp_path / "records" / f"e3_H6_data{seed}.json").write_text(json.dumps(
            {"data_seed": seed, "seconds": 60.0, "train_loss_per_epoch": [1.0 / (e + 1) for e in range(300)],
             "test_loss_per_eval_seed": {a: [PAPER[a] * scales[a][seed] * (1 + 0.01 * k) for k in range(5)]
                                         for a in ALGOS}}))
    set_dir = _set(tmp_path, 0.5)
    lines = table.e3_published_model(tmp_path / "records", set_dir)
    rule = next(i for i, line in enumerate(lines) if table.PUBLISHED_MODELS_RULE in line)
    (verdict,) = [i for i, line in enumerate(lines) if line.startswith("**Reading over 2 published models")]
    assert rule < verdict and lines[verdict] == f"**Reading over 2 published models: the factor of two is {reading}.**"
    rows = [r for r in table.e3_rows(tmp_path / "records", set_dir) if r["rule"].startswith("[published-models]")]
    assert [r["published_code_n"] for r in rows] == [2, 2, 2]
    assert rows[0]["published_code_mean"] == pytest.approx(PAPER["lasso"] * sum(scales["lasso"]) / 2 * 1.02)


def test_no_published_e3_record_no_section(tmp_path):
    (tmp_path / "records").mkdir()
    assert table.e3_published_model(tmp_path / "records", _set(tmp_path, 0.5)) == []


@pytest.mark.parametrize("ours_scale, verdict", [
    (2.0, "inconsistent (ours higher)"),  # this pipeline's runs at twice the published code's
    (0.5, "inconsistent (ours lower)"),
    (1.0, "consistent"),  # negative control: the same numbers
])
def test_e1_names_the_direction_from_this_pipeline_side(tmp_path, ours_scale, verdict):
    """E1's [paper-number] reading compares this pipeline's mean against the published code's: "ours higher" means
    this pipeline's MSE is above the published code's."""
    published = [5.2, 5.9, 5.6]
    (tmp_path / "records").mkdir()
    for s, v in zip((1234, 1235, 1236), published):
        (tmp_path / "records" / f"e1_H4_seed{s}.json").write_text(json.dumps(
            {"heads": 4, "epochs": 50, "seed": s, "test_mse": v, "seconds": 60.0}))
    runs = [{"protocol": "published", "target": "reference_code", "p": 60, "heads": 4, "seed": s,
             "mse_batchmean": ours_scale * published[s % 3] * (1 + 0.01 * s)} for s in range(10)]
    (tmp_path / "set" / "tables").mkdir(parents=True)
    pd.DataFrame(runs).assign(mse_K=0.1, mse_Q=0.1, mse_V=0.1).to_csv(tmp_path / "set/tables/heads_runs.csv", index=False)
    (row,) = table.e1_rows(tmp_path / "records", tmp_path / "set")
    assert row["verdict"] == verdict and row["published_code_n"] == 3 and row["ours_n"] == 10


def test_the_published_code_runs_on_another_device_without_edits():
    """--device: the module's DataLoader shuffles with a generator on that device while the code runs, and is put
    back after; on the CPU nothing is patched (the records made there stay as published)."""
    import types

    import torch
    from torch.utils.data import DataLoader

    from tools.crosscheck import published

    mod = types.SimpleNamespace(DataLoader=DataLoader)
    data = [torch.zeros(2)] * 8
    with published._on_device(mod, "cpu"):
        assert mod.DataLoader is DataLoader
    with published._on_device(mod, "cpu:0"):
        loader = mod.DataLoader(data, batch_size=4, shuffle=True)
        assert loader.generator is not None and loader.generator.device == torch.device("cpu")
        assert mod.DataLoader(data, batch_size=4).generator is None  # no shuffle: left alone
        assert len(list(loader)) == 2
    assert mod.DataLoader is DataLoader and torch.get_default_device() == torch.device("cpu")


def _swap_record(tmp_path: Path, pub: dict, ours: dict) -> Path:
    """A swap record: ``pub`` / ``ours`` map test set -> scale of the paper's value for that side's models."""
    def models(scales, names):
        return {n: {t: {a: [PAPER[a] * scales[t] * (1 + 0.01 * k) for k in range(3)] for a in ALGOS}
                    for t in ("published", "ours")} for n in names}
    rec = {"our_seeds": [0, 1, 2], "commit": "0" * 40, "published_eval_seeds": [42, 43, 44, 45, 46],
           "score": "mean of per-batch MSE", "checks": {"published_vs_record_max_abs": {"a.pth": 4e-5},
                                                        "ours_vs_set_records_max_abs": 1e-9},
           "mse": {"published_models": models(pub, ["a.pth", "b.pth"]), "our_models": models(ours, ["seed0", "seed1"])},
           "train_set": {"a.pth": {"final_params_mse": 0.11, "last_epoch_running_mean": 0.094}}}
    (tmp_path / "records").mkdir(exist_ok=True)
    (tmp_path / "records" / "e3_swap_H6.json").write_text(json.dumps(rec))
    return tmp_path / "records"


@pytest.mark.parametrize("pub, ours, reading", [
    # each side's models keep their level on both test sets: the models differ
    ({"published": 0.8, "ours": 0.8}, {"published": 0.5, "ours": 0.5}, "the models"),
    # negative control: the same models score by the test set (the published set harder): the data differ
    ({"published": 0.8, "ours": 0.5}, {"published": 0.8, "ours": 0.5}, "the test data"),
    # a third of the distance between the sides moves with the test set
    ({"published": 0.8, "ours": 0.7}, {"published": 0.6, "ours": 0.5}, "both"),
])
def test_swap_rule_says_models_data_or_both(tmp_path, pub, ours, reading):
    lines = table.e3_swap(_swap_record(tmp_path, pub, ours))
    rule = next(i for i, line in enumerate(lines) if table.SWAP_RULE in line)
    (verdict,) = [i for i, line in enumerate(lines) if line.startswith("**Reading: the gap follows")]
    assert rule < verdict and lines[verdict] == f"**Reading: the gap follows {reading}.**"
    assert sum(f"| {reading} |" in line for line in lines) == 3
    assert any("a.pth 0.11 vs 0.094" in line for line in lines)


def test_swap_rule_terms_and_no_record_no_section(tmp_path):
    reading, terms = table.swap_reading({"published": 0.10, "ours": 0.11}, {"published": 0.06, "ours": 0.05})
    assert reading == "the models" and terms == pytest.approx(
        {"gap_published_set": 0.04, "gap_our_set": 0.06, "shift_published_models": 0.01, "shift_our_models": 0.01})
    assert table.swap_reading({"published": 0.05, "ours": 0.06}, {"published": 0.06, "ours": 0.05})[0] == "the test data"
    (tmp_path / "records").mkdir()
    assert table.e3_swap(tmp_path / "records") == []


@pytest.mark.parametrize("x_scale, reading", [
    (0.5, "the trainer"),  # our trainer on the published data lands where our models are
    (0.8, "the training set"),  # negative control: it lands where the published models are
    (0.65, "both"),
])
def test_trainer_rule_says_trainer_training_set_or_both(tmp_path, x_scale, reading):
    records = _swap_record(tmp_path, {"published": 0.8, "ours": 0.8}, {"published": 0.5, "ours": 0.5})
    rec = json.loads((records / "e3_swap_H6.json").read_text())
    rec["mse"]["our_models_on_published_data"] = {
        n: {t: {a: [PAPER[a] * x_scale * (1 + 0.01 * k) for k in range(3)] for a in ALGOS} for t in ("published", "ours")}
        for n in ("seed0", "seed1")}
    rec["on_published_data"] = {"data_seed": 0, "trained_at": "0" * 40}
    rec["train_set"] = {name: {"final_params_mse": v, "last_epoch_running_mean": v, "last_10_epochs_mean": v}
                        for name, v in (("a.pth", 0.10), ("seed0", 0.08), ("seed0 on the published data", 0.09))}
    (records / "e3_swap_H6.json").write_text(json.dumps(rec))
    lines = table.e3_swap(records)
    rule = next(i for i, line in enumerate(lines) if table.TRAINER_RULE in line)
    (verdict,) = [i for i, line in enumerate(lines) if line.startswith("**Reading: within the models")]
    assert rule < verdict and lines[verdict] == f"**Reading: within the models, the gap follows {reading}.**"
    assert table.trainer_reading(0.08, 0.05, 0.05) == ("the trainer", 0.0)
    (level,) = [line for line in lines if line.startswith("The training loss over each model's last 10 epochs")]
    assert "published (p) 0.1; ours (o) 0.08; our trainer on the published training set (x) 0.09; f on it 0.50" in level


def _step_record(tmp_path: Path, f64: float, f32: float, control: float) -> Path:
    run = lambda dtype, diff, lr=1.0: {"start": "init", "dtype": dtype, "attention": "kernel", "lr_ratio": lr,  # noqa: E731
                                       "ours_flush_denormals": dtype == "float32", "steps": 10,
                                       "worst_rel_loss_diff": diff, "last_losses": {"published": 1.0, "ours": 1.0},
                                       "published_subnormals_at_end": 0, "seconds": 0.1}
    rec = {"experiment": "E3", "heads": 6, "commit": "0" * 40, "commit_dirty": False, "trained_start": "m.pth",
           "torch": "x", "runs": {"a": run("float64", f64), "b": run("float32", f32), "c": run("float32", control, 1.01)}}
    (tmp_path / "records").mkdir(exist_ok=True)
    (tmp_path / "records" / "e3_step_equiv_H6.json").write_text(json.dumps(rec))
    return tmp_path / "records"


@pytest.mark.parametrize("f64, f32, control, reading", [
    (1e-15, 2e-6, 2e-3, "the same arithmetic"),
    (1e-6, 2e-6, 2e-3, "differ"),  # a float64 run off by more than rounding: another computation
    (1e-15, 1e-3, 2e-3, "differ"),  # a float32 run as far off as the control
    (1e-15, 2e-6, 5e-5, "cannot tell"),  # the control is not told apart: the check has no power
])
def test_step_rule_says_same_differ_or_cannot_tell(tmp_path, f64, f32, control, reading):
    lines = table.e3_step(_step_record(tmp_path, f64, f32, control), tmp_path)
    assert f"The rule, stated before the numbers: {table.STEP_RULE}." in lines
    assert f"**Reading by [step]: {table.STEP_SAID[reading]}.**" in lines


def test_step_rule_needs_a_control_and_no_record_no_section(tmp_path):
    rec = json.loads((_step_record(tmp_path, 1e-15, 1e-6, 1e-3) / "e3_step_equiv_H6.json").read_text())
    with pytest.raises(ValueError, match="control"):
        table.step_reading({k: v for k, v in rec["runs"].items() if v["lr_ratio"] == 1.0})
    assert table.e3_step(tmp_path / "nothing", tmp_path) == []


def _rounding_record(tmp_path: Path, f32: float, rounding: float, control: float) -> Path:
    records = _step_record(tmp_path, 1e-15, f32, control)
    rec = json.loads((records / "e3_step_equiv_H6.json").read_text())
    rec["data_seed"] = 1
    rec["runs"]["r"] = dict(rec["runs"]["b"], side="published+1ulp", attention="-", worst_rel_loss_diff=rounding)
    (records / "e3_step_equiv_H6.json").unlink()
    (records / "e3_step_equiv_H6_data1.json").write_text(json.dumps(rec))
    return records


@pytest.mark.parametrize("f32, rounding, control, reading", [
    (1.2e-4, 5e-5, 3e-2, "the same arithmetic"),  # above [step]'s fixed bound, within 10 x rounding
    (1e-3, 5e-5, 3e-2, "differ"),  # 20 x what rounding alone gives
    (1e-5, 5e-3, 3e-2, "cannot tell"),  # rounding alone carries the runs as far apart as the control
])
def test_step_rounding_rule_reads_float32_against_rounding(tmp_path, f32, rounding, control, reading):
    lines = table.e3_step(_rounding_record(tmp_path, f32, rounding, control), tmp_path)
    assert f"The rule, stated before the numbers: {table.STEP_ROUNDING_RULE}." in lines
    assert f"**Reading by [step-rounding]: {table.STEP_SAID[reading]}.**" in lines
    assert "| r | init | float32 | published+1ulp | - | 1 | yes | 10 | 5e-05 | 0 |" in lines or reading != "the same arithmetic"


def test_step_rounding_rule_needs_its_rounding_control(tmp_path):
    rec = json.loads((_rounding_record(tmp_path, 1e-5, 5e-5, 3e-2) / "e3_step_equiv_H6_data1.json").read_text())
    del rec["runs"]["r"]
    with pytest.raises(ValueError, match="rounding control"):
        table.step_rounding_reading(rec["runs"])


@pytest.mark.parametrize("pub_scale, ranks, chance", [
    (2.0, "1, 2", "0.1"),  # the published models above every model of ours with their read-out
    (0.1, "4, 5", "1"),  # negative control: below every one, a rank any draw reaches
])
def test_readout_groups_rank_the_published_models_among_their_read_out(tmp_path, pub_scale, ranks, chance):
    set_dir = _set(tmp_path, 0.5)
    records = _readout(tmp_path, 0.5)  # our read-out models: lasso PAPER * 0.5 * (0.95, 1, 1.05); losses 1/300
    for i in (0, 1):
        (records / f"e3_H6_data{i}.json").write_text(json.dumps({
            "data_seed": i, "train_loss_per_epoch": [pub_scale / 300 * (1 + 0.01 * i)] * 300,
            "test_loss_per_eval_seed": {a: [PAPER[a] * 0.5 * pub_scale * (1 + 0.01 * i)] * 5 for a in ALGOS}}))
    for s in range(10):  # the set's 10 models (their test MSEs: _set)
        (set_dir / "statistical" / "runs" / "reference_code_H6" / f"seed{s}").mkdir(parents=True)
        (set_dir / "statistical" / "runs" / "reference_code_H6" / f"seed{s}" / "metrics.json").write_text(
            json.dumps({"train_history": [0.5] * 300}))
    lines = table._readout_loss_lines(records, set_dir)
    assert "| published code | 2 |" in lines[7] and "| ours, default read-out (d_out = 1) | 10 |" in lines[9]
    assert f"lasso {ranks} (chance {chance})" in lines[-7] and f"training loss {ranks} (chance {chance})" in lines[-7]
    assert lines[-7].endswith("With 2 + 3 models the smallest chance this can give is 0.1.")
    assert lines[-5] == f"The rule, stated before the numbers of the read-out's seeds 3-5: {table.RANK_RULE}."
    assert lines[-3] == "**Reading by [rank]: cannot tell.**"  # 2 + 3 models cannot reach 0.05 either way
    # like with like by [published-models]: the published code higher on all three is a difference of implementation;
    # lower on all three, the rule leaves it not decided
    assert lines[-1].endswith("reading: a difference of implementation." if pub_scale == 2.0 else "reading: not decided.")


def test_readout_records_pool_across_seeds_of_one_commit_and_refuse_a_patchwork(tmp_path):
    records = _readout(tmp_path, 0.5)
    more = json.loads((records / "e3_readout_H6.json").read_text())
    more.update(seeds=[3], config="config/e3_readout_345.yaml",
                test_mse_vs_noisy_y={"3": more["test_mse_vs_noisy_y"]["0"]},
                train_loss_per_epoch={"3": more["train_loss_per_epoch"]["0"]})
    (records / "e3_readout_H6_seeds3.json").write_text(json.dumps(more))
    rec = table.readout_record(records)
    assert rec["seeds"] == [0, 1, 2, 3] and sorted(rec["test_mse_vs_noisy_y"]) == ["0", "1", "2", "3"]
    assert rec["configs"] == {"config/e3_readout.yaml": [0, 1, 2], "config/e3_readout_345.yaml": [3]}
    rows, lines = table.e3_readout(records, _set(tmp_path, 0.5))
    assert all(r["readout_n"] == 4 for r in rows)
    assert any("`config/e3_readout_345.yaml` (seeds 3)" in line for line in lines)
    (records / "e3_readout_H6_seeds3.json").write_text(json.dumps(dict(more, seeds=[2], test_mse_vs_noisy_y={"2": {}})))
    with pytest.raises(ValueError, match="same seed"):
        table.readout_record(records)
    (records / "e3_readout_H6_seeds3.json").write_text(json.dumps(dict(more, commit="1" * 40)))
    with pytest.raises(ValueError, match="several commits"):
        table.readout_record(records)
    (records / "e3_readout_H6_seeds3.json").write_text(json.dumps(dict(more, code_version="algo_emu src 1")))
    assert table.readout_record(records)["seeds"] == [0, 1, 2, 3]  # a record without a digest names none
    (records / "e3_readout_H6.json").write_text(json.dumps(dict(json.loads((records / "e3_readout_H6.json")
                                                                           .read_text()), code_version="algo_emu src 0")))
    with pytest.raises(ValueError, match="several training-source digests"):
        table.readout_record(records)


@pytest.mark.parametrize("published, ours, reading", [
    ([0.9, 1.0], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], "differ"),  # above all 6 of ours: chance 1/28
    ([0.05, 1.0], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], "no difference found"),  # negative control: one at the bottom
    ([0.9, 1.0], [0.1, 0.2, 0.3], "cannot tell"),  # 2 + 3 models: 0.1 at the least
])
def test_rank_rule_says_differ_no_difference_or_cannot_tell(published, ours, reading):
    ranks, chance = table.rank_chance(published, ours)
    assert table.rank_reading([chance] * 3, len(published), len(published) + len(ours)) == reading
    if reading == "differ":
        assert ranks == [1, 2] and chance == pytest.approx(1 / 28)
    # two of three measures decide; one alone does not
    assert table.rank_reading([0.01, 0.5, 0.5], 2, 8) == "cannot tell"
    assert table.rank_reading([0.01, 0.02, 0.5], 2, 8) == "differ"


def test_readings_in_one_place_lists_each_bold_reading_under_its_section():
    lines = ["", "## A", "text", "**Reading: x.**", "### B", "", "**Verdict: y.**", "**Reading by [r]: z.**"]
    out = table.readings_in_one_place(lines)
    assert out[-3:] == ["- A: **Reading: x.**", "- B: **Verdict: y.**", "- B: **Reading by [r]: z.**"]
    assert table.readings_in_one_place(["## A", "no reading"]) == []
