"""E1's tables, rate fits and figures from its per-seed records (the ``aggregate``, ``fit`` and ``figure`` steps of
:mod:`algo_emu.experiments.heads`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from algo_emu import paper_values
from algo_emu import records
from algo_emu.data import heads as hd
from algo_emu.experiments.heads_settings import METRICS, headline, p_sweep_protocol, settings
from algo_emu.fit import fit_rates, fit_rates_summary
from algo_emu.io import write_json
from algo_emu.records import KEY, Get, RunSpec
from algo_emu.tables import require_columns, summarise_by, write_table

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
    return records.load_runs(paths, RUNS)


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
            if len(per_seed) < 2:
                entry["by_target"][target] = {"status": f"not enough settings: H = {sorted(per_seed)} (a fit needs two)"}
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
