"""E4's tables and figures from the evaluation's per-seed records (``results/ames/<mode>/seed<k>/metrics.json``).

``aggregate`` writes results/tables/ames.{csv,md,tex}, ames_ablation.{csv,md,tex} and ames_runs.csv (captions:
:mod:`algo_emu.report.captions`); ``figure`` draws results/figures/ames.{pdf,png} and ames_ablation.{pdf,png}.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from algo_emu import ablation as abl
from algo_emu import records
from algo_emu.data.ames_fits import ALGORITHMS
from algo_emu.data.ames_prompts import prompt_sets
from algo_emu.io import read_json, write_csv
from algo_emu.records import KEY, Get, RunSpec
from algo_emu.report import captions
from algo_emu.tables import summarise_by, write_table

AMES_COLUMNS = [
    "mode", "algorithm", "emulation_mse_mean", "emulation_mse_std", "emulation_mse_ci_low", "emulation_mse_ci_high",
    "prediction_mse_mean", "prediction_mse_std", "algorithm_mse_mean", "algorithm_mse_std", "n_seeds",
    "spread_mse_mean", "target_var_mean", "blind_mse_mean", "mse_over_blind",
    "alpha_mean", "n_nonzero_coef_mean", "n_features_mean", "all_coef_zero", "intercept_in_prompt", "target",
]


def _has_prompt_sets(record: Mapping, source: str) -> None:
    if "prompt_sets" not in record:
        raise ValueError(f"{source}: metrics without prompt_sets (written by an older version): rerun `ames evaluate`")


def _curves(r: dict) -> list[tuple]:
    """The emulator's and its weight-blind baseline's train loss per epoch (both in the emulator's record)."""
    return [(str(r["mode"]), model, h["epoch"], "train loss", h["train_loss"])
            for model, hist in (("model", r.get("history", [])), ("weight-blind", r.get("blind_history") or []))
            for h in hist]


#: What an ames record holds, as rows: one per (mode, prompt set, seed).
RUNS = RunSpec(
    experiment="ames", rows="prompt_sets", check=_has_prompt_sets,
    columns={
        "mode": "mode", "algorithm": KEY, "seed": "seed", "emulation_mse": "@.emulation_mse",
        "prediction_mse": "@.prediction_mse", "algorithm_mse": Get("@.algorithm_mse", None),
        "algorithm_sklearn_mse": Get("@.algorithm_sklearn_mse", None),
        "train_emulation_mse": Get("@.train_emulation_mse", None), "target_mse": "@.target_mse",
        "blind_mse": Get("@.blind_mse", None), "mse_over_blind": Get("@.mse_over_blind", None),
        "spread_mse": "@.spread_mse", "target_var": "@.target_var", "n_prompts": "@.n_prompts",
        "alpha": Get("@.alpha", None), "n_nonzero_coef": Get("@.n_nonzero_coef", None), "n_features": "n_features",
        "all_coef_zero": Get("@.all_coef_zero", None), "hidden": "hidden", "epochs": "params.epochs",
        "bit_identical": lambda m, key, r: m["frozen"]["bit_identical"] and (m.get("blind_frozen") or {}).get(
            "bit_identical", True),
        "device": "environment.device", "config_hash": "config_hash",
        "data_provenance": lambda m, key, r: captions.data_provenance([m]),
    },
    setting=("mode", "algorithm"), records="ames/*/seed*/metrics.json", curves=_curves,
    metrics=("emulation_mse", "prediction_mse", "algorithm_mse", "algorithm_sklearn_mse", "train_emulation_mse",
             "target_mse", "blind_mse", "mse_over_blind", "spread_mse", "target_var"),
)
#: Columns of ames_runs.csv, in order.
RUN_COLUMNS = list(RUNS.columns)


def load_runs(paths: Sequence[str]) -> pd.DataFrame:
    """One row per (mode, prompt set, seed) from metrics.json files (:data:`RUNS`)."""
    return records.load_runs(paths, RUNS)


def ablation_runs(paths: Sequence[str]) -> pd.DataFrame:
    """Tidy per-seed ablation rows (:func:`algo_emu.ablation.ablation_rows`; setting column ``algorithm``)."""
    rows = []
    for path in paths:
        m = read_json(path)
        for name, r in m["prompt_sets"].items():
            rows += abl.ablation_rows("ames", m["mode"], {"algorithm": name}, m["seed"], r["ablations"])
    return pd.DataFrame(rows)


def ablation_summary(paths: Sequence[str], modes: Sequence[str]) -> pd.DataFrame:
    """:func:`algo_emu.ablation.ablation_table` of every (mode, prompt set), rows in table order."""
    table = abl.ablation_table(ablation_runs(paths), ["algorithm"])
    order = {(m, a): i for i, (m, a) in enumerate((m, a) for m in modes for a in prompt_sets(m))}
    key = table.apply(lambda r: order.get((r["mode"], r["algorithm"]), len(order)), axis=1)
    return table.assign(_k=key).sort_values("_k", kind="stable").drop(columns="_k").reset_index(drop=True)


def ames_table(runs: pd.DataFrame, modes: Sequence[str], ablations: pd.DataFrame | None = None) -> pd.DataFrame:
    order = [(mode, algo) for mode in modes for algo in prompt_sets(mode)]
    flags = runs.assign(_blind_all=pd.to_numeric(runs.blind_mse, errors="coerce").notna(),
                        _coef_zero=runs.all_coef_zero.astype(bool))
    summary = summarise_by(flags, ["mode", "algorithm"], ["emulation_mse", "prediction_mse", "algorithm_mse"], order,
                           means=["spread_mse", "target_var", "blind_mse", "target_mse", "alpha", "n_nonzero_coef",
                                  "n_features", "_blind_all", "_coef_zero"])
    rows = []
    for r in summary.to_dict("records"):
        held = r["algorithm"] not in ALGORITHMS
        nan = float("nan")
        rows.append({
            "mode": r["mode"], "algorithm": r["algorithm"],
            **{k: r[k] for k in ("emulation_mse_mean", "emulation_mse_std", "emulation_mse_ci_low", "emulation_mse_ci_high")},
            **{k: nan if held else r[k] for k in ("prediction_mse_mean", "prediction_mse_std", "algorithm_mse_mean",
                                                   "algorithm_mse_std")},
            "n_seeds": r["n_seeds"], "spread_mse_mean": r["spread_mse_mean"], "target_var_mean": r["target_var_mean"],
            "blind_mse_mean": r["blind_mse_mean"],
            "mse_over_blind": float(r["target_mse_mean"] / r["blind_mse_mean"]) if r["_blind_all_mean"] == 1.0 else nan,
            "alpha_mean": r["alpha_mean"],
            "n_nonzero_coef_mean": nan if held else r["n_nonzero_coef_mean"],
            "n_features_mean": r["n_features_mean"],
            "all_coef_zero": False if held else bool(r["_coef_zero_mean"] == 1.0),
            "intercept_in_prompt": r["mode"] == "corrected",
            "target": "encoded prediction" if r["mode"] == "corrected" else "log price",
        })
    table = pd.DataFrame(rows, columns=AMES_COLUMNS)
    if ablations is not None:  # the shared mechanism's ratio; equal to the one above (a test checks it)
        tmp = table.assign(_t=[float(runs[(runs["mode"] == r["mode"]) & (runs.algorithm == r["algorithm"])]
                                     .target_mse.mean()) for _, r in table.iterrows()])
        table["mse_over_blind"] = abl.over_blind(tmp, ablations, on=["mode", "algorithm"], column="_t")
    return table


def aggregate(modes: Sequence[str], metrics_paths: Sequence[str], table_csv: str | Path, runs_csv: str | Path,
              ablation_csv: str | Path | None = None) -> None:
    """The ames table (and, given ``ablation_csv``, its ablation table) and the per-seed runs CSV."""
    metrics = [read_json(p) for p in metrics_paths]
    runs = load_runs(metrics_paths)
    write_csv(runs_csv, runs.sort_values(["mode", "algorithm", "seed"]))
    ablations = ablation_summary(metrics_paths, modes) if ablation_csv is not None else None
    table = ames_table(runs, modes, ablations)
    write_table(table, table_csv, captions.ames(runs, metrics, table), label="tab:ames")
    if ablation_csv is not None:
        write_table(ablations, ablation_csv, captions.ames_ablation(ablations, metrics), label="tab:ames_ablation")


def figure(table: str, runs_csv: str, predictions: Sequence[str], out: str, ablation_table: str | None = None,
           ablation_out: str | None = None) -> None:
    """Emulated vs algorithm scatter and error bars per algorithm (and, given ``ablation_table``, the ablation
    figure)."""
    from algo_emu.plots import ames as pa

    pa.ames_figure(table, runs_csv, predictions, out)
    if ablation_table:
        pa.ablation_figure(ablation_table, table, ablation_out)
