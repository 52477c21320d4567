"""E1 at convergence (ours, never paper-comparable): which training protocol converges at every H, and the heads table
trained with it.

Two steps, each behind a named target that ``all`` does not build:

* ``snakemake heads_convergence``: every candidate of ``heads.convergence.candidates`` is trained for its epochs E
  and for 2E (the same lr and schedule; a cosine schedule is stretched over 2E) at every H of ``heads.heads_sweep``,
  p = ``heads.p_heads_sweep``, under the published protocol, for ``heads.convergence.seeds``, through the heads
  ``train`` step (the variants' way: :func:`algo_emu.experiments.heads_settings.candidate_train_params`).
  :func:`convergence_table` applies :data:`CRITERION` and writes ``heads_convergence.{csv,md}``.
* ``snakemake heads_converged``: :func:`require_converged` refuses unless the candidate ``heads.converged.protocol``
  converged at every H; then that candidate at every H for the top-level seeds under each protocol of
  ``heads.converged.protocols``; :func:`converged_table` writes ``heads_converged.{csv,md}``, the per-seed
  ``heads_converged_runs.csv``, the O(1/H) fits and the verdicts ([falls-with-H], [converged-rate];
  :mod:`algo_emu.report.replication`) in ``heads_converged_fit.json``; :func:`converged_figure` draws the paper's
  table, our 50-epoch protocol and the converged table side by side.

Every record is labelled ``variant: convergence-<name>-x1|x2`` or ``converged-<name>`` and
``paper_comparable: false``, so the sweep's tables refuse it.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from algo_emu.experiments.heads_settings import BUDGETS, candidate, candidates, run_label
from algo_emu.experiments.step_keys import OMITTED_AT
from algo_emu.fit import fit_rates
from algo_emu.io import read_json, write_csv, write_json, write_text
from algo_emu.tables import summarise, to_markdown

CONVERGENCE_COLUMNS = ["candidate", "epochs", "lr", "lr_schedule", "heads", "p", "n_seeds", "mse_mean_E",
                       "mse_mean_2E", "rel_change", "converges", "converges_everywhere", "selected"]
RUN_COLUMNS = ["candidate", "protocol", "heads", "p", "seed", "epochs", "lr", "lr_schedule", "mse", "target_var"]
CONVERGED_COLUMNS = ["candidate", "protocol", "target", "metric", "heads", "p", "mse_mean", "mse_std", "mse_ci_low",
                     "mse_ci_high", "n_seeds", "target_var_mean"]


def criterion(params: dict) -> str:
    """The convergence criterion, as every table states it before its numbers."""
    conv = params["convergence"]
    return (f"Convergence criterion (stated before the numbers): a candidate with an epoch budget E converges at H when "
            f"the mean over the selection seeds {list(conv['seeds'])} of the composed head's final test MSE after 2E "
            f"epochs (the same lr and schedule, a cosine schedule stretched over 2E) is within "
            f"{conv['tolerance']:g} (relative, either direction) of the one after E epochs: |m(2E) - m(E)| <= "
            f"{conv['tolerance']:g} m(E). It converges when it does so at every H of heads.heads_sweep "
            f"{list(params['heads_sweep'])} (p = {params['p_heads_sweep']}, published protocol); the first candidate "
            "of heads.convergence.candidates that converges is the selected protocol.")


def _lr_schedule(prm: dict) -> str:
    return prm.get("lr_schedule", OMITTED_AT["lr_schedule"])


def _check_budget(path: str, rec: dict, c: dict, mult: int) -> None:
    prm = rec["params"]
    want = (c["epochs"] * mult, float(c["lr"]), c["lr_schedule"])
    got = (prm["epochs"], float(prm["lr"]), _lr_schedule(prm))
    if got != want:
        raise ValueError(f"{path}: trained with (epochs, lr, lr_schedule) = {got}, not heads.convergence.candidates"
                         f"[{c['name']}]'s {want}; rerun it (snakemake reruns a changed candidate's jobs)")


def _read(path: str, label: str) -> dict:
    rec = read_json(path)
    if rec.get("variant") != label or rec.get("paper_comparable") is not False:
        raise ValueError(f"{path}: not a record of {label!r} (variant={rec.get('variant')!r}, "
                         f"paper_comparable={rec.get('paper_comparable')!r})")
    return rec


# ----------------------------------------------------------------------------------------- the convergence check


def convergence_check(runs: pd.DataFrame, params: dict) -> pd.DataFrame:
    """The criterion on per-seed final head MSEs (columns candidate, budget (x1/x2), heads, seed, mse): one row per
    (candidate, H) in config order; a missing run is an error naming it."""
    conv = params["convergence"]
    tol = float(conv["tolerance"])
    rows = []
    for c in candidates(params):
        for H in params["heads_sweep"]:
            means = {}
            for budget in BUDGETS:
                sel = runs[(runs.candidate == c["name"]) & (runs.budget == budget) & (runs.heads == H)]
                missing = sorted(set(conv["seeds"]) - set(int(s) for s in sel.seed))
                if missing:
                    raise ValueError(f"heads.convergence: no run of candidate {c['name']} at {budget} (H = {H}) for "
                                     f"seed(s) {missing}")
                means[budget] = float(sel[sel.seed.isin(conv["seeds"])].mse.mean())
            rel = (means["x2"] - means["x1"]) / means["x1"]
            rows.append({"candidate": c["name"], "epochs": c["epochs"], "lr": c["lr"],
                         "lr_schedule": c["lr_schedule"], "heads": H, "p": params["p_heads_sweep"],
                         "n_seeds": len(conv["seeds"]), "mse_mean_E": means["x1"], "mse_mean_2E": means["x2"],
                         "rel_change": rel, "converges": "yes" if abs(rel) <= tol else "no"})
    frame = pd.DataFrame(rows, columns=CONVERGENCE_COLUMNS[:-2])
    everywhere = frame.groupby("candidate", sort=False).converges.apply(lambda s: bool((s == "yes").all()))
    chosen = selected(everywhere.to_dict(), [c["name"] for c in candidates(params)])
    frame["converges_everywhere"] = frame.candidate.map(lambda n: "yes" if everywhere[n] else "no")
    frame["selected"] = frame.candidate.map(lambda n: "yes" if n == chosen else "no")
    return frame


def selected(everywhere: dict[str, bool], order: list[str]) -> str | None:
    """The first candidate (in ``order``) that converges at every H, or None."""
    return next((n for n in order if everywhere.get(n)), None)


def load_convergence_runs(params: dict, metrics: list[str]) -> pd.DataFrame:
    rows = []
    for path in metrics:
        rec = read_json(path)
        label = str(rec.get("variant", ""))
        name, _, budget = label.removeprefix("convergence-").rpartition("-")
        if not label.startswith("convergence-") or budget not in BUDGETS:
            raise ValueError(f"{path}: not a record of the convergence check (variant={rec.get('variant')!r})")
        _read(path, label)
        c = candidate(params, name)
        _check_budget(path, rec, c, BUDGETS[budget])
        if rec["protocol"] != "published" or rec["setting"]["p"] != params["p_heads_sweep"]:
            raise ValueError(f"{path}: {rec['protocol']} p = {rec['setting']['p']}, not the published protocol at "
                             f"heads.p_heads_sweep = {params['p_heads_sweep']}")
        rows.append({"candidate": name, "budget": budget, "heads": rec["setting"]["heads"], "seed": rec["seed"],
                     "mse": rec["mse"]})
    return pd.DataFrame(rows, columns=["candidate", "budget", "heads", "seed", "mse"])


def convergence_table(params: dict, metrics: list[str], table: str) -> pd.DataFrame:
    """``heads_convergence.csv`` and ``.md`` (the criterion first, then the numbers, then the selection)."""
    frame = convergence_check(load_convergence_runs(params, metrics), params)
    chosen = next(iter(frame[frame.selected == "yes"].candidate), None)
    write_csv(table, frame)
    verdict = (f"**Selected protocol: {chosen}** (the first candidate that converges at every H)." if chosen else
               "**No candidate converges at every H**: `snakemake heads_converged` refuses; add or change a candidate "
               "(heads.convergence.candidates: more epochs, another lr or schedule) and rerun `snakemake heads_convergence`.")
    caption = ("E1 convergence check (ours, not paper-comparable). " + criterion(params) + " Columns: mse_mean_E and "
               "mse_mean_2E, the mean over the selection seeds of the composed head's final test MSE (the published "
               "protocol's headline: reference_code target, mean of per-batch means) after E and 2E epochs; rel_change "
               "= (mse_mean_2E - mse_mean_E) / mse_mean_E.")
    write_text(Path(table).with_suffix(".md"), to_markdown(frame, caption) + "\n" + verdict + "\n")
    return frame


def require_converged(params: dict, table: str, out: str) -> str:
    """Refuse unless heads.converged.protocol converged at every H (``table``: heads_convergence.csv).

    An error names heads.converged.protocol unless ``table`` says that candidate converged at every H of
    heads.heads_sweep; otherwise write ``out`` (what was checked)."""
    name = params["converged"]["protocol"]
    frame = pd.read_csv(table)
    own = frame[frame.candidate == name]
    hs = sorted(int(h) for h in own.heads)
    if own.empty or hs != sorted(params["heads_sweep"]):
        raise ValueError(f"heads.converged.protocol: {name!r} has no convergence check at every H of heads.heads_sweep "
                         f"{sorted(params['heads_sweep'])} in {table} (H = {hs}); rerun `snakemake heads_convergence`")
    bad = [int(h) for h, ok in zip(own.heads, own.converges) if ok != "yes"]
    if bad:
        good = list(dict.fromkeys(frame[frame.converges_everywhere == "yes"].candidate))
        raise ValueError(f"heads.converged.protocol: the candidate {name!r} did not converge at H = {bad} by the "
                         f"criterion of {table} (relative change from E to 2E epochs above heads.convergence.tolerance "
                         f"= {params['convergence']['tolerance']:g}); "
                         + (f"candidates that converged at every H: {good}; set heads.converged.protocol to one"
                            if good else "no candidate converged at every H: change heads.convergence.candidates and "
                                         "rerun `snakemake heads_convergence`"))
    c = candidate(params, name)
    write_json(out, {"protocol": name, "candidate": c, "heads": hs, "rel_change": dict(zip(map(str, own.heads),
                                                                                        own.rel_change)),
                     "table": str(table)})
    return name


# ----------------------------------------------------------------------------------------- the converged table


def load_converged_runs(params: dict, metrics: list[str]) -> pd.DataFrame:
    name = params["converged"]["protocol"]
    c = candidate(params, name)
    label = run_label("converged", name)
    rows = []
    for path in metrics:
        rec = _read(path, label)
        _check_budget(path, rec, c, 1)
        rows.append({"candidate": name, "protocol": rec["protocol"], "heads": rec["setting"]["heads"],
                     "p": rec["setting"]["p"], "seed": rec["seed"], "epochs": rec["params"]["epochs"],
                     "lr": rec["params"]["lr"], "lr_schedule": _lr_schedule(rec["params"]), "mse": rec["mse"],
                     "target_var": rec.get("target_var_by_target", {}).get(rec["target"], math.nan),
                     "target": rec["target"], "metric": rec["metric"], "n_prompts": rec["params"]["n_prompts"]})
    return pd.DataFrame(rows, columns=[*RUN_COLUMNS, "target", "metric", "n_prompts"])


def summary(runs: pd.DataFrame, params: dict, seeds: list[int]) -> pd.DataFrame:
    rows = []
    for protocol in params["converged"]["protocols"]:
        for H in params["heads_sweep"]:
            sel = runs[(runs.protocol == protocol) & (runs.heads == H)].sort_values("seed")
            missing = sorted(set(seeds) - set(int(s) for s in sel.seed))
            if missing:
                raise ValueError(f"heads.converged: no {protocol} run of H = {H} for seed(s) {missing}")
            first = sel.iloc[0]
            rows.append({"candidate": first.candidate, "protocol": protocol, "target": first.target,
                         "metric": first.metric, "heads": H, "p": params["p_heads_sweep"], **summarise(sel.mse),
                         "target_var_mean": float(sel.target_var.mean())})
    return pd.DataFrame(rows, columns=CONVERGED_COLUMNS)


def per_seed(runs: pd.DataFrame, protocol: str) -> dict[int, dict[int, float]]:
    """{H: {seed: head MSE}} of one protocol."""
    sel = runs[runs.protocol == protocol].sort_values("seed")
    return {int(H): dict(zip(g.seed.astype(int), g.mse.astype(float))) for H, g in sel.groupby("heads")}


def converged_table(params: dict, metrics: list[str], seeds: list[int], gate: str, table: str, runs_csv: str,
                    fit_json: str, n_boot: int = 2000) -> pd.DataFrame:
    """The heads table at convergence, its O(1/H) fits and verdicts (ours, never paper-comparable).

    ``heads_converged.{csv,md}``, ``heads_converged_runs.csv`` and ``heads_converged_fit.json`` (per protocol: the
    rate fits of :func:`algo_emu.fit.fit_rates` and the verdicts of rules [falls-with-H] and [converged-rate]).
    ``gate``: :func:`require_converged`'s output."""
    from algo_emu.report import replication as rp

    check = read_json(gate)
    name = params["converged"]["protocol"]
    if check.get("protocol") != name:
        raise ValueError(f"{gate}: the convergence check of {check.get('protocol')!r}, not of heads.converged.protocol "
                         f"= {name!r}")
    runs = load_converged_runs(params, metrics)
    frame = summary(runs, params, seeds)
    c = candidate(params, name)
    fits: dict = {"candidate": c, "criterion": criterion(params), "convergence_check": check,
                  "n_prompts": int(runs.n_prompts.iloc[0]) if len(runs) else None,
                  "model": "MSE(H) = a + b/H (least squares on per-H means) and MSE ~ H^-alpha (log-log least squares)"}
    for protocol in params["converged"]["protocols"]:
        values = per_seed(runs, protocol)
        lists = {H: [v[s] for s in sorted(v)] for H, v in values.items()}
        entry = (fit_rates(lists, n_boot=n_boot) | {"heads": sorted(lists)} if len(lists) >= 2 else
                 {"status": f"not enough settings: H = {sorted(lists)} (a fit needs two)"})
        fits[protocol] = entry | {"falls_with_h": rp.falls_with_h(values)}
    write_csv(runs_csv, runs.sort_values(["protocol", "heads", "seed"])[RUN_COLUMNS + ["n_prompts"]])
    write_csv(table, frame)
    write_json(fit_json, fits)
    rows = rp.converged_rows(runs_csv, fit_json)
    verdict_lines = [f"- {r.claim}, {r.setting}: **{r.verdict}** ({r.reason})" for r in rows]
    caption = (f"E1 heads table at convergence -- ours, NOT paper-comparable: the candidate {name} (E = {c['epochs']} "
               f"epochs, lr {c['lr']:g}, {c['lr_schedule']} schedule; the paper trained 50 "
               f"epochs at a constant lr 1e-3), selected by heads.convergence. " + criterion(params) +
               f" Per protocol and H: mean, std and 95 % bootstrap CI of the composed head's test MSE over the seeds "
               f"{list(seeds)} (published: reference_code target, mean of per-batch means; independent: "
               f"heads.target, exact mean). The paper's column is not beside it: its numbers were made with 50 epochs.")
    rules = "\n".join(f"- [{k}] **{rp.RULE[k].verdicts}** -- {rp.RULE[k].statement}" for k in ("falls-with-H",
                                                                                                "converged-rate"))
    # the criterion (in the caption) and the rules before any number, then the table, then the verdicts
    page = (caption + "\n\nVerdict rules (stated before any number):\n\n" + rules + "\n\n" + to_markdown(frame)
            + "\nVerdicts:\n\n" + "\n".join(verdict_lines) + "\n")
    write_text(Path(table).with_suffix(".md"), page)
    return frame


def converged_figure(table: str, out: str, baseline_tables: list[str] | None = None) -> None:
    """The paper's table, our 50-epoch protocol and the converged table side by side (writes ``out``.pdf and .png).

    Of ``baseline_tables`` (our 50-epoch heads_vs_mse.csv), the first present is drawn."""
    from algo_emu.plots import heads_converged as pc

    pc.converged_figure(table, out, list(baseline_tables or []))
