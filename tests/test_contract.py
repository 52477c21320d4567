"""The contract of a trained experiment (docs/architecture.md): a new one is a spec, a config section's schema, a
task, an evaluation, its table, figure and report rows; the shared layer does the rest. The toy experiment of
tests/toy_experiment.py (at most 150 lines, with its rules tests/toy.smk and schema tests/toy.schema.yaml, outside
the package) runs here in process through the engine (train_ensemble via Runner.train), its weight-blind baseline
(ablation.WeightBlindTask), frozen evaluation with prompt ablations (FrozenFile), per-seed records
(Runner.write_records), the record loader (RunSpec), the tables (summarise_by, ablation_table, write_table) and the
report's rules (learned, gate, verdict, the report's row format); and through the workflow (``ALGO_EMU_SPECS``):
its rules, the report's section and the manifest, with no edit to any list in the package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import toy_experiment as toy
from algo_emu import ablation as ab
from algo_emu import config, tables
from algo_emu.report import replication as rep
from algo_emu.runtime import REPO_ROOT
from algo_emu.tables import write_table

HERE = Path(__file__).resolve().parent
SECTION = {"epochs": 25, "lr": 0.01, "batch_size": 32}  # what a config file says of the toy


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    mp = pytest.MonkeyPatch()
    mp.setattr(config, "SPECS", config.SPECS + (toy.SPEC,))  # its schema, toy.schema.yaml, named by its spec
    section = config.schema_defaults("toy") | SECTION
    seeds = [0, 1]
    model = toy.train(section, seeds, str(root / "model"), threads=1)
    blind = toy.train(section, seeds, str(root / "blind"), blind=True, threads=1)
    yield section, seeds, root, model, blind
    mp.undo()


def _table(root: Path, model_dir: str, blind_dir: str, seeds: list[int]):
    return toy.table([str(root / model_dir / f"seed{s}" / "metrics.json") for s in seeds],
                     [str(root / blind_dir / f"seed{s}" / "metrics.json") for s in seeds])


def test_contract_a_new_experiment_runs_through_the_shared_layer(made):
    section, seeds, root, model, blind = made
    assert len(Path(toy.__file__).read_text().splitlines()) <= 150
    table = _table(root, "model", "blind", seeds)
    write_table(table, root / "toy.csv", "Toy: held-out MSE and the weight-blind ratio.")
    assert (root / "toy.md").read_text().startswith("Toy: held-out MSE") and table.n_seeds.iloc[0] == len(seeds)
    rows = [r for s in seeds for r in ab.ablation_rows("toy", "toy", {"member": "sum"}, s,
            {**model[s]["by_member"]["sum"]["ablation_mse"], ab.BLIND: blind[s]["by_member"]["sum"]["mse"]})]
    ablations = ab.ablation_table(rows, ["member"]).set_index("ablation").mse_mean
    # The model reads w from its prompt: far below its baseline, and every ablation of w undoes it.
    assert table.mse_over_blind.iloc[0] < 0.1
    assert all(ablations[a] > 10 * ablations[ab.NONE] for a in ("other_prompt", "random", "zeros"))
    for rec in model.values():
        assert rec["frozen"]["bit_identical"] and rec["frozen"]["file_unchanged"] and rec["timing"]["epoch_seconds"]
        ab.check_budget(rec["budget"], blind[rec["seed"]]["budget"])
    learned, why = rep.learned_from_row(table.iloc[0].to_dict())
    scale = rep.Scale("toy: 25 epochs, 2 seeds", True)
    row = rep.Row("toy", "the model reads w from its prompt", setting="member sum", comparable_mode="toy",
                  comparable_mean=table.mse_mean.iloc[0], learned=learned, scale=scale.text,
                  verdict=rep.gate(learned, scale) or rep.claim_verdict(True, False, scale), reason=why)
    report = "\n".join(rep.rows_markdown(rep.rows_frame([row])))
    assert learned == "yes" and "supported" in report and "MSE / weight-blind baseline's MSE" in report
    # Its learning curves are read through the same declaration (what refset draws): every epoch of both models.
    curves = tables.load_curves(root, toy.RUNS, "toy")
    assert len(curves) == 2 * len(seeds) * section["epochs"] and {c["model"] for c in curves} == {"model", "weight-blind"}
    assert [c["value"] for c in curves if c["model"] == "model" and c["seed"] == 0] == model[0]["by_member"]["sum"]["train_loss"]


def test_contract_negative_control_the_baseline_as_the_model_did_not_learn(made):
    section, seeds, root, model, blind = made
    swapped = _table(root, "blind", "blind", seeds)  # the baseline's records passed off as the model's
    learned, _ = rep.learned_from_row(swapped.iloc[0].to_dict())
    assert learned == "no" and rep.gate(learned, rep.Scale("toy", True)) == "did not learn"
    with pytest.raises(ValueError, match="epochs: model 25, baseline 24"):
        ab.check_budget(model[0]["budget"], dict(blind[0]["budget"], epochs=24))


def test_contract_the_toy_runs_through_the_workflow_from_outside_the_package(tmp_path):
    """``ALGO_EMU_SPECS=toy_experiment``: Snakemake includes the toy's rules, validates its section with its schema,
    runs its steps through ``python -m algo_emu toy <step>``, and the report and the manifest take its outputs (its
    section of replication.md, its records); the package's own experiments are not run."""
    cfg = tmp_path / "toy.yaml"
    cfg.write_text(json.dumps({"seeds": [0, 1], "device": "cpu", "threads": 1, "toy": SECTION}))
    env = dict(os.environ, ALGO_EMU_SPECS="toy_experiment",
               PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO_ROOT / "Snakefile"), "--directory", str(tmp_path),
           "--configfile", str(cfg), "--cores", "2", "all", "-q"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = tmp_path / "results"
    assert (results / "figures/toy.png").stat().st_size > 0 and (results / "tables/toy.tex").is_file()
    report = (results / "replication.md").read_text()
    assert "## E7 -- a toy: the sum of the weights in the prompt" in report and "## E1" not in report
    verdicts = pd.read_csv(results / "tables/replication.csv")
    assert verdicts.experiment.tolist() == ["E7"] and verdicts.verdict.tolist() == ["supported"]
    # Its own verdict rule, declared in its module alone, is printed with the others and cited by its row.
    assert "[toy] **supported | partly supported | not supported**" in report and "rule [toy]" in verdicts.reason[0]
    manifest = json.loads((results / "manifest.json").read_text())
    assert {f"results/toy/{k}/seed{s}/metrics.json" for k in ("runs", "blind") for s in (0, 1)} <= set(manifest["records"])
    # A section the toy's schema does not know is refused by name, before any job.
    cfg.write_text(json.dumps({"seeds": [0], "toy": dict(SECTION, epochz=1)}))
    bad = subprocess.run(cmd + ["-n"], env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "toy.epochz: unknown key" in bad.stdout + bad.stderr
    # ... and so is a value its own cross-field check refuses (its spec's `check`, run with the other sections').
    cfg.write_text(json.dumps({"seeds": [0], "toy": dict(SECTION, heads=3)}))
    bad = subprocess.run(cmd + ["-n"], env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "toy.heads: 3 heads do not divide toy.hidden = 8" in bad.stdout + bad.stderr
    # ... and so is a package experiment's section once the run names only the toy.
    cfg.write_text(json.dumps({"seeds": [0], "toy": SECTION, "heads": {}}))
    bad = subprocess.run(cmd + ["-n"], env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "heads" in bad.stdout + bad.stderr


def test_contract_a_spec_module_that_is_not_one_is_refused_by_name():
    env = dict(os.environ, ALGO_EMU_SPECS="all,no_such_experiment")
    proc = subprocess.run([sys.executable, "-c", "import algo_emu.specs"], env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and "ALGO_EMU_SPECS: 'no_such_experiment' is not a module defining SPEC" in proc.stderr


def test_contract_the_toy_report_rows_say_no_for_a_model_that_ignores_its_prompt(tmp_path, monkeypatch):
    """The toy's report rows, from a table whose model scores what its weight-blind baseline scores."""
    monkeypatch.setattr(rep, "SPECS", rep.SPECS + (toy.SPEC,))  # its rule [toy] is the report's once it is run
    pd.DataFrame([{"member": "sum", "mse_mean": 0.9, "mse_over_blind": 1.0}]).to_csv(tmp_path / "toy.csv", index=False)
    (row,) = toy.report_rows(tmp_path, {}, "toy.yaml")
    assert row.learned == "no" and row.verdict == "did not learn" and "rule [learned]" in row.reason
    pd.DataFrame([{"member": "sum", "mse_mean": 0.3, "mse_over_blind": 0.3}]).to_csv(tmp_path / "toy.csv", index=False)
    assert toy.report_rows(tmp_path, {}, "toy.yaml")[0].verdict == "not supported"  # learned (< 0.5), but above 0.2


def test_contract_a_verdict_rule_declared_twice_is_refused_by_name(monkeypatch):
    twin = type("Twin", (), {"RULES": (rep.Rule("E2", "x", "a second rule [E2]"),)})
    monkeypatch.setattr(rep.importlib, "import_module", lambda name, _real=rep.importlib.import_module:
                        twin if name == toy.__name__ else _real(name))
    monkeypatch.setattr(rep, "SPECS", rep.SPECS + (toy.SPEC,))
    with pytest.raises(ValueError, match=r"verdict rule\(s\) E2 declared more than once"):
        rep.rules_markdown()


def test_contract_experiment_and_data_modules_stay_within_400_lines():
    """What a trained experiment owns stays small: every module under experiments/ and data/ is at most 400 lines
    (shared concerns live in the shared layer; docs/architecture.md lists where)."""
    src = REPO_ROOT / "src" / "algo_emu"
    sizes = {str(p.relative_to(src)): len(p.read_text().splitlines())
             for d in ("experiments", "data") for p in sorted((src / d).glob("*.py"))}
    assert len(sizes) >= 15 and "experiments/ames.py" in sizes
    assert {k: v for k, v in sizes.items() if v > 400} == {}
