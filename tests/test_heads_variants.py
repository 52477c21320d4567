"""E1 variants (heads.variants): config, training params, labelled records, their table and figure, and that the
heads tables never take them."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import yaml

from algo_emu.config import ConfigError, load_config
from algo_emu.data import heads as hd
from algo_emu.experiments import heads as ex
from algo_emu.experiments.heads_settings import variant_train_params
from algo_emu.experiments.heads_variants import variants_figure, variants_table
from algo_emu.runtime import REPO_ROOT


def _load(tmp_path, heads: dict):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"heads": heads}))
    return load_config(path, gpu_check=False)["heads"]


V = {"name": "H2_cos", "heads": 2, "p": 60, "seeds": [0]}


# ----------------------------------------------------------------------------- config


def test_the_paper_scale_config_holds_the_five_variants_and_the_default_is_none(tmp_path):
    heads = load_config(REPO_ROOT / "config" / "config.yaml", gpu_check=False)["heads"]
    got = [(v["name"], v["protocol"], v["heads"], v["p"], v["seeds"],
            {k: variant_train_params(heads, v["name"]).get(k) for k in ("epochs", "lr", "lr_schedule")})
           for v in heads["variants"]]
    assert got == [
        ("H4_epochs150", "published", 4, 60, [0, 1, 2], {"epochs": 150, "lr": 0.001, "lr_schedule": None}),
        ("H4_lr3e-4", "published", 4, 60, [0, 1, 2], {"epochs": 50, "lr": 0.0003, "lr_schedule": None}),
        ("H4_lr3e-3", "published", 4, 60, [0, 1, 2], {"epochs": 50, "lr": 0.003, "lr_schedule": None}),
        ("H4_cosine", "published", 4, 60, [0, 1, 2], {"epochs": 50, "lr": 0.001, "lr_schedule": "cosine"}),
        ("H1_cosine", "published", 1, 60, [0, 1, 2], {"epochs": 50, "lr": 0.001, "lr_schedule": "cosine"}),
    ]
    assert _load(tmp_path, {})["variants"] == []


@pytest.mark.parametrize("bad,message", [
    ({**V, "lr_shedule": "cosine"}, "heads.variants.0.lr_shedule: unknown key (did you mean heads.variants.0.lr_schedule?)"),
    ({**V, "n_prompts": 10}, "heads.variants.0.n_prompts: unknown key"),
    ({**V, "lr_schedule": "linear"}, "heads.variants.0.lr_schedule: 'linear' is not one of ['constant', 'cosine']"),
    ({"name": "x", "heads": 2, "p": 60}, "heads.variants.0: 'seeds' is a required property"),
    ({**V, "name": "a/b"}, "heads.variants.0.name: 'a/b' does not match"),
    ({**V, "heads": 5}, "heads.variants[H2_cos].heads: 5 heads do not divide heads.hidden = 48"),
    ({**V, "p": 3}, "heads.variants[H2_cos].p: p = 3 is smaller than heads.n_tokens = 20"),
])
def test_a_bad_variant_is_refused_naming_the_key(tmp_path, bad, message):
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, {"variants": [bad]})
    assert str(info.value).startswith(message), str(info.value)


def test_two_variants_of_one_name_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"heads.variants\[H2_cos\].name: the name 'H2_cos' is used by two variants"):
        _load(tmp_path, {"variants": [V, {**V, "heads": 4}]})


def test_a_variant_reads_its_overrides_instead_of_the_section_keys(tmp_path):
    heads = _load(tmp_path, {"variants": [{**V, "lr": 3e-4, "lr_schedule": "cosine", "eval_every": 1}, {**V, "name": "b"}]})
    own = variant_train_params(heads, "H2_cos")
    plain = variant_train_params(heads, "b")
    assert (own["lr"], own["lr_schedule"], own["eval_every"], own["epochs"]) == (3e-4, "cosine", 1, 50)
    assert "lr_schedule" not in plain  # constant: the params (the rerun trigger) of the sweep's train step, unchanged
    edited = dict(heads) | {"lr": 5e-3, "epochs": 7}
    assert variant_train_params(edited, "H2_cos") == own | {"epochs": 7}  # its lr is its own; epochs the section's
    assert variant_train_params(edited, "b")["lr"] == 5e-3


# ----------------------------------------------------------------------------- records, table, figure


@pytest.fixture
def runs(heads_params, tmp_path):
    """A tiny published-protocol run of H=2 p=7 (seeds 0, 1; 2 epochs) and two variants of it: 4 epochs, and
    cosine with another lr; every epoch evaluated."""
    heads_params["eval_every"] = 1
    data = tmp_path / "published.pt"
    hd.write_dataset(data, 0, heads_params, protocol="published")
    root = tmp_path / "results" / "heads"
    ex.train_setting(heads_params, 2, 7, [0, 1], [str(data)], root / "published" / "runs" / "H2_p7", None, "cpu", 1,
                     protocol="published")
    dirs = []
    for name, over in (("H2_epochs4", {"epochs": 4}), ("H2_cosine", {"lr_schedule": "cosine", "lr": 3e-3})):
        ex.train_setting(heads_params | over, 2, 7, [0, 1], [str(data)], root / "variants" / name, None, "cpu", 1,
                         protocol="published", variant=name)
        dirs.append(str(root / "variants" / name))
    params = heads_params | {"variants": [{"name": "H2_epochs4", "heads": 2, "p": 7, "seeds": [0, 1], "epochs": 4},
                                          {"name": "H2_cosine", "heads": 2, "p": 7, "seeds": [0, 1],
                                           "lr_schedule": "cosine", "lr": 3e-3}]}
    return params, dirs, root


def test_variant_records_are_labelled_ours_with_per_member_curves(runs):
    _, dirs, root = runs
    rec = ex.read_json(f"{dirs[1]}/seed1/metrics.json")
    assert (rec["variant"], rec["paper_comparable"], rec["params"]["lr_schedule"], rec["params"]["lr"]) == \
        ("H2_cosine", False, "cosine", 3e-3)
    assert [h["lr"] for h in rec["history"]] == [3e-3, 3e-3 * 0.5 * (1 + math.cos(math.pi / 2))]
    assert set(rec["history"][0]["test_member_mse"]) == {"K", "Q", "V"} and "test_mse" in rec["history"][0]
    sweep = ex.read_json(root / "published" / "runs" / "H2_p7" / "seed1" / "metrics.json")
    assert "variant" not in sweep and "paper_comparable" not in sweep and "lr_schedule" not in sweep["params"]
    assert "test_member_mse" not in sweep["history"][0] and "lr" not in sweep["history"][0]


def test_the_heads_tables_refuse_a_variant_record(runs, tmp_path):
    params, dirs, root = runs
    sweep = [str(root / "published" / "runs" / "H2_p7" / f"seed{s}" / "metrics.json") for s in (0, 1)]
    variant = f"{dirs[0]}/seed0/metrics.json"
    with pytest.raises(ValueError, match=r"seed0/metrics.json: a record of the variant 'H2_epochs4' \(heads.variants"):
        ex.load_runs(sweep + [variant])
    with pytest.raises(ValueError, match="the heads tables never take variants"):
        ex.aggregate(params | {"protocols": ["published"], "heads_sweep": [2], "p_heads_sweep": 7, "p_sweep": [7],
                               "heads_p_sweep": 2}, sweep + [variant], str(tmp_path / "r.csv"), str(tmp_path / "h.csv"),
                     str(tmp_path / "p.csv"))
    assert not (tmp_path / "r.csv").exists()


def test_variants_table_and_figure(runs, tmp_path):
    params, dirs, root = runs
    table, curves = tmp_path / "t" / "heads_variants.csv", tmp_path / "t" / "heads_variants_curves.csv"
    frame = variants_table(params | {"p_heads_sweep": 7}, dirs, str(table), str(curves), baseline_roots=[str(root)])
    # every variant row is ours; the protocol's own run (both seeds) stands beside the variants, once
    assert list(dict.fromkeys(zip(frame.variant, frame.source))) == [
        ("H2_epochs4", "variant"), ("protocol published H2_p7", "protocol"), ("H2_cosine", "variant")]
    assert not frame[frame.source == "variant"].paper_comparable.any() and frame[frame.source == "protocol"].paper_comparable.all()
    assert len(frame) == 3 * 2 * 4 and list(frame.columns) == [
        "variant", "source", "paper_comparable", "protocol", "heads", "p", "epochs", "lr", "lr_schedule", "seed", "member",
        "final_test_mse", "min_test_mse", "best_epoch", "evaluations", "train_loss_e1", "train_loss_final",
        "train_loss_drop_last_tenth", "paper_mse", "paper_std"]
    for _, row in frame.iterrows():
        rec = ex.read_json(root / ("variants/" + row.variant if row.source == "variant" else "published/runs/H2_p7")
                           / f"seed{row.seed}" / "metrics.json")
        hist = rec["history"]
        if row.member == "head":
            curve = [h["test_mse"] for h in hist[:-1]] + [rec["mse"]]
            assert math.isnan(row.train_loss_final)
            assert (row.paper_mse, row.paper_std) == (2.802, 0.413)  # the paper's H = 2, beside the composed head only
        else:
            curve = [h["test_member_mse"][row.member] for h in hist[:-1]] if row.source == "variant" else \
                [math.nan] * (len(hist) - 1)
            curve += [rec["member_mse"][row.member]]
            assert row.train_loss_e1 == hist[0]["train_loss"][row.member]
            assert row.train_loss_final == hist[-1]["train_loss"][row.member]
            assert math.isnan(row.paper_mse)
            last, ref = len(hist), max(1, len(hist) - max(1, len(hist) // 10))
            drop = (hist[ref - 1]["train_loss"][row.member] - hist[-1]["train_loss"][row.member]) / \
                hist[ref - 1]["train_loss"][row.member]
            assert row.train_loss_drop_last_tenth == drop and ref == last - 1
        assert row.final_test_mse == curve[-1] and row.epochs == len(hist)
        finite = [(v, e + 1) for e, v in enumerate(curve) if not math.isnan(v)]
        assert (row.min_test_mse, row.best_epoch) == min(finite)
        assert row.evaluations == len(finite)
    elsewhere = variants_table(params | {"p_heads_sweep": 60}, dirs, str(tmp_path / "x.csv"), str(tmp_path / "y.csv"),
                               baseline_roots=[str(root)])
    assert elsewhere.paper_mse.isna().all()  # the paper's values are at the heads sweep's p only
    again = variants_table(params | {"p_heads_sweep": 7}, dirs, str(table), str(curves), baseline_roots=[str(root)])
    pd.testing.assert_frame_equal(again, pd.read_csv(table), check_dtype=False)
    lengths = pd.read_csv(curves).groupby(["variant", "seed", "member"]).epoch.count()
    assert lengths[("H2_epochs4", 0, "K")] == 4 and lengths[("protocol published H2_p7", 1, "head")] == 2
    variants_figure(str(table), str(curves), str(tmp_path / "f" / "heads_variants"))
    assert (tmp_path / "f" / "heads_variants.png").stat().st_size > 10_000


def test_variants_table_names_a_missing_seed_and_skips_a_baseline_of_another_config(runs, tmp_path):
    params, dirs, root = runs
    more = params | {"variants": [dict(params["variants"][0], seeds=[0, 1, 2])]}
    with pytest.raises(ValueError, match=r"heads.variants\[H2_epochs4\]: no record of seed\(s\) \[2\]"):
        variants_table(more, dirs, str(tmp_path / "t.csv"), str(tmp_path / "c.csv"))
    # a baseline made with another batch size is another protocol run: not drawn
    other = params | {"batch_size": 4}
    data = tmp_path / "published.pt"
    ex.train_setting(other, 2, 7, [0, 1], [str(data)], tmp_path / "other" / "published" / "runs" / "H2_p7", None, "cpu",
                     1, protocol="published")
    frame = variants_table(params | {"p_heads_sweep": 7}, dirs, str(tmp_path / "t.csv"), str(tmp_path / "c.csv"),
                           baseline_roots=[str(tmp_path / "other")])
    assert set(frame.source) == {"variant"}
