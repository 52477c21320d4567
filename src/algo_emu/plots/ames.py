"""E4 figures.

``ames_figure``: per mode and prompt set (the three algorithms' fits; in corrected mode also the held-out
weight vectors), the frozen emulator's output against the prediction the prompt encodes on the held-out
rows (every seed pooled; grey: the weight-blind baseline), and the test MSEs with error bars.
``ablation_figure``: per mode, the emulator's MSE under each prompt ablation beside the unablated MSE and
the weight-blind baseline (log scale)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
import seaborn as sns

from algo_emu.data.ames_fits import ALGORITHMS
from algo_emu.ablation import BLIND, NONE
from algo_emu.plots import PALETTE, figure, save_figure
from algo_emu.tables import require_columns

METRICS = (("emulation_mse", "emulator vs algorithm"), ("prediction_mse", "emulator vs log price"),
           ("algorithm_mse", "algorithm vs log price"))


def _footer(runs: pd.DataFrame, provenance: str) -> str:
    devices = ", ".join(sorted(runs.device.unique()))
    n = runs.groupby(["mode", "algorithm"]).seed.nunique()
    return (f"seeds per panel: {n.min()}-{n.max()} | epochs={runs.epochs.iloc[0]} | h={', '.join(str(int(h)) for h in sorted(runs.hidden.unique()))} | "
            f"device: {devices} | error bars: std over seeds | data: {provenance}")


def ames_figure(table_csv: str, runs_csv: str, predictions_csvs: Sequence[str], stem: str,
                max_points: int = 4000) -> None:
    table = pd.read_csv(table_csv)
    require_columns(table, ["mode", "algorithm"] + [f"{m}_{s}" for m, _ in METRICS for s in ("mean", "std")],
                    table_csv)
    runs = pd.read_csv(runs_csv)
    preds = pd.concat([pd.read_csv(p) for p in predictions_csvs], ignore_index=True)
    require_columns(preds, ["mode", "seed", "algorithm", "algorithm_prediction", "emulated"], "predictions")
    modes = list(dict.fromkeys(table["mode"]))
    sets = list(dict.fromkeys(table.algorithm))
    colors = sns.color_palette(PALETTE)
    with figure(ncols=len(sets) + 1, nrows=len(modes), width=3.3, height=3.0) as (fig, axes):
        axes = np.asarray(axes).reshape(len(modes), len(sets) + 1)
        for i, mode in enumerate(modes):
            for j, algo in enumerate(sets):
                ax = axes[i, j]
                sel = preds[(preds["mode"] == mode) & (preds.algorithm == algo)]
                if sel.empty:
                    ax.axis("off")
                    continue
                if len(sel) > max_points:  # deterministic thinning for a readable, small file
                    sel = sel.iloc[np.linspace(0, len(sel) - 1, max_points).astype(int)]
                if "blind" in sel and sel.blind.notna().any():
                    ax.scatter(sel.algorithm_prediction, sel.blind, s=3, alpha=0.25, lw=0, color="0.6",
                               label="weight-blind baseline")
                ax.scatter(sel.algorithm_prediction, sel.emulated, s=4, alpha=0.3, lw=0, color=colors[j % len(colors)],
                           label="emulator")
                lo = float(np.nanmin([sel.algorithm_prediction.min(), sel.emulated.min()]))
                hi = float(np.nanmax([sel.algorithm_prediction.max(), sel.emulated.max()]))
                ax.plot([lo, hi], [lo, hi], "--", color="0.4", lw=0.8, label="y = x")
                row = table[(table["mode"] == mode) & (table.algorithm == algo)].iloc[0]
                ratio = row.get("mse_over_blind", np.nan)
                ax.set_title(f"{mode}: {algo}\nemulation MSE {row.emulation_mse_mean:.3g} ± "
                             f"{row.emulation_mse_std:.2g}; / blind {ratio:.2g}", fontsize=8)
                ax.set_xlabel("prediction the prompt's weights encode", fontsize=8)
                ax.set_ylabel("frozen emulator's output", fontsize=8)
                ax.legend(fontsize=6, loc="upper left")
            ax = axes[i, -1]
            t = table[table["mode"] == mode].set_index("algorithm").loc[list(ALGORITHMS)]
            x = np.arange(len(ALGORITHMS))
            width = 0.27
            for k, (metric, label) in enumerate(METRICS):
                ax.bar(x + (k - 1) * width, t[f"{metric}_mean"], width, yerr=t[f"{metric}_std"].fillna(0),
                       capsize=2, color=colors[k + 3], label=label)
            ax.set_xticks(x, ALGORITHMS)
            values = t[[f"{m}_mean" for m, _ in METRICS]].to_numpy().ravel()
            if np.all(values > 0) and values.max() / values.min() > 20:
                ax.set_yscale("log")
            ax.set_ylabel("test MSE", fontsize=8)
            ax.set_title(f"{mode}: test MSE (mean ± std over seeds)", fontsize=8)
            ax.legend(fontsize=6)
        provenance = "; ".join(dict.fromkeys(runs.data_provenance.astype(str)))
        save_figure(fig, stem, footer=_footer(runs, provenance))


def ablation_figure(ablation_csv: str, table_csv: str, stem: str) -> None:
    """Per mode: grouped bars (prompt set x ablation) of the emulator's MSE against the original target."""
    ab = pd.read_csv(ablation_csv)
    require_columns(ab, ["mode", "algorithm", "ablation", "mse_mean", "mse_std", "n_seeds"], ablation_csv)
    modes = list(dict.fromkeys(ab["mode"]))
    names = list(dict.fromkeys(ab.ablation))
    colors = sns.color_palette(PALETTE, max(len(names), 3))
    with figure(ncols=len(modes), nrows=1, width=5.5, height=3.4) as (fig, axes):
        axes = np.atleast_1d(np.asarray(axes)).ravel()
        for ax, mode in zip(axes, modes):
            sub = ab[ab["mode"] == mode]
            sets = list(dict.fromkeys(sub.algorithm))
            width = 0.8 / len(names)
            for k, name in enumerate(names):
                vals = [sub[(sub.algorithm == a) & (sub.ablation == name)] for a in sets]
                mean = [float(v.mse_mean.iloc[0]) if len(v) else np.nan for v in vals]
                std = [float(v.mse_std.fillna(0).iloc[0]) if len(v) else 0.0 for v in vals]
                color = "0.15" if name == NONE else ("0.6" if name == BLIND else colors[k % len(colors)])
                ax.bar(np.arange(len(sets)) + (k - (len(names) - 1) / 2) * width, mean, width, yerr=std, capsize=1.5,
                       color=color, label=name)
            ax.set_xticks(np.arange(len(sets)), sets, rotation=20, fontsize=7)
            ax.set_yscale("log")
            ax.set_ylabel("MSE vs the original prompt's target", fontsize=8)
            ax.set_title(f"{mode}: prompt ablations (mean ± std over seeds)", fontsize=8)
            ax.legend(fontsize=6, ncol=2)
        n = ab.n_seeds.min()
        save_figure(fig, stem, footer=f"seeds: {n} | none = unablated emulator, weight_blind = baseline without "
                                      "weights in its input (same budget) | a model that reads the weights "
                                      "gets worse under ablation")
