"""E3's training curves against the paper's values (tools/campaign/training.py, the paper-scale page's)."""

import json

import pytest

from algo_emu import paper_values
from tools.campaign.training import paper_on_training_curve


def _training_record(path, mode, H, seed, history, mse, counts=(10, 10, 10)):
    rec = {"mode": mode, "setting": {"mode": mode, "heads": H}, "seed": seed, "train_history": history,
           "mse": dict(zip(("lasso", "ridge", "linear"), mse)),
           "algorithm_counts": dict(zip(("lasso", "ridge", "linear"), counts))}
    path.write_text(json.dumps(rec))
    return str(path)


def test_paper_values_on_our_training_curve_cross_at_the_exact_epoch_and_count_seeds_above(tmp_path):
    pm = {a: paper_values.STATISTICAL_HEADS[a]["mean"][3] for a in ("lasso", "ridge", "linear")}  # H = 6
    level = sum(pm.values()) / 3
    # seed 0 reaches the level at epoch 3, seed 1 at epoch 5: the mean curve first at epoch 4
    h0 = [1.0, 2 * level, level, level / 2, level / 2]
    h1 = [1.0, 2 * level, 1.5 * level, 1.2 * level, level]
    paths = [_training_record(tmp_path / "a.json", "reference_code", 6, 0, h0, (pm["lasso"], 0.01, 0.02)),
             _training_record(tmp_path / "b.json", "reference_code", 6, 1, h1, (0.01, 0.01, 0.5), (20, 10, 10)),
             # the fitted mode has no paper value of this metric, H = 3 none at all: both left out
             _training_record(tmp_path / "c.json", "fitted", 6, 0, h0, (9, 9, 9)),
             _training_record(tmp_path / "d.json", "reference_code", 3, 0, h0, (9, 9, 9))]
    [d] = paper_on_training_curve(paths)
    assert d["heads"] == 6 and d["seeds"] == [0, 1] and d["epochs"] == 5
    assert d["level"] == pytest.approx(level, rel=1e-15)
    assert d["cross_epoch"] == 4 and d["seed_cross"] == [3, 5]
    assert d["final_train"] == pytest.approx((level / 2 + level) / 2, rel=1e-15)
    assert d["heldout_mixed"] == pytest.approx(((pm["lasso"] + 0.03) / 3 + 0.52 / 3) / 2, rel=1e-15)
    assert d["n_at_or_above"] == {"lasso": 1, "ridge": 0, "linear": 1}  # at the paper's value counts
    assert d["ours_max"]["linear"] == 0.5 and d["share"]["lasso"] == pytest.approx(30 / 70)

    # a curve that never reaches the level says so (the campaign's page too: tools/tests/test_campaign.py)
    never = [_training_record(tmp_path / "e.json", "reference_code", 6, 0, [1.0] * 5, (1, 1, 1))]
    [d] = paper_on_training_curve(never)
    assert d["cross_epoch"] is None and d["seed_cross"] == [None]

    # bad input is named
    bad = [_training_record(tmp_path / "f.json", "reference_code", 6, 0, [], (1, 1, 1))]
    with pytest.raises(ValueError, match="f.json: no train_history"):
        paper_on_training_curve(bad)
    uneven = [paths[0], _training_record(tmp_path / "g.json", "reference_code", 6, 1, h1[:4], (1, 1, 1))]
    with pytest.raises(ValueError, match="H=6: seeds trained for different epochs"):
        paper_on_training_curve(uneven)
