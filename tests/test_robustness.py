"""Stale state never passes silently: content-stable digests, checkpoints tied to the
code and config that wrote them, a killed write's temporary file cleaned on the next write."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from algo_emu import runtime
from algo_emu.data import heads as hd
from algo_emu.experiments import statistical as e3
from algo_emu.frozen import parameter_digest
from algo_emu.io import atomic_path, clean_stale_temps, save_torch, sha256_file, tensor_digest
from algo_emu.models.emulator import EnsembleEmulator
from algo_emu.train import FAIL_ENV, Member, TrainConfig, checkpoint_fingerprint, train_ensemble

TIMING = ("timing", "seconds", "wall_s")


def without_timing(obj):
    """``obj`` without timing fields (keys named timing/seconds/wall_s or ending in _seconds)."""
    if isinstance(obj, dict):
        return {k: without_timing(v) for k, v in obj.items()
                if k not in TIMING and not k.endswith("_seconds") and not k.endswith("_seconds_job")}
    if isinstance(obj, list):
        return [without_timing(v) for v in obj]
    return obj


# ----------------------------------------------------------------------------- digests


def test_save_torch_bytes_depend_on_content_only(tmp_path):
    obj = {"x": torch.arange(12, dtype=torch.float64).reshape(3, 4), "meta": {"a": [1, 2]}}
    save_torch(tmp_path / "a.pt", obj)
    save_torch(tmp_path / "b" / "a.pt", obj)       # another directory
    save_torch(tmp_path / "other_name.pt", obj)    # another name
    digests = {sha256_file(p) for p in (tmp_path / "a.pt", tmp_path / "b" / "a.pt", tmp_path / "other_name.pt")}
    assert len(digests) == 1
    code = ("import torch, sys; from algo_emu.io import save_torch; "
            "save_torch(sys.argv[1], {'x': torch.arange(12, dtype=torch.float64).reshape(3, 4), 'meta': {'a': [1, 2]}})")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "c.pt")], check=True)  # another process
    assert sha256_file(tmp_path / "c.pt") in digests
    assert torch.equal(torch.load(tmp_path / "c.pt", weights_only=True)["x"], obj["x"])
    obj["x"][0, 0] = 1.0
    save_torch(tmp_path / "d.pt", obj)
    assert sha256_file(tmp_path / "d.pt") not in digests


def test_one_tensor_digest_keeps_the_values_the_records_hold():
    t = torch.linspace(-1, 1, 7, dtype=torch.float32)
    # the raw-bytes digest E2/E3 record as data_sha256 (unchanged from the helpers it replaced)
    assert tensor_digest(t) == hashlib.sha256(t.numpy().tobytes()).hexdigest()
    assert tensor_digest(t[::2]) == hashlib.sha256(t[::2].contiguous().numpy().tobytes()).hexdigest()
    model = EnsembleEmulator([torch.Generator().manual_seed(0)], 2, 2, 2, 4, 1, 3)
    h = hashlib.sha256()  # frozen.parameter_digest's documented format: name|dtype|shape| then bytes
    for name, p in list(model.named_parameters()) + list(model.named_buffers()):
        h.update(f"{name}|{p.dtype}|{tuple(p.shape)}|".encode() + p.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    assert parameter_digest(model) == h.hexdigest()
    assert tensor_digest(torch.zeros(0)) == hashlib.sha256(b"").hexdigest()


def test_two_identical_runs_give_identical_records(tmp_path, heads_params):
    """E1 data sidecars, and an E3 model trained, saved frozen and evaluated twice at the same paths:
    every record identical except timing fields (before: the .pt files' sha256 differed every run)."""
    params = {"modes": ["fitted"], "n_prompts": 24, "n_context": 4, "n_query": 2, "d": 2, "hidden": 4, "p": 6,
              "heads_sweep": [1], "algorithms": {"fitted": ["ols", "ridge"]}, "data_params": {"fitted": {}},
              "epochs": 2, "batch_size": 8, "lr": 1e-3, "eval_prompts": 8, "eval_chunk": 8, "checkpoint_every": 1,
              "compile": False, "attention": "auto"}
    records = []
    for _ in range(2):
        run = tmp_path / "run"
        hd.write_dataset(run / "heads" / "dataset.pt", 0, heads_params)
        e3.train_setting(params, "fitted", 1, [0], run / "model.pt", None, "cpu", 1)  # (a checkpoint holds timings)
        e3.evaluate_setting(params, "fitted", 1, [0], run / "model.pt", run / "runs", "cpu", 1)
        files = sorted(p for p in run.rglob("*") if p.is_file())
        records.append({str(p.relative_to(run)): (without_timing(json.loads(p.read_text())) if p.suffix == ".json"
                                                  else sha256_file(p)) for p in files})
        for p in sorted(files, reverse=True):
            p.unlink()
    assert records[0].keys() == records[1].keys() >= {"model.pt", "model.pt.json", "heads/dataset.pt.json",
                                                      "runs/seed0/metrics.json"}
    for key in records[0]:
        assert records[0][key] == records[1][key], key


# ----------------------------------------------------------------------------- checkpoints


class _Task:
    """Regress a fixed random map: enough to train the engine for a few steps."""

    def __init__(self, n=24, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.members = [Member(0, "a"), Member(1, "a")]
        self.n_train = n
        self.x = torch.randn(2, n, 2, 2, generator=g, dtype=torch.float64)
        self.y = torch.tanh(self.x.sum(-1, keepdim=True)).expand(-1, -1, -1, 2).contiguous()

    def batch(self, index):
        rows = torch.arange(2)[:, None]
        return self.x[rows, index], self.y[rows, index]


def _model():
    return EnsembleEmulator([torch.Generator().manual_seed(s) for s in (0, 1)], 2, 2, 2, 4, 1, 3, dtype=torch.float64)


def _train(ckpt, epochs=3, fingerprint="cfg"):
    model = _model()
    res = train_ensemble(model, _Task(), TrainConfig(epochs=epochs, batch_size=8, lr=1e-2), checkpoint=ckpt,
                         fingerprint=fingerprint)
    return model, res


def test_finished_checkpoint_is_never_resumed(tmp_path):
    """A forced rerun (same config, same code) retrains instead of loading the final weights."""
    ckpt = tmp_path / "ckpt.pt"
    first, res1 = _train(ckpt)
    again, res2 = _train(ckpt)
    assert (res2.resumed_from, res2.epochs_run) == (0, 3)  # before: (3, 0), the old weights reused
    assert parameter_digest(again) == parameter_digest(first)  # retrained to the same numbers
    assert torch.load(ckpt, weights_only=False)["final"] is True


def test_checkpoint_of_other_code_is_not_resumed(tmp_path, monkeypatch):
    ckpt = tmp_path / "ckpt.pt"
    straight, _ = _train(None)
    monkeypatch.setenv(FAIL_ENV, "0")
    with pytest.raises(RuntimeError, match="injected failure"):
        _train(ckpt)
    monkeypatch.delenv(FAIL_ENV)
    state = torch.load(ckpt, weights_only=False)
    assert state["epoch"] == 1 and state["final"] is False
    assert state["fingerprint"] == checkpoint_fingerprint("cfg", torch.device("cpu"))
    assert state["fingerprint"].startswith(f"cfg|{runtime.code_version()}")
    # the same code resumes (to the uninterrupted run's weights) ...
    import shutil

    shutil.copy(ckpt, tmp_path / "copy.pt")
    resumed, res = _train(tmp_path / "copy.pt")
    assert (res.resumed_from, res.epochs_run) == (1, 2) and parameter_digest(resumed) == parameter_digest(straight)
    # ... changed code (another source digest) starts from scratch
    monkeypatch.setattr("algo_emu.train.code_version", lambda: "algo_emu 0.1.0 src 0123456789abcdef")
    fresh, res = _train(ckpt)
    assert (res.resumed_from, res.epochs_run) == (0, 3) and parameter_digest(fresh) == parameter_digest(straight)


def test_checkpoint_of_the_other_denormal_arithmetic_is_not_resumed(tmp_path, monkeypatch):
    """A checkpoint written with denormals kept is not resumed by a run that flushes them (and back)."""
    ckpt = tmp_path / "ckpt.pt"
    flushed = runtime.denormals_flushed()
    monkeypatch.setenv(FAIL_ENV, "0")
    with pytest.raises(RuntimeError, match="injected failure"):
        _train(ckpt)
    monkeypatch.delenv(FAIL_ENV)
    monkeypatch.setattr("algo_emu.train.denormals_flushed", lambda: not flushed)
    _, res = _train(ckpt)
    assert (res.resumed_from, res.epochs_run) == (0, 3)


def test_source_digest_covers_the_model_task_and_loss(tmp_path):
    pkg = tmp_path / "algo_emu"
    for part in runtime.TRAINING_SOURCES:
        src = runtime.PACKAGE_DIR / part
        dst = pkg / part
        if src.is_dir():
            for f in [*src.rglob("*.py"), *src.rglob("*.c")]:
                (dst / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
                (dst / f.relative_to(src)).write_bytes(f.read_bytes())
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(src.read_bytes())
    assert runtime.source_digest(root=pkg) == runtime.source_digest()
    for rel in ("models/emulator.py", "models/two_set_attention.c", "train.py", "data/heads.py",
                "experiments/statistical.py", "rng.py"):
        f = pkg / rel
        original = f.read_bytes()
        f.write_bytes(original + b"\n# changed\n")
        assert runtime.source_digest(root=pkg) != runtime.source_digest(), rel
        f.write_bytes(original)
    (pkg / "plots").mkdir()
    (pkg / "plots" / "x.py").write_text("# plotting does not change a checkpoint\n")
    assert runtime.source_digest(root=pkg) == runtime.source_digest()
    assert runtime.code_version().startswith("algo_emu ") and runtime.source_digest()[:16] in runtime.code_version()


# ----------------------------------------------------------------------------- killed writes


def test_killed_write_leaves_a_temp_file_that_the_next_write_removes(tmp_path):
    target = tmp_path / "ckpt.pt"
    code = ("import os, signal, sys; from algo_emu.io import atomic_path\n"
            "with atomic_path(sys.argv[1]) as tmp:\n"
            "    tmp.write_bytes(b'half a checkpoint')\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(target)])
    assert proc.returncode == -signal.SIGKILL
    (left,) = tmp_path.iterdir()
    assert left.name.startswith(".ckpt.pt.") and left.name.endswith(".pt.tmp") and not target.exists()
    save_torch(target, {"x": torch.ones(2)})  # the rule runs again
    assert [p.name for p in tmp_path.iterdir()] == [target.name]
    # a live writer's temporary file (this process) and another file's are not touched
    host = left.name.split("~")[1]
    live = tmp_path / f".ckpt.pt.~{host}~{os.getpid()}~abcdefgh.pt.tmp"
    live.write_bytes(b"being written")
    other = tmp_path / f".ckpt.pt.json.~{host}~1~abcdefgh.json.tmp"  # another path's (pid 1 lives)
    other.write_bytes(b"x")
    save_torch(target, {"x": torch.ones(2)})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([target.name, live.name, other.name])
    live.unlink()
    other.unlink()
    # a leftover in the format of earlier versions (no host or pid) is stale too
    legacy = tmp_path / ".ckpt.pt.k3j_a9x2.pt.tmp"
    legacy.write_bytes(b"old")
    assert clean_stale_temps(target) == [legacy]
    with atomic_path(target) as tmp:
        assert tmp.name.startswith(f".ckpt.pt.~") and f"~{os.getpid()}~" in tmp.name
        tmp.write_bytes(b"done")
    assert target.read_bytes() == b"done"
