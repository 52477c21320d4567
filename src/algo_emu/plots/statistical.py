"""E3 figure: loss against the number of heads, panels Lasso / Ridge / Linear, with the paper's values."""

from __future__ import annotations

import pandas as pd
import seaborn as sns

from algo_emu.plots import PALETTE, PAPER_COLOR, figure, save_figure
from algo_emu.tables import require_columns

PANELS = (("lasso", ("lasso",)), ("ridge", ("ridge",)), ("linear", ("linear", "ols")))
LABELS = {"reference_code": "ours, reference_code (vs noisy y)", "fitted": "ours, fitted (emulation error)"}


def statistical_heads_figure(table_csv: str, runs_csv: str, stem: str) -> None:
    table = pd.read_csv(table_csv)
    require_columns(table, ["mode", "algorithm", "heads", "mse_mean", "mse_std", "paper_mse", "paper_std", "n_seeds"],
                    table_csv)
    runs = pd.read_csv(runs_csv)
    modes = list(dict.fromkeys(table["mode"]))
    colors = dict(zip(["reference_code", "fitted"], sns.color_palette(PALETTE, 3)[:1] + sns.color_palette(PALETTE, 3)[2:]))
    with figure(ncols=3, width=3.6) as (fig, axes):
        for ax, (title, names) in zip(axes[0], PANELS):
            for mode in modes:
                t = table[(table["mode"] == mode) & table.algorithm.isin(names)].sort_values("heads")
                if t.empty:
                    continue
                c = colors.get(mode, "0.3")
                lo = (t.mse_mean - t.mse_std.fillna(0)).clip(lower=t.mse_mean * 1e-3)
                ax.fill_between(t.heads, lo, t.mse_mean + t.mse_std.fillna(0), color=c, alpha=0.2, lw=0)
                ax.plot(t.heads, t.mse_mean, "o-", color=c, ms=4, label=f"{LABELS.get(mode, mode)}, n={int(t.n_seeds.min())}")
                pp = t.dropna(subset=["paper_mse"])
                if not pp.empty:
                    ax.fill_between(pp.heads, (pp.paper_mse - pp.paper_std).clip(lower=1e-6), pp.paper_mse + pp.paper_std,
                                    color=PAPER_COLOR, alpha=0.2, lw=0)
                    ax.plot(pp.heads, pp.paper_mse, "s--", color=PAPER_COLOR, ms=4, label="paper (mean ± std)")
            ax.set_title(title.capitalize(), fontsize=10)
            ax.set_xlabel("heads H")
            ax.set_yscale("log")
            ax.set_xticks(sorted(table.heads.unique()))
        axes[0][0].set_ylabel("test MSE (mean ± std over seeds)")
        axes[0][0].legend(fontsize=6.5)
        footer = (f"N={runs.n_prompts.iloc[0]}, epochs={runs.epochs.iloc[0]} | models frozen before evaluation "
                  f"(bit-identical: {bool(runs.bit_identical.all())}) | device: {', '.join(sorted(runs.device.unique()))} | "
                  "Linear panel: fitted mode's ols | paper std: test resampling of one model; ours: independent seeds")
        save_figure(fig, stem, footer=footer)
