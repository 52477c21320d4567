import pytest
import torch

from algo_emu.io import atomic_path, read_json, write_json
from algo_emu.rng import derive, torch_stream


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out" / "x.json"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert not target.exists() and list(target.parent.iterdir()) == []
    write_json(target, {"a": 1})
    assert read_json(target) == {"a": 1} and [p.name for p in target.parent.iterdir()] == ["x.json"]
    assert target.stat().st_mode & 0o044 == 0o044  # readable by others, like a plain open()


def test_read_json_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing file"):
        read_json(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ValueError, match="bad.json: not valid JSON"):
        read_json(bad)


def test_streams_are_named_and_stable():
    assert derive(3, "a", "b") == derive(3, "a", "b")
    assert len({derive(3, "a"), derive(4, "a"), derive(3, "b"), derive(3, "a", 0)}) == 4
    # pinned: a change here changes every number the pipeline produces
    assert derive(0, "heads", "X") == int.from_bytes(__import__("hashlib").sha256(b"0/heads/X").digest()[:8], "little") & (2**63 - 1)
    assert torch.equal(torch.rand(3, generator=torch_stream(1, "x")), torch.rand(3, generator=torch_stream(1, "x")))
    with pytest.raises(TypeError):
        derive(1.5, "x")


def test_claim_gpu_takes_distinct_free_gpus(tmp_path):
    import subprocess
    import sys

    from algo_emu import runtime

    runtime._GPU_LOCKS.clear()
    try:
        assert runtime.claim_gpu(3, tmp_path) == 0
        assert runtime.claim_gpu(3, tmp_path) == 1  # this process already holds GPU 0
        # another process sees GPUs 0 and 1 taken (flock is per open file) and gets GPU 2
        code = f"from algo_emu.runtime import claim_gpu; print(claim_gpu(3, {str(tmp_path)!r}))"
        assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "2"
    finally:
        for fh in runtime._GPU_LOCKS.values():
            fh.close()
        runtime._GPU_LOCKS.clear()
    # locks die with their holder: a new process gets GPU 0 again
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "0"


def test_claim_gpu_spreads_jobs_over_gpus_then_takes_more_slots_per_gpu(tmp_path):
    """Two GPUs, two slots each: jobs in four processes land on 0, 1, 0, 1; a fifth finds every slot taken (GPU 0)."""
    import subprocess
    import sys

    code = ("import sys, time; from algo_emu.runtime import claim_gpu; "
            f"print(claim_gpu(2, {str(tmp_path)!r}, per_gpu=2), flush=True); sys.stdin.read()")
    procs, got = [], []
    try:
        for _ in range(5):
            pr = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            procs.append(pr)
            got.append(int(pr.stdout.readline()))  # holds its lock until its stdin closes
        assert got == [0, 1, 0, 1, 0]
        assert sorted(f.name for f in tmp_path.iterdir()) == ["algo-emu-gpu0.lock", "algo-emu-gpu0.slot1.lock",
                                                               "algo-emu-gpu1.lock", "algo-emu-gpu1.slot1.lock"]
    finally:
        for pr in procs:
            pr.stdin.close()
            pr.wait()


def test_jobs_per_gpu_reads_the_environment_and_names_a_bad_value(monkeypatch):
    from algo_emu import runtime

    monkeypatch.delenv(runtime.JOBS_PER_GPU_VARIABLE, raising=False)
    assert runtime.jobs_per_gpu() == runtime.DEFAULT_JOBS_PER_GPU
    monkeypatch.setenv(runtime.JOBS_PER_GPU_VARIABLE, "3")
    assert runtime.jobs_per_gpu() == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(runtime.JOBS_PER_GPU_VARIABLE, bad)
        with pytest.raises(ValueError, match=f"ALGO_EMU_JOBS_PER_GPU='{bad}': expected a whole number"):
            runtime.jobs_per_gpu()


def test_gpu_local_profile_offers_gpus_times_jobs_per_gpu(monkeypatch):
    """The profile's `gpu` resource is GPUs x jobs per GPU, its default the runtime's, and a bad value is named."""
    yte = pytest.importorskip("yte")
    from algo_emu import runtime
    from algo_emu.runtime import REPO_ROOT

    text = (REPO_ROOT / "workflow/profiles/gpu-local/config.yaml").read_text()
    monkeypatch.setenv("ALGO_EMU_GPUS", "2")
    monkeypatch.delenv("ALGO_EMU_JOBS_PER_GPU", raising=False)
    assert yte.process_yaml(text)["resources"] == {"gpu": 2 * runtime.DEFAULT_JOBS_PER_GPU}
    monkeypatch.setenv("ALGO_EMU_JOBS_PER_GPU", "1")
    assert yte.process_yaml(text)["resources"] == {"gpu": 2}
    monkeypatch.setenv("ALGO_EMU_JOBS_PER_GPU", "x")
    with pytest.raises(Exception, match="ALGO_EMU_JOBS_PER_GPU='x'"):
        yte.process_yaml(text)


def test_tensor_data_sets_name_the_first_difference(tmp_path):
    from algo_emu.io import load_tensors, write_tensors

    path = tmp_path / "d.pt"
    meta = write_tensors(path, {"X": torch.zeros(2, 3)}, {"format_version": 1, "params": {"p": 4, "mix": {"a": 1}}})
    assert meta["shapes"] == {"X": [2, 3]} and len(meta["sha256"]) == 64
    data, side = load_tensors(path, {"params": {"p": 4, "mix": {"a": 1}}}, keys=["X"], format_version=1)
    assert torch.equal(data["X"], torch.zeros(2, 3)) and side == meta
    with pytest.raises(ValueError, match=r"generated with params\.mix\.a=1, this job needs 2; rerun the data rule"):
        load_tensors(path, {"params": {"p": 4, "mix": {"a": 2}}})
    with pytest.raises(ValueError, match=r"generated with params\.q=None, this job needs 5"):
        load_tensors(path, {"params": {"p": 4, "mix": {"a": 1}, "q": 5}})
    with pytest.raises(ValueError, match=r"format_version 1, expected 2"):
        load_tensors(path, format_version=2)
    with pytest.raises(ValueError, match=r"holds \['X'\], expected \['X', 'y'\]"):
        load_tensors(path, keys=["X", "y"])


@pytest.mark.parametrize("profile", ["gpu-local", "slurm"])
def test_gpu_profiles_give_every_training_rule_a_gpu(monkeypatch, profile):
    """Each experiment's training rules (its spec's training_rules; the grouped rules declare gpu=1 themselves) take
    one GPU under the GPU profiles: a rule left out would train on the CPU of a GPU cluster's node, or crowd the
    GPUs of a workstation without a slot. The profiles read the rules from the specs, so an experiment added
    without touching them (here a made-up one) gets its GPU too."""
    yte = pytest.importorskip("yte")
    from algo_emu import specs
    from algo_emu.runtime import REPO_ROOT

    toy = specs.Spec(section="toy", label="E9", reads=(), targets=(), training_rules=("toy_train", "toy_train_blind"))
    monkeypatch.setattr(specs, "SPECS", specs.SPECS + (toy,))
    SPECS = specs.SPECS
    monkeypatch.setenv("ALGO_EMU_GPUS", "1")
    prof = yte.process_yaml((REPO_ROOT / f"workflow/profiles/{profile}/config.yaml").read_text())
    given = {rule for rule, res in prof["set-resources"].items() if res.get("gpu") == 1}
    training = {rule for s in SPECS for rule in s.training_rules}
    assert training - given == set(), f"{profile}: no GPU for {sorted(training - given)}"
