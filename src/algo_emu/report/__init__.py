"""Artifact review: the replication report (paper number vs ours, with a verdict) and the run manifest.

``python -m algo_emu report replication JOB`` writes ``results/replication.md`` and
``results/tables/replication.csv``; ``python -m algo_emu report manifest JOB``
writes ``results/manifest.json``. Both refuse to run on a half-finished results
tree and name every missing file (:class:`MissingOutputs`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable


class MissingOutputs(FileNotFoundError):
    """Inputs of a report step are missing; the message lists every one of them."""

    def __init__(self, step: str, missing: list[str]):
        self.missing = list(missing)
        listing = "\n".join(f"  - {m}" for m in self.missing)
        super().__init__(
            f"{step}: {len(self.missing)} expected output(s) missing -- the run is not finished "
            f"(run `snakemake all` with the same --configfile first); no partial report written:\n{listing}"
        )


def check_present(step: str, paths: Iterable[str | Path]) -> None:
    """Raise :class:`MissingOutputs` naming every path of ``paths`` that does not exist."""
    missing = [str(p) for p in paths if not Path(p).exists()]
    if missing:
        raise MissingOutputs(step, missing)
