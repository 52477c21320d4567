"""Aggregation of per-seed results into tables, and their renderings.

One row per setting: mean, sample std (ddof=1), a percentile bootstrap
confidence interval of the mean over seeds, and the number of seeds. Tables are
written as CSV (the stable interface other tools read), Markdown and LaTeX.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from algo_emu.io import write_csv, write_text


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
