"""No long run unwarned: before Snakemake starts work (and in its dry run) the planned jobs' predicted cost is
printed, per experiment and in total, on this machine (from benchmarks/paper_scale.json) and on a GPU."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

from algo_emu.config import load_config
from algo_emu.cost import BENCHMARK, cost_block
from algo_emu.runtime import REPO_ROOT

TOTAL = re.compile(r"^  (?:total on this machine|on this machine: no benchmark for this CPU .*?): ([\d.e+-]+) h", re.M)


def _dry_run(tmp_path, config):
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO_ROOT / "Snakefile"), "--directory",
                           str(tmp_path), "--configfile", str(REPO_ROOT / config), "--cores", "2", "-n", "all"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:]
    assert out.count("Predicted cost of the ") == 1, out[-3000:]
    block = out[out.index("Predicted cost of the "):]
    assert block.index("on one GPU:") < block.index("Job stats:")  # one block, before the plan's table
    return block


def test_dry_run_of_the_paper_config_prices_its_jobs_in_hours(tmp_path):
    block = _dry_run(tmp_path, "config/config.yaml")
    hours = float(TOTAL.search(block).group(1))
    assert 20 < hours < 200, block[:1500]
    # the same prediction as the committed benchmark's (benchmarks/cost.py prices `all` with the same Pricer), which
    # the README's scales table reads: one number for one question
    assert hours == float(f"{json.loads((REPO_ROOT / BENCHMARK).read_text())['prediction']['hours']:.3g}")
    for name in ("E1 heads", "E2 theorem31", "E3 statistical", "E4 ames", "E6 essay"):
        assert re.search(rf"^  {name}: \d+ training jobs, [\d.e+-]+ h", block, re.M), block[:1500]
    assert "on one GPU: " in block


def test_dry_run_of_a_tiny_config_prints_a_small_total(tmp_path):
    block = _dry_run(tmp_path, "tests/tiny.yaml")
    assert float(TOTAL.search(block).group(1)) < 0.1, block[:1500]


def _jobs(cfg):
    return [("heads_train", {"protocol": "published", "heads": str(H), "p": str(cfg["heads"]["p_heads_sweep"])})
            for H in cfg["heads"]["heads_sweep"]] + [("theorem31_train", {"p": str(p)}) for p in cfg["theorem31"]["p_sweep"]] \
        + [("heads_aggregate", {})]


def test_another_cpu_has_no_benchmark_and_the_gpu_line_reads_the_probe(tmp_path):
    cfg = load_config(REPO_ROOT / "config" / "config.yaml", gpu_check=False)
    bench = json.loads((REPO_ROOT / BENCHMARK).read_text())
    ours = bench["environment"]["hardware"]["cpu_model"]
    same = cost_block(_jobs(cfg), cfg, cpu_model=ours)
    assert any(x.startswith("  total on this machine: ") for x in same)
    other = cost_block(_jobs(cfg), cfg, cpu_model="Some Other CPU 9000")
    assert any(x.startswith("  on this machine: no benchmark for this CPU (Some Other CPU 9000)") for x in other)
    assert "other jobs (data sets, tables, figures, report): 1, not priced" in "\n".join(other)
    # the GPU line: not measured until benchmarks/gpu_probe.json exists, then read from it
    (tmp_path / "benchmarks").mkdir()
    shutil.copy(REPO_ROOT / BENCHMARK, tmp_path / BENCHMARK)
    assert cost_block(_jobs(cfg), cfg, root=tmp_path)[-1] == "  on one GPU: not measured yet"
    (tmp_path / "benchmarks" / "gpu_probe.json").write_text(json.dumps(
        {"groups": {"g": 1}, "paper_seconds_one_group_at_a_time": 1234.0, "environment": {"device_name": "GPU X"}}))
    assert "1.23e+03 s of compute on one GPU X" in cost_block(_jobs(cfg), cfg, root=tmp_path)[-1]


def test_every_training_rule_is_priced():
    """A rule whose shell runs an experiment's train step is a training job, and the cost block prices it (one left
    out would be counted among the unpriced 'other jobs': a long run unwarned). Grouped rules (`*_group`) run only
    where shape grouping is on, on a GPU, which the GPU line prices."""
    from algo_emu.cost import TRAINING_RULES

    train_rules = set()
    for smk in (REPO_ROOT / "workflow" / "rules").glob("*.smk"):
        text = smk.read_text()
        for block in re.split(r"\n(?=\s*rule \w+:)", text):
            m = re.match(r"\s*rule (\w+):", block)
            if m and re.search(r"-m algo_emu \w+ train ", block.split("\nrule ")[0]):
                train_rules.add(m.group(1))
        train_rules |= {new for old, new in re.findall(r"use rule (\w+) as (\w+)", text) if old in train_rules}
    assert {"heads_train", "heads_convergence_train", "heads_converged_train", "theorem31_train_blind"} <= train_rules
    assert sorted(r for r in train_rules if not r.endswith("_group")) == sorted(TRAINING_RULES)


def test_a_dry_run_of_the_convergence_check_prices_its_training(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO_ROOT / "Snakefile"), "--directory",
                           str(tmp_path), "--configfile", str(REPO_ROOT / "config/config.yaml"), "--cores", "2", "-n",
                           "heads_convergence"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    cfg = load_config(REPO_ROOT / "config" / "config.yaml", gpu_check=False)["heads"]
    jobs = 2 * len(cfg["convergence"]["candidates"]) * len(cfg["heads_sweep"])  # each candidate at E and 2E, every H
    m = re.search(rf"^  E1 heads: {jobs} training jobs, ([\d.e+-]+) h", proc.stdout, re.M)
    assert m and float(m.group(1)) > 1, proc.stdout[-3000:]


def test_each_experiment_prices_its_own_training_rules(monkeypatch):
    """The cost block has no branch per experiment: a training rule is priced by its spec's ``price``; a rule whose
    spec declares none is counted, not priced."""
    import dataclasses

    from algo_emu import cost
    from algo_emu.specs import SPECS

    assert all(s.price is not None for s in SPECS if s.training_rules)  # every shipped training rule has a price
    bench = json.loads((REPO_ROOT / BENCHMARK).read_text())
    cfg = load_config(REPO_ROOT / "config/config.yaml", gpu_check=False)
    seen = []

    def toy_price(pricer, rule, wc):
        seen.append((rule, dict(wc), len(pricer.rows("heads")) > 0))
        return 3600.0 * int(wc["n"]), 1

    toy = dataclasses.replace(SPECS[0], section="toy", label="E9", training_rules=("toy_train",), price=toy_price)
    bare = dataclasses.replace(toy, training_rules=("bare_train",), price=None)
    monkeypatch.setattr(cost, "_PRICED_BY", {**cost._PRICED_BY, "toy_train": toy, "bare_train": bare})
    monkeypatch.setattr(cost, "TRAINING_RULES", {**cost.TRAINING_RULES, "toy_train": "E9 toy", "bare_train": "E9 toy"})
    lines = cost_block([("toy_train", {"n": "2"}), ("toy_train", {"n": "1"}), ("bare_train", {})], cfg,
                       cpu_model=bench["environment"]["hardware"]["cpu_model"])
    assert seen == [("toy_train", {"n": "2"}, True), ("toy_train", {"n": "1"}, True)]
    assert "  E9 toy: 2 training jobs, 3 h" in lines
    assert "  other jobs (data sets, tables, figures, report): 1, not priced" in lines
    assert "  total on this machine: 3 h" in lines[-2]
