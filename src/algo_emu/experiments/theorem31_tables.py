"""E2's tables and figures from the per-seed records of the model and its weight-blind baseline
(``results/theorem31/{runs,blind}/p<p>/seed<k>/metrics.json``): f_emulation, f_gd_step and
f_emulation_ablation (captions: :func:`caption`).
"""

from __future__ import annotations

import pandas as pd

from algo_emu import ablation as ab
from algo_emu.io import read_json, write_csv
from algo_emu.tables import KEY, last, RunSpec, summarise_by, write_table
from algo_emu.tables import load_runs as _load_runs  # (this module's load_runs is its own RunSpec's)
from pathlib import Path
from typing import Mapping
from algo_emu.report.replication import (Row, Rule, all_of, cite, finite, graded, learned_from_ratio, learned_from_row, scale_of, to_float)

#: a qualitative claim ("approximates f to small error") counts as supported when the error is at most
#: this fraction of the target's variance (the model explains >= 95 % of it) ...
SUPPORT_REL = 0.05
#: ... partly supported up to this fraction (it explains >= 80 %); above it, not supported.
PARTLY_REL = 0.20
RULES = (  # this experiment's verdict rules (algo_emu.report.replication.rule_list)
    Rule("E2", "supported | partly supported | not supported",
         f"trained emulation of f (Theorem 3.1): MSE / Var(target) <= {SUPPORT_REL:g} (>= {1 - SUPPORT_REL:.0%} of "
         f"the target's variance explained): supported; <= {PARTLY_REL:g} (>= {1 - PARTLY_REL:.0%}): partly "
         f"supported; above {PARTLY_REL:g}: not supported. The GD-step rows (Corollary 3.1.2): the same thresholds "
         "on ||step error||^2 / ||exact step||^2."),
)


EXPERIMENT = "theorem31"
F_COLUMNS = ["f", "p", "heads", "mse_mean", "mse_std", "mse_ci_low", "mse_ci_high", "rel_mse_mean", "rel_mse_std",
             "mse_over_blind", "blind_rel_mse_mean", "target_var", "n_seeds", "x_dist", "x_scale"]
GD_COLUMNS = ["f", "p", "eta", "gd_mse_mean", "gd_mse_std", "gd_rel_mean", "gd_rel_std", "step_sq_norm", "n_seeds"]
#: The ablation table's ``mode`` (E2 has one set-up: the experiment the theorem states).
MODE = "theorem"
#: Setting columns of the ablation table (between experiment/mode and ablation).
ABLATION_SETTING = ["f", "p", "heads"]


# --- captions: the text above this experiment's tables (.md) and in their .tex

def _setup(params: dict, runs: pd.DataFrame) -> str:
    devices = ", ".join(sorted(runs.device.unique()))
    return (f"x {params['x_dist']} (scale {params['x_scale']}), y, w standard normal; N={params['n_prompts']} "
            f"(test {params['test_fraction']:.0%}), n={params['n_tokens']}, d={params['d']}, h={params['hidden']}, "
            f"H={params['heads']}, {params['epochs']} epochs, batch {params['batch_size']}, Adam lr {params['lr']}. "
            f"Device: {devices}. The paper reports no number for this experiment.")


#: E2's f_emulation and f_emulation_ablation tables, before the set-up sentence (:func:`_setup`).
CAPTIONS = {
    "f": ("Theorem 3.1: one softmax head emulating f(w^T x_i - y_i) x_i at every token. Test MSE on the "
          "held-out prompts (mean, sample std, 95% bootstrap CI over seeds) and rel_mse = MSE / Var(target) "
          "(1 = predicting the mean). mse_over_blind = MSE / the MSE of the weight-blind baseline (the same "
          "block, data, data order and budget on tokens [x_i; y_i] without w); blind_rel_mse_mean = that "
          "baseline's MSE / Var(target). Part of every target is predictable without w (x_i/2 for sigmoid and "
          "step), so rel_mse is to be read against blind_rel_mse_mean, not against 1: only mse_over_blind < 1 "
          "shows that the weights in the prompt are used. p = tokens after appending p - n learnable tokens. "),
    "ablation": ("Theorem 3.1, prompt ablations: the trained model, frozen (parameters bit-identical before and after), "
                 "on the held-out prompts with w in every token replaced by another prompt's w (other_prompt), the same "
                 "w with its coordinates permuted (permuted), a standard normal vector of the same norm (random) or "
                 "zeros (zeros); the target is always the original prompt's f(w^T x_i - y_i) x_i. none = unablated; "
                 "weight_blind = the baseline trained without w. mse_over_blind = mse_mean / the baseline's mse_mean: "
                 "an ablated MSE near the unablated one would mean the model ignores w; near or above 1 means the "
                 "ablation removed what the model had learnt from w. "),
}


def caption(table: str, params: dict, runs: pd.DataFrame) -> str:
    """The caption of E2's ``table`` (``f``, ``ablation`` or ``gd``)."""
    if table == "gd":
        return _gd_caption(params, runs)
    return CAPTIONS[table] + _setup(params, runs)


def _gd_caption(params: dict, runs: pd.DataFrame) -> str:
    return ("Corollary 3.1.2: the model's per-token outputs averaged with u = (1/n) 1 give the step "
            f"w - eta u^T g (eta = {params['gd_eta']}); error against the exact step w - eta (1/n) sum_i "
            "f(w^T x_i - y_i) x_i. gd_mse: mean squared error per coordinate; gd_rel: squared error / squared "
            "norm of the exact step (eta-free; 1 = not moving w). " + _setup(params, runs))


def _is_blind(record: dict, source: str) -> None:
    if not record.get("weight_blind"):
        raise ValueError(f"{source}: not a weight-blind baseline's metrics")


def _curves(model: str):
    def curves(r: dict) -> list[tuple]:
        """Each f's train loss per epoch."""
        return [(f"f={f} p={r['setting']['p']}", model, epoch, "train loss", v)
                for f, rec in r["by_f"].items() for epoch, v in enumerate(rec.get("train_loss", []), start=1)]
    return curves


#: What a theorem31 record holds, as rows: one per (p, seed, f).
RUNS = RunSpec(
    experiment=EXPERIMENT, rows="by_f",
    columns={
        "f": KEY, "p": "setting.p", "heads": "setting.heads", "seed": "seed",
        "mse": "@.mse", "rel_mse": "@.rel_mse", "target_var": "@.target_var",
        "gd_mse": "@.gd_mse", "gd_rel": "@.gd_rel", "step_sq_norm": "@.step_sq_norm",
        "final_train_loss": last("@.train_loss"),
        "eta": "params.gd_eta", "x_dist": "params.x_dist", "x_scale": "params.x_scale",
        "epochs": "params.epochs", "n_prompts": "params.n_prompts",
        "device": "environment.device", "config_hash": "config_hash",
    },
    setting=("f", "p", "heads"),
    metrics=("mse", "rel_mse", "target_var", "gd_mse", "gd_rel", "step_sq_norm", "final_train_loss"),
    records="theorem31/runs/p*/seed*/metrics.json", curves=_curves("model"),
)
#: The weight-blind baseline's records (refuses a model's record).
BLIND_RUNS = RunSpec(
    experiment=EXPERIMENT, rows="by_f",
    columns={"f": KEY, "p": "setting.p", "heads": "setting.heads", "seed": "seed",
             "mse": "@.mse", "rel_mse": "@.rel_mse", "budget": "budget"},
    setting=("f", "p", "heads"), metrics=("mse", "rel_mse"), check=_is_blind,
    empty="no weight-blind metrics files given",
    records="theorem31/blind/p*/seed*/metrics.json", curves=_curves("weight-blind"),
)


def load_runs(paths: list[str]) -> pd.DataFrame:
    """One row per (p, seed, f) from metrics.json files (:data:`RUNS`)."""
    return _load_runs(paths, RUNS)


def load_blind(paths: list[str]) -> pd.DataFrame:
    """One row per (p, seed, f) from the weight-blind baseline's metrics.json files (:data:`BLIND_RUNS`)."""
    return _load_runs(paths, BLIND_RUNS)


def ablation_rows(metrics: list[str], blind: pd.DataFrame) -> pd.DataFrame:
    """Tidy rows (experiment, mode, f, p, heads, seed, ablation, mse): the frozen model unablated
    (``none``) and ablated, and the weight-blind baseline (``weight_blind``) on the same test prompts.
    The baseline's budget must equal the model's (ValueError naming the key otherwise)."""
    rows = []
    budgets = {(r.p, r.seed): r.budget for r in blind.itertuples()}
    for path in metrics:
        m = read_json(path)
        p, seed = m["setting"]["p"], m["seed"]
        if (p, seed) not in budgets:
            raise ValueError(f"{path}: no weight-blind baseline for p={p}, seed={seed}")
        try:
            ab.check_budget(m["budget"], budgets[(p, seed)])
        except ValueError as exc:
            raise ValueError(f"{path} (p={p}, seed={seed}): {exc}") from None
        for f, r in m["by_f"].items():
            sel = blind[(blind.p == p) & (blind.seed == seed) & (blind.f == f)]
            if len(sel) != 1:
                raise ValueError(f"{path}: no weight-blind baseline for f={f}, p={p}, seed={seed}")
            setting = {"f": f, "p": p, "heads": m["setting"]["heads"]}
            rows += ab.ablation_rows(EXPERIMENT, MODE, setting, seed,
                                     {**r["ablation_mse"], ab.BLIND: float(sel.mse.iloc[0])})
    return pd.DataFrame(rows)


def f_table(runs: pd.DataFrame, params: dict, blind: pd.DataFrame) -> pd.DataFrame:
    order = [(f, p) for f in params["fs"] for p in params["p_sweep"]]
    model = summarise_by(runs, ["f", "p"], ["mse", "rel_mse"], order, means=["heads", "target_var"])
    base = summarise_by(blind, ["f", "p"], [], order, means=["mse", "rel_mse"])
    for (f, p), m_seeds, b_seeds in zip(order, _seeds(runs, order), _seeds(blind, order)):
        if b_seeds != m_seeds:
            raise ValueError(f"f={f}, p={p}: model seeds {m_seeds}, weight-blind seeds {b_seeds}")
    table = model.assign(heads=model.heads_mean.astype(int), mse_over_blind=model.mse_mean / base.mse_mean,
                         blind_rel_mse_mean=base.rel_mse_mean, target_var=model.target_var_mean,
                         x_dist=params["x_dist"], x_scale=params["x_scale"])
    return table[F_COLUMNS]


def _seeds(runs: pd.DataFrame, order: list[tuple]) -> list[list[int]]:
    by = {k: sorted(g.seed.tolist()) for k, g in runs.groupby(["f", "p"])}
    return [by.get(o, []) for o in order]


def gd_table(runs: pd.DataFrame, params: dict) -> pd.DataFrame:
    order = [(f, p) for f in params["fs"] for p in params["p_sweep"]]
    table = summarise_by(runs, ["f", "p"], ["gd_mse", "gd_rel"], order, means={"step_sq_norm": "step_sq_norm"})
    return table.assign(eta=params["gd_eta"])[GD_COLUMNS]


def aggregate(params: dict, metrics: list[str], runs_csv: str, f_csv: str, gd_csv: str, blind_metrics: list[str],
              ablation_csv: str, ablation_runs_csv: str) -> None:
    """The f_emulation, f_gd_step and f_emulation_ablation tables from the per-seed metrics."""
    runs = load_runs(metrics)
    blind = load_blind(blind_metrics)
    tidy = ablation_rows(metrics, blind)           # checks every baseline's budget against its model's
    write_csv(runs_csv, runs.sort_values(["f", "p", "seed"]))
    write_table(f_table(runs, params, blind), f_csv, caption("f", params, runs), label="tab:f-emulation")
    write_csv(ablation_runs_csv, tidy)
    write_table(ab.ablation_table(tidy, ABLATION_SETTING), ablation_csv, caption("ablation", params, runs),
                label="tab:f-emulation-ablation")
    write_table(gd_table(runs, params), gd_csv, caption("gd", params, runs), label="tab:f-gd-step")


def figure(table: str, gd_table: str, runs_csv: str, out: str) -> None:
    """Error vs p, one line per f (writes ``out``.pdf and .png)."""
    from algo_emu.plots import theorem31 as pt

    pt.f_emulation_figure(table, gd_table, runs_csv, out)


def ablation_figure(table: str, runs_csv: str, out: str) -> None:
    """Ablated MSE relative to the weight-blind baseline, per f and p."""
    from algo_emu.plots import ablation as pa

    pa.ablation_figure(table, runs_csv, out, panel="f", hue="p",
                       title="Theorem 3.1: frozen model with w in the prompt ablated")


# ------------------------------------------------------------------ the replication report's rows
def report_rows(tables: Path, config: Mapping, config_name: str) -> list[Row]:
    scale = scale_of("theorem31", config, config_name)
    fe = pd.read_csv(tables / "f_emulation.csv")
    gd = pd.read_csv(tables / "f_gd_step.csv")
    not_comp = ("not reproduced: the published script feeds the target into the model's input and mixes every "
                "token into the target (the published code at commit 6d39297, E2)")
    out = []
    for f, grp in fe.groupby("f", sort=False):
        rec = grp.sort_values("p").iloc[-1].to_dict()
        r = Row("E2", "Theorem 3.1: one softmax head (+ affine maps) emulates f(w^T x - y) x",
                f"f={f}, p={int(rec['p'])}, x ~ {rec.get('x_dist', '?')} (scale {rec.get('x_scale', '?')})",
                paper="qualitative: 'minimal error' (f = tanh; no number reported)" if f == "tanh"
                else "qualitative: any continuously differentiable f (no experiment reported)",
                comparable_mode=not_comp, corrected_mode="the theorem's task; value = MSE / target variance",
                corrected_mean=rec["rel_mse_mean"], scale=scale.text)
        if finite(rec.get("target_var")) and rec["target_var"] > 0:
            r.corrected_ci_low, r.corrected_ci_high = rec["mse_ci_low"] / rec["target_var"], rec["mse_ci_high"] / rec["target_var"]
        r.learned, why = learned_from_row(rec) if "mse_over_blind" in rec else learned_from_ratio(
            to_float(rec["rel_mse_mean"]), "MSE / target variance (rel_mse_mean)")
        if r.learned == "no":
            r.verdict, r.reason = "did not learn", f"{why}; {cite('learned')}"
        else:
            rel = to_float(rec["rel_mse_mean"])
            r.verdict = graded(rel, SUPPORT_REL, PARTLY_REL, scale)
            r.reason = f"{why}; MSE / Var(target) = {rel:.3g}; {cite('E2')}"
        out.append(r)
    for f, grp in gd.groupby("f", sort=False):
        rec = grp.sort_values("p").iloc[-1].to_dict()
        r = Row("E2", "Corollary 3.1.2: averaging the emulated f(w^T x - y) x gives one GD step",
                f"f={f}, p={int(rec['p'])}, eta={rec['eta']}",
                paper="qualitative (no experiment reported)", comparable_mode=not_comp,
                corrected_mode="||step error||^2 / ||exact step||^2 (gd_rel_mean)", corrected_mean=rec["gd_rel_mean"],
                scale=scale.text)
        # the step is averaged from the emulated f: the emulator must itself beat its weight-blind baseline (for
        # sigmoid/step a model ignoring w already gets about half of the target right)
        same = fe[(fe.f == f) & (fe.p == rec["p"])]
        model = learned_from_row(same.iloc[0].to_dict()) if len(same) else ("unknown", "no f_emulation row")
        r.learned, why = all_of([model, learned_from_ratio(to_float(rec["gd_rel_mean"]), "step error / step size (gd_rel_mean)")])
        if r.learned == "no":
            r.verdict, r.reason = "did not learn", f"{why}; {cite('learned')}"
        else:
            r.verdict = graded(rec["gd_rel_mean"], SUPPORT_REL, PARTLY_REL, scale)
            r.reason = f"{why}; {cite('E2')}"
        out.append(r)
    return out
