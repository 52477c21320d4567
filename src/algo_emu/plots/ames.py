"""E4 figure: per mode and algorithm, the frozen emulator's output against the algorithm's own
prediction on the held-out rows (every seed pooled), and the three test MSEs with error bars."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
import seaborn as sns

from algo_emu.data.ames_fits import ALGORITHMS
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
    colors = sns.color_palette(PALETTE)
    with figure(ncols=len(ALGORITHMS) + 1, nrows=len(modes), width=3.3, height=3.0) as (fig, axes):
        axes = np.asarray(axes).reshape(len(modes), len(ALGORITHMS) + 1)
        for i, mode in enumerate(modes):
            for j, algo in enumerate(ALGORITHMS):
                ax = axes[i, j]
                sel = preds[(preds["mode"] == mode) & (preds.algorithm == algo)]
                if len(sel) > max_points:  # deterministic thinning for a readable, small file
                    sel = sel.iloc[np.linspace(0, len(sel) - 1, max_points).astype(int)]
                ax.scatter(sel.algorithm_prediction, sel.emulated, s=4, alpha=0.3, lw=0, color=colors[j])
                lo = float(np.nanmin([sel.algorithm_prediction.min(), sel.emulated.min()]))
                hi = float(np.nanmax([sel.algorithm_prediction.max(), sel.emulated.max()]))
                ax.plot([lo, hi], [lo, hi], "--", color="0.4", lw=0.8, label="y = x")
                row = table[(table["mode"] == mode) & (table.algorithm == algo)].iloc[0]
                ax.set_title(f"{mode}: {algo}\nemulation MSE {row.emulation_mse_mean:.3g} ± "
                             f"{row.emulation_mse_std:.2g}", fontsize=8)
                ax.set_xlabel("algorithm's prediction (prompt weights)", fontsize=8)
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
