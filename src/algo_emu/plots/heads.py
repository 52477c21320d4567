"""E1 figures: heads vs MSE (with the fitted a + b/H curve and the paper's points), prompt length vs MSE."""

from __future__ import annotations

import numpy as np
import pandas as pd

from algo_emu.experiments.heads_settings import METRIC_LABELS, METRICS
from algo_emu.io import read_json
from algo_emu.plots import FIT_COLOR, OURS_COLOR, PAPER_COLOR, figure, save_figure
from algo_emu.tables import require_columns


def _footer(runs: pd.DataFrame, extra: str = "") -> str:
    n = runs.groupby(["protocol", "heads", "p"]).seed.nunique()
    devices = ", ".join(sorted(runs.device.unique()))
    return (f"seeds per point: {n.min()}-{n.max()} | N={runs.n_prompts.iloc[0]}, "
            f"epochs={runs.epochs.iloc[0]} | device: {devices} | band: 95% bootstrap CI of the mean{extra}")


def _maybe_log(ax, values) -> None:
    """Log y-axis when the plotted values span more than a factor of 20 (ours vs the paper's, say)."""
    v = np.asarray([x for x in values if np.isfinite(x)], dtype=float)
    if v.size and v.min() > 0 and v.max() / v.min() > 20:
        ax.set_yscale("log")


_TITLES = {"published": "published protocol (comparable with the paper)",
           "independent": "independent seeds (ours)"}


def heads_figure(table_csv: str, fit_json: str | None, runs_csv: str, stem: str) -> None:
    """One panel per protocol, each at its headline target and metric; the paper's points only on the published panel."""
    table = pd.read_csv(table_csv)
    require_columns(table, ["protocol", "target", "metric", "heads", "mse_mean", "mse_ci_low", "mse_ci_high",
                            "target_var_mean", "paper_mse", "paper_std"], table_csv)
    runs = pd.read_csv(runs_csv)
    fits = read_json(fit_json) if fit_json else {}
    protocols = list(dict.fromkeys(table.protocol))
    with figure(ncols=len(protocols)) as (fig, axes):
        axes = np.atleast_1d(axes).ravel()
        for ax, protocol in zip(axes, protocols):
            sub = table[table.protocol == protocol]
            target, metric = sub.target.iloc[0], sub.metric.iloc[0]  # the first target of a protocol is its headline
            t = sub[sub.target == target].sort_values("heads")
            column = METRICS[metric]
            ax.fill_between(t.heads, t.mse_ci_low, t.mse_ci_high, color=OURS_COLOR, alpha=0.25, lw=0)
            ax.plot(t.heads, t.mse_mean, "o-", color=OURS_COLOR, label=f"ours (mean, n={int(t.n_seeds.min())})")
            sel = runs[(runs.protocol == protocol) & (runs.target == target) & runs.heads.isin(t.heads)
                       & runs.p.isin(t.p)]
            ax.scatter(sel.heads, sel[column], s=8, color=OURS_COLOR, alpha=0.35, lw=0, label="ours (per seed)")
            ax.plot(t.heads, t.target_var_mean, ":", color="0.4", label="Var(Y): a constant predictor")
            fit = fits.get(protocol, {})
            if "a" in fit:
                hh = np.linspace(t.heads.min(), t.heads.max(), 200)
                ax.plot(hh, fit["a"] + fit["b"] / hh, "--", color=FIT_COLOR,
                        label=f"fit a + b/H: a={fit['a']:.3g}, b={fit['b']:.3g} ($R^2$={fit['r2']:.2f})")
            pp = t.dropna(subset=["paper_mse"])
            if not pp.empty:
                ax.errorbar(pp.heads, pp.paper_mse, yerr=pp.paper_std, fmt="s", color=PAPER_COLOR, capsize=3, ms=5,
                            label="paper (mean ± std)")
            _maybe_log(ax, [t.mse_ci_low.min(), t.mse_ci_high.max(), *pp.paper_mse, *t.target_var_mean])
            ax.set_xlabel("heads H")
            ax.set_ylabel(f"test MSE ({METRIC_LABELS[metric]})")
            ax.set_title(f"{_TITLES.get(protocol, protocol)}\ntarget: {target}", fontsize=8)
            ax.set_xticks(list(t.heads))
            ax.legend(fontsize=6)
        save_figure(fig, stem, footer=_footer(runs))


def prompt_length_figure(table_csv: str, runs_csv: str, stem: str) -> None:
    table = pd.read_csv(table_csv)
    require_columns(table, ["protocol", "target", "metric", "p", "heads", "mse_mean", "mse_ci_low", "mse_ci_high",
                            "target_var_mean"], table_csv)
    runs = pd.read_csv(runs_csv)
    protocol, target, metric = table.protocol.iloc[0], table.target.iloc[0], table.metric.iloc[0]
    t = table[table.target == target].sort_values("p")
    column = METRICS[metric]
    with figure() as (fig, ax):
        ax.fill_between(t.p, t.mse_ci_low, t.mse_ci_high, color=OURS_COLOR, alpha=0.25, lw=0)
        ax.plot(t.p, t.mse_mean, "o-", color=OURS_COLOR, label=f"ours (mean, n={int(t.n_seeds.min())})")
        sel = runs[(runs.protocol == protocol) & (runs.target == target) & (runs.heads == t.heads.iloc[0]) & runs.p.isin(t.p)]
        ax.scatter(sel.p, sel[column], s=8, color=OURS_COLOR, alpha=0.35, lw=0, label="ours (per seed)")
        ax.plot(t.p, t.target_var_mean, ":", color="0.4", label="Var(Y): a constant predictor")
        _maybe_log(ax, [t.mse_ci_low.min(), t.mse_ci_high.max(), *t.target_var_mean])
        ax.set_xlabel("tokens p (n data tokens + p - n learnable tokens)")
        ax.set_ylabel(f"test MSE ({METRIC_LABELS[metric]})")
        ax.set_title(f"H = {int(t.heads.iloc[0])}, {_TITLES.get(protocol, protocol)}\ntarget: {target}", fontsize=8)
        ax.legend(fontsize=7)
        save_figure(fig, stem, footer=_footer(runs, " | the paper reports no table for this sweep"))
