"""E1 at convergence (ours): the paper's heads table, our 50-epoch protocol and the converged table, side by side."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import seaborn as sns

from algo_emu import paper_values
from algo_emu.plots import PALETTE, PAPER_COLOR, figure, save_figure
from algo_emu.tables import require_columns

_MARKERS = {"published": "o", "independent": "s"}


def converged_figure(table_csv: str, stem: str, baseline_tables: list[str]) -> None:
    """Three panels with one shared log y-axis: (1) the paper's table (mean +- std, 10 seeds, 50 epochs); (2) our
    50-epoch protocol, the heads sweep's table (``heads_vs_mse.csv``, the first of ``baseline_tables`` present; the
    panel says so when none is); (3) the converged table (ours, not paper-comparable), mean and 95 % CI per protocol."""
    table = pd.read_csv(table_csv)
    require_columns(table, ["candidate", "protocol", "heads", "p", "mse_mean", "mse_ci_low", "mse_ci_high", "n_seeds"],
                    table_csv)
    p = int(table.p.iloc[0])
    fifty, source = fifty_epoch_table(baseline_tables, p)
    colors = dict(zip(("published", "independent"), sns.color_palette(PALETTE)[:2]))
    with figure(ncols=3, width=4.2, height=3.6, sharey=True) as (fig, axes):
        ax = axes[0, 0]
        paper = paper_table()
        ax.errorbar(paper.heads, paper.mse_mean, yerr=paper.mse_std, color=PAPER_COLOR, marker="D", capsize=3,
                    label="paper (mean +- std)")
        ax.set_title("the paper's table\n(50 epochs, 10 seeds)")
        ax = axes[0, 1]
        if fifty.empty:
            ax.text(0.5, 0.5, "no 50-epoch heads table\n(snakemake heads_table)", ha="center", va="center",
                    transform=ax.transAxes)
        for protocol, g in (fifty.groupby("protocol", sort=False) if not fifty.empty else ()):
            g = g.sort_values("heads")
            ax.errorbar(g.heads, g.mse_mean, yerr=[g.mse_mean - g.mse_ci_low, g.mse_ci_high - g.mse_mean],
                        color=colors.get(protocol), marker=_MARKERS.get(protocol, "o"), capsize=3,
                        label=f"{protocol} ({int(g.n_seeds.min())} seeds)")
        ax.set_title("ours, the paper's protocol: 50 epochs" + (f"\n({source})" if source else ""), fontsize=9)
        ax = axes[0, 2]
        name = str(table.candidate.iloc[0])
        for protocol, g in table.groupby("protocol", sort=False):
            g = g.sort_values("heads")
            ax.errorbar(g.heads, g.mse_mean, yerr=[g.mse_mean - g.mse_ci_low, g.mse_ci_high - g.mse_mean],
                        color=colors.get(protocol), marker=_MARKERS.get(protocol, "o"), capsize=3,
                        label=f"{protocol} ({int(g.n_seeds.min())} seeds)")
        ax.set_title(f"ours at convergence ({name}):\nNOT paper-comparable", fontsize=9)
        for ax in axes[0]:
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks(sorted(set(paper.heads) | set(table.heads)))
            ax.set_xticklabels([str(h) for h in sorted(set(paper.heads) | set(table.heads))])
            ax.set_xlabel("heads H")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
        axes[0, 0].set_ylabel("test MSE of the emulated head")
        save_figure(fig, stem, footer=f"p = {p}; bars: paper +- std; ours 95 % bootstrap CI over seeds. Panel 3 is "
                                      "trained to convergence (heads.convergence), the paper's and panel 2 for 50 epochs.")


def fifty_epoch_table(paths: list[str], p: int) -> tuple[pd.DataFrame, str | None]:
    """Our 50-epoch protocol's heads table (``heads_vs_mse.csv``) from the first of ``paths`` that exists with rows at
    p: each protocol's headline target (its first rows), or an empty frame and None."""
    for path in paths:
        if not Path(path).exists():
            continue
        t = pd.read_csv(path)
        if not {"protocol", "target", "heads", "p", "mse_mean"} <= set(t.columns):
            continue
        t = t[t.p == p]
        if t.empty:
            continue
        heads = t.groupby("protocol", sort=False).target.first()
        return t[t.target == t.protocol.map(heads)], path
    return pd.DataFrame(), None


def paper_table() -> pd.DataFrame:
    pv = paper_values.HEADS_TABLE
    return pd.DataFrame({"heads": pv["heads"], "mse_mean": pv["mse"], "mse_std": pv["std"]})
