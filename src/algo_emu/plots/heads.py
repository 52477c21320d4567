"""E1 figures: heads vs MSE (with the fitted a + b/H curve and the paper's points), prompt length vs MSE."""

from __future__ import annotations

import numpy as np
import pandas as pd

from algo_emu.io import read_json
from algo_emu.plots import FIT_COLOR, OURS_COLOR, PAPER_COLOR, figure, save_figure
from algo_emu.tables import require_columns


def _footer(runs: pd.DataFrame, target: str, extra: str = "") -> str:
    n = runs.groupby(["heads", "p"]).seed.nunique()
    devices = ", ".join(sorted(runs.device.unique()))
    return (f"target: {target} | seeds per point: {n.min()}-{n.max()} | N={runs.n_prompts.iloc[0]}, "
            f"epochs={runs.epochs.iloc[0]} | device: {devices} | band: 95% bootstrap CI of the mean{extra}")


def _maybe_log(ax, values) -> None:
    """Log y-axis when the plotted values span more than a factor of 20 (ours vs the paper's, say)."""
    v = np.asarray([x for x in values if np.isfinite(x)], dtype=float)
    if v.size and v.min() > 0 and v.max() / v.min() > 20:
        ax.set_yscale("log")


def heads_figure(table_csv: str, fit_json: str | None, runs_csv: str, stem: str) -> None:
    table = pd.read_csv(table_csv)
    require_columns(table, ["heads", "mse_mean", "mse_ci_low", "mse_ci_high", "paper_mse", "paper_std", "target"], table_csv)
    runs = pd.read_csv(runs_csv)
    fit = read_json(fit_json) if fit_json else None
    target = fit["headline_target"] if fit else table.target.iloc[0]
    t = table[table.target == target].sort_values("heads")
    with figure() as (fig, ax):
        ax.fill_between(t.heads, t.mse_ci_low, t.mse_ci_high, color=OURS_COLOR, alpha=0.25, lw=0)
        ax.plot(t.heads, t.mse_mean, "o-", color=OURS_COLOR, label=f"ours (mean, n={int(t.n_seeds.min())})")
        sel = runs[(runs.target == target) & runs.heads.isin(t.heads) & (runs.p == runs[runs.heads.isin(t.heads)].p.mode()[0])]
        ax.scatter(sel.heads, sel.mse, s=8, color=OURS_COLOR, alpha=0.35, lw=0, label="ours (per seed)")
        if fit:
            hh = np.linspace(t.heads.min(), t.heads.max(), 200)
            ax.plot(hh, fit["a"] + fit["b"] / hh, "--", color=FIT_COLOR,
                    label=f"fit a + b/H: a={fit['a']:.3g}, b={fit['b']:.3g} ($R^2$={fit['r2']:.2f})")
        pp = t.dropna(subset=["paper_mse"])
        if not pp.empty:
            ax.errorbar(pp.heads, pp.paper_mse, yerr=pp.paper_std, fmt="s", color=PAPER_COLOR, capsize=3, ms=5,
                        label="paper (mean ± std)")
        _maybe_log(ax, [t.mse_ci_low.min(), t.mse_ci_high.max(), *pp.paper_mse])
        ax.set_xlabel("heads H")
        ax.set_ylabel("test MSE of the emulated head")
        ax.set_xticks(list(t.heads))
        ax.legend(fontsize=7)
        save_figure(fig, stem, footer=_footer(runs, target))


def prompt_length_figure(table_csv: str, runs_csv: str, stem: str) -> None:
    table = pd.read_csv(table_csv)
    require_columns(table, ["p", "heads", "mse_mean", "mse_ci_low", "mse_ci_high", "target"], table_csv)
    runs = pd.read_csv(runs_csv)
    target = table.target.iloc[0]
    t = table[table.target == target].sort_values("p")
    with figure() as (fig, ax):
        ax.fill_between(t.p, t.mse_ci_low, t.mse_ci_high, color=OURS_COLOR, alpha=0.25, lw=0)
        ax.plot(t.p, t.mse_mean, "o-", color=OURS_COLOR, label=f"ours (mean, n={int(t.n_seeds.min())})")
        sel = runs[(runs.target == target) & (runs.heads == t.heads.iloc[0]) & runs.p.isin(t.p)]
        ax.scatter(sel.p, sel.mse, s=8, color=OURS_COLOR, alpha=0.35, lw=0, label="ours (per seed)")
        _maybe_log(ax, [t.mse_ci_low.min(), t.mse_ci_high.max()])
        ax.set_xlabel("tokens p after appending learnable tokens (n data tokens + p - n)")
        ax.set_ylabel("test MSE of the emulated head")
        ax.set_title(f"H = {int(t.heads.iloc[0])}", fontsize=9)
        ax.legend(fontsize=7)
        save_figure(fig, stem, footer=_footer(runs, target, " | the paper reports no table for this sweep"))
