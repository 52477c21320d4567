"""No hand-typed result numbers in README.md and docs/: they are generated from the committed sets.

Every result number (an MSE, a ratio, a verdict count, a time) sits in a ``<!-- generated: NAME -->`` block
filled by :mod:`algo_emu.docs_numbers` from the committed tables; these tests fail when a block is stale, and
when prose outside the blocks carries a number that looks like a result and is not on the allow-list of
non-result numbers (configuration values, rule thresholds, test tolerances, the essay's own predictions).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from algo_emu import docs_numbers as dn
from algo_emu.runtime import REPO_ROOT

BLOCK = re.compile(r"<!-- generated: [\w-]+ -->\n.*?<!-- /generated -->", re.S)
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE = re.compile(r"`[^`\n]*`")
# References that contain digits but are not numbers: paper ids and versions, theorem/section numbers, versions.
REFS = re.compile(
    r"(arXiv:? ?\d{4}\.\d{4,5}(v\d)?|\d{4}\.\d{4,5}(v\d)?"
    r"|(Theorems?|Corollar(y|ies)|Definition|Remark|Section|Appendix|Lemma|Proposition) [A-Z]?\d[\d.]*"
    r"((, |/| and )\d[\d.]*)*"
    r"|[Pp]ython \d\.\d+|YAML \d\.\d|\b\d+\.\d+\.\d+\b|\b[A-Z]\.\d\b)")
# What reads as a result: a decimal, a number in scientific notation, a percentage, a ratio "Nx", a duration.
NUM = re.compile(r"(?<![\w.])(\d+(\.\d+)?e[-+]?\d+|\d+\.\d+\s?(%|x\b)?|\d+\s?(%|x\b))"
                 r"|(?<![\w.])\d+(\.\d+)?\s?(h|min|s|hours?|minutes?|days?|weeks?)\b")

#: Numbers that are not results, in any file: the CI level, the split, test tolerances, the learning rate.
ALLOWED = {"95 %", "95%", "20 %", "80 %", "1e-12", "1e-3"}
#: Per file, with why.
ALLOWED_IN = {
    # the essay's own predictions (bands it states), the verdict bands read from them, the theory's slope test
    "docs/essay.md": {"5 %", "3 %", "10 %", "50 %", "2.5", "0.9", "1.1", "0.25", "0.5", "10x", "100x"},
    # a sigmoid/step target's part that ignores w: MSE / Var(target) 0.5 by construction (a derivation)
    "docs/experiments.md": {"0.5"},
    # the remote runner's limit per command, and the script's BUDGET and RESERVE defaults
    "docs/gpu.md": {"10 minutes", "540 s", "60 s"},
    # data defaults (noise, masking probability, lasso alpha, GD step), solver and test tolerances, and the
    # residual's std at the paper's scale, sqrt(d * 25/3) (a derivation)
    "docs/statistical_and_theorem31_data.md": {"0.5", "0.05", "0.1", "0.02", "1e-8", "1e-4", "1e-7", "14.2"},
    # one ulp of 1e6 (a derivation) and the fast-vs-dense forward's test tolerance
    "docs/constructions.md": {"1e-10", "1e-14"},
    # a version (MariaDB 10.11)
    "docs/cluster.md": {"10.11"},
    # the label noise's std and its variance (the reference_code algorithm's own error by construction), and
    # the frozen-file test's weight change
    "docs/statistical.md": {"0.05", "0.0025", "1e-7"},
    # the default test fraction and two test tolerances (a CV fast path, the padded-ensemble rounding)
    "docs/ames.md": {"0.2", "1e-9", "1e-8"},
}
#: Files checked in full (no result number outside a generated block).
STRICT = ("README.md", "docs/reference-scale.md", "docs/essay.md", "docs/speed.md", "docs/experiments.md",
          "docs/reproduce.md", "docs/architecture.md", "docs/gpu.md",
          "docs/statistical_and_theorem31_data.md", "docs/constructions.md",
          "docs/cluster.md", "docs/theorem31.md",
          "docs/statistical.md", "docs/ames.md", "docs/reliability.md")
#: Not scanned: every number there is a verdict rule's parameter, stated before any result (its own owners
#: keep it; the rules are tested in tests/test_verdicts.py).
NOT_SCANNED = ("docs/verdicts.md",)
def result_like_numbers(text: str, allowed: set[str] = frozenset()) -> list[str]:
    """The result-like numbers of ``text`` outside generated blocks, code and references, not allowed."""
    for pattern in (BLOCK, FENCE, INLINE, REFS):
        text = pattern.sub(" ", text)
    found = [m.group(0).strip() for m in NUM.finditer(text)]
    return [n for n in found if n not in ALLOWED and n not in allowed]


def _docs() -> list[str]:
    return ["README.md", *sorted(f"docs/{p.name}" for p in (REPO_ROOT / "docs").glob("*.md"))]


def test_every_generated_block_matches_the_committed_files():
    problems = dn.run(write=False)
    assert not problems, "\n".join(problems) + "\nrun: python -m algo_emu.docs_numbers --write"


def test_every_generator_has_a_block_and_every_block_a_generator():
    used = set()
    for rel in _docs():
        used |= set(re.findall(r"<!-- generated: ([\w-]+) -->", (REPO_ROOT / rel).read_text()))
    assert used == set(dn.GENERATORS), (used ^ set(dn.GENERATORS))


def test_a_stale_block_is_reported_and_rewritten(tmp_path: Path):
    text = "before\n<!-- generated: reference-cost -->\nE1 took 1.0 min\n<!-- /generated -->\nafter\n"
    new, stale, unknown = dn.fill(text, REPO_ROOT, {})
    assert stale == ["reference-cost"] and not unknown
    assert "E1 took 1.0 min" not in new and new.startswith("before\n") and new.endswith("after\n")
    again, stale2, _ = dn.fill(new, REPO_ROOT, {})
    assert again == new and not stale2
    assert dn.fill("<!-- generated: no-such -->\nx\n<!-- /generated -->", REPO_ROOT, {})[2] == ["no-such"]


@pytest.mark.parametrize("rel", STRICT)
def test_no_hand_typed_result_number(rel: str):
    found = result_like_numbers((REPO_ROOT / rel).read_text(), ALLOWED_IN.get(rel, set()))
    assert not found, f"{rel}: result-like numbers outside generated blocks: {found}"


def test_every_page_is_strict_or_named():
    pages = set(_docs())
    assert pages <= set(STRICT) | set(NOT_SCANNED), pages - set(STRICT) - set(NOT_SCANNED)


def test_the_scanner_sees_results_and_skips_references():
    assert result_like_numbers("MSE 3.64 against 3.469, 6-8x faster, 74 min, 18 %") == \
        ["3.64", "3.469", "8x", "74 min", "18 %"]
    assert result_like_numbers("arXiv 2508.17550v2, Theorem 3.1, Corollary 4.2.1, torch 2.13.0, `lr 0.1`") == []
    assert result_like_numbers("<!-- generated: x -->\n0.77\n<!-- /generated -->") == []


def test_the_listed_drifts_are_generated_now():
    """The numbers that drifted from their tables are now read from them."""
    readme = (REPO_ROOT / "README.md").read_text()
    summary = dn.block_summary(REPO_ROOT)
    # every setting of the paper-scale sweep that has no record is named (H = 12 and the p sweep alike)
    missing_p = [s.name for s, present, _ in dn.paper_scale_settings(REPO_ROOT)
                 if not present and s.name.startswith("heads/published/H1_p")]
    assert all(name.split("/", 1)[1] in summary for name in missing_p)
    assert summary in readme
    # the reference run's cost comes from its manifest, not a hand-typed "74 min, 89 jobs"
    jobs = dn.read_json(REPO_ROOT / dn.REF / "manifest.json")["benchmarks"]["jobs"]
    assert f"{len(jobs)} timed jobs" in dn.block_scales(REPO_ROOT)
    # the compile speed-up is the benchmark's, and config.yaml no longer states its own
    assert "1.4x" not in (REPO_ROOT / "config" / "config.yaml").read_text()
    # the essay's 1000-layer error is the table's
    eq = dn.block_essay_equivalences(REPO_ROOT)
    import pandas as pd

    e = pd.read_csv(REPO_ROOT / dn.REF / "tables" / "essay_equivalences.csv")
    v = e[(e.check == "ridge_lsa_vs_posterior_mean") & (e.value.astype(float) == 1000)].result_max.iloc[0]
    assert f"1000: {dn._g(v)}" in eq


def _fake_bench_root(tmp_path: Path, seconds: float, code_version: str) -> Path:
    """A root holding config/, a benchmark JSON whose every job takes ``seconds``, and the campaign's state."""
    import json
    import shutil
    import sys
    from dataclasses import asdict

    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    import cost
    import paper_scale as ps
    from algo_emu.config import load_config

    shutil.copytree(REPO_ROOT / "config", tmp_path / "config")
    cfg = load_config(tmp_path / "config/config.yaml", gpu_check=False)
    rows = ps.build_rows(cfg)
    bench = {"rows": {r.key: {"shape": asdict(r), "measured": {"job_seconds": seconds, "steps_per_job": 1000,
                                                               "speedup_vs_loop": 12.0, "ratio_to_floor": 3.5}}
                      for r in rows},
             "environment": {"code_version": code_version, "git_commit": "0" * 40, "threads": 2, "hardware": {}}}
    pred = cost.predict_hours(bench, cfg)
    bench["settings"] = pred.pop("settings")
    bench["prediction"] = pred
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / dn.PAPER_BENCH).write_text(json.dumps(bench))
    state = {"settings": {"heads/published/H4_p60": {"status": "done", "wall_seconds": 1.1 * seconds,
                                                     "commit": "1" * 40, "code_version": "algo_emu 0.1.0 src aaaa"},
                          "heads/published/H8_p60": {"status": "done", "wall_seconds": 2.0 * seconds,
                                                     "commit": "1" * 40, "code_version": "algo_emu 0.1.0 src aaaa"}}}
    (tmp_path / "results/reference/paper-scale").mkdir(parents=True)
    (tmp_path / "results/reference/paper-scale/campaign.json").write_text(json.dumps(state))
    return tmp_path


def test_paper_scale_cost_block_reads_target_and_real_settings(tmp_path):
    """The 48 h reading flips with the benchmark's hours; a real setting checks the prediction only when its
    training code is the benchmark's, and then reads within / outside 25 % from its own wall time."""
    fast = dn.block_paper_scale_cost(_fake_bench_root(tmp_path / "a", 60.0, "algo_emu 0.1.0 src aaaa"))
    assert "within the 48 h" in fast
    assert "| `heads/published/H4_p60` |" in fast and "| 1.1 | " in fast and "within 25%" in fast
    assert "| 2 | " in fast and "outside 25%" in fast
    slow = dn.block_paper_scale_cost(_fake_bench_root(tmp_path / "b", 36000.0, "algo_emu 0.1.0 src bbbb"))
    assert "over the 48 h" in slow
    assert slow.count("other code: not a check") == 2 and "within 25%" not in slow
    # the GPU line prices the same steps and says it is an estimate
    assert "an estimate, not a measurement" in slow


def test_paper_scale_cost_check_needs_a_benchmark_on_the_settings_cpu_and_times_a_resumed_call_only(tmp_path):
    """A setting made on another CPU is not checked against the reference machine's benchmark; with a benchmark
    of the same code on its CPU (benchmarks/paper_scale_<machine>.json) it is, and a setting resumed there is
    checked on the epochs of its last call against that share of the prediction."""
    import json

    from algo_emu import campaign as cp
    from algo_emu.config import load_config

    code = "algo_emu 0.1.0 src aaaa"
    root = _fake_bench_root(tmp_path, 1000.0, code)
    state_path = root / "results/reference/paper-scale/campaign.json"
    state = json.loads(state_path.read_text())
    amd = {"cpu_model": "AMD EPYC", "cpu_count": 2, "memory_gib": 23.5}
    state["settings"] = {"heads/published/H1_p20": {"status": "done", "wall_seconds": 9999.0, "commit": "1" * 40,
                                                    "code_version": code, "hardware": amd}}
    state_path.write_text(json.dumps(state))
    s = {x.name: x for x in cp.settings(load_config(root / "config/config.yaml", gpu_check=False))}["heads/published/H1_p20"]
    # 50 epochs, the last call resumed at epoch 10: 40 epochs of 30 s on the AMD machine (the first 10 elsewhere)
    for r in s.records:
        p = root / "results/reference/paper-scale" / s.set_path(r)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({"environment": {"code_version": code, "hardware": amd},
                                 "timing": {"epoch_seconds": [99.0] * 10 + [30.0] * 40, "resumed_from_epoch": 10}}))
    only_ref = dn.block_paper_scale_cost(root)
    row = next(ln for ln in only_ref.splitlines() if ln.startswith("| `heads/published/H1_p20`"))
    assert "no benchmark on its CPU (AMD EPYC): not a check" in row and "| 11-50 |" in row
    # the same benchmark on that CPU: 1000 s per job -> 800 s for 40 of 50 epochs; measured 40 x 30 = 1200 s
    bench = json.loads((root / dn.PAPER_BENCH).read_text())
    bench["environment"]["hardware"] = amd
    bench["machine_gflops"] = 100.0
    (root / "benchmarks/paper_scale_amd.json").write_text(json.dumps(bench))
    both = dn.block_paper_scale_cost(root)
    row = next(ln for ln in both.splitlines() if ln.startswith("| `heads/published/H1_p20`"))
    assert "| 0.2 h | 0.3 h | 1.5 |" in row and "outside 25% (`paper_scale_amd.json`)" in row
    assert "`benchmarks/paper_scale_amd.json`" in both and "AMD EPYC (2 cores" in both
    # faster epochs on that CPU: within 25 %
    for r in s.records:
        p = root / "results/reference/paper-scale" / s.set_path(r)
        rec = json.loads(p.read_text())
        rec["timing"]["epoch_seconds"] = [99.0] * 10 + [21.0] * 40
        p.write_text(json.dumps(rec))
    row = next(ln for ln in dn.block_paper_scale_cost(root).splitlines() if ln.startswith("| `heads/published/H1_p20`"))
    assert "| 1.1 |" in row and "within 25% (`paper_scale_amd.json`)" in row  # 840 s / 800 s
    # another CPU generation under the same model name (its identity recorded by the campaign's last call): the
    # benchmark of the name alone is not its CPU's
    zen5 = amd | {"cpu_id": "AuthenticAMD family 26 model 2 stepping 1, avx512f"}
    state["settings"]["heads/published/H1_p20"]["calls"] = [{"hardware": zen5, "started": "t", "resumed_from": {}}]
    state_path.write_text(json.dumps(state))
    row = next(ln for ln in dn.block_paper_scale_cost(root).splitlines() if ln.startswith("| `heads/published/H1_p20`"))
    assert "no benchmark on its CPU (AMD EPYC (AuthenticAMD family 26 model 2 stepping 1, avx512f)): not a check" in row
    bench["environment"]["hardware"] = zen5  # a benchmark made on that CPU checks it
    (root / "benchmarks/paper_scale_amd.json").write_text(json.dumps(bench))
    row = next(ln for ln in dn.block_paper_scale_cost(root).splitlines() if ln.startswith("| `heads/published/H1_p20`"))
    assert "within 25% (`paper_scale_amd.json`)" in row and "that call" not in row  # no load measured: none claimed
    # the load measured while that call ran is read beside the check
    state["settings"]["heads/published/H1_p20"]["calls"][-1]["load"] = {
        "every_s": 30.0, "cores": 2, "sampled_s": 1200.0, "job_cpu_s": 1800.0, "others_cpu_s": 480.0,
        "job_share": 0.75, "others_share": 0.2, "stalled_s": 300.0, "stalls": [["2026-12-04T01:00:00+00:00", 300.0]]}
    state_path.write_text(json.dumps(state))
    row = next(ln for ln in dn.block_paper_scale_cost(root).splitlines() if ln.startswith("| `heads/published/H1_p20`"))
    assert ("within 25% (`paper_scale_amd.json`); that call: job 75% of 2 cores, others 20%, stalled 5 min in 1 "
            "stretch(es); without those stalls (every job paused) 0.68, outside 25% |") in row  # (840 - 300) / 800

    # two calls: the timed epochs (resumed at 10) ran in the one that resumed a checkpoint at epoch 10, so only its
    # load and stalls are read; the earlier call's are not
    def load(stalled):
        return {"every_s": 30.0, "cores": 2, "sampled_s": 1200.0, "job_cpu_s": 1800.0, "others_cpu_s": 0.0,
                "job_share": 0.75, "others_share": 0.0, "stalled_s": stalled, "stalls": [["t", stalled]] if stalled else []}

    entry = state["settings"]["heads/published/H1_p20"]
    entry["calls"] = [{"hardware": zen5, "started": "2026-12-01T01:00:00", "resumed_from": {}, "load": load(600.0)},
                      {"hardware": zen5, "started": "2026-12-02T01:00:00", "resumed_from": {"ck.pt": 10}, "load": load(120.0)}]
    state_path.write_text(json.dumps(state))
    row = next(ln for ln in dn.block_paper_scale_cost(root).splitlines() if ln.startswith("| `heads/published/H1_p20`"))
    assert "that call: job 75% of 2 cores, others 0%, stalled 2 min in 1 stretch(es); without those stalls (every job " \
           "paused) 0.9, within 25% |" in row  # (840 - 120) / 800
    # timed from its first epoch, in the call before the one that first resumed its (finished) checkpoint: both calls
    for r in s.records:
        pth = root / "results/reference/paper-scale" / s.set_path(r)
        rec = json.loads(pth.read_text())
        rec["timing"] = {"epoch_seconds": [21.0] * 50, "resumed_from_epoch": 0}
        pth.write_text(json.dumps(rec))
    entry["calls"][1]["resumed_from"] = {"ck.pt": 50}
    state_path.write_text(json.dumps(state))
    row = next(ln for ln in dn.block_paper_scale_cost(root).splitlines() if ln.startswith("| `heads/published/H1_p20`"))
    assert ("the calls that trained its timed epochs: from 2026-12-01 01:00: job 75% of 2 cores, others 0%, stalled "
            "10 min in 1 stretch(es); from 2026-12-02 01:00: job 75% of 2 cores, others 0%, stalled 2 min in 1 "
            "stretch(es); without those stalls (every job paused) 0.33, outside 25% |") in row  # (1050 - 720) / 1000
    assert dn._calls_of_timed_epochs([{"resumed_from": {}}, {"resumed_from": {"a": 3}}], [7]) == [0, 1]  # untold: all


def test_essay_bar_block_and_sentence_read_the_gate_from_the_rows(tmp_path):
    """The essay-gate sentence and table come from benchmarks/essay_bar.json: a budget whose ratio at k_max is
    above the gate reads 'missed', one below 'reached', and the sentence names the first budget that reaches it."""
    import json

    assert dn.essay_bar_summary(tmp_path) == "no configuration that reaches it has been measured"

    def row(steps, ratio):
        return {"seed": 0, "steps": steps, "batch_size": 64, "lr": 1e-3, "k_max": 32, "gate": 1.1, "passes": ratio <= 1.1,
                "d": 5, "model": {"d_model": 64, "layers": 4, "heads": 4, "ff": 128}, "train_seconds": 60.0 * steps / 1000,
                "ratios": {f"k{k}": {"model_mse": 0.3 * ratio, "ridge_mse": 0.3, "ratio": ratio} for k in (8, 16, 32)},
                "load_note": "quiet", "environment": {"threads": 1, "hardware": {"cpu_model": "X"}}}

    (tmp_path / "benchmarks").mkdir()
    path = tmp_path / dn.ESSAY_BAR
    path.write_text(json.dumps({"rows": [row(12000, 1.3), row(6000, 1.7)]}))
    assert dn.essay_bar_summary(tmp_path).endswith("6000 steps (batch 64, lr 0.001, seed 0): 1.7; 12000 steps "
                                                   "(batch 64, lr 0.001, seed 0): 1.3; none reaches the gate (1.1)")
    assert dn.block_essay_bar(tmp_path).count("| missed |") == 2
    path.write_text(json.dumps({"rows": [row(12000, 1.3), row(24000, 1.05), row(6000, 1.7)]}))
    assert dn.essay_bar_summary(tmp_path).endswith("the gate (1.1) is reached from 24000 steps")
    table = dn.block_essay_bar(tmp_path)
    assert "| 0 | 24000 | 64 | 0.001 | 1.05 | 1.05 | 1.05 (0.315 / 0.3) | reached |" in table


def test_cost_check_reads_every_training_job_a_record_reports():
    """E3's records report two training jobs (the model's timing.train, the baseline's blind.train_timing), each
    with its own resume epoch; E1/E2 records one (timing). The check times each job's last call."""
    from pathlib import Path

    from algo_emu.records import timing_blocks, training_jobs

    flat = {"timing": {"epoch_seconds": [1.0, 2.0], "resumed_from_epoch": 1}}
    e3 = {"timing": {"train": {"epoch_seconds": [1.0] * 3, "resumed_from_epoch": 1}, "eval_seconds": 5.0},
          "blind": {"train_timing": {"epoch_seconds": [2.0] * 3, "resumed_from_epoch": 2}}}
    assert timing_blocks(flat) == [(("timing",), flat["timing"])]
    assert [b for _, b in timing_blocks(e3)] == [e3["timing"]["train"], e3["blind"]["train_timing"]]
    assert timing_blocks({"timing": {"eval_seconds": 1.0}}) == []
    # the seeds of one job share it (the slowest record's block is kept); E4's sidecars replace its records
    slow = {"timing": {"epoch_seconds": [1.0, 3.0], "resumed_from_epoch": 1}}
    jobs = training_jobs({Path("runs/p60/seed0/metrics.json"): flat, Path("runs/p60/seed1/metrics.json"): slow,
                          Path("blind/p60/seed0/metrics.json"): flat})
    assert sorted(jobs) == [(Path("blind/p60"), ("timing",)), (Path("runs/p60"), ("timing",))]
    assert jobs[(Path("runs/p60"), ("timing",))] is slow["timing"]
    groups = {"timing": {"groups": {"544": {"epoch_seconds": [2.0], "resumed_from_epoch": 0}}}}
    e4 = training_jobs({Path("seed0/metrics.json"): {"timing": {"train": groups["timing"]}}},
                       {Path("emulator.pt.json"): groups, Path("blind.pt.json"): groups})
    assert sorted(e4) == [(Path("blind.pt.json"), ("timing", "groups", "544")),
                          (Path("emulator.pt.json"), ("timing", "groups", "544"))]


def test_paper_scale_summary_counts_made_rows_only_and_sets_paper_numbers_beside_ours(tmp_path):
    import pandas as pd

    from algo_emu.campaign_page import MISSING, VERDICTS

    assert dn.paper_other_lines(tmp_path, []) == []  # no verdict rows committed: nothing claimed
    nan = float("nan")
    rows = pd.DataFrame([
        {"experiment": "E3", "claim": "c", "setting": "lasso, H=6", "paper_mean": 0.0948, "paper_std": 0.028,
         "comparable_mean": 0.0536, "comparable_ci_low": 0.0461, "comparable_ci_high": 0.0623,
         "verdict": "inconsistent (ours lower)"},
        {"experiment": "E3", "claim": "c", "setting": "lasso, H=1", "paper_mean": 0.1286, "paper_std": 0.0368,
         "comparable_mean": nan, "comparable_ci_low": nan, "comparable_ci_high": nan, "verdict": MISSING},
        {"experiment": "E6 (essay)", "claim": "d", "setting": "", "paper_mean": nan, "paper_std": nan,
         "comparable_mean": 0.25, "comparable_ci_low": 0.18, "comparable_ci_high": 0.33,
         "verdict": "not supported: rule [essay]"}])
    path = tmp_path / dn.PAPER / VERDICTS
    path.parent.mkdir(parents=True)
    rows.to_csv(path, index=False)
    text = "\n".join(dn.paper_other_lines(tmp_path, ["inconsistent (ours lower)", "not supported"]))
    assert "| E3 | 1 | inconsistent (ours lower) 1 |" in text  # the missing H = 1 row is not counted
    assert "| E6 (essay) | 1 | not supported 1 |" in text
    assert "| E3 | c | lasso, H=6 | 0.0948 ± 0.028 | 0.0536 [0.0461, 0.0623] | inconsistent (ours lower) |" in text
    assert "H=1" not in text and "| E6 (essay) | d |" not in text  # no paper number: not in the paired table


def test_ames_paper_block_reads_the_paper_scale_set_and_waits_for_every_mode(tmp_path):
    """docs/ames.md's paper-scale block: each corrected row's per-seed count and coefficient range come from the
    paper-scale set's own files; with one mode only, it claims nothing."""
    import json
    import shutil

    import pandas as pd

    text = dn.block_ames_results_paper(REPO_ROOT)
    runs = pd.read_csv(REPO_ROOT / dn.PAPER / "tables" / "ames_runs.csv")
    for alg in ("linear", "ridge", "lasso"):
        per = runs[(runs["mode"] == "corrected") & (runs.algorithm == alg)]
        line = next(x for x in text.splitlines() if x.startswith(f"| {alg} |"))
        assert f"| {int((per.mse_over_blind < 1).sum())}/{len(per)} |" in line
    fits = [json.loads(f.read_text())["algorithms"]
            for f in sorted((REPO_ROOT / dn.PAPER / "ames" / "corrected").glob("seed*/fits.json"))]
    assert len(fits) == runs.seed.nunique() == 10
    lo, hi = min(f["linear"]["max_abs_coef"] for f in fits), max(f["linear"]["max_abs_coef"] for f in fits)
    assert f"linear {dn._range([lo, hi], 2)};" in text
    # one mode only: no table, a sentence that says why
    shutil.copytree(REPO_ROOT / "config", tmp_path / "config")
    (tmp_path / dn.PAPER / "tables").mkdir(parents=True)
    runs[runs["mode"] == "reference_code"].to_csv(tmp_path / dn.PAPER / "tables" / "ames_runs.csv", index=False)
    partial = dn.block_ames_results_paper(tmp_path)
    assert "mode(s) reference_code only" in partial and "|" not in partial


def test_paper_scale_cost_states_the_spread_of_every_benchmark_on_the_same_cpu(tmp_path):
    """Benchmarks of one CPU give one spread line (lowest to highest total, runs, commits); another commit's run is
    named by its commit, not called earlier; a benchmark of another CPU is not in the spread; one run alone gives
    no spread line."""
    import json

    root = _fake_bench_root(tmp_path, 1000.0, "algo_emu 0.1.0 src aaaa")
    alone = dn.block_paper_scale_cost(root)
    assert "Every benchmark on this CPU" not in alone
    bench = json.loads((root / dn.PAPER_BENCH).read_text())
    total = bench["prediction"]["hours"]
    other = json.loads(json.dumps(bench))
    other["prediction"]["hours"] = 2 * total
    other["environment"].update(git_commit="abcdef1" + "0" * 33, code_version="algo_emu 0.1.0 src bbbb")
    (root / "benchmarks/paper_scale_again.json").write_text(json.dumps(other))
    elsewhere = json.loads(json.dumps(bench))
    elsewhere["prediction"]["hours"] = 10 * total
    elsewhere["environment"]["hardware"] = {"cpu_model": "Other CPU", "cpu_count": 2}
    (root / "benchmarks/paper_scale_other.json").write_text(json.dumps(elsewhere))
    text = dn.block_paper_scale_cost(root)
    assert f"(2 runs, 2 commits, not all quiet: see each one's load note): the whole paper scale " \
           f"**{dn._hours(3600 * total)} to {dn._hours(7200 * total)}**" in text  # the fakes state no load
    assert "the same CPU, the code of abcdef1," in text and "earlier code" not in text
    for path, note in ((dn.PAPER_BENCH, "quiet: nothing else ran"), (Path("benchmarks/paper_scale_again.json"), "quiet: x")):
        b = json.loads((root / path).read_text())
        b["load_note"] = note
        (root / path).write_text(json.dumps(b))
    assert "(2 runs, 2 commits, each quiet)" in dn.block_paper_scale_cost(root)
    b = json.loads((root / "benchmarks/paper_scale_again.json").read_text())
    b["load_note"] = "the campaign trained beside it"
    (root / "benchmarks/paper_scale_again.json").write_text(json.dumps(b))
    assert "(2 runs, 2 commits, not all quiet: see each one's load note)" in dn.block_paper_scale_cost(root)


def test_step_profile_block_reads_its_benchmark(tmp_path):
    """Each row's step, its per-step part (a negative fit read as none), its useful rate against the large-matmul
    rate, the profile's classes and its matrix products in the step against alone, from the committed JSON."""
    import json

    assert "TODO" in dn.block_step_profile(tmp_path)
    shares = {"matrix products": 0.5, "attention kernel": 0.25, "compiled elementwise/layout": 0.125, "copies": 0.05,
              "batch assembly": 0.05, "optimiser": 0.025, "other (dispatch, autograd, Python)": 0.0}
    row = {"members": 10, "ms_per_step": 8.0, "fixed_ms_per_step": -0.2, "fixed_share": -0.025,
           "useful_gflops": 50.0, "profile_shares": shares, "matmul_in_step_ms": 4.0, "matmul_isolated_ms": 2.0,
           "matmul_isolated_gflops": 150.0}
    b = {"machine": {"matmul_gflops": 200.0, "copy_gbps_4mib": 150.0, "copy_gbps_256mib": 30.0},
         "environment": {"hardware": {"cpu_model": "X"}, "threads": 2, "git_commit": "1" * 40},
         "load_note": "quiet", "argv": ["--out", "x.json"], "rows": {"E3 fitted H=12": row}}
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / dn.STEP_PROFILE_BENCH).write_text(json.dumps(b))
    text = dn.block_step_profile(tmp_path)
    assert "| E3 fitted H=12 | 10 | 8 | 0.00 ms (0%) | 50 (0.25) | 50% | 25% | 12% | 12% | 4 / 2 (150) |" in text
    assert "large matmul 200 GFLOP/s" in text and "30 GB/s from memory" in text
