"""Figures of E6: pure functions of results/tables/essay_curves.csv and essay_equivalences.csv."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns

from algo_emu.plots import OURS_COLOR, PALETTE, figure, save_figure
from algo_emu.tables import require_columns

LABELS = {"model": "trained transformer", "ridge": "ridge = posterior mean", "ols": "OLS (min-norm)",
          "nn": "nearest-neighbour copy", "prior_mean": "prior mean (0)", "dmmse": "discrete-prior Bayes"}


def plot_icl(curves: pd.DataFrame, params: dict, stem) -> list[Path]:
    """Left: MSE vs k (model, shallow model, baselines); right: distance of the model's predictions to each baseline."""
    require_columns(curves, ["variant", "estimator", "k", "mse_mean", "mse_ci_low", "mse_ci_high", "dist_to_model"],
                    "essay_curves")
    g = curves[curves.variant == "gaussian"]
    names = [n for n in g.estimator.unique() if n != "model"]
    colors = dict(zip(names, sns.color_palette(PALETTE)[1:]))
    with figure(ncols=2, width=5.0, height=3.6) as (fig, axes):
        ax = axes[0, 0]
        for n in names:
            t = g[(g.estimator == n) & (g.k >= 1)]
            ax.plot(t.k, t.mse_mean, lw=1.2, ls="--", color=colors[n], label=LABELS.get(n, n))
        t = g[(g.estimator == "model") & (g.k >= 1)]
        ax.fill_between(t.k, t.mse_ci_low, t.mse_ci_high, color=OURS_COLOR, alpha=0.25, lw=0)
        ax.plot(t.k, t.mse_mean, lw=2, color=OURS_COLOR, label=LABELS["model"])
        s = curves[(curves.variant == "shallow") & (curves.estimator == "model") & (curves.k >= 1)]
        if len(s):
            ax.plot(s.k, s.mse_mean, lw=1.5, color="0.3", ls=":", label=f"{params['shallow_layers']}-layer transformer")
        ax.axhline(params["sigma"] ** 2, color="0.5", lw=0.8)
        ax.set_yscale("log")
        prior = g[(g.estimator == "prior_mean") & (g.k >= 1)].mse_mean
        if len(prior):  # OLS's peak at k = d (interpolation threshold) would squash the rest
            ax.set_ylim(top=4 * float(prior.max()))
        ax.set_xlabel("in-context examples k")
        ax.set_ylabel("test MSE")
        ax.legend(fontsize=7)
        ax = axes[0, 1]
        for n in names:
            t = g[(g.estimator == n) & (g.k >= 1)]
            ax.plot(t.k, t.dist_to_model, lw=1.3, color=colors[n], label=LABELS.get(n, n))
        ax.set_yscale("log")
        if len(prior):
            ax.set_ylim(top=4 * float(prior.max()))
        ax.set_xlabel("in-context examples k")
        ax.set_ylabel("mean squared distance to the model")
        ax.set_title("which algorithm the model is closest to", fontsize=9)
        n_seeds = int(g.n_seeds.max())
        footer = (f"E6, in-context linear regression: d={params['d']}, tau={params['tau']:g}, sigma={params['sigma']:g}, "
                  f"trained context {params['k_max']}; mean over {n_seeds} seed(s), band: 95% bootstrap CI; "
                  "grey line: noise floor sigma^2.")
        return save_figure(fig, stem, footer)


def plot_equivalences(table: pd.DataFrame, stem) -> list[Path]:
    """Softmax-vs-linear deviation against eps; ridge-construction error against layers; outlier shifts."""
    require_columns(table, ["check", "value", "result_max"], "essay_equivalences")
    with figure(ncols=3, width=3.8, height=3.4) as (fig, axes):
        ax = axes[0, 0]
        t = table[table.check == "softmax_vs_linear"].sort_values("value")
        ax.loglog(t.value, t.result_max, marker="o", color=OURS_COLOR)
        ax.set_xlabel("softmax scale eps")
        ax.set_ylabel("relative deviation from linear")
        ax.set_title("softmax -> linear as eps -> 0", fontsize=9)
        ax = axes[0, 1]
        for check, lab in (("ridge_lsa_vs_posterior_mean", "L layers vs posterior mean"),
                           ("lsa_vs_gd", "L layers vs L GD steps"),
                           ("ridge_lsa_vs_ridge_gd", "L layers vs L ridge-GD steps")):
            t = table[table.check == check].sort_values("value")
            ax.semilogy(t.value, np.maximum(t.result_max, 1e-17), marker="o", label=lab)
        ax.set_xlabel("layers L")
        ax.set_ylabel("max abs prediction error")
        ax.legend(fontsize=7)
        ax.set_title("exact and convergent constructions", fontsize=9)
        ax = axes[0, 2]
        for where, ls in (("y", "-"), ("x", "--")):
            for kind, c in (("linear", sns.color_palette(PALETTE)[1]), ("softmax", OURS_COLOR)):
                t = table[table.check == f"outlier_{where}_{kind}"].sort_values("value")
                ax.loglog(t.value, t.result_max, ls=ls, marker=".", color=c, label=f"{kind}, outlier in {where}")
        ax.set_xlabel("outlier size delta")
        ax.set_ylabel("prediction shift (RMS)")
        ax.legend(fontsize=7)
        ax.set_title("one outlier example", fontsize=9)
        return save_figure(fig, stem, "E6, hand-built attention in float64 (no training); worst case over seeds.")
