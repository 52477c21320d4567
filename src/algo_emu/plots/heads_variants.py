"""E1 variants (ours): per-member learning curves of each variant, the protocol's run and the paper's value beside."""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.ticker import MaxNLocator

from algo_emu.plots import PALETTE, PAPER_COLOR, figure, save_figure
from algo_emu.tables import require_columns

ROLES = ("K", "Q", "V")
_STYLES = ("-", "--", ":", "-.")


def variants_figure(table_csv: str, curves_csv: str, stem: str) -> None:
    """One column per variant. Top: every K/Q/V emulator's train loss per epoch (colour: the emulator; line style:
    the seed). Bottom: the composed head's test MSE at the evaluated epochs per seed. Faint and thick behind: the
    protocol's own run of the same setting and seeds (where its records exist); red line and band: the paper's
    mean +- std for that H (published protocol only)."""
    table = pd.read_csv(table_csv)
    curves = pd.read_csv(curves_csv)
    require_columns(curves, ["variant", "source", "protocol", "heads", "p", "seed", "member", "epoch", "train_loss",
                             "test_mse"], curves_csv)
    require_columns(table, ["variant", "member", "paper_mse", "paper_std"], table_csv)
    names = list(dict.fromkeys(curves[curves.source == "variant"].variant))
    role_color = dict(zip(ROLES, sns.color_palette(PALETTE)[:3]))
    seed_color = sns.color_palette(PALETTE, 10)
    with figure(ncols=max(1, len(names)), nrows=2, width=4.2, height=3.3) as (fig, axes):
        axes = np.asarray(axes).reshape(2, -1)
        if not names:
            axes[0, 0].text(0.5, 0.5, "no variants configured (heads.variants)", ha="center", va="center")
            axes[0, 0].set_axis_off()
            axes[1, 0].set_axis_off()
        for j, name in enumerate(names):
            own = curves[(curves.variant == name)]
            first = own.iloc[0]
            seeds = sorted(own.seed.unique())
            base = curves[(curves.source == "protocol") & (curves.protocol == first.protocol)
                          & (curves.heads == first.heads) & (curves.p == first.p) & curves.seed.isin(seeds)]
            top, bottom = axes[0, j], axes[1, j]
            for k, seed in enumerate(seeds):
                ls = _STYLES[k % len(_STYLES)]
                for r in ROLES:
                    b = base[(base.seed == seed) & (base.member == r)]
                    if not b.empty:
                        top.plot(b.epoch, b.train_loss, ls, color=role_color[r], lw=3, alpha=0.25)
                    c = own[(own.seed == seed) & (own.member == r)]
                    top.plot(c.epoch, c.train_loss, ls, color=role_color[r], lw=1,
                             label=f"{r}" if k == 0 else None)
                color = seed_color[k % len(seed_color)]
                b = base[(base.seed == seed) & (base.member == "head")].dropna(subset=["test_mse"])
                if not b.empty:
                    bottom.plot(b.epoch, b.test_mse, "-", color=color, lw=3, alpha=0.25,
                                label="protocol's run" if k == 0 else None)
                c = own[(own.seed == seed) & (own.member == "head")].dropna(subset=["test_mse"])
                bottom.plot(c.epoch, c.test_mse, "o-", color=color, lw=1, ms=3, label=f"seed {seed}")
            paper = table[(table.variant == name) & (table.member == "head")].dropna(subset=["paper_mse"])
            if not paper.empty:
                pm, ps = float(paper.paper_mse.iloc[0]), float(paper.paper_std.iloc[0])
                bottom.axhspan(pm - ps, pm + ps, color=PAPER_COLOR, alpha=0.12, lw=0)
                bottom.axhline(pm, color=PAPER_COLOR, lw=1.2, label=f"paper H={int(first.heads)}: {pm:g} ± {ps:g}")
            top.set_yscale("log")
            bottom.set_yscale("log")
            top.set_title(f"{name} (ours)\n{first.protocol} H={int(first.heads)} p={int(first.p)}, "
                          f"{int(own.epochs.max())} ep, lr {first.lr:g} {first.lr_schedule}", fontsize=9)
            for ax in (top, bottom):
                ax.set_xlabel("epoch")
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if j == 0:
                top.set_ylabel("train loss (K/Q/V emulator)")
                bottom.set_ylabel("test MSE (composed head)")
            top.legend(fontsize=7, title="emulator; style: seed", title_fontsize=7)
            bottom.legend(fontsize=7)
        footer = ("variants: ours, not the paper's protocol (heads.variants); faint thick lines: the protocol's own run "
                  "of the same setting and seeds, where its records exist")
        save_figure(fig, stem, footer=footer)
