import os
import tarfile
from pathlib import Path

import pytest
import torch

from algo_emu.io import (
    atomic_path,
    fit_in_budget,
    join_parts,
    pack_parts,
    part_paths,
    read_json,
    split_file,
    write_json,
)
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


def test_split_file_parts_join_to_the_same_bytes(tmp_path):
    data = bytes(range(256)) * 41 + b"tail"  # 10,500 bytes: parts of 4,000, 4,000, 2,500
    whole = tmp_path / "state.tar.gz"
    whole.write_bytes(data)
    out = tmp_path / "out"
    parts = split_file(whole, 4000, out)
    assert [p.name for p in parts] == [f"state.tar.gz.part0{i}" for i in range(3)]
    assert [p.stat().st_size for p in parts] == [4000, 4000, 2500] and sorted(out.iterdir()) == parts
    assert b"".join(p.read_bytes() for p in parts) == data
    # any part, or the base name that is not itself a file, names all of them; joined = the file
    for name in ("state.tar.gz.part00", "state.tar.gz.part02", "state.tar.gz"):
        assert part_paths(out / name) == parts
    joined = join_parts(out / "state.tar.gz.part01", tmp_path / "joined.tar.gz")
    assert joined == tmp_path / "joined.tar.gz" and joined.read_bytes() == data
    assert join_parts(whole, tmp_path / "unused") == whole and not (tmp_path / "unused").exists()  # whole: as it is
    assert [p.name for p in split_file(whole, 20000, tmp_path / "one")] == ["state.tar.gz.part00"]
    with pytest.raises(ValueError, match="part_bytes must be >= 1"):
        split_file(whole, 0)


def test_missing_parts_are_named(tmp_path):
    (tmp_path / "r.tar.gz.part00").write_bytes(b"a")
    (tmp_path / "r.tar.gz.part02").write_bytes(b"c")
    with pytest.raises(FileNotFoundError, match=r"r.tar.gz.part01 missing \(found 2 of 3\)"):
        join_parts(tmp_path / "r.tar.gz.part00", tmp_path / "j")
    assert not (tmp_path / "j").exists()  # nothing half-joined
    with pytest.raises(FileNotFoundError, match="no such file, and no parts none.tar.gz.part00"):
        part_paths(tmp_path / "none.tar.gz")


def test_fit_in_budget_keeps_in_order_and_passes_over_what_does_not_fit():
    items = [("a", 6), ("b", 5), ("c", 3), ("d", 1)]
    assert fit_in_budget(items, 10) == (["a", "c", "d"], ["b"])  # b does not fit after a; c and d still do
    assert fit_in_budget(items, 15) == (["a", "b", "c", "d"], [])
    assert fit_in_budget(items, 0) == ([], ["a", "b", "c", "d"])


def test_pack_parts_keeps_what_fits_in_priority_order_and_cuts_it_into_parts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sizes = {"a": 40_000, "b": 30_000, "c": 8_000}  # random bytes: gzip keeps their size (plus a few hundred bytes)
    for k, n in sizes.items():
        Path(f"ck/{k}").mkdir(parents=True)
        Path(f"ck/{k}/state.pt").write_bytes(os.urandom(n))
    groups = [(k, [f"ck/{k}/state.pt"]) for k in sizes]
    (tmp_path / "scratch").mkdir()

    # two parts of 25,000 bytes: a fits, b no longer does, c still does; a + c come back as two parts
    out, info = pack_parts(groups, tmp_path / "o1", "resume.tar.gz", 25_000, 2, tmp_path / "scratch")
    assert [x["returned"] for x in info] == [True, False, True] and [x["key"] for x in info] == ["a", "b", "c"]
    assert all(sizes[x["key"]] < x["gz_bytes"] < sizes[x["key"]] + 1_000 for x in info)
    assert [p.name for p in out] == ["resume.tar.gz.part00", "resume.tar.gz.part01"]
    assert out[0].stat().st_size == 25_000 and sorted((tmp_path / "o1").iterdir()) == out
    with tarfile.open(join_parts(out[0], tmp_path / "joined.tar.gz")) as tf:
        assert tf.getnames() == ["ck/a/state.pt", "ck/c/state.pt"]
        assert tf.extractfile("ck/c/state.pt").read() == Path("ck/c/state.pt").read_bytes()

    # room for everything in one part: one whole file
    out, info = pack_parts(groups, tmp_path / "o2", "resume.tar.gz", 100_000, 1, tmp_path / "scratch")
    assert [p.name for p in out] == ["resume.tar.gz"] and all(x["returned"] for x in info)
    # no room: nothing written, every group named as not returned
    out, info = pack_parts(groups, tmp_path / "o3", "resume.tar.gz", 100_000, 0, tmp_path / "scratch")
    assert out == [] and not any(x["returned"] for x in info) and not (tmp_path / "o3").exists()
    assert list((tmp_path / "scratch").iterdir()) == []  # no scratch archive left behind


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
