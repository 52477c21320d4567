"""E1's tables, rate fits and figures from its per-seed records (the ``aggregate``, ``fit`` and ``figure`` steps of
:mod:`algo_emu.experiments.heads`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from algo_emu import paper_values
from algo_emu.data import heads as hd
from algo_emu.experiments.heads_settings import METRICS, headline, p_sweep_protocol
from algo_emu.experiments.heads_converged import RULES  # noqa: F401  (E1's own rules: those at convergence)
from algo_emu.fit import fit_rates, fit_rates_summary, too_few
from algo_emu.io import write_json
from algo_emu.tables import Get, KEY, require_columns, RunSpec, summarise_by, write_table
from algo_emu.tables import load_runs as _load_runs  # (this module's load_runs is its own RunSpec's)
from pathlib import Path
import json
from typing import Mapping, Sequence
from algo_emu.report.replication import (MIN_FIT_POINTS, NAN, RATE_READINGS, agreement, cite, finite, first_row, fit_entry, fit_points, gate, gate_cite, learned_from_row, rate_verdict, Row, scale_of)

_SUMMARY = ["mse_mean", "mse_std", "mse_ci_low", "mse_ci_high", "n_seeds", "target_var_mean"]
HEADS_COLUMNS = ["protocol", "target", "metric", "heads", "p", *_SUMMARY, "paper_mse", "paper_std"]
P_COLUMNS = ["protocol", "target", "metric", "p", "heads", *_SUMMARY]


# --- captions: the text above this experiment's tables (.md) and in their .tex

def caption(params: dict, runs: pd.DataFrame, what: str, missing: list[str] | None = None) -> str:
    devices = ", ".join(sorted(runs.device.unique()))
    hashes = sorted(runs.sweep_config_hash.unique())
    text = (f"{what}. Test MSE of the composed head on the held-out {params['test_fraction']:.0%} "
            f"(mean, sample std and 95% bootstrap CI over seeds). Protocol `published` (the published code's: one data "
            f"set and target head for all seeds, softmax over queries = target `reference_code`, metric = mean of "
            f"per-batch means of batch {params['eval_batch_size']}): the paper's values stand beside its "
            f"`reference_code` rows only. Protocol `independent` (ours: a data set and head per seed, exact mean; "
            f"headline target `{params['target']}`). Target `paper` = softmax over keys (the paper's definition). "
            f"target_var_mean = variance of the target output Y (a model that predicts a constant scores about this). "
            f"N={params['n_prompts']}, n={params['n_tokens']}, d={params['d']}, h={params['hidden']}, "
            f"{params['epochs']} epochs, batch {params['batch_size']}, Adam lr {params['lr']}. Device: {devices}. "
            f"Paper values: {paper_values.HEADS_TABLE['source']}.")
    if missing:
        text += f" PARTIAL: {len(missing)} rows missing ({'; '.join(missing)})."
    if len(hashes) > 1:
        text += f" MIXED: records of {len(hashes)} different configurations ({', '.join(hashes)})."
    return text


def _not_a_variant(record: dict, path: str) -> None:
    """A variant's record (``heads.variants``, ours) is refused: the heads tables and fits hold the protocols'
    sweeps only."""
    if "variant" in record or record.get("paper_comparable") is False:
        raise ValueError(f"{path}: a record of the variant {record.get('variant')!r} (heads.variants, ours; "
                         "paper_comparable: false), not of a sweep setting; the heads tables never take variants "
                         "(their table is heads_variants.csv)")


def _curves(r: dict) -> list[tuple]:
    """The K/Q/V emulators' mean train loss per epoch, the composed head's test MSE at the evaluated epochs and
    its final one (the final evaluation is not in the history)."""
    setting, out = f"{r.get('protocol', '?')} H={r['setting']['heads']} p={r['setting']['p']}", []
    for h in r.get("history", []):
        if isinstance(h.get("train_loss"), dict):
            out.append((setting, "model", h["epoch"], "train loss (mean of K/Q/V)",
                        float(np.mean(list(h["train_loss"].values())))))
        if h.get("test_mse") is not None:
            out.append((setting, "model", h["epoch"], "test MSE (composed head)", h["test_mse"]))
    if r.get("mse") is not None and r.get("history"):
        out.append((setting, "model", int(r["params"]["epochs"]), "test MSE (composed head)", r["mse"]))
    return out


#: What a heads record holds, as rows: one per (protocol, setting, seed, target); variants' records refused.
RUNS = RunSpec(
    experiment="heads", rows="mse_by_target",
    columns={
        "protocol": Get("protocol", "independent"), "heads": "setting.heads", "p": "setting.p", "seed": "seed",
        "target": KEY, "mse": "@", "mse_batchmean": "mse_batchmean_by_target.{key}",
        "target_var": Get("target_var_by_target.{key}", math.nan),
        "mse_K": "member_mse.K", "mse_Q": "member_mse.Q", "mse_V": "member_mse.V",
        "epochs": "params.epochs", "n_prompts": "params.n_prompts", "device": "environment.device",
        "config_hash": "config_hash",
        "sweep_config_hash": lambda m, key, item: m.get("sweep_config_hash", m["config_hash"]),
    },
    setting=("protocol", "heads", "p", "target"),
    metrics=("mse", "mse_batchmean", "target_var", "mse_K", "mse_Q", "mse_V"),
    check=_not_a_variant, records="heads/*/runs/*/seed*/metrics.json", curves=_curves,
)


def load_runs(paths: list[str]) -> pd.DataFrame:
    """One row per (protocol, setting, seed, target) from metrics.json files (:data:`RUNS`; a variant's record is
    refused)."""
    return _load_runs(paths, RUNS)


def _target_order(primary: str) -> list[str]:
    return [primary] + [t for t in hd.TARGETS if t != primary]


def _missing(what: str, missing: list, allow_partial: bool) -> None:
    if missing and not allow_partial:
        raise ValueError(f"no runs for {what}: " + ", ".join(map(str, missing)))


def _summary_rows(runs: pd.DataFrame, params: dict, protocol: str, key: str, values: list[int],
                  fixed: dict, missing: list, with_paper: bool) -> list[dict]:
    target0, metric = headline(protocol, params)
    order = [(target, v, *fixed.values()) for target in _target_order(target0) for v in values]
    lost: list[tuple] = []
    table = summarise_by(runs[runs.protocol == protocol], ["target", key, *fixed], {METRICS[metric]: "mse"}, order,
                         means=["target_var"], missing=lost)
    missing += [f"{protocol} {key}={v} " + " ".join(f"{k}={x}" for k, x in zip(fixed, rest)) + f" target={target}"
                for target, v, *rest in lost]
    rows = []
    for row in table.to_dict("records"):
        row = {"protocol": protocol, "target": row["target"], "metric": metric, key: row[key],
               **{k: row[k] for k in fixed}, **{k: row[k] for k in _SUMMARY}}
        if with_paper:
            comparable = protocol == "published" and row["target"] == "reference_code"
            pm, ps = paper_values.paper_heads(row[key]) if comparable else (math.nan, math.nan)
            row |= {"paper_mse": pm, "paper_std": ps}
        rows.append(row)
    return rows


def heads_table(runs: pd.DataFrame, params: dict, allow_partial: bool = False) -> tuple[pd.DataFrame, list[str]]:
    """Heads sweep per protocol and target; the paper's values only beside published/reference_code rows."""
    rows, missing = [], []
    for protocol in params["protocols"]:
        rows += _summary_rows(runs, params, protocol, "heads", params["heads_sweep"], {"p": params["p_heads_sweep"]},
                              missing, with_paper=True)
    _missing("the heads sweep", missing, allow_partial)
    return pd.DataFrame(rows, columns=HEADS_COLUMNS), missing


def prompt_length_table(runs: pd.DataFrame, params: dict, allow_partial: bool = False) -> tuple[pd.DataFrame, list[str]]:
    missing: list[str] = []
    rows = _summary_rows(runs, params, p_sweep_protocol(params), "p", params["p_sweep"], {"heads": params["heads_p_sweep"]},
                         missing, with_paper=False)
    _missing("the prompt-length sweep", missing, allow_partial)
    return pd.DataFrame(rows, columns=P_COLUMNS), missing


def aggregate(params: dict, metrics: list[str], runs_csv: str, heads_csv: str, p_csv: str,
              allow_partial: bool = False) -> dict:
    """The heads and prompt-length tables and the per-seed runs CSV from per-seed records.

    ``allow_partial``: build from whatever settings exist and say which are missing (a committed reference set);
    otherwise a missing setting is an error."""
    runs = load_runs(metrics)
    hashes = sorted(runs.sweep_config_hash.unique())
    if len(hashes) > 1 and not allow_partial:
        raise ValueError(f"records of {len(hashes)} different configurations ({', '.join(hashes)}) would be mixed; "
                         "rerun the stale settings or aggregate them separately")
    table, missing_h = heads_table(runs, params, allow_partial)  # every check before the first write
    ptable, missing_p = prompt_length_table(runs, params, allow_partial)
    from algo_emu.io import write_csv

    write_csv(runs_csv, runs.sort_values(["protocol", "heads", "p", "target", "seed"]))
    write_table(table, heads_csv, caption(params, runs, f"Heads sweep at p = {params['p_heads_sweep']}", missing_h),
                label="tab:heads")
    write_table(ptable, p_csv, caption(params, runs, f"Prompt-length sweep at H = {params['heads_p_sweep']}", missing_p),
                label="tab:prompt-length")
    return {"missing": missing_h + missing_p, "config_hashes": hashes}


def fit(params: dict, runs_csv: str, out_json: str, n_boot: int = 2000) -> dict:
    """Rate fits per protocol (its headline target and metric; both targets under ``by_target``) and of the paper."""
    runs = pd.read_csv(runs_csv)
    require_columns(runs, ["protocol", "heads", "p", "seed", "target", "mse", "mse_batchmean"], runs_csv)
    result = {"model": "MSE(H) = a + b/H (least squares on per-H means) and MSE ~ H^-alpha (log-log least squares)"}
    for protocol in params["protocols"]:
        target0, metric = headline(protocol, params)
        entry = {"headline_target": target0, "metric": metric, "by_target": {}}
        for target in _target_order(target0):
            sel = runs[(runs.protocol == protocol) & (runs.p == params["p_heads_sweep"]) & (runs.target == target)
                       & runs.heads.isin(params["heads_sweep"])]
            per_seed = {int(H): g.sort_values("seed")[METRICS[metric]].tolist() for H, g in sel.groupby("heads")}
            if too_few(per_seed):
                entry["by_target"][target] = {"status": too_few(per_seed)}
            else:
                entry["by_target"][target] = fit_rates(per_seed, n_boot=n_boot) | {"heads": sorted(per_seed)}
        entry.update(entry["by_target"][target0])
        result[protocol] = entry
    pv = paper_values.HEADS_TABLE
    result["paper"] = fit_rates_summary(pv["heads"], pv["mse"], pv["std"], pv["n_seeds"], n_boot=n_boot) | {"source": pv["source"]}
    write_json(out_json, result)
    return result


#: The figures of :func:`figure`.
FIGURE_KINDS = ("heads", "prompt_length")


def figure(kind: str, table: str, runs_csv: str, out: str, fit_json: str | None = None) -> None:
    """The heads (``kind="heads"``, with the fit) or prompt-length figure (writes ``out``.pdf and .png)."""
    if kind not in FIGURE_KINDS:
        raise ValueError(f"kind: {kind!r} is not one of {', '.join(FIGURE_KINDS)}")
    from algo_emu.plots import heads as ph

    if kind == "heads":
        ph.heads_figure(table, fit_json, runs_csv, out)
    else:
        ph.prompt_length_figure(table, runs_csv, out)


# ------------------------------------------------------------------ the replication report's rows
def report_rows(tables: Path, config: Mapping, config_name: str) -> list[Row]:
    rows: list[Row] = []
    heads_cfg = config.get("heads", {})
    scale = scale_of("heads", config, config_name)
    hv = pd.read_csv(tables / "heads_vs_mse.csv")
    has_protocol = "protocol" in hv.columns
    headline = heads_cfg.get("target", "paper")
    comp_mode = "published protocol, target reference_code, mean of per-batch means"
    corr_mode = f"independent seeds, target {headline}, exact MSE"
    if has_protocol:
        comp_sel = hv[(hv.protocol == "published") & (hv.target == "reference_code")]
        corr_sel = hv[(hv.protocol == "independent") & (hv.target == headline)]
    else:
        comp_sel = None
        corr_sel = hv[hv.target == headline] if "target" in hv.columns else hv
        corr_mode = f"target {headline}, exact MSE, independent seeds (results made before the published-protocol mode)"
    no_var = "target_var_mean" not in hv.columns
    pv = paper_values.HEADS_TABLE
    swept = set(int(h) for h in hv.heads.unique()) if "heads" in hv.columns else set()
    for H, pm, ps in zip(pv["heads"], pv["mse"], pv["std"]):
        r = Row("E1", "heads table: test MSE of the emulated head", f"H={H}, p={heads_cfg.get('p_heads_sweep', 60)}",
                paper=f"{pm} +- {ps} ({pv['n_seeds']} seeds)", paper_mean=pm, paper_std=ps, paper_n=pv["n_seeds"],
                comparable_mode=comp_mode if has_protocol else "not available", corrected_mode=corr_mode,
                scale=scale.text)
        corr = first_row(corr_sel[corr_sel.heads == H]) if "heads" in corr_sel.columns else None
        if corr is not None:
            r.corrected_mean, r.corrected_ci_low, r.corrected_ci_high = corr["mse_mean"], corr["mse_ci_low"], corr["mse_ci_high"]
        if H not in swept:
            r.verdict, r.reason = "not run at this scale", f"H={H} is not in heads.heads_sweep {sorted(swept)}; {cite('not-run')}"
            rows.append(r)
            continue
        if not has_protocol:
            r.learned, why = learned_from_row(corr, var_col=None if no_var else "target_var_mean")
            r.verdict = "not available"
            r.reason = ("no `protocol` column in heads_vs_mse.csv: these results predate the published-protocol mode, "
                        "the only one made the way the paper made its numbers; learned (corrected mode): " + why + "; "
                        + cite("not-available"))
            rows.append(r)
            continue
        comp = first_row(comp_sel[comp_sel.heads == H])
        if comp is None:
            r.verdict, r.reason = "not run at this scale", f"no published-protocol row for this H (heads.protocols); {cite('not-run')}"
            rows.append(r)
            continue
        r.compare_with(comp)
        r.learned, why = learned_from_row(comp, var_col="target_var_mean")
        g = gate(r.learned, scale)
        if g:
            r.verdict, r.reason = g, f"{why}; {gate_cite(g)}"
        else:
            r.verdict = agreement(pm, ps, pv["n_seeds"], comp["mse_mean"], comp["mse_std"], comp["n_seeds"])
            r.reason = (f"{why}; paper mean {'inside' if comp['mse_ci_low'] <= pm <= comp['mse_ci_high'] else 'outside'} "
                        f"our 95 % CI; {cite('paper-number')}")
        rows.append(r)
    rows += e1_rate_rows(tables, config, config_name, rows)
    rows += e1_prompt_length_rows(tables, config, config_name)
    from algo_emu.experiments.heads_converged import e1_converged_rows

    rows += e1_converged_rows(tables, config)  # only where `snakemake heads_converged` wrote its tables here
    return rows


def e1_rate_rows(tables: Path, config: Mapping, config_name: str, heads_rows: list[Row]) -> list[Row]:
    fits = json.loads((tables / "heads_fit.json").read_text())
    scale = scale_of("heads", config, config_name)
    out = []
    paper = fit_entry(fits, "paper")
    for key, reading in RATE_READINGS:
        r = Row("E1", f"O(1/H): the paper's own table, {reading}", "H = 1..12",
                paper="O(1/H) (alpha = 1)", paper_mean=1.0, comparable_mode="fit of the paper's published means/stds",
                scale="the paper's table (no run): parametric bootstrap from its means and stds", learned="n/a")
        if paper is None:
            r.verdict, r.reason = "not available", "heads_fit.json has no `paper` fit; " + cite("not-available")
        else:
            lo, hi = paper.get("alpha_ci_total", paper["alpha_ci"])
            r.comparable_mean, r.comparable_ci_low, r.comparable_ci_high = paper["alpha"], lo, hi
            n = len(fit_points(paper, paper_values.HEADS_TABLE["heads"]))
            if n < MIN_FIT_POINTS:
                r.verdict, r.reason = "not testable at this scale", f"fit over {n} H values; {cite('too-few')}"
            else:
                r.verdict, numbers = rate_verdict(key, paper)
                r.reason = f"{numbers}; {cite(key if r.verdict != 'not available' else 'not-available')}"
        out.append(r)

    published = fit_entry(fits, "published")
    independent = fit_entry(fits, "independent")
    if independent is None and published is None and "alpha" in fits:  # old layout: one fit of the headline target
        independent = fits
    hv = pd.read_csv(tables / "heads_vs_mse.csv")
    swept = sorted(int(h) for h in hv.heads.unique()) if "heads" in hv.columns else []
    comp_learned = [x.learned for x in heads_rows if x.experiment == "E1" and x.comparable_mode.startswith("published")
                    and finite(x.comparable_mean)]
    learned = "no" if "no" in comp_learned else ("yes" if comp_learned and all(v == "yes" for v in comp_learned) else "unknown")
    for key, reading in RATE_READINGS:
        r = Row("E1", f"O(1/H): our heads sweep, {reading}", "H in heads.heads_sweep",
                paper="O(1/H) (alpha = 1)", paper_mean=1.0,
                comparable_mode="published protocol" if published else "not available",
                corrected_mode="independent seeds" if independent else "not available", scale=scale.text)
        if independent is not None:
            r.corrected_mean, (r.corrected_ci_low, r.corrected_ci_high) = (
                independent["alpha"], independent.get("alpha_ci_total", independent["alpha_ci"]))
        if published is None:
            r.verdict = "not available"
            r.reason = ("heads_fit.json has no `published` fit (results predate the published-protocol mode, or too "
                        "few H); " + cite("not-available"))
            out.append(r)
            continue
        lo, hi = published.get("alpha_ci_total", published["alpha_ci"])
        r.comparable_mean, r.comparable_ci_low, r.comparable_ci_high = published["alpha"], lo, hi
        r.learned = learned
        points = fit_points(published, swept)
        verdict, numbers = rate_verdict(key, published)
        if len(points) < MIN_FIT_POINTS:
            r.verdict = "not testable at this scale"
            r.reason = f"fit over H = {[int(x) for x in points]} only; {cite('too-few')}; {numbers}"
        elif g := gate(r.learned, scale):
            r.verdict = g
            r.reason = ("some H settings did not learn; " if r.learned == "no" else "") + numbers + "; " + cite(
                "learned" if r.learned == "no" else "comparable")
        else:
            r.verdict, r.reason = verdict, f"{numbers}; {cite(key if verdict != 'not available' else 'not-available')}"
        out.append(r)
    return out


def _loglog_slope(x: Sequence[float], y: Sequence[float]) -> float:
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = (x > 0) & (y > 0) & np.isfinite(y)
    if ok.sum() < 2:
        return NAN
    return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0])


def e1_prompt_length_rows(tables: Path, config: Mapping, config_name: str) -> list[Row]:
    pl = pd.read_csv(tables / "prompt_length_vs_mse.csv")
    scale = scale_of("heads", config, config_name)
    heads_cfg = config.get("heads", {})
    r = Row("E1", "prompt-length sweep: MSE against p at H = 1 (log-log slope)",
            f"p in {sorted(int(p) for p in pl.p.unique())}, H={heads_cfg.get('heads_p_sweep', 1)}",
            paper="no number (the published code sweeps p = 20..110; the paper reports no value)",
            scale=scale.text)
    if "protocol" in pl.columns:
        sel = pl[pl.protocol == "published"]
        if "target" in sel.columns:
            sel = sel[sel.target == "reference_code"] if (sel.target == "reference_code").any() else sel
        r.comparable_mode = "published protocol"
    else:
        sel = pl[pl.target == heads_cfg.get("target", "paper")] if "target" in pl.columns else pl
        r.comparable_mode = "not available"
        r.corrected_mode = "independent seeds (results made before the published-protocol mode)"
    sel = sel.sort_values("p")
    slope = _loglog_slope(sel.p, sel.mse_mean)
    if r.comparable_mode == "published protocol":
        r.comparable_mean = slope
    else:
        r.corrected_mean = slope
    lrn = [learned_from_row(x, var_col="target_var_mean")[0] for x in sel.to_dict("records")]
    r.learned = "no" if "no" in lrn else ("yes" if lrn and all(v == "yes" for v in lrn) else "unknown")
    trend = ", ".join(f"p={int(p)}: {m:.3g}" for p, m in zip(sel.p, sel.mse_mean))
    r.verdict = "did not learn" if r.learned == "no" else "not comparable: the paper reports no number for this sweep"
    r.reason = f"slope of log MSE on log p; per p: {trend}; {gate_cite(r.verdict)}"
    return [r]
