"""Real tabular data, whatever the data set: a declared schema and its validator, CSV checks, the per-seed split
and the preprocessing fitted on the training rows only.

A data set supplies its schema as data (a YAML file read by :meth:`TabularSchema.from_yaml`; E4's is
``ames_schema.yaml``) and its error class (a :class:`DataError`); everything here is the same for any table:

* :meth:`TabularSchema.validate`: columns, types, documented ranges, codes and levels, missing values where
  none are allowed, repeated identifiers, row counts; the first problem raises, naming column, row (and file
  line) and value.
* :func:`check_csv_structure` / :func:`read_csv`: a truncated, non-UTF-8 or ragged CSV fails before parsing;
  values are read as text, their types come from the schema, never from the file.
* :func:`split_indices`, :class:`Preprocessor`: the split from a named random stream; median imputation,
  one-hot with the first sorted level dropped (an unseen level encodes as all zeros), standardisation with
  the fitting rows' mean and std (a zero-variance column gets scale 1).
* :func:`write_arrays`, :func:`load_arrays`: arrays and their JSON sidecar written together, atomically.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd
import yaml

from algo_emu.io import atomic_path, write_json
from algo_emu.rng import numpy_stream

#: A categorical value that is missing, as the encoder sees it.
MISSING = "Missing"


class DataError(ValueError):
    """Bad tabular input: a file or frame that does not match its declared schema or structure."""


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


@dataclass(frozen=True)
class Column:
    """One column of a declared schema."""

    name: str
    kind: str  # "integer" (whole numbers), "number", or "categorical"
    low: float | None = None  # documented range (inclusive); None = unbounded
    high: float | None = None
    codes: frozenset = frozenset()  # allowed values of a coded numeric column
    levels: frozenset = frozenset()  # allowed values of a categorical column
    nullable: bool = False  # the published files have missing values here
    unique: bool = False  # an identifier: a repeat is a duplicated row

    def describe(self) -> str:
        if self.kind == "categorical":
            return f"one of {sorted(self.levels)}"
        if self.codes:
            return f"one of the documented codes {sorted(self.codes)}"
        rng = f"{_fmt(self.low) if self.low is not None else '-inf'}..{_fmt(self.high) if self.high is not None else 'inf'}"
        return f"{'a whole number' if self.kind == 'integer' else 'a number'} in {rng}"


def _column(name: str, spec: Mapping[str, Any], where: str) -> Column:
    flags = {"nullable": bool(spec.get("nullable", False)), "unique": bool(spec.get("unique", False))}
    if "levels" in spec:
        levels = frozenset(str(v) for v in list(spec["levels"]) + list(spec.get("spellings", [])))
        return Column(name, "categorical", levels=levels, **flags)
    if "codes" in spec:
        return Column(name, "integer", codes=frozenset(int(v) for v in spec["codes"]), **flags)
    for kind in ("integer", "number"):
        if kind in spec:
            low, high = spec[kind]
            return Column(name, kind, low, high, **flags)
    raise DataError(f"{where}: column {name!r} declares none of levels, codes, integer or number")


@dataclass(frozen=True)
class TabularSchema:
    """A data set's declared columns (in file order), the documented shapes of its files and the values
    outside the documented ranges that its published files hold (allowed and reported)."""

    name: str  # how reports and messages name the schema
    described_as: str  # what a column-set error says the schema holds
    columns: dict[str, Column]
    required: tuple[str, ...]  # columns every file has (the rest: extra columns of some shapes)
    shapes: dict[str, tuple[int, tuple[str, ...]]]  # documented data set -> (rows, columns)
    anomalies: dict[str, dict[float, str]] = field(default_factory=dict)  # {column: {value: why}}
    row_label_column: str | None = None  # identifies a row in messages (e.g. "Id 17")
    id_columns: tuple[str, ...] = ()
    row_noun: str = "row"  # what one row is ("a sale"): a repeated identifier "identifies a <row_noun>"
    error: type[DataError] = DataError
    raw: dict[str, Any] = field(default_factory=dict, repr=False)  # the YAML as read (data-set-specific keys)

    @classmethod
    def from_yaml(cls, path: str | Path, error: type[DataError] = DataError) -> "TabularSchema":
        path = Path(path)
        raw = yaml.safe_load(path.read_text())
        columns = {str(n): _column(str(n), spec, str(path)) for n, spec in raw["columns"].items()}
        extra = {str(c) for s in raw["shapes"].values() for c in s.get("extra_columns", [])}
        required = tuple(c for c in columns if c not in extra)
        shapes = {k: (int(s["rows"]), required + tuple(s.get("extra_columns", []))) for k, s in raw["shapes"].items()}
        anomalies = {str(c): {float(v): str(why) for v, why in vals.items()} for c, vals in raw.get("anomalies", {}).items()}
        return cls(raw["name"], raw["described_as"], columns, required, shapes, anomalies,
                   raw.get("row_label_column"), tuple(raw.get("id_columns", ())), raw.get("row_noun", "row"), error, raw)

    def documented_rows(self, columns) -> tuple[int, ...]:
        """The row counts a file with these columns may have: those of every documented shape that has each
        of the file's optional columns (columns outside the schema are the validator's to report)."""
        optional = set(columns) & (set(self.columns) - set(self.required))
        return tuple(rows for rows, cols in self.shapes.values() if optional <= set(cols))

    def column_types(self, columns) -> dict[str, str]:
        """``numeric`` or ``categorical`` per column, from the schema (not from the data)."""
        return {c: ("categorical" if self.columns[c].kind == "categorical" else "numeric")
                for c in columns if c in self.columns}

    def typed(self, df: pd.DataFrame) -> pd.DataFrame:
        """``df`` (validated) with the numeric columns as float64/int64 and categoricals as text."""
        out = df.copy()
        for c in out.columns:
            if self.columns[c].kind == "categorical":
                out[c] = out[c].astype(object).where(out[c].notna(), None)
            else:
                v = pd.to_numeric(out[c], errors="raise").astype(np.float64)
                out[c] = v.astype(np.int64) if not v.isna().any() else v
        return out

    def validate(self, df: pd.DataFrame, where: str, expected_rows: int | tuple[int, ...] | None = None,
                 line_offset: int | None = None, display: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Check ``df`` (values as read) against the schema; return a report.

        Raises the schema's error naming the column, the row (1-based; with ``line_offset``, also the file
        line, ``line = row + line_offset``) and the value, at the first problem found, in this order: missing
        or unexpected columns; per column, a value that is not a number (numeric columns), not whole, outside
        the documented range or codes, not a documented level (categorical columns), or missing where the
        published data has no missing values; a repeated identifier (a duplicated row); a row count that is
        not ``expected_rows`` (a file cut at a row boundary, or rows added). ``display`` maps a schema name to
        the name the source uses. The report counts missing values per column and the anomalies met.
        """
        err, display = self.error, dict(display or {})

        def shown(c: str) -> str:
            return f"{c!r}" + (f" ({display[c]!r} in the source)" if c in display and display[c] != c else "")

        cols = [str(c) for c in df.columns]
        missing = [c for c in self.required if c not in cols]
        extra = [c for c in cols if c not in self.columns]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"missing column(s) {missing}")
            if extra:
                hint = " (a byte-order mark or encoding damage in the header?)" if any(not c.isascii() for c in extra) else ""
                parts.append(f"unexpected column(s) {extra}{hint}")
            raise err(f"{where}: {' and '.join(parts)}; {self.described_as}")
        label = self.row_label_column
        ids = pd.to_numeric(df[label], errors="coerce") if label is not None and label in df.columns else None

        def row(i: int, with_id: bool = True) -> str:
            text = f"row {i + 1}" + (f" (line {i + 1 + line_offset})" if line_offset is not None else "")
            if with_id and ids is not None and i < len(ids) and pd.notna(ids.iloc[i]) and float(ids.iloc[i]).is_integer():
                text += f", {label} {int(ids.iloc[i])}"
            return text

        report: dict[str, Any] = {"schema": self.name, "n_rows": int(len(df)), "missing_values": {}, "known_anomalies": []}
        for c in cols:
            col, s = self.columns[c], df[c]
            isna = s.isna().to_numpy()
            values = None
            if col.kind == "categorical":
                text = s.astype(object)
                bad = ~isna & ~text.astype(str).isin(col.levels).to_numpy(dtype=bool)
                if bad.any():
                    i = int(np.flatnonzero(bad)[0])
                    raise err(f"{where}: column {shown(c)}, {row(i)}: {text.iloc[i]!r} is not a documented level "
                              f"({col.describe()}){_more(bad)}")
            else:
                values = _as_numbers(s)
                notnum = ~isna & values.isna().to_numpy()
                if notnum.any():
                    i = int(np.flatnonzero(notnum)[0])
                    raise err(f"{where}: column {shown(c)}, {row(i)}: {s.iloc[i]!r} is not a number "
                              f"(the schema declares {c} {col.describe()}){_more(notnum)}")
                v = values.to_numpy()
                ok = np.isnan(v)
                anomalies = self.anomalies.get(c, {})
                checks = [("is not a whole number", ok | (v == np.round(v)))] if col.kind == "integer" else []
                if col.codes:
                    checks.append(("is not a documented code", ok | np.isin(v, list(col.codes))))
                else:
                    inside = ok | ((v >= (col.low if col.low is not None else -np.inf))
                                   & (v <= (col.high if col.high is not None else np.inf)))
                    known = np.isin(v, list(anomalies)) if anomalies else np.zeros_like(ok)
                    for i in np.flatnonzero(~inside & known):
                        report["known_anomalies"].append(
                            {"column": c, "row": int(i) + 1, "value": float(v[i]), "why": anomalies[float(v[i])]})
                    checks.append(("is outside the documented range", inside | known))
                for what, good in checks:
                    if not good.all():
                        i = int(np.flatnonzero(~good)[0])
                        raise err(f"{where}: column {shown(c)}, {row(i)}: {_fmt(v[i])} {what} "
                                  f"(the schema declares {c} {col.describe()}){_more(~good)}")
            if isna.any():
                if not col.nullable:
                    i = int(np.flatnonzero(isna)[0])
                    raise err(f"{where}: column {shown(c)}, {row(i)}: missing value, but the documented data has "
                              f"none in {c} (a blank or damaged cell?){_more(isna)}")
                report["missing_values"][c] = int(isna.sum())
            if col.unique and values is not None:
                dup = values.duplicated(keep="first").to_numpy() & ~isna
                if dup.any():
                    i = int(np.flatnonzero(dup)[0])
                    first = int(np.flatnonzero((values == values.iloc[i]).to_numpy())[0])
                    raise err(f"{where}: column {shown(c)}, {row(i)}: {_fmt(v[i])} repeats {row(first, False)} "
                              f"(a duplicated row? {c} identifies a {self.row_noun}){_more(dup)}")
        if expected_rows is not None:
            expected = (expected_rows,) if isinstance(expected_rows, int) else tuple(expected_rows)
            if len(df) not in expected:
                names = " or ".join(f"{n:,}" for n in expected)
                raise err(f"{where}: {len(df):,} data rows, but the documented data set has {names} "
                          "(a file cut at a row boundary, or rows added or removed)")
        return report


def _as_numbers(s: pd.Series) -> pd.Series:
    """float64 values of ``s``; text that is not a number becomes NaN (the caller reports it)."""
    if pd.api.types.is_numeric_dtype(s):
        return s.astype(np.float64)
    try:
        return s.astype(np.float64)  # fast path: every cell is a number or missing
    except (TypeError, ValueError):
        return pd.to_numeric(s, errors="coerce").astype(np.float64)


def _more(mask: np.ndarray) -> str:
    n = int(np.count_nonzero(mask)) - 1
    return f"; {n} more row(s) like it in this column" if n > 0 else ""


# ----------------------------------------------------------------------------- files


def check_csv_structure(path: str | Path, error: type[DataError] = DataError) -> tuple[list[str], int]:
    """Header and row count of a CSV, after checking that it is text, has a header, and that every
    row has the header's number of fields (a truncated or corrupted file fails here, naming the line)."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{path}: no such file")
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if not header or all(not h.strip() for h in header):
                raise error(f"{path}: empty file or no header row")
            n = 0
            for row in reader:
                if not row:  # blank line
                    continue
                n += 1
                if len(row) != len(header):
                    raise error(f"{path}: line {reader.line_num} has {len(row)} fields, the header has "
                                f"{len(header)} (truncated or corrupted file)")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not a UTF-8 text CSV ({exc})") from None
    except csv.Error as exc:
        raise error(f"{path}: malformed CSV ({exc})") from None
    if n == 0:
        raise error(f"{path}: header only, no data rows")
    with open(path, "rb") as fh:
        fh.seek(-1, 2)
        if fh.read(1) not in (b"\n", b"\r"):
            raise error(f"{path}: does not end with a newline (truncated file?); if it is complete, add a final newline")
    if len(set(header)) != len(header):
        dup = sorted({h for h in header if header.count(h) > 1})
        raise error(f"{path}: duplicate column names {dup}")
    return header, n


def read_csv(path: str | Path, na_values, error: type[DataError] = DataError) -> pd.DataFrame:
    """A CSV read with every value as text (the schema converts and checks them), ``na_values`` only as missing."""
    try:
        return pd.read_csv(path, na_values=list(na_values), keep_default_na=False, dtype=str)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise error(f"{path}: could not be parsed as CSV ({type(exc).__name__}: {exc})") from None


def write_arrays(out_npz: str | Path, arrays: Mapping[str, np.ndarray], out_meta: str | Path, meta: Any) -> None:
    """``arrays`` as an ``.npz`` (no pickles) and ``meta`` as its JSON sidecar; neither is left half-written."""
    with atomic_path(out_npz) as tmp:
        with open(tmp, "wb") as fh:  # a file object: np.savez would append ".npz" to a path
            np.savez(fh, **arrays)
        write_json(out_meta, meta)


def load_arrays(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` written by :func:`write_arrays` (no pickles)."""
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


# ----------------------------------------------------------------------------- split and preprocessing


def split_indices(n_rows: int, seed: int, test_fraction: float, stream: tuple[str, ...],
                  error: type[DataError] = DataError) -> tuple[np.ndarray, np.ndarray]:
    """Sorted train and test row indices; ``ceil(test_fraction * n)`` test rows (as scikit-learn's
    ``train_test_split``), drawn from ``numpy_stream(seed, *stream)``."""
    n_test = int(math.ceil(float(test_fraction) * n_rows))
    if not 0 < n_test < n_rows:
        raise error(f"test_fraction {test_fraction} leaves an empty split of {n_rows} rows")
    perm = numpy_stream(seed, *stream).permutation(n_rows)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def as_text(s: pd.Series) -> pd.Series:
    """Categorical values as text, NaN -> :data:`MISSING` (numbers stored as text stay as written)."""
    return s.astype(object).where(s.notna(), MISSING).map(str)


@dataclass
class Preprocessor:
    """Statistics of one fit: medians, levels, means and stds, all from the fitting rows."""

    numeric: list[str]
    categorical: list[str]
    medians: dict[str, float]
    levels: dict[str, list[str]]  # kept levels per categorical column (first sorted level dropped)
    dropped_levels: dict[str, str]
    feature_names: list[str] = field(default_factory=list)
    mean: np.ndarray | None = None
    std: np.ndarray | None = None
    zero_variance: list[str] = field(default_factory=list)

    @classmethod
    def fit(
        cls, df: pd.DataFrame, numeric: list[str], categorical: list[str], vocabulary: pd.DataFrame | None = None
    ) -> "Preprocessor":
        """Fit on the rows of ``df``; one-hot levels come from ``vocabulary`` (default: ``df``).

        Only the set of levels is read from ``vocabulary``; every statistic comes from ``df``.
        """
        vocabulary = df if vocabulary is None else vocabulary
        medians = {}
        for c in numeric:
            col = pd.to_numeric(df[c], errors="raise").astype(np.float64)
            medians[c] = float(col.median()) if col.notna().any() else 0.0
        levels, dropped = {}, {}
        for c in categorical:
            lv = sorted(as_text(vocabulary[c]).unique())
            dropped[c] = lv[0]
            levels[c] = lv[1:]
        pre = cls(numeric, categorical, medians, levels, dropped)
        pre.feature_names = list(numeric) + [f"{c}_{v}" for c in categorical for v in levels[c]]
        raw = pre._encode(df)
        pre.mean = raw.mean(axis=0)
        std = raw.std(axis=0)  # ddof=0, as scikit-learn's StandardScaler
        zero = std <= 1e-12 * np.maximum(1.0, np.abs(pre.mean))
        pre.zero_variance = [n for n, z in zip(pre.feature_names, zero) if z]
        pre.std = np.where(zero, 1.0, std)
        return pre

    def _encode(self, df: pd.DataFrame) -> np.ndarray:
        blocks = []
        if self.numeric:
            num = df[self.numeric].apply(pd.to_numeric, errors="raise").astype(np.float64)
            blocks.append(num.fillna(self.medians).to_numpy())
        for c in self.categorical:
            text = as_text(df[c]).to_numpy()
            lv = np.asarray(self.levels[c], dtype=object)
            blocks.append((text[:, None] == lv[None, :]).astype(np.float64))  # unseen level -> all zeros
        if not blocks:
            return np.zeros((len(df), 0))
        return np.concatenate(blocks, axis=1)

    def transform(self, df: pd.DataFrame) -> np.ndarray:
        return (self._encode(df) - self.mean) / self.std

    def state(self) -> dict[str, Any]:
        return {
            "numeric_columns": self.numeric,
            "categorical_columns": self.categorical,
            "numeric_medians": self.medians,
            "categorical_levels_kept": self.levels,
            "categorical_level_dropped": self.dropped_levels,
            "feature_mean": dict(zip(self.feature_names, map(float, self.mean))),
            "feature_std": dict(zip(self.feature_names, map(float, self.std))),
            "zero_variance_features": self.zero_variance,
        }
