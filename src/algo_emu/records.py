"""One run record for every trained experiment, and its tidy view.

Every trained experiment writes one ``metrics.json`` per seed (through :class:`algo_emu.train.Runner`).
What a table reads from those files is declared once per experiment as a :class:`RunSpec`: which
columns identify the setting, which are metrics, which are provenance, and where in the record each
one lives. :func:`load_runs` is the one loader (one row per seed and per item of ``spec.rows``, e.g.
per target, per f, per algorithm); :func:`tidy` turns its rows into the long form
``(experiment, <setting columns>, seed, metric, value)``; :func:`algo_emu.tables.summarise_by` is the
one aggregation every table uses. Each experiment keeps only its spec, its column choice and its
caption.

Torch-free (the report and refset read records without it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import pandas as pd

from algo_emu.io import read_json

__all__ = ["KEY", "Get", "Last", "RunSpec", "load_runs", "load_curves", "last", "tidy", "TIDY_COLUMNS", "CURVE_COLUMNS",
           "environments", "record_commits"]

#: Stands for the row key (the key of the item of ``spec.rows`` a row comes from).
KEY = "<key>"
_REQUIRED = object()
TIDY_COLUMNS = ["experiment", "seed", "metric", "value"]
#: The learning curves of :func:`load_curves`, one row per recorded value.
CURVE_COLUMNS = ["experiment", "setting", "model", "seed", "epoch", "quantity", "value"]


@dataclass(frozen=True)
class Get:
    """A value in a record: a dotted ``path`` from the record (``"setting.heads"``), or from the row's item
    when it starts with ``@`` (``"@.mse"``; ``"@"`` is the item itself). ``{key}`` in the path is the row
    key. Without ``default`` a missing field is an error naming the file and the path."""

    path: str
    default: Any = _REQUIRED

    def __call__(self, record: Mapping, key: str, item: Any, source: str) -> Any:
        parts = self.path.replace("{key}", str(key)).split(".")
        node: Any = item if parts[0] == "@" else record
        for part in parts[1:] if parts[0] == "@" else parts:
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif self.default is not _REQUIRED:
                return self.default
            else:
                raise ValueError(f"{source}: the record has no field {self.path.replace('{key}', str(key))!r}")
        return node


@dataclass(frozen=True)
class RunSpec:
    """What one experiment's per-seed records hold, as table rows.

    ``rows``: dotted path to the mapping whose items become rows (one row per item per record);
    ``columns``: column -> :data:`KEY`, a :class:`Get`, a dotted path string (a required :class:`Get`)
    or a callable ``(record, key, item) -> value``, in the output column order; ``setting``: the columns
    that identify a setting (with ``seed``, a row); ``metrics``: the numeric results (:func:`tidy`);
    every other column is provenance. ``check``: ``(record, source) -> None``, raising on a record this
    spec must not read (e.g. a baseline's record given as a model's). ``records``: where these records sit
    under a results tree (a glob); ``curves``: the per-epoch values a record holds, ``record -> [(setting,
    model, epoch, quantity, value)]`` (model: ``model`` or ``weight-blind``), read by :func:`load_curves`."""

    experiment: str
    rows: str
    columns: Mapping[str, Any]
    setting: Sequence[str]
    metrics: Sequence[str]
    check: Callable[[Mapping, str], None] | None = None
    empty: str = "no metrics files given"
    records: str = ""
    curves: Callable[[Mapping], Iterable[tuple]] | None = None

    def __post_init__(self) -> None:
        unknown = [c for c in [*self.setting, *self.metrics, "seed"] if c not in self.columns]
        if unknown:
            raise ValueError(f"RunSpec {self.experiment!r}: setting/metric column(s) {unknown} not among its columns")


def _value(source: Any, record: Mapping, key: str, item: Any, where: str) -> Any:
    if source is KEY:
        return key
    if isinstance(source, str):
        source = Get(source)
    if isinstance(source, Get):
        return source(record, key, item, where)
    return source(record, key, item)


def load_runs(paths: Sequence[str], spec: RunSpec) -> pd.DataFrame:
    """One row per (record, item of ``spec.rows``), columns as ``spec.columns`` declares them."""
    rows = []
    for path in paths:
        record = read_json(path)
        if spec.check is not None:
            spec.check(record, str(path))
        items = Get(spec.rows)(record, "", None, str(path))
        for key, item in items.items():
            rows.append({col: _value(src, record, key, item, str(path)) for col, src in spec.columns.items()})
    if not rows:
        raise ValueError(spec.empty)
    return pd.DataFrame(rows, columns=list(spec.columns))


def load_curves(root: str | Path, spec: RunSpec, label: str) -> list[dict]:
    """Every learning-curve value of the records of ``spec`` under ``root`` (its ``records`` glob, in path order),
    as :data:`CURVE_COLUMNS` rows with ``experiment`` = ``label``."""
    if spec.curves is None or not spec.records:
        raise ValueError(f"RunSpec {spec.experiment!r} declares no learning curves (records, curves)")
    rows = []
    for path in sorted(Path(root).glob(spec.records)):
        record = read_json(path)
        for setting, model, epoch, quantity, value in spec.curves(record):
            rows.append(dict(experiment=label, setting=setting, model=model, seed=record["seed"], epoch=epoch,
                             quantity=quantity, value=float(value)))
    return rows


def environments(record: Mapping) -> list[Mapping]:
    """The environment block(s) of a record: its own, or, where it keeps one per job that made it (E3's records:
    ``{"train": ..., "eval": ...}``), each of those. Readers of a record's commit or code version use this, so a
    record of either shape is read, never taken for one without a commit."""
    env = record.get("environment") or {}
    if not isinstance(env, Mapping):
        return []
    nested = [v for v in env.values() if isinstance(v, Mapping) and ("git_commit" in v or "code_version" in v)]
    return nested if nested and "git_commit" not in env and "code_version" not in env else [env]


def record_commits(record: Mapping) -> set:
    """Every commit a record names (None where an environment block names none)."""
    return {e.get("git_commit") for e in environments(record)} or {None}


def tidy(runs: pd.DataFrame, spec: RunSpec) -> pd.DataFrame:
    """The long form of :func:`load_runs`' rows: ``experiment, <setting columns>, seed, metric, value``,
    one row per (setting, seed, metric); values as floats (None -> NaN)."""
    cols = [*spec.setting, "seed"]
    long = runs.melt(id_vars=cols, value_vars=list(spec.metrics), var_name="metric", value_name="value")
    long["value"] = pd.to_numeric(long["value"], errors="coerce").astype(float)
    long.insert(0, "experiment", spec.experiment)
    return long[["experiment", *cols, "metric", "value"]]


@dataclass(frozen=True)
class Last(Get):
    """The last element of the list at ``path`` (NaN when the list is empty): a final training loss."""

    def __call__(self, record: Mapping, key: str, item: Any, source: str) -> Any:
        seq = super().__call__(record, key, item, source)
        return seq[-1] if seq else math.nan


def last(path: str) -> Last:
    return Last(path)
