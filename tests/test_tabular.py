"""The shared tabular data layer (algo_emu.data.tabular, algo_emu.data.sources) on a data set that is not Ames:
a schema written as YAML, its validator's errors, the preprocessing's numbers, the split, the pins."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from algo_emu.data import sources, tabular

SCHEMA_YAML = """
name: shop.SCHEMA
described_as: "the shop schema has id, colour and size"
row_label_column: id
row_noun: sale
id_columns: [id]
columns:
  id: {integer: [1, null], unique: true}
  colour: {levels: ["red", "blue"], spellings: ["Red"]}
  size: {number: [0, 10], nullable: true}
  note: {levels: ["a", "b"], nullable: true}
shapes:
  short: {rows: 3, extra_columns: []}
  long: {rows: 4, extra_columns: [note]}
anomalies:
  size: {99: "a known typo"}
"""


class ShopError(tabular.DataError):
    pass


@pytest.fixture()
def schema(tmp_path):
    path = tmp_path / "shop.yaml"
    path.write_text(SCHEMA_YAML)
    return tabular.TabularSchema.from_yaml(path, ShopError)


def frame(**change):
    cols = {"id": ["1", "2", "3"], "colour": ["red", "blue", "Red"], "size": ["0.5", None, "99"]}
    cols.update(change)
    return pd.DataFrame(cols)


def test_schema_from_yaml_declares_columns_shapes_and_anomalies(schema):
    assert list(schema.columns) == ["id", "colour", "size", "note"]
    assert schema.required == ("id", "colour", "size")
    assert schema.shapes == {"short": (3, ("id", "colour", "size")), "long": (4, ("id", "colour", "size", "note"))}
    assert schema.columns["colour"].levels == frozenset({"red", "blue", "Red"})
    assert schema.columns["size"].kind == "number" and schema.columns["size"].describe() == "a number in 0..10"
    assert schema.documented_rows(["id", "colour", "size"]) == (3, 4)
    assert schema.documented_rows(["id", "colour", "size", "note"]) == (4,)
    assert schema.column_types(["id", "colour", "zzz"]) == {"id": "numeric", "colour": "categorical"}


def test_validate_reports_missing_values_and_known_anomalies(schema):
    report = schema.validate(frame(), "shop.csv", expected_rows=3, line_offset=1)
    assert report == {"schema": "shop.SCHEMA", "n_rows": 3, "missing_values": {"size": 1},
                      "known_anomalies": [{"column": "size", "row": 3, "value": 99.0, "why": "a known typo"}]}
    typed = schema.typed(frame())
    assert typed["id"].dtype == np.int64 and typed["size"].dtype == np.float64


@pytest.mark.parametrize("change, message", [
    ({"colour": ["red", "green", "blue"]},
     "shop.csv: column 'colour', row 2 (line 3), id 2: 'green' is not a documented level (one of ['Red', 'blue', 'red'])"),
    ({"size": ["0.5", "x", "1"]},
     "shop.csv: column 'size', row 2 (line 3), id 2: 'x' is not a number (the schema declares size a number in 0..10)"),
    ({"size": ["0.5", "11", "12"]},
     "shop.csv: column 'size', row 2 (line 3), id 2: 11 is outside the documented range (the schema declares size "
     "a number in 0..10); 1 more row(s) like it in this column"),
    ({"id": ["1", "2.5", "3"]},
     "shop.csv: column 'id', row 2 (line 3): 2.5 is not a whole number (the schema declares id a whole number in 1..inf)"),
    ({"id": ["1", "2", "1"]},
     "shop.csv: column 'id', row 3 (line 4), id 1: 1 repeats row 1 (line 2) (a duplicated row? id identifies a sale)"),
    ({"colour": ["red", None, "blue"]},
     "shop.csv: column 'colour', row 2 (line 3), id 2: missing value, but the documented data has none in colour "
     "(a blank or damaged cell?)"),
])
def test_validate_names_column_row_line_and_value(schema, change, message):
    with pytest.raises(ShopError) as err:
        schema.validate(frame(**change), "shop.csv", line_offset=1)
    assert str(err.value) == message


def test_validate_columns_and_row_count(schema):
    with pytest.raises(ShopError, match=r"^shop.csv: missing column\(s\) \['size'\] and unexpected column\(s\) "
                                        r"\['Size'\]; the shop schema has id, colour and size$"):
        schema.validate(frame().rename(columns={"size": "Size"}), "shop.csv")
    with pytest.raises(ShopError, match="^shop.csv: 3 data rows, but the documented data set has 4 "):
        schema.validate(frame(), "shop.csv", expected_rows=(4,))


def test_a_schema_column_without_a_kind_is_refused(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(SCHEMA_YAML.replace("size: {number: [0, 10], nullable: true}", "size: {nullable: true}"))
    with pytest.raises(tabular.DataError, match="column 'size' declares none of levels, codes, integer or number"):
        tabular.TabularSchema.from_yaml(path)


def test_csv_structure_errors_name_the_line(tmp_path):
    good = tmp_path / "good.csv"
    good.write_text("id,colour,size\n1,red,0.5\n2,blue,\n")
    assert tabular.check_csv_structure(good, ShopError) == (["id", "colour", "size"], 2)
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("id,colour,size\n1,red,0.5\n2,blue\n")
    with pytest.raises(ShopError, match=r"ragged.csv: line 3 has 2 fields, the header has 3 \(truncated"):
        tabular.check_csv_structure(ragged, ShopError)
    cut = tmp_path / "cut.csv"
    cut.write_text("id,colour,size\n1,red,0.5")
    with pytest.raises(ShopError, match="does not end with a newline"):
        tabular.check_csv_structure(cut, ShopError)
    df = tabular.read_csv(good, ["", "NA"], ShopError)
    assert df["id"].tolist() == ["1", "2"] and pd.isna(df["size"].iloc[1])  # text, missing only where declared


def test_preprocessor_numbers():
    df = pd.DataFrame({"x": [1.0, 2.0, np.nan, 3.0], "c": ["b", "a", None, "b"]})
    pre = tabular.Preprocessor.fit(df, ["x"], ["c"])
    # x: median 2 fills the gap -> [1, 2, 2, 3]; c: levels sorted [Missing, a, b], 'Missing' dropped
    assert pre.feature_names == ["x", "c_a", "c_b"] and pre.dropped_levels == {"c": "Missing"}
    raw = np.array([[1, 0, 1], [2, 1, 0], [2, 0, 0], [3, 0, 1]], dtype=float)
    expected = (raw - raw.mean(axis=0)) / raw.std(axis=0)
    np.testing.assert_allclose(pre.transform(df), expected, rtol=0, atol=1e-15)
    unseen = pre.transform(pd.DataFrame({"x": [2.0], "c": ["z"]}))  # an unseen level encodes as all zeros
    np.testing.assert_allclose(unseen, ((np.array([[2.0, 0, 0]]) - raw.mean(axis=0)) / raw.std(axis=0)), atol=1e-15)


def test_split_is_a_function_of_seed_and_stream():
    tr, te = tabular.split_indices(10, 0, 0.25, ("shop", "split"))
    assert len(te) == 3 and sorted(np.concatenate([tr, te]).tolist()) == list(range(10))
    again = tabular.split_indices(10, 0, 0.25, ("shop", "split"))
    assert all(np.array_equal(a, b) for a, b in zip((tr, te), again))
    assert any(not np.array_equal(te, tabular.split_indices(10, s, 0.25, ("shop", "split"))[1]) for s in (1, 2))
    assert not np.array_equal(te, tabular.split_indices(10, 0, 0.25, ("other", "split"))[1])
    with pytest.raises(ShopError, match="leaves an empty split of 2 rows"):
        tabular.split_indices(2, 0, 0.9, ("shop", "split"), ShopError)  # ceil(1.8) = 2 test rows


def test_pins_and_atomic_writes(tmp_path):
    assert sources.check_pin("ab", None, "shop.sha256", "x") is False
    assert sources.check_pin("ab", "AB", "shop.sha256", "x") is True
    with pytest.raises(ShopError, match="checksum mismatch for x: sha256 ab, but config key shop.sha256 pins cd"):
        sources.check_pin("ab", "cd", "shop.sha256", "x", ShopError)
    prov = sources.new_provenance("packaged", "size") | {"source": "packaged"}
    with pytest.raises(ShopError):  # a wrong pin: neither file is written
        sources.write_frame(frame(), tmp_path / "a.csv", tmp_path / "a.json", prov, "shop.sha256", "0" * 64, ShopError)
    assert not list(tmp_path.iterdir())
    sha = sources.write_frame(frame(), tmp_path / "a.csv", tmp_path / "a.json", prov, "shop.sha256", None, ShopError)
    assert prov["sha256"] == sha and prov["sha256_verified"] is False and "is null" in prov["warnings"][-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "a.json"]
    arrays = {"X": np.arange(6.0).reshape(2, 3), "names": np.asarray(["a", "b"])}
    tabular.write_arrays(tmp_path / "p.npz", arrays, tmp_path / "p.json", {"n": 2})
    back = tabular.load_arrays(tmp_path / "p.npz")
    assert back.keys() == arrays.keys() and all(np.array_equal(back[k], arrays[k]) for k in arrays)


def test_fallback_records_the_reason_and_refuses_without_auto():
    def offline():
        raise OSError("no route")

    prov = sources.new_provenance("auto", None)
    args = dict(failed=lambda r: f"fetch failed: {r}", fell_back=lambda r: f"FALLING BACK ({r})",
                prov=prov, fallback=("net", "disk"), error=ShopError)
    assert sources.fetch_or_fall_back(offline, auto=True, **args) is None
    assert prov["fallback"] == {"from": "net", "to": "disk", "reason": "OSError: no route"}
    assert prov["warnings"] == ["FALLING BACK (OSError: no route)"]
    with pytest.raises(ShopError, match=r"^fetch failed: OSError: no route$"):
        sources.fetch_or_fall_back(offline, auto=False, **args)
    with pytest.raises(KeyError):  # anything but a network or server error is a bug: it propagates
        sources.fetch_or_fall_back(lambda: {}["x"], auto=True, **args)
    assert sources.fetch_or_fall_back(lambda: 7, auto=False, **args) == 7
