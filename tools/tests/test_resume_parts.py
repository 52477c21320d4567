"""tools.resume_parts: files cut into parts and joined again, exact bytes; a resume state packed to a budget."""

import os
import tarfile
from pathlib import Path

import pytest

from tools.resume_parts import fit_in_budget, join_parts, pack_parts, part_paths, split_file


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
