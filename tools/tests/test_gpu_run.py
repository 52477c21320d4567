"""tools/gpu_run.sh: the user's Snakemake command in a time box, its outputs packed into bounded files; and the
GPU's path (grouped jobs, ``grouping: true``) end to end on the tiny config on the CPU, against the per-setting
jobs."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "gpu_run.sh"
TINY = REPO / "tests" / "tiny.yaml"


def _run(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "WORKDIR": str(tmp_path / "work"), **env}
    proc = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=1800)
    return proc, out


def _unpack(out: Path, stem: str, dest: Path) -> None:
    """Join ``stem``'s parts (or take it whole) and extract it into ``dest``."""
    parts = sorted(out.glob(f"{stem}.part*")) or [out / stem]
    joined = dest / f"{stem}.joined"
    dest.mkdir(parents=True, exist_ok=True)
    joined.write_bytes(b"".join(p.read_bytes() for p in parts))
    with tarfile.open(joined) as tar:
        tar.extractall(dest, filter="data")


def test_without_snakemake_or_wheels_it_says_so(tmp_path):
    python = tmp_path / "python"  # a Python without site-packages: no snakemake
    python.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")
    python.chmod(0o755)
    (tmp_path / "wheels").mkdir()
    proc, out = _run(tmp_path, "--version", PYTHON=str(python), WHEELS=str(tmp_path / "wheels"))
    assert proc.returncode == 1 and "no snakemake, and no wheels in" in proc.stderr
    assert not list(out.glob("*"))


def test_outputs_are_packed_into_bounded_parts_checkpoints_left_out_first(tmp_path):
    """results/ (without checkpoints) and logs/ in results.tar.gz, the checkpoints in resume.tar.gz, each cut
    into parts of PART_SIZE; FILES counts status.txt, and parts beyond it are left out, the checkpoints' first."""
    work = tmp_path / "work"
    (work / "results/heads/published/runs/H1_p8/seed0").mkdir(parents=True)
    (work / "results/heads/published/runs/H1_p8/seed0/metrics.json").write_bytes(os.urandom(150 * 1024))
    (work / "results/heads/checkpoints").mkdir(parents=True)
    (work / "results/heads/checkpoints/group_H1_p8.pt").write_bytes(os.urandom(150 * 1024))
    proc, out = _run(tmp_path, "--version", PART_SIZE="100K", FILES="4")
    assert proc.returncode == 0, proc.stderr
    status = (out / "status.txt").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["results.tar.gz.part00", "results.tar.gz.part01",
                                                     "resume.tar.gz.part00", "status.txt"]
    assert all(p.stat().st_size <= 100 * 1024 for p in out.iterdir())
    assert "left out (more than 4 files of 100K): resume.tar.gz.part01" in status and "exit 0" in status
    _unpack(out, "results.tar.gz", tmp_path / "back")
    back = tmp_path / "back" / "results/heads/published/runs/H1_p8/seed0/metrics.json"
    assert back.read_bytes() == (work / "results/heads/published/runs/H1_p8/seed0/metrics.json").read_bytes()
    assert not (tmp_path / "back" / "results/heads/checkpoints").exists()
    assert (tmp_path / "back" / "logs/gpu_run.snakemake.log").exists()


def test_the_time_box_stops_snakemake_and_says_so(tmp_path):
    proc, out = _run(tmp_path, "-n", "all", "--configfile", str(TINY), "--cores", "1", LIMIT="1")
    assert proc.returncode == 124
    assert "exit 124" in (out / "status.txt").read_text()


def _tables(workdir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((workdir / "results/tables").glob("*"))}


def _records(workdir: Path, files: list[str]) -> list[dict]:
    """The records but for the clock, the machine and where the model file lies."""
    import json

    out = []
    for f in files:
        r = json.loads((workdir / f).read_text())
        out.append({k: v for k, v in r.items() if k not in ("timing", "environment")}
                   | {"frozen": {k: v for k, v in r["frozen"].items() if k != "file"}})
    return out


def _plain(workdir: Path, *targets: str) -> str:
    ran = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
                          "--configfile", str(TINY), "--cores", "2", *targets], capture_output=True, text=True,
                         timeout=3600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return ran.stderr


def test_a_grouped_job_end_to_end_writes_the_per_setting_records(tmp_path):
    """One E1 group (both protocols at H = 2, p = 8) through the wrapper with ``grouping: true`` (a GPU's job,
    3 steps per call) on the CPU: its records are the per-setting jobs' (a plain snakemake run), every key but the
    clock and the machine; the packed results unpack to the same records."""
    grouped = tmp_path / "grouped.yaml"
    grouped.write_text(yaml.safe_dump(yaml.safe_load(TINY.read_text()) | {"grouping": True, "steps_per_call": 3}))
    files = [f"results/heads/{protocol}/runs/H2_p8/seed{s}/metrics.json" for protocol in ("published", "independent")
             for s in (0, 1)]
    proc, out = _run(tmp_path, *files, "--configfile", str(grouped), "--cores", "2")
    assert proc.returncode == 0, (out / "status.txt").read_text()[-3000:]
    log = (tmp_path / "work" / "logs/gpu_run.snakemake.log").read_text()
    assert "heads_train_group_H2_p8" in log and "rule heads_train:" not in log
    assert "rule heads_train:" in _plain(tmp_path / "plain", *files)
    mine = _records(tmp_path / "work", files)
    assert mine == _records(tmp_path / "plain", files)
    _unpack(out, "results.tar.gz", tmp_path / "back")
    assert _records(tmp_path / "back", files) == mine


@pytest.mark.slow
def test_grouped_jobs_end_to_end_make_the_per_setting_tables(tmp_path):
    """The tiny config's E1, E2 and E3 tables with ``grouping: true`` through the wrapper on the CPU: E1's
    byte-identical to the per-setting jobs' (equal shapes), E2's and E3's equal within float32 rounding (their
    weight-blind baselines' padded inputs)."""
    import pandas as pd

    grouped = tmp_path / "grouped.yaml"
    grouped.write_text(yaml.safe_dump(yaml.safe_load(TINY.read_text()) | {"grouping": True}))
    targets = ["results/tables/heads_vs_mse.csv", "results/tables/f_emulation.csv",
               "results/tables/statistical_emulation.csv"]
    proc, out = _run(tmp_path, *targets, "--configfile", str(grouped), "--cores", "2")
    assert proc.returncode == 0, (out / "status.txt").read_text()[-3000:]
    _plain(tmp_path / "plain", *targets)
    mine, plain = _tables(tmp_path / "work"), _tables(tmp_path / "plain")
    for name in ("heads_vs_mse.csv", "prompt_length_vs_mse.csv", "heads_runs.csv"):
        assert mine[name] == plain[name], name
    for name in ("f_emulation.csv", "statistical_emulation.csv"):
        a, b = pd.read_csv(tmp_path / "work/results/tables" / name), pd.read_csv(tmp_path / "plain/results/tables" / name)
        assert list(a.columns) == list(b.columns) and len(a) == len(b)
        numeric = a.select_dtypes("number").columns
        pd.testing.assert_frame_equal(a[numeric], b[numeric], rtol=1e-3, check_exact=False)
