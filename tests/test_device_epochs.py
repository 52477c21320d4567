"""benchmarks/device_epochs.py (what the GPU runs timed) and the docs blocks that read its JSON."""

from __future__ import annotations

import io
import json
import shutil
import sys
import tarfile
from pathlib import Path

import pytest

from algo_emu import docs_numbers as dn
from algo_emu.runtime import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import device_epochs as de  # noqa: E402


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


def test_docs_read_the_measurement_and_fall_back_to_an_estimate_without_it(tmp_path):
    """With the committed JSON the GPU blocks price steps at the measured rate; without it they say estimate."""
    root = tmp_path / "root"
    for rel in ("config/config.yaml", "benchmarks/engine.json", dn.DEVICE_BENCH.as_posix()):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / rel, root / rel)
    for m in ("corrected", "reference_code"):
        rel = dn.REF / "ames" / m / "seed0" / "metrics.json"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / rel, root / rel)
    g = dn.gpu_measured(root)
    bench = json.loads((root / dn.DEVICE_BENCH).read_text())
    alone = [r for run in bench["runs"] for r in run["rows"] if r["jobs_at_once"] == 1][0]
    assert g["alone_ms"] == alone["ms_per_step"] and g["throughput"] == bench["sharing"][0]["throughput_vs_alone"]
    measured = dn.block_gpu_measured(root)
    assert measured.count("| E1 H = 1, p = 60 |") == 2 and "the shared GPU did" in measured
    assert "CPU benchmark" not in measured  # no paper_scale.json in this root
    (root / dn.PAPER_BENCH).write_text(json.dumps({"rows": {"E1 H=1 p=60": {"measured": {"step_seconds": 0.05}}}}))
    x = 50 / alone["ms_per_step"]
    assert (f"takes 50 ms per step: the GPU alone runs it {dn._g(x, 3)}x as fast, and shared it did the work of "
            f"{dn._g(x * bench['sharing'][0]['throughput_vs_alone'], 3)} such CPU jobs") in dn.block_gpu_measured(root)
    (root / dn.DEVICE_BENCH).unlink()
    assert dn.gpu_measured(root) is None
    assert dn.block_gpu_measured(root) == "No GPU run has timed a training step yet.\n"


def test_step_labels():
    assert dn.device_step_label("heads_train_published_H12_p60") == "E1 H = 12, p = 60"
    assert dn.device_step_label("heads_train_independent_H2_p60") == "E1 H = 2, p = 60 (independent)"
    assert dn.device_step_label("theorem31_blind_p100") == "E2 p = 100 weight-blind"
    assert dn.device_step_label("statistical_train_reference_code_H6") == "E3 reference_code H = 6"
    assert dn.device_step_label("ames_train_corrected") == "ames_train_corrected"


def test_gpu_training_loss_is_set_beside_the_cpu_records_of_the_same_setting(tmp_path):
    """The comparison row reads the paper-scale set's per-seed histories (mean over every member) at epoch 2 and at
    the last epoch the GPU reached; a setting without CPU records gets no row."""
    root = tmp_path / "root"
    (root / dn.DEVICE_BENCH).parent.mkdir(parents=True)
    shutil.copy(REPO_ROOT / dn.DEVICE_BENCH, root / dn.DEVICE_BENCH)
    bench = json.loads((root / dn.DEVICE_BENCH).read_text())
    gpu = next(r for r in dn._most_shared_run(bench)["rows"]
               if r["step"] == "heads_train_published_H1_p60")
    last = max(int(k) for k in gpu["mean_train_loss"])
    assert "GPU / CPU" not in dn.block_gpu_measured(root)
    for seed, scale in ((0, 1.0), (1, 3.0)):
        f = root / dn.PAPER / "heads/published/runs/H1_p60" / f"seed{seed}" / "metrics.json"
        f.parent.mkdir(parents=True)
        f.write_text(json.dumps({"history": [{"epoch": e, "train_loss": {"K": 0.1 * scale, "Q": 0.2 * scale, "V": 0.3 * scale}}
                                             for e in (1, 2, last)]}))
    block = dn.block_gpu_measured(root)
    cpu = (0.1 + 0.2 + 0.3) * (1 + 3) / 6
    row = next(x for x in block.split("GPU / CPU")[1].splitlines() if x.startswith("| E1 H = 1, p = 60 | "))
    assert row == (f"| E1 H = 1, p = 60 | {dn._g(gpu['mean_train_loss']['2'], 4)} | {dn._g(cpu, 4)} | {last} | "
                   f"{dn._g(gpu['mean_train_loss'][str(last)], 4)} | {dn._g(cpu, 4)} | "
                   f"{dn._g(gpu['mean_train_loss'][str(last)] / cpu, 3)} |")
    assert "| E1 H = 2, p = 60 | " not in block.split("GPU / CPU")[1]


def test_the_jobs_per_gpu_default_is_the_measured_sharing_ratio():
    """The gpu-local profile's jobs per GPU is the committed run's ratio of the shared GPU's work to one job's
    alone, rounded (docs/gpu.md: about that many jobs keep it as busy)."""
    from algo_emu import runtime

    ratio = json.loads((REPO_ROOT / dn.DEVICE_BENCH).read_text())["sharing"][0]["throughput_vs_alone"]
    assert runtime.DEFAULT_JOBS_PER_GPU == round(ratio)
