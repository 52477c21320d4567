"""Prompt-ablation figure (any experiment): each ablation's MSE relative to the weight-blind baseline.

One panel per value of ``panel`` (a column or a list of columns of the ablation table), the
ablations along x, one series per value of ``hue``; y = mse_over_blind (log scale). The dotted
line at 1 is the weight-blind baseline; ``none`` (the unablated model) far below 1 and the ablations
near or above 1 is what a model that reads the weights in its prompt looks like.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd
import seaborn as sns

from algo_emu.ablation import ABLATION_COLUMNS, BLIND, NONE
from algo_emu.plots import PALETTE, figure, save_figure
from algo_emu.tables import require_columns


def ablation_figure(table_csv: str, runs_csv: str, stem: str, panel: str | Sequence[str], hue: str,
                    title: str = "", max_cols: int = 4) -> None:
    table = pd.read_csv(table_csv)
    panels = [panel] if isinstance(panel, str) else list(panel)
    require_columns(table, ["experiment", "mode", *panels, hue, *ABLATION_COLUMNS], table_csv)
    runs = pd.read_csv(runs_csv)
    require_columns(runs, ["experiment", "mode", *panels, hue, "seed", "ablation", "mse"], runs_csv)
    keys = list(dict.fromkeys(map(tuple, table[panels].itertuples(index=False, name=None))))
    ablations = list(dict.fromkeys(table.ablation))
    hues = sorted(table[hue].unique())
    colors = dict(zip(hues, sns.color_palette(PALETTE, len(hues))))
    ncols = min(len(keys), max_cols)
    nrows = math.ceil(len(keys) / ncols)
    with figure(ncols=ncols, nrows=nrows, width=3.4, height=3.0, sharey=True) as (fig, axes):
        axes = np.atleast_2d(axes)
        for i, key in enumerate(keys):
            ax = axes[i // ncols][i % ncols]
            sel_t = table.loc[(table[panels] == pd.Series(key, index=panels)).all(axis=1)]
            sel_r = runs.loc[(runs[panels] == pd.Series(key, index=panels)).all(axis=1)]
            width = 0.8 / max(len(hues), 1)
            for j, hv in enumerate(hues):
                t = sel_t[sel_t[hue] == hv].set_index("ablation").reindex(ablations)
                # per seed: its MSE / its own baseline's MSE (paired; seeds differ in Var(target))
                per_seed = sel_r[sel_r[hue] == hv].pivot_table(index="seed", columns="ablation", values="mse")
                ratio = per_seed.div(per_seed[BLIND], axis=0).reindex(columns=ablations)
                x = np.arange(len(ablations)) - 0.4 + width * (j + 0.5)
                ax.errorbar(x, t.mse_over_blind, yerr=ratio.std(ddof=1).fillna(0).to_numpy(), fmt="o", ms=3.5,
                            lw=0.8, color=colors[hv], label=f"{hue} = {hv}")
                for k, a in enumerate(ablations):
                    vals = ratio[a].to_numpy()
                    ax.scatter(np.full(vals.shape, x[k]), vals, s=5, color=colors[hv], alpha=0.35, lw=0)
            ax.axhline(1.0, color="0.4", lw=0.8, ls=":")
            ax.set_xticks(np.arange(len(ablations)))
            ax.set_xticklabels(["unablated" if a == NONE else a.replace("_", " ") for a in ablations],
                               rotation=40, ha="right", fontsize=7)
            ax.set_yscale("log")
            ax.set_title(", ".join(f"{c} = {v}" for c, v in zip(panels, key)), fontsize=8)
            if i % ncols == 0:
                ax.set_ylabel("MSE / weight-blind MSE")
        for i in range(len(keys), nrows * ncols):
            axes[i // ncols][i % ncols].set_visible(False)
        axes[0][0].legend(fontsize=6.5)
        n = runs.groupby([*panels, hue, "ablation"]).seed.nunique()
        footer = ((title + " | " if title else "") +
                  f"seeds per point: {n.min()}-{n.max()} | marker: mean MSE / mean baseline MSE (the table's mse_over_blind) | "
                  "dots: each seed's MSE / its own baseline's; bars: ± 1 std of those | dotted line: the "
                  "weight-blind baseline (same block, data and budget, weights removed from the input) | "
                  "targets always those of the original prompt")
        save_figure(fig, stem, footer=footer)
