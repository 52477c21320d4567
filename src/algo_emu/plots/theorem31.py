"""E2 figure: error of the emulated f(w^T x - y) x, and of the GD step built from it, against p (one line per f)."""

from __future__ import annotations

import pandas as pd
import seaborn as sns

from algo_emu.plots import PALETTE, figure, save_figure
from algo_emu.tables import require_columns


def f_emulation_figure(table_csv: str, gd_csv: str, runs_csv: str, stem: str) -> None:
    table = pd.read_csv(table_csv)
    require_columns(table, ["f", "p", "heads", "mse_mean", "rel_mse_mean", "rel_mse_std", "n_seeds", "x_dist", "x_scale"],
                    table_csv)
    gd = pd.read_csv(gd_csv)
    require_columns(gd, ["f", "p", "eta", "gd_rel_mean", "gd_rel_std"], gd_csv)
    runs = pd.read_csv(runs_csv)
    fs = list(dict.fromkeys(table.f))
    colors = dict(zip(fs, sns.color_palette(PALETTE, len(fs))))
    with figure(ncols=2) as (fig, axes):
        ax_f, ax_gd = axes[0]
        for f in fs:
            t = table[table.f == f].sort_values("p")
            g = gd[gd.f == f].sort_values("p")
            c = colors[f]
            ax_f.fill_between(t.p, (t.rel_mse_mean - t.rel_mse_std).clip(lower=1e-12), t.rel_mse_mean + t.rel_mse_std,
                              color=c, alpha=0.2, lw=0)
            ax_f.plot(t.p, t.rel_mse_mean, "o-", color=c, label=f"f = {f}")
            sel = runs[runs.f == f]
            ax_f.scatter(sel.p, sel.rel_mse, s=6, color=c, alpha=0.35, lw=0)
            ax_gd.fill_between(g.p, (g.gd_rel_mean - g.gd_rel_std).clip(lower=1e-12), g.gd_rel_mean + g.gd_rel_std,
                               color=c, alpha=0.2, lw=0)
            ax_gd.plot(g.p, g.gd_rel_mean, "o-", color=c, label=f"f = {f}")
        for ax in (ax_f, ax_gd):
            ax.set_xlabel("tokens p (n data tokens + p - n learnable tokens)")
            ax.set_yscale("log")
            ax.axhline(1.0, color="0.5", lw=0.8, ls=":")
            ax.set_xticks(sorted(table.p.unique()))
        ax_f.set_ylabel("test MSE / Var(target)")
        ax_f.set_title("per-token f(w$^T$x$_i$ - y$_i$) x$_i$", fontsize=9)
        ax_gd.set_ylabel("|w'$_{model}$ - w'$_{exact}$|$^2$ / |w'$_{exact}$ - w|$^2$")
        ax_gd.set_title(f"one GD step, u = (1/n) 1 (eta-free; eta = {gd.eta.iloc[0]:g})", fontsize=9)
        ax_f.legend(fontsize=7)
        n = runs.groupby(["f", "p"]).seed.nunique()
        footer = (f"H = {int(table.heads.iloc[0])} | x {table.x_dist.iloc[0]} (scale {table.x_scale.iloc[0]:g}) | "
                  f"seeds per point: {n.min()}-{n.max()} | N={runs.n_prompts.iloc[0]}, epochs={runs.epochs.iloc[0]} | "
                  f"device: {', '.join(sorted(runs.device.unique()))} | band: ± 1 std over seeds; dots: seeds | "
                  "dotted line: error of predicting the mean / of not moving w")
        save_figure(fig, stem, footer=footer)
