"""tools/benchmarks/device_epochs.py: what the GPU runs timed."""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path

import pytest

from algo_emu.runtime import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "tools" / "benchmarks"))
import device_epochs as de  # noqa: E402

DEVICE_BENCH = REPO_ROOT / "tools" / "benchmarks" / "device_h200.json"


def _log(epochs: list[float], members: int = 30, total: int = 50) -> str:
    head = f"2026-01-01 00:00:00,000 INFO algo_emu.heads: setting published H=1 p=60: 10 seeds x K/Q/V = {members} members on cuda\n"
    return head + "".join(f"2026-01-01 00:00:{i:02d},000 INFO algo_emu.train: epoch {i + 1}/{total}  {t:.2f}s  mean train "
                          f"loss 0.1\n" for i, t in enumerate(epochs))


def _run(folder: Path, max_jobs: int, logs: dict[str, str], spans: dict[str, tuple[float, float]]) -> Path:
    folder.mkdir(parents=True)
    steps = [{"name": n, "state": "cut", "rc": -15, "progress": None, "start_s": a, "wall_s": w} for n, (a, w) in spans.items()]
    status = {"config": "config/config.yaml", "config_hash": "x", "max_jobs": max_jobs, "budget_s": 560.0, "reserve_s": 60.0,
              "compile": "0", "threads": "1", "order": ["heads"], "wall_s": 500.0, "steps": steps,
              "experiments": {"E1": {"wanted": ["a", "b"], "complete": [], "missing": {}}}}
    (folder / "status.json").write_text(json.dumps(status))
    (folder / "device.json").write_text(json.dumps({"gpu": "Test GPU", "gpu_memory_gib": 80.0, "nvidia_smi": "Test GPU, 1, 2 MiB",
                                                    "torch": "2.x", "cuda": "13.0", "cpu_count": 16, "git_commit": "c" * 40,
                                                    "code_version": "algo_emu 0.1.0 src aaaa"}))
    with tarfile.open(folder / "logs.tar.gz", "w:gz") as tf:
        for name, text in logs.items():
            data = text.encode()
            info = tarfile.TarInfo(f"logs/{name}.log")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return folder


def test_epoch_times_steps_and_sharing(tmp_path):
    """ms per step = the median epoch after the first / the experiment's steps per epoch (1,250 for E1 at the paper's
    config); jobs at once counts the steps running at a step's midpoint; sharing = jobs x alone / shared s per epoch."""
    shared = _run(tmp_path / "shared", 2, {"heads_train_published_H1_p60": _log([30.0, 10.0, 12.0, 11.0]),
                                           "heads_train_published_H2_p60": _log([30.0, 20.0, 20.0])},
                  {"heads_train_published_H1_p60": (5.0, 400.0), "heads_train_published_H2_p60": (5.0, 400.0),
                   "heads_data_published": (0.0, 5.0)})
    alone = _run(tmp_path / "alone", 1, {"heads_train_published_H1_p60": _log([9.0, 2.5, 2.0, 3.0])},
                 {"heads_data_published": (0.0, 5.0), "heads_train_published_H1_p60": (5.0, 100.0)})
    out = tmp_path / "bench.json"
    assert de.main([str(shared), str(alone), "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    rows = {(run["max_jobs"], r["step"]): r for run in res["runs"] for r in run["rows"]}
    h1 = rows[(2, "heads_train_published_H1_p60")]
    assert h1["jobs_at_once"] == 2 and h1["epochs_reached"] == 4 and h1["epochs"] == 50
    assert h1["s_per_epoch_median"] == 11.0 and h1["steps_per_epoch"] == 1250 and h1["ms_per_step"] == 8.8
    assert h1["minutes_every_epoch"] == round(50 * 11.0 / 60, 1) and h1["members"] == 30
    a = rows[(1, "heads_train_published_H1_p60")]
    assert a["jobs_at_once"] == 1 and a["s_per_epoch_median"] == 2.5
    assert res["sharing"] == [{"step": "heads_train_published_H1_p60", "jobs_at_once": 2, "alone_s_per_epoch": 2.5,
                               "shared_s_per_epoch": 11.0, "slowdown": 4.4, "throughput_vs_alone": round(2 * 2.5 / 11.0, 2)}]
    assert out.with_suffix(".md").is_file()


def test_missing_file_is_named(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "status.json").write_text("{}")
    with pytest.raises(SystemExit):
        de.main([str(tmp_path / "run"), "--out", str(tmp_path / "x.json")])
    err = capsys.readouterr().err
    assert "missing device.json, logs.tar.gz" in err and not (tmp_path / "x.json").exists()


def test_the_jobs_per_gpu_default_is_the_measured_sharing_ratio():
    """The gpu-local profile's jobs per GPU is the committed run's ratio of the shared GPU's work to one job's
    alone, rounded (docs/gpu.md: about that many jobs keep it as busy)."""
    from algo_emu import runtime

    ratio = json.loads(DEVICE_BENCH.read_text())["sharing"][0]["throughput_vs_alone"]
    assert runtime.DEFAULT_JOBS_PER_GPU == round(ratio)
