"""tools/benchmarks/device_paper_scale.sh (the GPU script of docs/gpu.md), tried on CPU at tiny scale.

Fast: both device scripts parse, and the script's --params slices are the rules' (so its records are the
records Snakemake would write). Slow (`pytest -m slow`, minutes on 2 cores): a whole tiny run writes records,
tables and figures of every trained experiment into the files a remote run returns; a run whose budget
cannot fit one experiment names that experiment's settings as missing (cut at the deadline), aggregates only
what finished and returns the checkpoints to resume from; a second call named the first of those cut into
parts resumes from them, and with no file left for its own state names every setting as not returned.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from tools.resume_parts import split_file

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "benchmarks" / "device_paper_scale.sh"
WRAPPER = REPO / "tools" / "benchmarks" / "device_heads_sweep.sh"
RULES = REPO / "workflow" / "rules"


def _python_body() -> ast.Module:
    """The script's Python (its ``<<'PYEOF'`` here-document), parsed."""
    return ast.parse(SCRIPT.read_text().split("<<'PYEOF'\n", 1)[1].rsplit("\nPYEOF", 1)[0])


def test_scripts_parse():
    for script in (SCRIPT, WRAPPER):
        subprocess.run(["bash", "-n", str(script)], check=True)
    _python_body()


def _assignments(tree: ast.Module) -> dict[str, ast.expr]:
    """Top-level ``NAME = <expr>`` of the script's Python."""
    return {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name)}


def _comprehension_keys(node: ast.expr) -> tuple[str, set]:
    """A dict comprehension that filters a section's keys: ('excluded', keys) for ``... if k not in (...)`` or
    ``if k != "x"``, ('included', keys) for ``{k: S[k] for k in (...)}``."""
    assert isinstance(node, ast.DictComp), ast.dump(node)
    (gen,) = node.generators
    if isinstance(gen.iter, ast.Tuple):
        return "included", set(ast.literal_eval(gen.iter))
    (cond,) = gen.ifs
    assert isinstance(cond, ast.Compare) and isinstance(cond.ops[0], (ast.NotIn, ast.NotEq)), ast.dump(cond)
    value = ast.literal_eval(cond.comparators[0])
    return "excluded", set(value) if isinstance(value, tuple) else {value}


def test_params_are_the_rules_slices():
    """The script's --params hold every key each step reads (algo_emu.experiments.step_keys); a step drops any
    other key, so its records are the records Snakemake would write."""
    from algo_emu.config import schema_defaults
    from algo_emu.experiments.step_keys import reads

    names = _assignments(_python_body())
    keys = {n: ast.literal_eval(v) for n, v in names.items() if n.startswith("AMES_") and n.endswith("_KEYS")}
    for name, step in (("AMES_DOWNLOAD_KEYS", "download"), ("AMES_PREPARE_KEYS", "prepare"), ("AMES_TRAIN_KEYS", "train")):
        assert keys[name] == reads("ames", step).keys, name
    fit = keys["AMES_REFERENCE_FIT_KEYS"]
    assert fit == reads("ames", "fit").for_variant("reference_code")
    assert fit + keys["AMES_POOL_KEYS"] == reads("ames", "fit").for_variant("corrected")
    stat = set(schema_defaults("statistical"))
    assert _comprehension_keys(names["STAT_TRAIN"])[0] == "excluded"
    assert set(reads("statistical", "train").all) <= stat - _comprehension_keys(names["STAT_TRAIN"])[1]
    assert _comprehension_keys(names["STAT_EVAL"])[0] == "included"
    assert set(reads("statistical", "evaluate").all) <= _comprehension_keys(names["STAT_EVAL"])[1]
    assert _comprehension_keys(names["T31_TRAIN"]) == ("excluded", {"p_sweep"})
    assert "p_sweep" not in reads("theorem31", "train").all


def _run(tmp_path: Path, **env) -> tuple[int, Path, str]:
    out = tmp_path / "out"
    full = dict(os.environ, OUT=str(out), WORK=str(tmp_path / "work"), SCALE="tiny", DEVICE="cpu", MAX_JOBS="2",
                PYTHON=sys.executable, OMP_NUM_THREADS="1", REUSE_DIR=str(tmp_path / "no-reuse"))
    full.update(env)
    proc = subprocess.run(["bash", str(SCRIPT)], env=full, capture_output=True, text=True, timeout=3600)
    return proc.returncode, out, proc.stdout + proc.stderr


def _returned(out: Path) -> dict[str, Path]:
    files = {p.name: p for p in out.iterdir()}
    assert all(p.is_file() for p in files.values()), "only flat files come back from the device"
    assert len(files) <= 8 and all(p.stat().st_size < 16 * 2**20 for p in files.values())
    return files


def _members(files: dict[str, Path]) -> list[str]:
    with tarfile.open(files["gpu_reference.tar.gz"]) as tf:
        return tf.getnames()


@pytest.mark.slow
def test_tiny_run_writes_every_experiment(tmp_path):
    rc, out, log = _run(tmp_path, BUDGET="3000", RESERVE="1200")  # generous: the run ends when done
    files = _returned(out)
    status = json.loads(files["status.json"].read_text())
    assert rc == 0, log[-3000:]
    assert status["complete"], status
    assert set(status["experiments"]) == {"E1", "E2", "E3", "E4"}
    for exp, e in status["experiments"].items():
        assert e["missing"] == {} and sorted(e["complete"]) == sorted(e["wanted"]), exp
    names = _members(files)
    for rec in ("gpu/heads/published/runs/H4_p8/seed1/metrics.json", "gpu/heads/independent/runs/H1_p8/seed0/metrics.json",
                "gpu/theorem31/runs/p6/seed1/metrics.json", "gpu/theorem31/blind/p6/seed1/metrics.json",
                "gpu/statistical/runs/fitted_H2/seed1/metrics.json", "gpu/statistical/runs/reference_code_H1/seed0/metrics.json",
                "gpu/ames/corrected/seed1/metrics.json", "gpu/ames/reference_code/seed0/metrics.json"):
        assert rec in names, rec
    for table in ("heads_vs_mse.csv", "prompt_length_vs_mse.csv", "heads_fit.json", "f_emulation.csv", "statistical_emulation.csv",
                  "ames.csv", "ames_ablation.csv", "learning_curves.csv"):
        assert f"gpu/tables/{table}" in names, table
    for fig in ("heads_vs_mse.png", "f_emulation.png", "statistical_heads.png", "ames.png", "learning_curves.png"):
        assert f"gpu/figures/{fig}" in names, fig
    assert not [n for n in names if n.endswith((".pt", ".npz", ".log"))], "weights, arrays and logs stay out of the set"
    assert not [n for n in names if "/partial/" in n]
    assert "resume.tar.gz" not in files  # nothing unfinished
    assert {"SUMMARY.md", "device.json", "logs.tar.gz"} <= set(files)
    assert files["SUMMARY.md"].read_text().startswith("# GPU run: complete")

    # A later call continues from the committed set: complete settings are reused, not rerun; an experiment
    # with a setting missing (here one E3 setting deleted and E3 not selected) is aggregated only into
    # tables/partial/, with the missing setting named.
    committed = tmp_path / "committed"
    committed.mkdir()
    with tarfile.open(files["gpu_reference.tar.gz"]) as tf:
        tf.extractall(committed)
    gone = committed / "gpu" / "statistical" / "runs" / "fitted_H2"
    for f in gone.rglob("metrics.json"):
        f.unlink()
    again = tmp_path / "again"
    again.mkdir()
    rc, out, log = _run(again, BUDGET="1500", RESERVE="1400", EXPERIMENTS="heads theorem31 ames p_sweep independent",
                        REUSE_DIR=str(committed / "gpu"))
    files = _returned(out)
    status = json.loads(files["status.json"].read_text())
    assert rc == 3, log[-3000:]
    assert status["reused"] and not [s for s in status["steps"] if s["state"] in ("done", "running", "cut", "failed")
                                     and not s["name"].startswith(("agg_", "fig_"))], "nothing trained again"
    assert status["experiments"]["E3"]["missing"] == {"fitted H=2": "not selected (EXPERIMENTS=heads theorem31 ames "
                                                                    "p_sweep independent)"}
    names = _members(files)
    # per mode over that mode's complete H (the package's table needs the whole modes x heads grid)
    assert {"gpu/tables/partial/statistical_fitted_emulation.csv", "gpu/tables/partial/statistical_reference_code_emulation.csv"} <= set(names)
    assert "gpu/tables/statistical_emulation.csv" not in names
    with tarfile.open(files["gpu_reference.tar.gz"]) as tf:
        note = tf.extractfile("gpu/tables/partial/README.md").read().decode()
    assert "fitted H=2" in note
    assert "gpu/tables/f_emulation.csv" in names and "gpu/tables/ames.csv" in names  # complete ones as before


@pytest.mark.slow
def test_setting_cut_at_the_deadline_is_named_missing(tmp_path):
    # E2 alone, with more epochs than any budget holds: its settings are cut at the deadline whatever the load
    # (a deadline for E1 to finish before would depend on the machine's load: on 2 loaded cores one data step
    # took 131 s)
    cfg = yaml.safe_load((REPO / "tests" / "tiny.yaml").read_text())
    cfg["theorem31"]["p_sweep"] = [4]
    cfg["theorem31"]["epochs"] = 100000
    config = tmp_path / "cut.yaml"
    config.write_text(yaml.safe_dump(cfg))
    rc, out, log = _run(tmp_path, CONFIG=str(config), EXPERIMENTS="theorem31", BUDGET="480", RESERVE="120")
    files = _returned(out)
    status = json.loads(files["status.json"].read_text())
    assert rc == 1, log[-3000:]  # nothing complete
    assert not status["complete"]
    e2 = status["experiments"]["E2"]
    assert e2["complete"] == [] and set(e2["missing"]) == {"model p=4", "weight-blind p=4"}
    for reason in e2["missing"].values():
        assert "cut at the deadline" in reason and "epoch" in reason and "/100000" in reason, reason
    assert all("not selected" in r for r in status["experiments"]["E1"]["missing"].values())
    summary = files["SUMMARY.md"].read_text()
    assert summary.startswith("# GPU run: PARTIAL") and "model p=4" in summary and "cut at the deadline" in summary
    names = _members(files)
    assert not [n for n in names if n.startswith("gpu/theorem31/") or "f_emulation" in n], "nothing of E2 is aggregated"
    with tarfile.open(files["resume.tar.gz"]) as tf:
        resume = tf.getnames()
    assert "results/theorem31/checkpoints/p4.pt" in resume and "results/theorem31/checkpoints/blind_p4.pt" in resume
    assert status["resume"]["files"] == ["resume.tar.gz"]
    assert [x["returned"] for x in status["resume"]["settings"]] == [True, True] and "## Resume state" in summary

    # the state cut into parts (as a larger one comes back): a second call named the first part joins them and
    # continues both jobs from their checkpoints; with no file left for a resume state (RETURN_FILES=6), its own
    # state does not come back, and its summary says so setting by setting
    parts = split_file(files["resume.tar.gz"], files["resume.tar.gz"].stat().st_size // 2 + 1, tmp_path / "parts")
    assert len(parts) == 2
    rc2, out2, log2 = _run(tmp_path / "second", CONFIG=str(config), EXPERIMENTS="theorem31", BUDGET="480", RESERVE="120",
                           RESUME=str(parts[0]), RETURN_FILES="6")
    files2 = _returned(out2)
    assert rc2 == 1 and f"resumed from {parts[0]}" in log2, log2[-3000:]
    with tarfile.open(files2["logs.tar.gz"]) as tf:
        logs = {n: tf.extractfile(n).read().decode() for n in tf.getnames() if n.endswith(".log")}
    resumed = [n for n, text in logs.items() if "resumed from results/theorem31/checkpoints/" in text]
    assert len(resumed) == 2, {n: t[-500:] for n, t in logs.items()}
    status2 = json.loads(files2["status.json"].read_text())
    assert status2["resume"]["max_parts"] == 0 and status2["resume"]["files"] == []
    assert [x["returned"] for x in status2["resume"]["settings"]] == [False, False]
    assert not [n for n in files2 if n.startswith("resume")]
    assert "no: over the return limit" in files2["SUMMARY.md"].read_text()
