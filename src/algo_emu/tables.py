"""From the per-seed run records to the tables: one record for every trained experiment, its tidy view, the one
aggregation every table uses, and the tables' renderings.

Records. Every trained experiment writes one ``metrics.json`` per seed (through :class:`algo_emu.train.Runner`).
What a table reads from those files is declared once per experiment as a :class:`RunSpec`: which
columns identify the setting, which are metrics, which are provenance, and where in the record each
one lives. :func:`load_runs` is the one loader (one row per seed and per item of ``spec.rows``, e.g.
per target, per f, per algorithm); :func:`tidy` turns its rows into the long form
``(experiment, <setting columns>, seed, metric, value)``. Each experiment keeps only its spec, its column choice
and its caption.

Tables. :func:`summarise_by` is the one aggregation: one row per setting, with mean, sample std (ddof=1), a
percentile bootstrap confidence interval of the mean over seeds, and the number of seeds. Tables are written as
CSV (the stable interface other tools read), Markdown and LaTeX (:func:`write_table`).

Torch-free (the report and the reference sets read records without it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from algo_emu.io import read_json, write_csv, write_text

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


# ---------------------------------------------------------------------------------------------------------
# Tables: the aggregation and the renderings
# ---------------------------------------------------------------------------------------------------------

def bootstrap_mean_ci(
    values: Sequence[float], level: float = 0.95, n_boot: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (resampling seeds with replacement).

    Deterministic for a given ``seed``. With a single value the interval is that value.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("bootstrap_mean_ci: no values")
    if x.size == 1:
        return float(x[0]), float(x[0])
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def summarise(values: Sequence[float], prefix: str = "mse", ci_seed: int = 0) -> dict[str, float]:
    """``{prefix}_mean, {prefix}_std, {prefix}_ci_low, {prefix}_ci_high, n_seeds`` of per-seed values."""
    x = np.asarray(values, dtype=np.float64)
    lo, hi = bootstrap_mean_ci(x, seed=ci_seed)
    return {
        f"{prefix}_mean": float(x.mean()),
        f"{prefix}_std": float(x.std(ddof=1)) if x.size > 1 else float("nan"),
        f"{prefix}_ci_low": lo,
        f"{prefix}_ci_high": hi,
        "n_seeds": int(x.size),
    }


def _fmt(value, digits: int = 4) -> str:
    if value is None:
        return ""
    if isinstance(value, (float, np.floating)):
        if math.isnan(value):
            return "–"
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
            return f"{value:.{digits - 1}e}"
        return f"{value:.{digits}g}" if abs(value) >= 1 else f"{value:.{digits}f}"
    return str(value)


def to_markdown(frame: pd.DataFrame, caption: str | None = None) -> str:
    cols = list(frame.columns)
    lines = []
    if caption:
        lines += [caption, ""]
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "|".join("---:" if pd.api.types.is_numeric_dtype(frame[c]) else "---" for c in cols) + "|")
    for _, row in frame.iterrows():
        lines.append("| " + " | ".join(_fmt(row[c]) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def _latex_escape(text: str) -> str:
    for a, b in [("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"), ("#", r"\#"), ("$", r"\$")]:
        text = text.replace(a, b)
    return text


def to_latex(frame: pd.DataFrame, caption: str | None = None, label: str | None = None) -> str:
    cols = list(frame.columns)
    align = "".join("r" if pd.api.types.is_numeric_dtype(frame[c]) else "l" for c in cols)
    out = ["\\begin{table}[t]", "\\centering"]
    if caption:
        out.append(f"\\caption{{{_latex_escape(caption)}}}")
    if label:
        out.append(f"\\label{{{label}}}")
    out += [f"\\begin{{tabular}}{{{align}}}", "\\toprule", " & ".join(_latex_escape(c) for c in cols) + " \\\\", "\\midrule"]
    for _, row in frame.iterrows():
        out.append(" & ".join(_latex_escape(_fmt(row[c])) for c in cols) + " \\\\")
    out += ["\\bottomrule", "\\end{tabular}", "\\end{table}"]
    return "\n".join(out) + "\n"


def write_table(frame: pd.DataFrame, csv_path: str | Path, caption: str, label: str | None = None,
                extra_formats: Iterable[str] = ("md", "tex")) -> list[Path]:
    """Write ``frame`` as CSV plus Markdown/LaTeX siblings (same stem); all atomic."""
    csv_path = Path(csv_path)
    written = [csv_path]
    write_csv(csv_path, frame)
    if "md" in extra_formats:
        p = csv_path.with_suffix(".md")
        write_text(p, to_markdown(frame, caption))
        written.append(p)
    if "tex" in extra_formats:
        p = csv_path.with_suffix(".tex")
        write_text(p, to_latex(frame, caption, label))
        written.append(p)
    return written


def require_columns(frame: pd.DataFrame, columns: Iterable[str], source: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{source}: missing column(s) {missing}; has {list(frame.columns)}")


def summarise_by(runs: pd.DataFrame, keys: Sequence[str], metrics: Sequence[str] | Mapping[str, str],
                 order: Iterable[Sequence] | None = None, means: Sequence[str] | Mapping[str, str] = (),
                 missing: list[str] | None = None, ci_seed: int = 0) -> pd.DataFrame:
    """The one aggregation over seeds every table uses: one row per setting (the values of ``keys``).

    ``metrics``: columns (or column -> prefix) summarised by :func:`summarise` over the setting's seeds,
    in seed order: ``<prefix>_mean, _std, _ci_low, _ci_high`` and ``n_seeds``. ``means``: columns (or
    column -> output name, default ``<column>_mean``) averaged over the seeds. ``order``: the settings
    (tuples of key values) in table order; default every setting present, sorted. A setting of
    ``order`` without runs is a ValueError naming it, or, when a ``missing`` list is given, is skipped
    and its key values (a tuple) appended to it. A seed listed twice in one setting is a ValueError.
    """
    keys = list(keys)
    metrics = dict(metrics) if isinstance(metrics, Mapping) else {m: m for m in metrics}
    means = dict(means) if isinstance(means, Mapping) else {m: f"{m}_mean" for m in means}
    require_columns(runs, [*keys, "seed", *metrics, *means], "summarise_by")
    groups = {k if isinstance(k, tuple) else (k,): g for k, g in runs.groupby(keys, sort=True, dropna=False)} \
        if len(runs) else {}
    wanted = [tuple(o) for o in order] if order is not None else sorted(groups)
    rows = []
    for setting in wanted:
        sel = groups.get(setting)
        if sel is None:
            if missing is None:
                raise ValueError("no runs for " + ", ".join(f"{k}={v}" for k, v in zip(keys, setting)))
            missing.append(setting)
            continue
        sel = sel.sort_values("seed")
        if sel.seed.duplicated().any():
            raise ValueError("seed listed twice for " + ", ".join(f"{k}={v}" for k, v in zip(keys, setting)))
        row: dict = dict(zip(keys, setting))
        for column, prefix in metrics.items():
            row |= summarise(pd.to_numeric(sel[column], errors="coerce").to_numpy(np.float64), prefix=prefix, ci_seed=ci_seed)
        for column, name in means.items():
            row[name] = float(pd.to_numeric(sel[column], errors="coerce").mean())
        rows.append(row)
    return pd.DataFrame(rows)
