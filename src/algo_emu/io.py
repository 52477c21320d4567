"""Atomic file output, checksums and JSON helpers.

Every file the pipeline writes goes through :func:`atomic_path`: the content is
written to a temporary file in the same directory, flushed to the disk (``fsync``),
renamed into place, and the folder flushed after the rename, so a killed job, or a
machine that loses power, never leaves a half-written output behind under the final
name. The temporary file's name carries the writer's host and process id; the next
write of the same path removes the leftovers of writers that died (``kill -9`` gives
them no chance to clean up). A full disk raises :class:`DiskFullError` naming the
file, and nothing is left under its name.

Digests are of content only: :func:`tensor_digest` hashes tensor bytes, and
:func:`save_torch` writes an archive that does not depend on the temporary file's
name, so :func:`sha256_file` of a ``.pt`` file is the same for the same content.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import glob
import hashlib
import json
import os
import re
import socket
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

def utc_now() -> str:
    """The current UTC time to the second, ISO 8601 (``2026-12-03T17:48:52+00:00``): every timestamp a record,
    provenance or campaign state writes."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


#: A writer on another host cannot be checked for life; its leftovers are removed after this long.
STALE_TMP_SECONDS = 24 * 3600


def _host_tag() -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", socket.gethostname()) or "host"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (a zombie counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def clean_stale_temps(path: str | os.PathLike, suffix: str | None = None) -> list[Path]:
    """Remove temporary files that killed writers of ``path`` left behind; return what was removed.

    A temporary file ``.<name>.~<host>~<pid>~<random><suffix>.tmp`` is stale when its writer is
    on this host and no longer running, or on another host and older than
    :data:`STALE_TMP_SECONDS`. Files in the format of earlier versions (no host or pid,
    ``.<name>.<8 random chars><suffix>.tmp``) are always stale. A live writer's file is kept.
    """
    path = Path(path)
    suffix = path.suffix if suffix is None else suffix
    if not path.parent.is_dir():
        return []
    name, sfx = re.escape(path.name), re.escape(suffix)
    tagged = re.compile(rf"^\.{name}\.~(?P<host>[A-Za-z0-9_]+)~(?P<pid>\d+)~[A-Za-z0-9_]+{sfx}\.tmp$")
    legacy = re.compile(rf"^\.{name}\.[a-z0-9_]{{8}}{sfx}\.tmp$")
    host, removed = _host_tag(), []
    for cand in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        m = tagged.match(cand.name)
        if m:
            if m["host"] == host:
                stale = not pid_alive(int(m["pid"]))
            else:
                try:
                    stale = time.time() - cand.stat().st_mtime > STALE_TMP_SECONDS
                except FileNotFoundError:
                    continue
        else:
            stale = bool(legacy.match(cand.name))
        if stale:
            with contextlib.suppress(FileNotFoundError):
                cand.unlink()
                removed.append(cand)
    return removed


class DiskFullError(OSError):
    """A write found no space left on its device (or the user's quota spent); nothing was written."""


class CorruptFileError(ValueError):
    """A file the pipeline wrote does not read back as written (damaged on disk, or edited)."""


def fsync_path(path: str | os.PathLike) -> None:
    """Flush ``path`` (a file, or a folder's entries) to the disk. A file system that cannot sync a folder
    (some network and FUSE file systems refuse) is left as it is."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if not os.path.isdir(path) or exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def _disk_full(exc: BaseException, folder: Path) -> bool:
    """Whether ``exc`` (anything a writer raised: OSError, or a library's wrapper of one) came from a full
    device: ENOSPC or EDQUOT in the exception or its causes, or no byte left on ``folder``'s device."""
    seen = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        seen = seen.__cause__ or seen.__context__
    if isinstance(exc, (OSError, RuntimeError)):
        with contextlib.suppress(OSError):
            st = os.statvfs(folder)
            return st.f_bavail == 0
    return False


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success, flush it to the disk, rename it onto ``path`` and
    flush the folder (so the new name survives a power loss, not only the content).

    On an exception the temporary file is removed and ``path`` is untouched; a full device raises
    :class:`DiskFullError` naming ``path``. A temporary file left by an earlier writer that was killed is
    removed first (:func:`clean_stale_temps`). ``suffix`` defaults to the target's suffix (some writers, e.g.
    matplotlib, choose the format from it).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = path.suffix if suffix is None else suffix
    clean_stale_temps(path, suffix)
    try:
        fd, tmp = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.name}.~{_host_tag()}~{os.getpid()}~", suffix=suffix + ".tmp"
        )
    except OSError as exc:
        if _disk_full(exc, path.parent):
            raise DiskFullError(exc.errno, f"no space left on the device of {path.parent}: {path} not written; "
                                "free some space and run the same command again") from exc
        raise
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp creates 0600; give the file the permissions a plain open() would (0666 & ~umask).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_path, 0o666 & ~umask)
        fsync_path(tmp_path)
        os.replace(tmp_path, path)
        fsync_path(path.parent)
    except BaseException as exc:
        full = _disk_full(exc, path.parent)  # before the temporary file's space is given back
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        if full:
            raise DiskFullError(errno.ENOSPC, f"no space left on the device of {path.parent}: {path} not written "
                                "(nothing half-written is left under its name); free some space and run the "
                                "same command again") from exc
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def _json_default(obj: Any) -> Any:
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def dumps_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, default=_json_default, allow_nan=True) + "\n"


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, dumps_json(obj))


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"missing file: {path}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None


#: Keys renamed since records were first written: old name -> new name (:func:`current_names`).
FORMER_NAMES = {"total_tokens": "p"}


def current_names(record: Mapping[str, Any]) -> dict:
    """A copy of ``record`` (a frozen model's meta, a record's run parameters) with keys written under a former name
    (:data:`FORMER_NAMES`) under their current one, so files written before a rename still read."""
    out = dict(record)
    for old, new in FORMER_NAMES.items():
        if old in out:
            out.setdefault(new, out.pop(old))
    return out


def seed_metrics_path(out_dir: str | os.PathLike, seed: int) -> Path:
    """Where a run writes one seed's results: ``<out_dir>/seed<k>/metrics.json`` (the rules expect this name)."""
    return Path(out_dir) / f"seed{seed}" / "metrics.json"


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def save_torch(path: str | os.PathLike, obj: Any) -> None:
    """``torch.save`` atomically, content-stable: the same ``obj`` gives the same bytes.

    Given a path, torch.save names the zip archive's top folder after the file, i.e.
    after the random temporary name; given an open file it always uses ``archive``.
    """
    import torch

    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            torch.save(obj, fh)


def load_torch(path: str | os.PathLike, **kwargs) -> Any:
    """``torch.load(path, **kwargs)`` of a :func:`save_torch` file that reads back as written: every member of
    its zip archive passes its CRC-32 check (``torch.load`` alone loads a flipped bit in a tensor's bytes
    without a word). Otherwise :class:`CorruptFileError` naming the file."""
    import torch

    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, EOFError, ValueError) as exc:
        raise CorruptFileError(f"{path}: damaged, not a readable torch archive ({exc})") from None
    if bad is not None:
        raise CorruptFileError(f"{path}: damaged, its member {bad} fails its CRC-32 check")
    try:
        return torch.load(path, **kwargs)
    except (RuntimeError, EOFError, ValueError, UnicodeDecodeError, zipfile.BadZipFile) as exc:
        raise CorruptFileError(f"{path}: damaged, torch.load fails ({type(exc).__name__}: {exc})") from None


def _tensor_bytes(t) -> bytes:
    import torch

    t = t.detach().to("cpu").contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def tensor_digest(obj: Any) -> str:
    """sha256 of tensor content (the package's one tensor digest).

    A tensor: its raw bytes in C order (dtype and shape not included; the bytes of
    ``t.contiguous()`` on the CPU). A mapping of name -> tensor, or an iterable of (name,
    tensor) pairs, in the given order: for each, ``"<name>|<dtype>|<shape tuple>|"`` then its
    raw bytes (what :func:`algo_emu.frozen.parameter_digest` hashes for a module).
    """
    import torch

    h = hashlib.sha256()
    if isinstance(obj, torch.Tensor):
        h.update(_tensor_bytes(obj))
        return h.hexdigest()
    items: Iterable = obj.items() if isinstance(obj, Mapping) else obj
    for name, t in items:
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(_tensor_bytes(t))
    return h.hexdigest()


def write_csv(path: str | os.PathLike, frame) -> None:
    """Write a pandas DataFrame atomically (no index, full float precision)."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.10g")


def sidecar(path: str | os.PathLike) -> Path:
    """``<path>.json``: the JSON sidecar of a data or model file."""
    path = Path(path)
    return path.with_name(path.name + ".json")


def checked_sidecar(path: str | os.PathLike) -> dict:
    """The sidecar of a data file whose sha256 matches it; otherwise :class:`CorruptFileError` (a ValueError)
    naming the file and how to remake it."""
    path = Path(path)
    meta = read_json(sidecar(path))
    digest = sha256_file(path)
    if digest != meta.get("sha256"):
        raise CorruptFileError(f"{path}: sha256 {digest[:12]}... does not match its sidecar "
                               f"({str(meta.get('sha256'))[:12]}...): damaged or edited after it was written; "
                               f"remove it (rm {path}) and run the same command again to remake it")
    return meta


def write_tensors(path: str | os.PathLike, tensors: Mapping[str, Any], meta: Mapping[str, Any]) -> dict:
    """The one format of a generated data set: ``tensors`` saved atomically and content-stable
    (:func:`save_torch`), and a JSON sidecar holding ``meta``, then the tensors' shapes and the file's sha256.
    Returns the sidecar."""
    save_torch(path, dict(tensors))
    out = {**meta, "shapes": {k: list(v.shape) for k, v in tensors.items()}, "sha256": sha256_file(path)}
    write_json(sidecar(path), out)
    return out


def _first_difference(key: str, have: Any, want: Any) -> tuple[str, Any, Any]:
    """The innermost key (dotted) at which two JSON values differ, with both values there."""
    if isinstance(have, Mapping) and isinstance(want, Mapping):
        for k in list(want) + [k for k in have if k not in want]:
            if dumps_json(have.get(k)) != dumps_json(want.get(k)):
                return _first_difference(f"{key}.{k}", have.get(k), want.get(k))
    return key, have, want


def load_tensors(path: str | os.PathLike, expect: Mapping[str, Any] | None = None, *,
                 keys: Iterable[str] | None = None, format_version: int | None = None) -> tuple[dict, dict]:
    """(tensors, sidecar) of a :func:`write_tensors` file, loaded without unpickling code (``weights_only``).

    The file's sha256 must match its sidecar (:func:`checked_sidecar`), the sidecar's ``format_version`` be
    ``format_version`` when given, every entry of ``expect`` (e.g. mode, seed, the generation ``params``) equal
    the sidecar's as JSON, and the file hold exactly ``keys`` when given; otherwise ValueError naming the file
    and the first difference (``params.n_prompts``), and saying to rerun the data rule."""
    import torch

    path = Path(path)
    meta = checked_sidecar(path)
    if format_version is not None and meta.get("format_version") != format_version:
        raise ValueError(f"{path}: format_version {meta.get('format_version')!r}, expected {format_version}; "
                         "rerun the data rule")
    for key, value in (expect or {}).items():
        if dumps_json(meta.get(key)) != dumps_json(value):
            where, have, want = _first_difference(key, meta.get(key), value)
            raise ValueError(f"{path}: generated with {where}={have!r}, this job needs {want!r}; rerun the data rule")
    data = torch.load(path, weights_only=True)
    if keys is not None and sorted(data) != sorted(keys):
        raise ValueError(f"{path}: holds {sorted(data)}, expected {sorted(keys)}; rerun the data rule")
    return data, meta
