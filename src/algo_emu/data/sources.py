"""Where real data comes from, whatever the data set: an OpenML download with a timeout, an offline fallback
said loudly, a local file copied byte for byte, each written with a provenance JSON and checked against an
optional sha256 pin. Nothing is written when anything fails.

A data set's download step (E4's: :func:`algo_emu.data.ames.download`) decides which source to read and
validates the frame against its schema; this module fetches, pins and writes.
"""

from __future__ import annotations

import logging
import platform
import shutil
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd

from algo_emu.data.tabular import DataError
from algo_emu.guard import to_console
from algo_emu.io import atomic_path, sha256_file, utc_now, write_json

log = logging.getLogger(__name__)


def new_provenance(source_requested: str, target: str | None) -> dict[str, Any]:
    """The provenance fields every download records before it reads anything."""
    return {
        "source_requested": source_requested,
        "retrieved_at": utc_now(),
        "target": target,
        "warnings": [],
        "fallback": None,
        "software": {"python": platform.python_version(), "pandas": pd.__version__, "numpy": np.__version__},
    }


def check_pin(sha: str, pin: str | None, key: str, what: str, error: type[DataError] = DataError) -> bool:
    """True when ``pin`` is set and equals ``sha``; raise when it differs; False when there is no pin."""
    if pin is None:
        return False
    if sha != str(pin).lower():
        raise error(
            f"checksum mismatch for {what}: sha256 {sha}, but config key {key} pins {pin}. "
            f"Either the source changed or the pin is wrong; set {key}: null to accept this file unverified."
        )
    return True


@contextmanager
def _socket_timeout(seconds: float | None) -> Iterator[None]:
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(old)


def fetch_errors() -> tuple[type[BaseException], ...]:
    """Exceptions meaning "OpenML could not be reached or refused": OSError covers URLError,
    HTTPError, socket timeouts and DNS failures; OpenMLError is scikit-learn's server-side error."""
    errors: list[type[BaseException]] = [OSError]
    try:
        from sklearn.datasets._openml import OpenMLError  # private, hence guarded

        errors.append(OpenMLError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(errors)


def fetch_openml_frame(data_id: int, timeout_s: float, n_retries: int,
                       error: type[DataError] = DataError) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The OpenML data set ``data_id`` as one frame (features + target) and its OpenML details.

    The OpenML cache goes to a temporary directory (the CSV written by the download step is the cache).
    """
    import sklearn
    import sklearn.datasets

    with tempfile.TemporaryDirectory(prefix="openml-") as home, _socket_timeout(timeout_s):
        bunch = sklearn.datasets.fetch_openml(
            data_id=int(data_id), as_frame=True, data_home=home, n_retries=int(n_retries), delay=1.0
        )
    frame = bunch.frame
    if frame is None:
        raise error(f"OpenML data id {data_id}: fetch_openml returned no frame")
    details = dict(getattr(bunch, "details", {}) or {})
    keep = ("id", "name", "version", "upload_date", "md5_checksum", "file_id", "licence", "default_target_attribute")
    info = {k: details.get(k) for k in keep if k in details}
    info["url"] = getattr(bunch, "url", None) or f"https://www.openml.org/d/{int(data_id)}"
    info["sklearn_version"] = sklearn.__version__
    return frame, info


def fetch_or_fall_back(fetch: Callable[[], Any], auto: bool, failed: Callable[[str], str],
                       fell_back: Callable[[str], str], prov: dict[str, Any], fallback: tuple[str, str],
                       error: type[DataError] = DataError) -> Any:
    """``fetch()``; on a network or server error (:func:`fetch_errors`; anything else is a bug and raises):
    with ``auto``, return None after recording the fall-back (``fallback`` = (from, to)) in ``prov`` and
    warning loudly with ``fell_back(reason)``; without, raise ``failed(reason)``."""
    try:
        return fetch()
    except fetch_errors() as exc:
        reason = f"{type(exc).__name__}: {exc}"
        if not auto:
            raise error(failed(reason)) from exc
        msg = fell_back(reason)
        log.warning("!" * 78)
        log.warning(msg)
        log.warning("!" * 78)
        to_console(f"WARNING: {msg}")  # on Snakemake's console too, not only in the job's log
        prov["fallback"] = {"from": fallback[0], "to": fallback[1], "reason": reason}
        prov["warnings"].append(msg)
        return None


def write_frame(frame: pd.DataFrame, out_csv: str | Path, out_provenance: str | Path, prov: dict[str, Any],
                pin_key: str, pin: str | None, error: type[DataError] = DataError) -> str:
    """``frame`` as a CSV and ``prov`` (with the CSV's sha256, checked against ``pin`` when set) beside it;
    returns the sha256."""
    with atomic_path(out_csv) as tmp_csv:
        frame.to_csv(tmp_csv, index=False, float_format="%.10g")
        sha = sha256_file(tmp_csv)
        prov["sha256"] = sha
        prov["sha256_pin_key"] = pin_key
        prov["sha256_pinned"] = pin
        prov["sha256_verified"] = check_pin(sha, pin, pin_key, f"the {prov['source']} CSV", error)
        if not prov["sha256_verified"]:
            note = f"{pin_key} is null: this CSV's sha256 is recorded but not checked against a pin"
            log.warning(note)
            prov["warnings"].append(note)
        write_json(out_provenance, prov)
    return sha


def copy_file(src: Path, sha: str, out_csv: str | Path, out_provenance: str | Path, prov: dict[str, Any],
              error: type[DataError] = DataError) -> None:
    """A local file copied byte for byte (its sha256 ``sha`` checked again on the copy), ``prov`` beside it."""
    with atomic_path(out_csv) as tmp_csv:
        shutil.copyfile(src, tmp_csv)
        if sha256_file(tmp_csv) != sha:  # pragma: no cover - the file changed while we copied it
            raise error(f"{src}: changed while being copied")
        write_json(out_provenance, prov)
