"""E1 protocols: `published` (one data set and head for all seeds, the code's softmax axis, mean of per-batch
means; the paper's numbers stand only beside it) and `independent` (ours); partial reference sets."""

import json

import pandas as pd
import pytest
import torch

from algo_emu.data import heads as hd
from algo_emu.experiments import heads as e1
from algo_emu.experiments.heads_settings import settings


@pytest.fixture
def params(heads_params):
    return heads_params | {"protocols": ["published", "independent"]}


def test_settings_published_runs_both_sweeps_independent_the_heads_sweep(params):
    got = settings(params)
    assert got == [("published", 1, 7), ("published", 2, 7), ("published", 1, 4),
                   ("independent", 1, 7), ("independent", 2, 7)]
    assert settings(params | {"protocols": ["independent"]}) == [("independent", 1, 7), ("independent", 2, 7),
                                                                ("independent", 1, 4)]


def test_published_data_set_is_one_fixed_stream(params, tmp_path):
    pub = hd.generate(0, 8, 4, 3, 6, protocol="published")
    ind = hd.generate(0, 8, 4, 3, 6, protocol="independent")
    assert not torch.equal(pub["X"], ind["X"]) and not torch.equal(pub["W_K"], ind["W_K"])
    assert torch.equal(pub["X"], hd.generate(0, 8, 4, 3, 6, protocol="published")["X"])
    meta = hd.write_dataset(tmp_path / "pub.pt", 0, params, protocol="published")
    assert meta["protocol"] == "published" and meta["streams"] == ["heads/published/X", "heads/published/target_head"]
    with pytest.raises(ValueError, match="fixed seed 0, got 3"):
        hd.write_dataset(tmp_path / "bad.pt", 3, params, protocol="published")
    with pytest.raises(ValueError, match="heads.protocols: unknown protocol 'paper'"):
        hd.generate(0, 8, 4, 3, 6, protocol="paper")


def _published_run(params, tmp_path, seeds=(0, 1), H=1, p=7):
    path = tmp_path / "pub.pt"
    if not path.exists():
        hd.write_dataset(path, 0, params, protocol="published")
    return e1.train_setting(params, H, p, list(seeds), [str(path)], tmp_path / f"pub_H{H}_p{p}", None, "cpu", 1,
                            protocol="published")


def test_published_protocol_shares_data_and_reports_the_codes_quantity(params, tmp_path):
    out = _published_run(params, tmp_path)
    a, b = out[0], out[1]
    assert a["data_sha256"] == b["data_sha256"] and a["protocol"] == "published"
    assert a["target"] == "reference_code" and a["metric"] == "batchmean"
    assert a["mse"] == a["mse_batchmean_by_target"]["reference_code"]
    assert a["mse"] != b["mse"]  # seeds vary init, split and data order
    # both seeds evaluate the same head: Var(Y) differs only through the test split
    assert a["target_var_by_target"]["paper"] > 0 and a["target_var_by_target"]["reference_code"] > 0
    assert a["sweep_config_hash"] == b["sweep_config_hash"]


def test_published_protocol_refuses_the_wrong_data(params, tmp_path):
    ind = tmp_path / "seed0.pt"
    hd.write_dataset(ind, 0, params)
    with pytest.raises(ValueError, match="not the published protocol's data set"):
        e1.train_setting(params, 1, 7, [0, 1], [str(ind)], tmp_path / "x", None, "cpu", 1, protocol="published")
    with pytest.raises(ValueError, match="shares one data set across seeds, got 2 data files"):
        e1.train_setting(params, 1, 7, [0, 1], [str(ind), str(ind)], tmp_path / "x", None, "cpu", 1,
                         protocol="published")


def _cli(step: str, job: dict, threads: int | None = None):
    """``python -m algo_emu heads <step> JOB [--threads N]``, in this process."""
    from algo_emu.cli import main

    return main(["heads", step, json.dumps(job)] + (["--threads", str(threads)] if threads else []))


def test_data_and_train_through_the_cli_and_its_errors_name_the_argument(params, tmp_path):
    data = str(tmp_path / "pub.pt")
    _cli("data", dict(params=params, seed=0, protocol="published", path=data))
    job = dict(params=params, H=1, p=7, seeds=[0, 1], data_paths=[data], out_dir=str(tmp_path / "cli"),
               device_spec="cpu", protocol="published")
    _cli("train", job, threads=1)
    rec = json.loads((tmp_path / "cli" / "seed1" / "metrics.json").read_text())
    assert (rec["protocol"], rec["setting"], rec["params"]["n_prompts"]) == ("published", {"heads": 1, "p": 7},
                                                                           params["n_prompts"])
    assert rec["mse"] == _published_run(params, tmp_path)[1]["mse"]  # the step's function, called directly
    # bind_job: an argument the step does not take, threads inside the job, a key the step reads missing from params
    with pytest.raises(SystemExit, match=r"unknown argument\(s\) heads"):
        _cli("train", job | {"heads": 1}, threads=1)
    with pytest.raises(SystemExit, match="threads goes in --threads"):
        _cli("train", job | {"threads": 1})
    with pytest.raises(SystemExit, match="heads.n_prompts"):
        _cli("train", job | {"params": {k: v for k, v in params.items() if k != "n_prompts"}}, threads=1)
    # the old argparse choices: a bad protocol or figure kind is an error naming it, before anything is written
    with pytest.raises(ValueError, match="unknown protocol 'paper'"):
        _cli("data", dict(params=params, seed=0, protocol="paper", path=str(tmp_path / "bad.pt")))
    with pytest.raises(ValueError, match="unknown protocol 'paper'"):
        _cli("train", job | {"protocol": "paper", "out_dir": str(tmp_path / "bad")}, threads=1)
    with pytest.raises(ValueError, match="unknown protocol 'paper'"):
        _cli("train-group", dict(params=params, H=1, p=7, seeds=[0, 1], protocols=["paper"], data_paths=[data, data],
                                 out_root=str(tmp_path / "bad"), device_spec="cpu"), threads=1)
    with pytest.raises(ValueError, match="kind: 'heads_vs_mse' is not one of heads, prompt_length"):
        _cli("figure", dict(kind="heads_vs_mse", table="t.csv", runs_csv="r.csv", out=str(tmp_path / "bad")))
    assert not (tmp_path / "bad.pt").exists() and not (tmp_path / "bad").exists()


def test_tables_paper_values_only_beside_comparable_rows_and_partial_sets(params, tmp_path):
    params = params | {"protocols": ["published"], "heads_sweep": [1, 2], "p_sweep": [7]}
    _published_run(params, tmp_path, H=1)
    metrics = sorted(str(p) for p in tmp_path.glob("pub_H*/seed*/metrics.json"))
    out = tmp_path / "t"
    args = (params, metrics, str(out / "runs.csv"), str(out / "heads.csv"), str(out / "p.csv"))
    with pytest.raises(ValueError, match="no runs for the heads sweep: published heads=2 p=7 target=reference_code"):
        e1.aggregate(*args)
    assert not (out / "heads.csv").exists() and not (out / "runs.csv").exists()  # nothing half-written
    info = e1.aggregate(*args, allow_partial=True)
    assert info["missing"] == ["published heads=2 p=7 target=reference_code", "published heads=2 p=7 target=paper"]
    table = pd.read_csv(out / "heads.csv")
    assert table.heads.tolist() == [1, 1] and table.target.tolist() == ["reference_code", "paper"]
    assert table.paper_mse.iloc[0] == 3.469 and pd.isna(table.paper_mse.iloc[1])
    assert "PARTIAL: 2 rows missing" in (out / "heads.md").read_text()
    fit = e1.fit(params, str(out / "runs.csv"), str(out / "fit.json"), n_boot=50)
    assert fit["published"]["status"] == "not enough settings: H = [1] (a two-parameter fit needs at least 3)"


def test_records_of_different_configurations_are_never_mixed(params, tmp_path):
    params = params | {"protocols": ["published"], "heads_sweep": [1, 2], "p_sweep": [7]}
    _published_run(params, tmp_path, seeds=(0,), H=1)
    other = tmp_path / "other"
    other.mkdir()
    _published_run(params | {"epochs": 1}, other, seeds=(0,), H=2)
    metrics = [str(p) for p in sorted(tmp_path.rglob("seed*/metrics.json"))]
    out = tmp_path / "t"
    with pytest.raises(ValueError, match="records of 2 different configurations"):
        e1.aggregate(params, metrics, str(out / "runs.csv"), str(out / "h.csv"), str(out / "p.csv"))
    assert not (out / "runs.csv").exists()
    e1.aggregate(params, metrics, str(out / "runs.csv"), str(out / "h.csv"), str(out / "p.csv"), allow_partial=True)
    assert "MIXED: records of 2 different configurations" in (out / "h.md").read_text()
    assert json.loads(json.dumps(params))  # params stay JSON (the CLI passes them as one argument)


def test_e1_page_builds_from_a_partial_committed_set(tmp_path):
    """A committed reference set with 2 of the 3 heads settings: tables, fit, figure and README name the missing one."""
    from tools import refset
    from algo_emu.config import REPO_ROOT, load_config

    cfg_path = REPO_ROOT / "tests" / "tiny.yaml"
    params = load_config(cfg_path)["heads"]
    data = tmp_path / "pub.pt"
    hd.write_dataset(data, 0, params, protocol="published")
    ref = tmp_path / "ref"
    for H in (1, 2):
        e1.train_setting(params, H, params["p_heads_sweep"], [0, 1], [str(data)],
                         ref / f"heads/published/runs/H{H}_p{params['p_heads_sweep']}", None, "cpu", 1, protocol="published")
    out = refset.e1_page(ref, cfg_path, "tiny reference set")
    assert ("published", 4, 8) in out["missing"] and ("published", 1, 8) in out["present"]
    readme = (ref / "README.md").read_text()
    assert "settings MISSING (" in readme and "published H=4 p=8" in readme
    assert "| E1 " not in readme or "heads table" in readme
    assert (ref / "figures/heads_vs_mse.png").stat().st_size > 1000
    table = pd.read_csv(ref / "tables/heads_vs_mse.csv")
    assert set(table.protocol) == {"published"} and sorted(table.heads.unique()) == [1, 2]
    fit = json.loads((ref / "tables/heads_fit.json").read_text())
    # two of the three H: no rate fit (two points fit either law exactly), said so instead of an R^2 of 1
    assert fit["published"]["status"] == "not enough settings: H = [1, 2] (a two-parameter fit needs at least 3)"
