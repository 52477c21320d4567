"""Rate fits recover known laws."""

import numpy as np
import pytest

from algo_emu import paper_values
from algo_emu.fit import fit_inverse, fit_power, fit_rates, fit_rates_summary

H = [1, 2, 4, 6, 8, 12]


def test_inverse_fit_is_exact_on_exact_points():
    y = [0.5 + 3.0 / h for h in H]
    out = fit_inverse(H, y)
    assert out["a"] == pytest.approx(0.5, abs=1e-12) and out["b"] == pytest.approx(3.0, abs=1e-12)
    assert out["r2"] == pytest.approx(1.0, abs=1e-12)


def test_power_fit_is_exact_on_exact_points():
    out = fit_power(H, [2.0 * h ** -0.7 for h in H])
    assert out["alpha"] == pytest.approx(0.7, abs=1e-12) and np.exp(out["c"]) == pytest.approx(2.0)


def test_bootstrap_fit_recovers_a_b_from_noisy_seeds():
    rng = np.random.default_rng(0)
    per_seed = {h: list(0.4 + 3.0 / h + 0.05 * rng.standard_normal(10)) for h in H}
    out = fit_rates(per_seed, n_boot=500)
    assert out["a"] == pytest.approx(0.4, abs=0.05) and out["b"] == pytest.approx(3.0, abs=0.1)
    assert out["a_ci"][0] < 0.4 < out["a_ci"][1] and out["b_ci"][0] < 3.0 < out["b_ci"][1]
    assert out["a_ci"][1] - out["a_ci"][0] < 0.2 and "paired" in out["method"]
    assert fit_rates(per_seed, n_boot=500) == out  # deterministic


def test_paper_fit_from_summary():
    pv = paper_values.HEADS_TABLE
    out = fit_rates_summary(pv["heads"], pv["mse"], pv["std"], pv["n_seeds"], n_boot=300)
    direct = fit_inverse(pv["heads"], pv["mse"])
    assert out["a"] == direct["a"] and out["b"] == direct["b"]
    assert out["b"] > 0 and 0 < out["alpha"] < 1.5  # the paper's table does decay with H
    assert out["b_ci"][0] < out["b"] < out["b_ci"][1]


def test_fit_needs_two_points():
    with pytest.raises(ValueError, match="two distinct x"):
        fit_inverse([2, 2], [1, 1])
    with pytest.raises(ValueError, match="positive y"):
        fit_power([1, 2], [1, -1])
