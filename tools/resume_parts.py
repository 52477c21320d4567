"""Files cut into parts, and a resume state packed to fit a bounded return.

A remote machine returns files of a bounded size (the GPU script's resume state), so a file too large for one
travels as ``<name>.part00``, ``<name>.part01``, ... whose concatenation, in order, is the file. Our own
machinery (the GPU script), not the pipeline's: nothing under ``src/`` imports it.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import tarfile
from pathlib import Path
from typing import Any, Iterable

from algo_emu.io import atomic_path

_PART = re.compile(r"^(?P<base>.+)\.part(?P<i>\d{2})$")


def split_file(path: str | os.PathLike, part_bytes: int, dest_dir: str | os.PathLike | None = None) -> list[Path]:
    """Cut ``path`` into ``<name>.part00``, ``.part01``, ... of at most ``part_bytes`` bytes each, in ``dest_dir``
    (default: beside it), each written atomically; return them in order. ``cat`` of the parts is the file."""
    path = Path(path)
    if part_bytes < 1:
        raise ValueError(f"split_file: part_bytes must be >= 1, got {part_bytes}")
    size = path.stat().st_size
    n = max(1, -(-size // part_bytes))
    if n > 100:
        raise ValueError(f"split_file: {path} ({size} bytes) would need {n} parts of {part_bytes} bytes (at most 100)")
    dest = Path(dest_dir) if dest_dir is not None else path.parent
    parts = []
    with open(path, "rb") as src:
        for i in range(n):
            part = dest / f"{path.name}.part{i:02d}"
            with atomic_path(part, suffix="") as tmp:
                tmp.write_bytes(src.read(part_bytes))
            parts.append(part)
    return parts


def part_paths(path: str | os.PathLike) -> list[Path]:
    """The files that make up ``path``: ``[path]`` when it is a whole file; its parts ``<base>.part00``, ... in order
    when ``path`` is one of them, or is their ``<base>`` and does not exist itself. A gap in the numbering or no file
    at all raises ``FileNotFoundError`` naming what is missing."""
    path = Path(path)
    m = _PART.match(path.name)
    if m is None and path.is_file():
        return [path]
    base = path.with_name(m["base"]) if m else path
    found = {}
    for p in base.parent.glob(glob.escape(base.name) + ".part[0-9][0-9]"):
        found[int(_PART.match(p.name)["i"])] = p
    if not found:
        raise FileNotFoundError(f"{path}: no such file, and no parts {base.name}.part00, ... beside it")
    gaps = [i for i in range(max(found) + 1) if i not in found]
    if gaps:
        raise FileNotFoundError(f"{base}: part(s) {', '.join(f'{base.name}.part{i:02d}' for i in gaps)} missing "
                                f"(found {len(found)} of {max(found) + 1})")
    return [found[i] for i in sorted(found)]


def join_parts(path: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """The whole file ``path`` names (:func:`part_paths`): ``path`` itself when it is whole, else its parts
    concatenated into ``dest`` (written atomically), which is returned."""
    parts = part_paths(path)
    if len(parts) == 1 and _PART.match(parts[0].name) is None:
        return parts[0]
    with atomic_path(dest, suffix="") as tmp, open(tmp, "wb") as out:
        for p in parts:
            with open(p, "rb") as src:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
    return Path(dest)


def fit_in_budget(items: Iterable[tuple[Any, int]], budget: int) -> tuple[list[Any], list[Any]]:
    """``items``: (key, size) in priority order. Keep each item whose size still fits in what ``budget`` has left
    (an item too large is passed over, and smaller ones after it may still be kept); return (kept, dropped)."""
    kept, dropped, left = [], [], budget
    for key, size in items:
        if size <= left:
            kept.append(key)
            left -= size
        else:
            dropped.append(key)
    return kept, dropped


def _tar_gz(path: Path, files: Iterable[str | os.PathLike]) -> int:
    with atomic_path(path, suffix="") as tmp:
        with tarfile.open(tmp, "w:gz", compresslevel=1) as tf:  # weights barely compress: the fast level
            for f in files:
                tf.add(f)
    return path.stat().st_size


def pack_parts(groups: Iterable[tuple[Any, list]], dest_dir: str | os.PathLike, name: str, part_bytes: int,
               max_parts: int, scratch: str | os.PathLike) -> tuple[list[Path], list[dict]]:
    """One ``name`` (a tar.gz) in ``dest_dir`` of the files of as many of ``groups`` as fit in ``max_parts`` files of
    ``part_bytes`` bytes, cut into parts (:func:`split_file`) when larger than one. ``groups``: (key, files) in
    priority order, paths relative to the working directory (kept so in the archive). Each group is gzipped alone
    in ``scratch`` to size it; a group that does not fit is left out whole (:func:`fit_in_budget`); if the one
    archive of the kept groups comes out larger than their sum allows, the last kept is left out too. Returns the
    files written and, per group, ``{"key", "gz_bytes", "returned"}``."""
    scratch = Path(scratch)
    sized = [(key, list(files), _tar_gz(scratch / f".{name}.one", files)) for key, files in groups]
    (scratch / f".{name}.one").unlink(missing_ok=True)
    budget = max(0, max_parts) * part_bytes
    kept, _ = fit_in_budget([(i, size) for i, (_, _, size) in enumerate(sized)], budget)
    whole = scratch / name
    while kept and _tar_gz(whole, [f for i in kept for f in sized[i][1]]) > budget:
        kept.pop()
    out: list[Path] = []
    if kept:
        if whole.stat().st_size <= part_bytes:
            dest = Path(dest_dir) / name
            with atomic_path(dest, suffix="") as tmp:
                shutil.copyfile(whole, tmp)
            out = [dest]
        else:
            out = split_file(whole, part_bytes, dest_dir)
    whole.unlink(missing_ok=True)
    return out, [{"key": key, "gz_bytes": size, "returned": i in kept} for i, (key, _, size) in enumerate(sized)]
