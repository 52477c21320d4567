"""E3's tables and figures from the per-seed evaluation records (``results/statistical/runs/<mode>_H<H>/seed<k>/
metrics.json``): statistical_emulation (beside the paper's Appendix C.1 values) and statistical_ablation
(captions: :func:`caption`, :func:`ablation_caption`).
"""

from __future__ import annotations

import pandas as pd

from algo_emu import ablation as ab
from algo_emu import paper_values
from algo_emu.io import read_json, write_csv
from algo_emu.tables import Get, KEY, last, RunSpec, summarise_by, write_table
from algo_emu.tables import load_runs as _load_runs  # (this module's load_runs is its own RunSpec's)
from pathlib import Path
from typing import Mapping
from algo_emu.report.replication import (Z_AGREE, Row, Rule, agreement_one_model, cite, first_row, gate, gate_cite, learned_from_row, scale_of)


RULES = (  # this experiment's verdict rules (algo_emu.report.replication.rule_list)
    Rule("one-model", "consistent | inconsistent (ours lower|higher)",
         "a paper number made by ONE trained model (E3: the published script trains one unseeded model and "
         "evaluates it on five test sets; its ± is numpy's std over them, ddof = 0) is one draw from the "
         "distribution of trained models, not a mean over models: consistent when |ours - paper| <= "
         f"{Z_AGREE:g} x sqrt(sd_ours^2 (1 + 1/n_ours) + SE_test^2), where sd_ours is our between-model standard "
         "deviation over seeds (how far one model falls from the mean of models), sd_ours^2 / n_ours the "
         "uncertainty of our mean, and SE_test = std_paper x sqrt(k / (k - 1)) / sqrt(k) the test-set noise of the "
         "paper's mean over its k = 5 test sets (ddof = 0 converted to ddof = 1); otherwise inconsistent."),
)


EXPERIMENT = "statistical"
COLUMNS = ["mode", "algorithm", "heads", "mse_mean", "mse_std", "mse_ci_low", "mse_ci_high", "n_seeds",
           "mse_over_blind", "paper_mse", "paper_std", "mse_is", "emulation_mean", "emulation_std", "prediction_mean",
           "prediction_std", "alg_error_mean", "alg_error_std"]
#: Setting columns of the ablation table (between experiment/mode and ablation).
ABLATION_SETTING = ["algorithm", "heads"]
#: Fitted-mode names of the paper's three algorithms (the report's E3 rows).
PAPER_NAME = {"linear": "linear", "ols": "linear", "ridge": "ridge", "lasso": "lasso"}
#: What ``mse`` means in each mode: the paper's loss (against the noisy y) for the published protocol,
#: the emulation error (against the algorithm's own prediction) for the fitted mode.
HEADLINE = {"reference_code": "prediction", "fitted": "emulation"}


# --- captions: the text above this experiment's tables (.md) and in their .tex

def caption(params: dict, runs: pd.DataFrame) -> str:
    devices = ", ".join(sorted(runs.device.unique()))
    return ("Statistical algorithms (Appendix C.1): one model per seed trained on a mixture of algorithms, frozen, "
            f"evaluated per algorithm on {params['eval_prompts']} fresh prompts per seed (mean, sample std, 95% bootstrap "
            "CI over seeds; each seed a full independent run). mse = the headline named by mse_is: reference_code mode, "
            "the paper's loss against the noisy y; fitted mode, the emulation error against the algorithm's own "
            "prediction at the query. emulation / prediction / alg_error: model vs the algorithm's prediction, model vs "
            "noisy y, the algorithm itself vs noisy y. mse_over_blind = mse_mean / the mean mse of the weight-blind "
            "baseline (the same block, data, data order and budget, trained on tokens without the weights). What the "
            "model is asked to do: the algorithm is run outside the model and its weights are written into every "
            "token, so in both modes the model's task is to compute x^T w (+ b) from weights in the prompt; rows of "
            "different algorithms differ in the weights' distribution, not in a procedure the model runs. Whether the "
            "model uses the weights, and in fitted mode the context (x, y of the labelled examples), is what "
            "statistical_ablation measures. "
            f"N={params['n_prompts']}, n={params['n_context']} context (+{params['n_query']} query in fitted mode), "
            f"d={params['d']}, h={params['hidden']}, p={params['p']}, {params['epochs']} epochs, batch "
            f"{params['batch_size']}, Adam lr {params['lr']}. Device: {devices}. "
            f"Paper values (reference_code rows): {paper_values.STATISTICAL_HEADS['source']}.")


def ablation_caption(params: dict, runs: pd.DataFrame) -> str:
    devices = ", ".join(sorted(runs.device.unique()))
    return ("Statistical algorithms (Appendix C.1), prompt ablations: each frozen model (parameters bit-identical "
            "before and after) on the same fresh prompts with the weights in every token replaced by another "
            "prompt's (other_prompt), those the next algorithm of the mixture fitted on the same context "
            "(other_algorithm), the same weights permuted (permuted), a standard normal vector of the same norm "
            "(random) or zeros (zeros); fitted mode also with the context tokens' x and y zeroed (context_zeroed; "
            "weights and queries kept). The target is always the original prompt's (mse as in statistical_emulation: "
            "fitted, vs the algorithm's prediction; reference_code, vs the noisy y). none = unablated; weight_blind "
            "= the baseline trained without the weights. mse_over_blind = mse_mean / the baseline's mse_mean. "
            "An ablated MSE close to none means that part of the prompt is not used; context_zeroed close to none "
            "means the model computes x_q^T w from the weights and does not use the labelled examples. "
            f"N={params['n_prompts']}, {params['epochs']} epochs, h={params['hidden']}, p={params['p']}, "
            f"{params['eval_prompts']} evaluation prompts per algorithm and seed. Device: {devices}.")


def _curves(r: dict) -> list[tuple]:
    """The model's and its weight-blind baseline's train loss per epoch (the baseline's is in the model's record)."""
    setting = f"{r['setting']['mode']} H={r['setting']['heads']}"
    return [(setting, model, epoch, "train loss", v)
            for model, hist in (("model", r.get("train_history", [])),
                                ("weight-blind", r.get("blind", {}).get("train_history", [])))
            for epoch, v in enumerate(hist, start=1)]


#: What a statistical record holds, as rows: one per (mode, heads, seed, algorithm).
RUNS = RunSpec(
    experiment=EXPERIMENT, rows="errors",
    columns={
        "mode": "mode", "heads": "setting.heads", "seed": "seed", "algorithm": KEY,
        "mse": lambda m, key, e: e[m["headline"]], "mse_is": "headline", "emulation": "@.emulation",
        "prediction": "@.prediction", "alg_error": "@.algorithm",
        "final_train_loss": last("train_history"),
        "epochs": "params.epochs", "n_prompts": "params.n_prompts",
        "bit_identical": "frozen.bit_identical", "device": "environment.train.device", "config_hash": "config_hash",
        "blind_mse": Get("blind.mse.{key}", float("nan")),
    },
    setting=("mode", "heads", "algorithm"),
    metrics=("mse", "emulation", "prediction", "alg_error", "final_train_loss", "blind_mse"),
    records="statistical/runs/*/seed*/metrics.json", curves=_curves,
)


def load_runs(paths: list[str]) -> pd.DataFrame:
    """One row per (mode, heads, seed, algorithm) from metrics.json files (:data:`RUNS`)."""
    return _load_runs(paths, RUNS)


def ablation_rows(paths: list[str]) -> pd.DataFrame:
    """Tidy rows (experiment, mode, algorithm, heads, seed, ablation, mse): the frozen model unablated
    (``none``) and ablated, and the weight-blind baseline (``weight_blind``), on the same fresh prompts."""
    rows = []
    for path in paths:
        mt = read_json(path)
        if "blind" not in mt or "ablation_mse" not in mt:
            raise ValueError(f"{path}: no weight-blind baseline or ablations (evaluate with blind_path)")
        try:
            ab.check_budget(mt["budget"] or {}, mt["blind"]["budget"])
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
        for alg, mses in mt["ablation_mse"].items():
            rows += ab.ablation_rows(EXPERIMENT, mt["mode"], {"algorithm": alg, "heads": mt["setting"]["heads"]},
                                     mt["seed"], {**mses, ab.BLIND: mt["blind"]["mse"][alg]})
    return pd.DataFrame(rows)


def paper_value(mode: str, algorithm: str, H: int) -> tuple[float, float]:
    """(mean, std) of the paper's figure for reference_code lasso/ridge/linear, else (nan, nan)."""
    pv = paper_values.STATISTICAL_HEADS
    if mode != "reference_code" or algorithm not in pv or H not in pv["heads"]:
        return float("nan"), float("nan")
    i = pv["heads"].index(H)
    return pv[algorithm]["mean"][i], pv[algorithm]["std"][i]


def emulation_table(runs: pd.DataFrame, params: dict) -> pd.DataFrame:
    from algo_emu.data.statistical_sets import algorithms  # imports torch: only when a table is made

    order = [(mode, alg, H) for mode in params["modes"] for alg in algorithms(params, mode) for H in params["heads_sweep"]]
    no_blind = set(runs.loc[runs.blind_mse.isna(), ["mode", "algorithm", "heads"]].itertuples(index=False, name=None))
    for mode, alg, H in order:
        if (mode, alg, H) in no_blind:
            raise ValueError(f"mode={mode}, algorithm={alg}, H={H}: a run has no weight-blind baseline")
    table = summarise_by(runs, ["mode", "algorithm", "heads"], ["mse", "emulation", "prediction", "alg_error"], order,
                         means=["blind_mse"])
    paper = [paper_value(mode, alg, H) for mode, alg, H in order]
    table = table.assign(mse_over_blind=table.mse_mean / table.blind_mse_mean, paper_mse=[pm for pm, _ in paper],
                         paper_std=[ps for _, ps in paper], mse_is=[HEADLINE[mode] for mode, _, _ in order])
    return table[COLUMNS]


def aggregate(params: dict, metrics: list[str], runs_csv: str, table_csv: str, ablation_csv: str | None = None,
              ablation_runs_csv: str | None = None) -> None:
    """statistical_emulation table (and, given ``ablation_csv``, statistical_ablation) from per-seed metrics."""
    runs = load_runs(metrics)
    if not runs.bit_identical.all():
        raise ValueError("a run's frozen model changed during evaluation")
    tidy = ablation_rows(metrics)  # checks every baseline's budget against its model's
    write_csv(runs_csv, runs.sort_values(["mode", "heads", "algorithm", "seed"]))
    write_table(emulation_table(runs, params), table_csv, caption(params, runs), label="tab:statistical")
    if ablation_csv:
        write_csv(ablation_runs_csv, tidy)
        write_table(ab.ablation_table(tidy, ABLATION_SETTING), ablation_csv, ablation_caption(params, runs),
                    label="tab:statistical-ablation")


def figure(table: str, runs_csv: str, out: str) -> None:
    """Loss vs heads, panels Lasso / Ridge / Linear, with the paper's values (writes <out>.pdf and <out>.png)."""
    from algo_emu.plots import statistical as ps

    ps.statistical_heads_figure(table, runs_csv, out)


def ablation_figure(table: str, runs_csv: str, out: str) -> None:
    """Ablated MSE relative to the weight-blind baseline, per mode and algorithm (writes <out>.pdf and <out>.png)."""
    from algo_emu.plots import ablation as pa

    pa.ablation_figure(table, runs_csv, out, panel=["mode", "algorithm"], hue="heads",
                       title="Appendix C.1: frozen model with the weights in its prompt ablated")


# ------------------------------------------------------------------ the replication report's rows
def report_rows(tables: Path, config: Mapping, config_name: str) -> list[Row]:
    scale = scale_of("statistical", config, config_name)
    st = pd.read_csv(tables / "statistical_emulation.csv")
    sp = paper_values.STATISTICAL_HEADS
    n_paper = 5  # the published script's five evaluation seeds (one model, five test sets)
    modes = set(st["mode"].unique())
    swept = set(int(h) for h in st.heads.unique())
    out = []
    for algo in ("lasso", "ridge", "linear"):
        for i, H in enumerate(sp["heads"]):
            pm, ps = sp[algo]["mean"][i], sp[algo]["std"][i]
            r = Row("E3", f"Appendix C.1 figure: {algo} loss against H", f"{algo}, H={H}",
                    paper=f"{pm} +- {ps} (one model, 5 test sets, ddof 0)", paper_mean=pm, paper_std=ps,
                    paper_n=n_paper,
                    comparable_mode="reference_code (published protocol: loss vs noisy y)",
                    corrected_mode="fitted (emulation error vs the algorithm's own prediction)", scale=scale.text)
            fitted = st[(st["mode"] == "fitted") & (st.algorithm.map(lambda a: PAPER_NAME.get(a, a)) == algo) & (st.heads == H)]
            corr = first_row(fitted)
            if corr is not None:
                r.corrected_mean, r.corrected_ci_low, r.corrected_ci_high = corr["mse_mean"], corr["mse_ci_low"], corr["mse_ci_high"]
            if H not in swept:
                r.verdict = "not run at this scale"
                r.reason = f"H={H} is not in statistical.heads_sweep {sorted(swept)}; {cite('not-run')}"
                out.append(r)
                continue
            if "reference_code" not in modes:
                r.verdict, r.reason = "not run at this scale", f"statistical.modes has no reference_code; {cite('not-run')}"
                out.append(r)
                continue
            comp = first_row(st[(st["mode"] == "reference_code") & (st.algorithm == algo) & (st.heads == H)])
            if comp is None:
                r.verdict, r.reason = "not available", f"no reference_code row for {algo}, H={H}; {cite('not-available')}"
                out.append(r)
                continue
            r.compare_with(comp)
            r.learned, why = learned_from_row(comp)
            g = gate(r.learned, scale)
            note = "the paper's value is one trained model's (its std: five test sets of it); ours: independent models"
            if g:
                r.verdict, r.reason = g, f"{why}; {note}; {gate_cite(g)}"
            else:
                r.verdict, z = agreement_one_model(pm, ps, n_paper, comp["mse_mean"], comp["mse_std"], comp["n_seeds"])
                r.reason = (f"{why}; {note}; |ours - paper| = {z:.2f} x the combined spread (one model's distance from "
                            f"the mean of models, our mean's SE, the paper's test-set SE); {cite('one-model')}")
            out.append(r)
    return out
