"""Rate fits: MSE(H) = a + b / H and MSE ~ H^(-alpha), with bootstrap intervals over seeds.

Both laws have two parameters, so through two points each fits exactly (R^2 = 1 whatever the data): every fit
records ``n_points`` and ``exact_by_construction`` (fewer than :data:`MIN_POINTS` x values), and the replication
report gives such a fit no verdict.

A seed bootstrap measures how the per-x means move with the seeds, not how well the law describes them: a law that
misses the points by far more than the seeds move still gets a narrow interval. So every fit also carries the
exponent's regression interval from its own residuals (``alpha_ci_fit``: least squares on log-log, t quantile with
n - 2 degrees of freedom), their union (``alpha_ci_total``: what a verdict should read), and the fits with each x left
out in turn (``leave_one_out``), which show when one setting makes the reading.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from scipy import stats

#: a two-parameter law read from fewer x values than this fits them exactly, so it cannot fail
MIN_POINTS = 3


def _points(xs) -> dict:
    n = int(np.unique(np.asarray(xs, dtype=np.float64)).size)
    return {"n_points": n, "exact_by_construction": n < MIN_POINTS}


def fit_inverse(x: Sequence[float], y: Sequence[float]) -> dict[str, float]:
    """Least squares of y = a + b / x; returns a, b and r2 (on y)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.size < 2 or np.unique(x).size < 2:
        raise ValueError("fit_inverse needs at least two distinct x values")
    design = np.column_stack([np.ones_like(x), 1.0 / x])
    (a, b), *_ = np.linalg.lstsq(design, y, rcond=None)
    resid = y - design @ np.array([a, b])
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / ss_tot if ss_tot > 0 else float("nan")
    return {"a": float(a), "b": float(b), "r2": r2}


def fit_power(x: Sequence[float], y: Sequence[float]) -> dict[str, float]:
    """Least squares of log y = c - alpha log x (y must be positive); returns alpha, c, r2 (log scale)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if np.any(y <= 0):
        raise ValueError("fit_power needs positive y")
    lx, ly = np.log(x), np.log(y)
    design = np.column_stack([np.ones_like(lx), -lx])
    (c, alpha), *_ = np.linalg.lstsq(design, ly, rcond=None)
    resid = ly - design @ np.array([c, alpha])
    ss_tot = float(((ly - ly.mean()) ** 2).sum())
    return {"alpha": float(alpha), "c": float(c), "r2_log": 1.0 - float((resid**2).sum()) / ss_tot if ss_tot > 0 else float("nan")}


def alpha_fit_interval(x: Sequence[float], y: Sequence[float], level: float = 0.95) -> list[float]:
    """The exponent's interval from the log-log fit's own residuals (t with n - 2 degrees of freedom); [nan, nan]
    with fewer than three points (two points leave no residual) or a non-positive y."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.size < 3 or np.any(y <= 0):
        return [float("nan"), float("nan")]
    lx, ly = np.log(x), np.log(y)
    slope, intercept = np.polyfit(lx, ly, 1)
    resid = ly - (intercept + slope * lx)
    s2 = float((resid**2).sum()) / (x.size - 2)
    se = np.sqrt(s2 / float(((lx - lx.mean()) ** 2).sum()))
    t = float(stats.t.ppf(0.5 + level / 2, x.size - 2))
    return [float(-slope - t * se), float(-slope + t * se)]


def leave_one_out(x: Sequence[float], y: Sequence[float]) -> list[dict]:
    """Both laws refitted with each x left out in turn (only where at least :data:`MIN_POINTS` x values remain)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    out = []
    if np.unique(x).size - 1 < MIN_POINTS:
        return out
    for i in range(x.size):
        keep = np.arange(x.size) != i
        inv = fit_inverse(x[keep], y[keep])
        alpha = fit_power(x[keep], y[keep])["alpha"] if np.all(y[keep] > 0) else float("nan")
        out.append({"left_out": float(x[i]), "alpha": alpha, "a": inv["a"], "b": inv["b"], "r2": inv["r2"]})
    return out


def _lack_of_fit(x, means, boot_ci: list[float], level: float) -> dict:
    fit_ci = alpha_fit_interval(x, means, level)
    total = ([min(boot_ci[0], fit_ci[0]), max(boot_ci[1], fit_ci[1])] if not np.isnan(fit_ci[0]) else list(boot_ci))
    return {"alpha_ci_fit": fit_ci, "alpha_ci_total": total, "leave_one_out": leave_one_out(x, means)}


def _interval(samples: np.ndarray, level: float) -> list[float]:
    lo, hi = np.quantile(samples, [(1 - level) / 2, 1 - (1 - level) / 2])
    return [float(lo), float(hi)]


def _fit_both(x, y) -> tuple[float, float, float]:
    inv = fit_inverse(x, y)
    alpha = fit_power(x, y)["alpha"] if np.all(np.asarray(y) > 0) else float("nan")
    return inv["a"], inv["b"], alpha


def too_few(xs) -> str | None:
    """Why no rate fit is made from the settings ``xs`` (None: at least :data:`MIN_POINTS` of them)."""
    xs = sorted(xs)
    return (f"not enough settings: H = {xs} (a two-parameter fit needs at least {MIN_POINTS})"
            if len(xs) < MIN_POINTS else None)


def fit_rates(per_seed: Mapping[float, Sequence[float]], n_boot: int = 2000, level: float = 0.95,
              seed: int = 0) -> dict:
    """Fit both laws to the per-x means of ``per_seed`` ({x: [value per seed]}).

    Intervals: percentile bootstrap, resampling the seeds of each x with replacement.
    """
    xs = sorted(per_seed)
    values = [np.asarray(per_seed[x], dtype=np.float64) for x in xs]
    means = np.array([v.mean() for v in values])
    inv, powr = fit_inverse(xs, means), fit_power(xs, means)
    rng = np.random.default_rng(seed)
    boot = np.empty((n_boot, 3))
    # Seeds are paired across x when every x has the same number of them (seed k
    # shares its data set across settings): resample seed indices jointly then.
    paired = len({v.size for v in values}) == 1
    for i in range(n_boot):
        if paired:
            pick = rng.integers(0, values[0].size, values[0].size)
            bm = [v[pick].mean() for v in values]
        else:
            bm = [v[rng.integers(0, v.size, v.size)].mean() for v in values]
        boot[i] = _fit_both(xs, bm)
    return {
        "a": inv["a"], "b": inv["b"], "r2": inv["r2"], "alpha": powr["alpha"], "alpha_r2_log": powr["r2_log"],
        "a_ci": _interval(boot[:, 0], level), "b_ci": _interval(boot[:, 1], level),
        "alpha_ci": _interval(boot[~np.isnan(boot[:, 2]), 2], level),
        "ci_level": level, "n_boot": n_boot,
        "method": "percentile bootstrap over seeds" + (" (paired: the same seeds resampled at every x)" if paired else ""),
        "x": xs, "y_mean": means.tolist(), "n_seeds": [int(v.size) for v in values], **_points(xs),
        **_lack_of_fit(xs, means, _interval(boot[~np.isnan(boot[:, 2]), 2], level), level),
    }


def fit_rates_summary(x: Sequence[float], mean: Sequence[float], std: Sequence[float], n: int,
                      n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> dict:
    """The same fit from reported means and stds only (e.g. the paper's table).

    Intervals: parametric bootstrap, each mean redrawn from N(mean, std / sqrt(n));
    draws with a non-positive mean are dropped for the power law.
    """
    x = np.asarray(x, dtype=np.float64)
    mean = np.asarray(mean, dtype=np.float64)
    se = np.asarray(std, dtype=np.float64) / np.sqrt(n)
    inv, powr = fit_inverse(x, mean), fit_power(x, mean)
    rng = np.random.default_rng(seed)
    boot = np.array([_fit_both(x, mean + se * rng.standard_normal(x.size)) for _ in range(n_boot)])
    return {
        "a": inv["a"], "b": inv["b"], "r2": inv["r2"], "alpha": powr["alpha"], "alpha_r2_log": powr["r2_log"],
        "a_ci": _interval(boot[:, 0], level), "b_ci": _interval(boot[:, 1], level),
        "alpha_ci": _interval(boot[~np.isnan(boot[:, 2]), 2], level),
        "ci_level": level, "n_boot": n_boot,
        "method": f"parametric bootstrap: means ~ N(mean, std/sqrt({n})) (per-seed values not published)",
        "x": x.tolist(), "y_mean": mean.tolist(), **_points(x),
        **_lack_of_fit(x, mean, _interval(boot[~np.isnan(boot[:, 2]), 2], level), level),
    }
