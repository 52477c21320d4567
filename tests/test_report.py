"""The replication report's rules, the manifest, and refusing a half-finished results tree.

The report built from a real run is checked in tests/test_workflow.py (on the tiny DAG's results).
"""

import hashlib
import json
import subprocess
import sys

import pandas as pd
import pytest

from algo_emu import paper_values
from algo_emu.experiments import heads_tables as ht
from algo_emu.report import MissingOutputs, manifest, replication
from algo_emu.cli import main as cli_main
from algo_emu.runtime import REPO_ROOT

PAPER_CFG = {"seeds": list(range(10)), "heads": {"n_prompts": 50_000, "epochs": 50, "p_heads_sweep": 60,
                                                 "heads_p_sweep": 1, "target": "paper"}}
SMALL_CFG = {"seeds": [0, 1, 2], "heads": dict(PAPER_CFG["heads"], n_prompts=2000, epochs=3)}


def test_agreement_is_two_combined_standard_errors():
    # paper 3.469 +- 0.381 (n=10): SE 0.1205; ours std 0.381, n=10: combined SE 0.1704, 2 SE = 0.3408
    assert replication.agreement(3.469, 0.381, 10, 3.469 + 0.340, 0.381, 10) == "consistent"
    assert replication.agreement(3.469, 0.381, 10, 3.469 + 0.342, 0.381, 10) == "inconsistent (ours higher)"
    assert replication.agreement(3.469, 0.381, 10, 3.469 - 0.342, 0.381, 10) == "inconsistent (ours lower)"


def test_learned_and_scale_rules():
    assert replication.learned_from_ratio(0.49, "x")[0] == "yes"
    assert replication.learned_from_ratio(0.5, "x")[0] == "no"
    assert replication.learned_from_ratio(float("nan"), "x")[0] == "unknown"
    # mse_over_blind wins over the target variance when both are there
    assert replication.learned_from_row({"mse_mean": 1.0, "target_var_mean": 100.0, "mse_over_blind": 0.9},
                                        var_col="target_var_mean")[0] == "no"
    status, why = replication.learned_from_row({"mse_mean": 1.0}, var_col="target_var_mean")
    assert status == "unknown" and "could not be made" in why
    assert replication.scale_of("heads", PAPER_CFG, "config/config.yaml").at_paper
    small = replication.scale_of("heads", SMALL_CFG, "config/quick.yaml")
    assert not small.at_paper and small.why_not == "reduced scale (N=2000 < 50000, 3 < 50 epochs)"
    assert "config/quick.yaml: N=2000, 3 epochs, 3 seeds (REDUCED" in small.text


def _e1_tables(tmp_path, mse_scale=1.0, var=200.0, layout="new"):
    pv = paper_values.HEADS_TABLE
    rows = []
    for H, m, s in zip(pv["heads"], pv["mse"], pv["std"]):
        for protocol, target, metric in (("published", "reference_code", "batchmean"), ("independent", "paper", "exact")):
            comparable = protocol == "published" and target == "reference_code"
            mean = m * mse_scale
            rows.append({"protocol": protocol, "target": target, "metric": metric, "heads": H, "p": 60,
                         "mse_mean": mean, "mse_std": s, "mse_ci_low": mean - 0.2, "mse_ci_high": mean + 0.2,
                         "n_seeds": 10, "target_var_mean": var,
                         "paper_mse": m if comparable else float("nan"), "paper_std": s if comparable else float("nan")})
    hv = pd.DataFrame(rows)
    pl = pd.DataFrame([{"protocol": "published", "target": "reference_code", "metric": "batchmean", "p": p, "heads": 1,
                        "mse_mean": 4.0 / p * 20, "mse_std": 0.1, "mse_ci_low": 0, "mse_ci_high": 9, "n_seeds": 10,
                        "target_var_mean": var} for p in (20, 40, 60)])
    fit_entry = {"a": 0.5, "b": 3.0, "r2": 0.9, "alpha": 0.95, "alpha_ci": [0.8, 1.1], "a_ci": [0, 1], "b_ci": [2, 4]}
    fit = {"published": fit_entry, "independent": fit_entry,
           "paper": dict(fit_entry, alpha=0.72, alpha_ci=[0.6, 0.85])}
    if layout == "old":  # before the published-protocol mode: no protocol/metric/target_var columns, one fit
        hv = hv[hv.protocol == "independent"].drop(columns=["protocol", "metric", "target_var_mean", "p"])
        pl = pl.drop(columns=["protocol", "metric", "target_var_mean"]).assign(target="paper")
        fit = dict(fit_entry, paper=fit["paper"])
    hv.to_csv(tmp_path / "heads_vs_mse.csv", index=False)
    pl.to_csv(tmp_path / "prompt_length_vs_mse.csv", index=False)
    (tmp_path / "heads_fit.json").write_text(json.dumps(fit))
    return tmp_path


def _verdicts(rows, claim_start):
    return [r.verdict for r in rows if r.claim.startswith(claim_start)]


def test_e1_verdicts_by_rule(tmp_path):
    tables = _e1_tables(tmp_path)
    rows = ht.report_rows(tables, PAPER_CFG, "config/config.yaml")
    assert _verdicts(rows, "heads table") == ["consistent"] * 6  # our means equal the paper's
    paper_rate = next(r for r in rows if r.claim.startswith("O(1/H): the paper's own"))
    assert paper_rate.verdict == "not supported" and paper_rate.comparable_mean == 0.72  # CI [0.6, 0.85] excludes 1
    ours_rate = next(r for r in rows if r.claim.startswith("O(1/H): our"))
    assert ours_rate.verdict == "supported" and ours_rate.learned == "yes"
    assert _verdicts(rows, "prompt-length")[0].startswith("not comparable: the paper reports no number")

    shifted = ht.report_rows(_e1_tables(tmp_path, mse_scale=1.3), PAPER_CFG, "config/config.yaml")
    assert _verdicts(shifted, "heads table")[0] == "inconsistent (ours higher)"  # 3.469 * 0.3 >> 2 SE

    # models at the target's variance did not learn: no verdict, whatever the paper says
    flat = ht.report_rows(_e1_tables(tmp_path, var=3.0), PAPER_CFG, "config/config.yaml")
    assert _verdicts(flat, "heads table")[0] == "did not learn"
    assert next(r for r in flat if r.claim.startswith("O(1/H): our")).verdict == "did not learn"

    # a reduced scale is never compared with the paper
    small = ht.report_rows(_e1_tables(tmp_path), SMALL_CFG, "config/quick.yaml")
    assert set(_verdicts(small, "heads table")) == {"not comparable: reduced scale (N=2000 < 50000, 3 < 50 epochs)"}


def test_e1_old_layout_says_not_available(tmp_path):
    rows = ht.report_rows(_e1_tables(tmp_path, layout="old"), PAPER_CFG, "config/config.yaml")
    heads = [r for r in rows if r.claim.startswith("heads table")]
    assert {r.verdict for r in heads} == {"not available"} and "no `protocol` column" in heads[0].reason
    assert heads[0].corrected_mean == pytest.approx(3.469)  # our independent-seed number is still shown
    assert next(r for r in rows if r.claim.startswith("O(1/H): our")).verdict == "not available"


def test_missing_tables_are_all_named(tmp_path, capsys):
    (tmp_path / "heads_vs_mse.csv").write_text("heads\n1\n")
    with pytest.raises(MissingOutputs) as err:
        replication.build(tmp_path, PAPER_CFG, "x")
    assert len(err.value.missing) == len(replication.REQUIRED) - 1
    assert str(tmp_path / "construction_multistep.csv") in str(err.value) and "no partial report" in str(err.value)
    job = {"tables_dir": str(tmp_path), "config": {}, "config_name": "x", "out_md": str(tmp_path / "r.md"),
           "out_csv": str(tmp_path / "r.csv")}
    with pytest.raises(SystemExit) as exit_:
        cli_main(["report", "replication", json.dumps(job)])
    assert exit_.value.code == 2 and not (tmp_path / "r.md").exists()
    assert f"{len(replication.REQUIRED) - 1} expected output(s) missing" in capsys.readouterr().err


def test_manifest_hashes_and_benchmarks(tmp_path):
    a = tmp_path / "a.csv"
    a.write_text("x,device\n1,cpu\n")
    a_runs = tmp_path / "e_runs.csv"
    a_runs.write_text("seed,device\n0,cpu\n1,cuda:0\n")
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "heads_train_H1_p60.tsv").write_text("s\th:m:s\tmax_rss\tcpu_time\n12.5\t0:00:12\t300.0\t20.0\n")
    m = manifest.build([a, a_runs], {"device": "cpu", "heads": {"epochs": 1}}, ["tests/tiny.yaml"], bench)
    assert m["outputs"][str(a)]["sha256"] == hashlib.sha256(a.read_bytes()).hexdigest()
    assert m["benchmarks"]["jobs"]["heads_train_H1_p60"] == {"wall_s": 12.5, "max_rss_mb": 300.0, "cpu_time_s": 20.0}
    assert m["device"]["recorded_by_runs"] == {"e_runs.csv": ["cpu", "cuda:0"]}
    assert len(m["config_hash"]) == 16 and set(m["config_section_hashes"]) == {"heads"}
    assert m["git"]["commit"] and isinstance(m["git"]["dirty"], bool)
    assert m["versions"]["pandas"] == pd.__version__
    with pytest.raises(MissingOutputs, match="gone.csv"):
        manifest.build([a, tmp_path / "gone.csv"], {}, [], bench)


def test_report_on_an_unfinished_tree_names_the_missing_outputs(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(REPO_ROOT / "Snakefile"), "--directory", str(tmp_path),
         "--configfile", str(REPO_ROOT / "tests" / "tiny.yaml"), "--report", str(tmp_path / "report.html")],
        capture_output=True, text=True, timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and not (tmp_path / "report.html").exists()
    assert "output(s) of `all` are missing" in out
    for name in ("results/figures/heads_vs_mse.png", "results/replication.md", "results/manifest.json"):
        assert f"  - {name}" in out


def test_the_report_reads_tables_the_targets_map_declares():
    """Every table the replication report requires is a file of `all` (algo_emu.report.targets); brace patterns
    expand as the README writes them."""
    from algo_emu.report.targets import MANIFEST, REPLICATION_OUTPUTS, all_outputs, expand_braces

    outputs = all_outputs()
    assert {f"results/tables/{f}" for f in replication.REQUIRED} <= set(outputs)
    assert "essay_claims.csv" in replication.REQUIRED  # the essay's section is read like any other (its spec's Report)
    assert {MANIFEST, *REPLICATION_OUTPUTS} <= set(outputs)
    assert expand_braces("t/c_{a,b}.{csv,md}") == ["t/c_a.csv", "t/c_a.md", "t/c_b.csv", "t/c_b.md"]
    assert expand_braces("plain.json") == ["plain.json"]


def test_learned_needs_every_baseline_the_row_has():
    """A model below half its weight-blind baseline but worse than a constant (quick-scale E4: emulation MSE 0.285,
    Var(target) 0.164, blind ratio 0.438) has not learned; below both it has."""
    from algo_emu.report.replication import learned_from_row

    row = {"emulation_mse_mean": 0.285, "target_var_mean": 0.164, "mse_over_blind": 0.438}
    learned, why = learned_from_row(row, mse_col="emulation_mse_mean", var_col="target_var_mean")
    assert learned == "no" and "1.74 >= 0.5" in why and "0.438 < 0.5" in why
    row["emulation_mse_mean"] = 0.0466
    assert learned_from_row(row, mse_col="emulation_mse_mean", var_col="target_var_mean")[0] == "yes"
    assert learned_from_row({"mse_over_blind": 0.7}, var_col="target_var_mean")[0] == "no"
    assert learned_from_row({"mse_mean": 1.0}, var_col="target_var_mean")[0] == "unknown"
