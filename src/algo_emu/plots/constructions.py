"""Figures of E5 (hand-built frozen attention): pure functions of the construction tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns

from algo_emu.plots import FIT_COLOR, OURS_COLOR, PALETTE, figure, save_figure
from algo_emu.tables import require_columns

FLOOR = 1e-26  # below: float64 rounding of the scores, not the mechanism


def _footer(table: pd.DataFrame, what: str) -> str:
    seeds = int(table["n_seeds"].max()) if "n_seeds" in table else None
    return (f"E5, hand-built two-layer softmax attention (no training), float64; {what}; "
            f"mean over {seeds} seeds, bars: 95% bootstrap CI." if seeds else f"E5, float64; {what}.")


def _errorbars(ax, x, mean, lo, hi, **kw):
    mean = np.asarray(mean, float)
    yerr = np.vstack([np.clip(mean - np.asarray(lo, float), 0, None), np.clip(np.asarray(hi, float) - mean, 0, None)])
    ax.errorbar(x, mean, yerr=yerr, capsize=2.5, marker="o", ms=4, lw=1.3, **kw)


def _floor(ax):
    lo, hi = ax.get_ylim()
    if lo >= FLOOR:
        return
    ax.axhspan(lo, FLOOR, color="0.9", zorder=0)
    ax.set_ylim(lo, hi)
    ax.text(0.99, 0.02, "float64 rounding", transform=ax.transAxes, ha="right", va="bottom", fontsize=7, color="0.4")


def _mark_ends(ax, x, mse, table: pd.DataFrame, label: bool = True) -> bool:
    """Ring the settings where some read-out values lie within the end margin of ``end_tol`` (their error is
    not covered by that tolerance); tables written before the column existed are drawn unmarked."""
    if "end_flagged_mean" not in table:
        return False
    flagged = table["end_flagged_mean"].to_numpy() > 0
    if flagged.any():
        ax.scatter(np.asarray(x)[flagged], np.asarray(mse)[flagged], s=90, facecolors="none", edgecolors="0.2",
                   lw=1.0, zorder=5, label="values within the end margin (end_tol)" if label else None)
    return bool(flagged.any())


def plot_beta(table: pd.DataFrame, stem) -> list[Path]:
    require_columns(table, ["beta_d2", "mse_mean", "mse_ci_low", "mse_ci_high", "kqv_mse_mean"], "construction_beta")
    t = table.sort_values("beta_d2")
    with figure() as (fig, ax):
        _errorbars(ax, t["beta_d2"], t["mse_mean"], t["mse_ci_low"], t["mse_ci_high"], color=OURS_COLOR,
                   label="head output (layer 2)")
        ax.plot(t["beta_d2"], t["kqv_mse_mean"], ls="--", marker=".", color=FIT_COLOR, label="K, Q, V read-outs (layer 1)")
        _mark_ends(ax, t["beta_d2"], t["mse_mean"], t)
        ax.set_xscale("log")
        ax.set_yscale("log")
        _floor(ax)
        ax.set_xlabel(r"read-out sharpness $\beta D^2$ (grid fixed)")
        ax.set_ylabel("MSE vs exact head")
        P, R = int(t["P"].iloc[0]), float(t["grid_half_width"].iloc[0])
        title = f"P = {P} grid tokens on [-{R:g}, {R:g}], n = {int(t['n'].iloc[0])}, d = {int(t['d'].iloc[0])}"
        if "fit_rate" in t and np.isfinite(t["fit_rate"].iloc[0]):
            title += f"\nfalling branch: MSE ~ exp(-{t['fit_rate'].iloc[0]:.2f} beta), theory {t['theory_rate'].iloc[0]:.2f}"
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8, loc="upper center")
        return save_figure(fig, stem, _footer(t, "error vs beta"))


def plot_p(table: pd.DataFrame, stem) -> list[Path]:
    require_columns(table, ["policy", "P", "mse_mean", "mse_ci_low", "mse_ci_high"], "construction_p")
    colors = sns.color_palette(PALETTE)
    with figure(width=5.4) as (fig, ax):
        marked = False
        for i, (pol, grp) in enumerate(table.groupby("policy", sort=False)):
            g = grp.sort_values("P")
            label = pol
            if "fit_slope" in g and np.isfinite(g["fit_slope"].iloc[0]):
                label += f" (slope {g['fit_slope'].iloc[0]:.2f})"
            _errorbars(ax, g["P"], g["mse_mean"], g["mse_ci_low"], g["mse_ci_high"], color=colors[i % len(colors)],
                       label=label)
            marked = _mark_ends(ax, g["P"], g["mse_mean"], g, label=not marked) or marked
        ax.set_xscale("log")
        ax.set_yscale("log")
        _floor(ax)
        ax.set_xlabel("P (grid tokens in the prompt)")
        ax.set_ylabel("MSE vs exact head")
        t = table.iloc[0]
        ax.set_title(f"n = {int(t['n'])}, d = {int(t['d'])}, grid [-{t['grid_half_width']:g}, {t['grid_half_width']:g}]"
                     "; theory slope -2 at fixed beta D^2", fontsize=9)
        ax.legend(fontsize=7)
        return save_figure(fig, stem, _footer(table, "error vs prompt length P"))


def _plot_knob(table: pd.DataFrame, stem, knob: str, xlabel: str) -> list[Path]:
    require_columns(table, [knob, "mse_mean", "mse_ci_low", "mse_ci_high", "max_abs_s"], f"construction_{knob}")
    t = table.sort_values(knob)
    with figure() as (fig, ax):
        _errorbars(ax, t[knob], t["mse_mean"], t["mse_ci_low"], t["mse_ci_high"], color=OURS_COLOR, label="head output")
        ax.plot(t[knob], t["kqv_mse_mean"], ls="--", marker=".", color=FIT_COLOR, label="K, Q, V read-outs")
        _mark_ends(ax, t[knob], t["mse_mean"], t)
        ax.set_yscale("log")
        _floor(ax)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("MSE vs exact head")
        r = t.iloc[0]
        ax.set_title(f"P = {int(r['P'])}, beta D^2 = {r['beta_d2']:.3g}, grid [-{r['grid_half_width']:g}, "
                     f"{r['grid_half_width']:g}]", fontsize=9)
        for x, m, s in zip(t[knob], t["mse_mean"], t["max_abs_s"]):
            ax.annotate(f"{s:.1f}", (x, m), textcoords="offset points", xytext=(0, 6), fontsize=6, ha="center", color="0.4")
        ax.legend(fontsize=8, title="labels: largest |u^T x|", title_fontsize=7)
        return save_figure(fig, stem, _footer(t, f"error vs {knob}"))


def plot_library(table: pd.DataFrame, stem) -> list[Path]:
    require_columns(table, ["algorithm", "mse_mean", "mse_ci_low", "mse_ci_high"], "construction_library")
    t = table.reset_index(drop=True)
    with figure(width=5.6) as (fig, ax):
        y = np.arange(len(t))
        mean = t["mse_mean"].to_numpy()
        xerr = np.vstack([np.clip(mean - t["mse_ci_low"], 0, None), np.clip(t["mse_ci_high"] - mean, 0, None)])
        ax.barh(y, mean, xerr=xerr, color=OURS_COLOR, capsize=2.5)
        ax.set_yticks(y, t["algorithm"])
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("MSE vs the exact algorithm")
        r = t.iloc[0]
        sha = r.get("module_sha256", "")
        ax.set_title(f"one frozen module ({r.get('capacity', '')}), P = {int(r['P'])}\nweights sha256 {sha}", fontsize=8)
        return save_figure(fig, stem, _footer(t, "algorithms switched by the prompt only"))


def plot_multistep(table: pd.DataFrame, stem) -> list[Path]:
    require_columns(table, ["loss", "t", "err_inf_mean", "err_inf_ci_low", "err_inf_ci_high", "bound_inf_mean"],
                    "construction_multistep")
    colors = sns.color_palette(PALETTE)
    with figure(width=5.4) as (fig, ax):
        for i, (loss, g) in enumerate(table.groupby("loss", sort=False)):
            g = g.sort_values("t")
            c = colors[i % len(colors)]
            _errorbars(ax, g["t"], g["err_inf_mean"], g["err_inf_ci_low"], g["err_inf_ci_high"], color=c,
                       label=f"{loss}: error after t steps")
            ax.plot(g["t"], g["bound_inf_mean"], ls="--", color=c, lw=1, label=f"{loss}: t * eps")
        ax.set_yscale("log")
        ax.set_xlabel("GD steps t (stacked modules)")
        ax.set_ylabel(r"$\|\hat w^{(t)} - w^{(t)}\|_\infty$")
        r = table.iloc[0]
        ax.set_title(f"P = {int(r['P'])}, beta D^2 = {r['beta_d2']:g}, eta = {r['eta']:g}", fontsize=9)
        ax.legend(fontsize=7, ncol=2)
        return save_figure(fig, stem, _footer(table, "multi-step in-context GD"))


def plot(kind: str, table: pd.DataFrame, stem) -> list[Path]:
    """Dispatch on ``kind`` (beta, p, n, d, library, multistep)."""
    if kind == "beta":
        return plot_beta(table, stem)
    if kind == "p":
        return plot_p(table, stem)
    if kind == "n":
        return _plot_knob(table, stem, "n", "n (data tokens)")
    if kind == "d":
        return _plot_knob(table, stem, "d", "d (data dimension; h = key_ratio * d)")
    if kind == "library":
        return plot_library(table, stem)
    if kind == "multistep":
        return plot_multistep(table, stem)
    raise ValueError(f"unknown construction figure {kind!r}")
