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

import json
import math
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from algo_emu.experiments.heads_settings import BUDGETS, candidate, candidates, run_label
from algo_emu.specs import OMITTED_AT
from algo_emu.fit import fit_rates, too_few
from algo_emu.io import read_json, write_csv, write_json, write_text
from algo_emu.report.replication import (FLOOR_FIT_R2, MIN_FIT_POINTS, NAN, RATE_READINGS, Row, Rule, cite, fit_entry,
                                         fit_points, learned_from_ratio, rate_verdict, to_float)
from algo_emu.tables import summarise, to_markdown

#: [falls-with-H]: the level of the interval of MSE(largest H) - MSE(smallest H), and the significance level of the
#: rank trend of the per-seed MSEs on H (Spearman, two-sided).
FALLS_LEVEL = 0.95
FALLS_P = 0.05
#: bootstrap resamples (fixed generator seed 0) of the [falls-with-H] difference's interval
FALLS_N_BOOT = 10_000
RULES = (  # E1's verdict rules at convergence (algo_emu.report.replication.rule_list)
    Rule("falls-with-H", "falls with H | does not fall with H",
         "ours, on the heads table at convergence (heads.converged; never beside the paper's numbers), per data "
         "protocol: *falls with H* when both hold: (1) the mean test MSE at the largest H of the sweep is below the "
         f"one at the smallest H, the {FALLS_LEVEL * 100:g} % bootstrap interval of their difference (seeds resampled, "
         f"jointly where both H have the same seeds; {FALLS_N_BOOT} resamples, generator seed 0) excluding 0; "
         "(2) a rank trend: Spearman's rho between H and the per-seed MSEs (every H, every seed) is negative with "
         f"two-sided p < {FALLS_P:g}. Otherwise *does not fall with H* (flat or rising error, or too noisy to "
         "tell). Fewer than two H values: rule [too-few]."),
    Rule("converged-rate", "as [rate-exact] and [rate-bound]",
         "O(1/H) at convergence (ours, not paper-comparable): rules [rate-exact] and [rate-bound], unchanged, "
         "applied to the fits of the heads table at convergence (heads_converged_fit.json, per data protocol), "
         "with the same intervals, leave-one-H-out fits and floor threshold (R^2 >= "
         f"{FLOOR_FIT_R2:g}); fewer than {MIN_FIT_POINTS} H values: rule [too-few]."),
)

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
        entry = ({"status": too_few(lists)} if too_few(lists) else
                 fit_rates(lists, n_boot=n_boot) | {"heads": sorted(lists)})
        fits[protocol] = entry | {"falls_with_h": falls_with_h(values)}
    write_csv(runs_csv, runs.sort_values(["protocol", "heads", "seed"])[RUN_COLUMNS + ["n_prompts"]])
    write_csv(table, frame)
    write_json(fit_json, fits)
    rows = converged_rows(runs_csv, fit_json)
    verdict_lines = [f"- {r.claim}, {r.setting}: **{r.verdict}** ({r.reason})" for r in rows]
    caption = (f"E1 heads table at convergence -- ours, NOT paper-comparable: the candidate {name} (E = {c['epochs']} "
               f"epochs, lr {c['lr']:g}, {c['lr_schedule']} schedule; the paper trained 50 "
               f"epochs at a constant lr 1e-3), selected by heads.convergence. " + criterion(params) +
               f" Per protocol and H: mean, std and 95 % bootstrap CI of the composed head's test MSE over the seeds "
               f"{list(seeds)} (published: reference_code target, mean of per-batch means; independent: "
               f"heads.target, exact mean). The paper's column is not beside it: its numbers were made with 50 epochs.")
    rules = "\n".join(f"- [{r.key}] **{r.verdicts}** -- {r.statement}" for r in RULES)
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


# ------------------------------------------------------------------ the replication report's rows
def falls_with_h(per_seed: Mapping[int, Sequence[float] | Mapping[int, float]]) -> dict:
    """Rule [falls-with-H] on per-seed MSEs ``{H: [value per seed]}`` (or ``{H: {seed: value}}``, which pairs the
    seeds of the two ends by name): the verdict, the numbers it was read from, and the statistics."""
    from scipy import stats

    def values(v) -> dict:
        return {int(k): float(x) for k, x in v.items()} if isinstance(v, Mapping) else dict(enumerate(map(float, v)))

    data = {int(H): values(v) for H, v in per_seed.items() if len(v)}
    hs = sorted(data)
    if len(hs) < 2:
        return {"verdict": "not testable at this scale", "numbers": f"H = {hs}; {cite('too-few')}", "heads": hs}
    lo_h, hi_h = hs[0], hs[-1]
    a, b = data[lo_h], data[hi_h]
    diff = float(np.mean(list(b.values())) - np.mean(list(a.values())))
    rng = np.random.default_rng(0)
    if set(a) == set(b):  # the same seeds at both ends (the published protocol shares one data set): paired
        keys = sorted(a)
        d = np.array([b[k] - a[k] for k in keys])
        boot = d[rng.integers(0, d.size, (FALLS_N_BOOT, d.size))].mean(axis=1)
        paired = True
    else:
        va, vb = np.array(list(a.values())), np.array(list(b.values()))
        boot = (vb[rng.integers(0, vb.size, (FALLS_N_BOOT, vb.size))].mean(axis=1)
                - va[rng.integers(0, va.size, (FALLS_N_BOOT, va.size))].mean(axis=1))
        paired = False
    ci = [float(x) for x in np.quantile(boot, [(1 - FALLS_LEVEL) / 2, 1 - (1 - FALLS_LEVEL) / 2])]
    xs = [H for H in hs for _ in data[H]]
    ys = [v for H in hs for v in data[H].values()]
    rho, p = stats.spearmanr(xs, ys)
    rho, p = float(rho), float(p)
    if math.isnan(rho):  # constant data: no trend
        rho, p = 0.0, 1.0
    falls = ci[1] < 0 and rho < 0 and p < FALLS_P
    numbers = (f"MSE(H={hi_h}) - MSE(H={lo_h}) = {diff:.3g} [{ci[0]:.3g}, {ci[1]:.3g}] "
               f"({'paired' if paired else 'unpaired'} seed bootstrap); Spearman rho(H, MSE) = {rho:.3g}, p = {p:.2g} "
               f"over {len(ys)} runs; {cite('falls-with-H')}")
    return {"verdict": "falls with H" if falls else "does not fall with H", "numbers": numbers, "heads": hs,
            "diff": diff, "diff_ci": ci, "paired": paired, "spearman_rho": rho, "spearman_p": p, "n_runs": len(ys)}


def e1_converged_rows(tables: Path, config: Mapping) -> list[Row]:
    """The heads table at convergence (ours), where ``snakemake heads_converged`` wrote it into ``tables``: per data
    protocol, rule [falls-with-H] and rule [converged-rate] (both readings of O(1/H)). No rows when it is absent."""
    runs_csv, fit_json = tables / "heads_converged_runs.csv", tables / "heads_converged_fit.json"
    if not (runs_csv.exists() and fit_json.exists()):
        return []
    return converged_rows(runs_csv, fit_json)


def converged_rows(runs_csv: str | Path, fit_json: str | Path) -> list[Row]:
    """Rules [falls-with-H] and [converged-rate] on the converged table's per-seed runs and fits (what
    heads_converged.md and the replication report print)."""
    runs = pd.read_csv(Path(runs_csv))
    fits = json.loads(Path(fit_json).read_text())
    cand = fits.get("candidate", {})
    name = cand.get("name", "?")
    scale = (f"ours, NOT paper-comparable: trained to convergence with {name} ({cand.get('epochs')} epochs, lr "
             f"{to_float(cand.get('lr')):g}, {cand.get('lr_schedule')} schedule; heads.convergence's criterion), "
             f"N={fits.get('n_prompts', '?')}, {runs.seed.nunique()} seeds")
    out = []
    for protocol in [p for p in ("published", "independent") if p in set(runs.protocol)]:
        sel = runs[runs.protocol == protocol]
        values = {int(H): dict(zip(g.seed.astype(int), g.mse.astype(float))) for H, g in sel.groupby("heads")}
        means = sel.groupby("heads")[["mse", "target_var"]].mean()
        ratio = float((means.mse / means.target_var).max()) if "target_var" in sel.columns else NAN
        learned, why = learned_from_ratio(ratio, "worst H's mean MSE / Var(target)")
        mode = f"ours at convergence ({name}), {protocol} protocol"
        falls = falls_with_h(values)
        r = Row("E1", f"error falls with H, at convergence (ours: {name})", f"{protocol}, H = {min(values)}..{max(values)}",
                paper="more heads, lower error", corrected_mode=mode, learned=learned, scale=scale)
        if "diff" in falls:
            r.corrected_mean, (r.corrected_ci_low, r.corrected_ci_high) = falls["diff"], falls["diff_ci"]
        if learned == "no":
            r.verdict, r.reason = "did not learn", f"{why}; {cite('learned')}"
        else:
            r.verdict, r.reason = falls["verdict"], f"{why}; {falls['numbers']}"
        out.append(r)
        entry = fit_entry(fits, protocol)
        for key, reading in RATE_READINGS:
            r = Row("E1", f"O(1/H) at convergence (ours: {name}), {reading}", f"{protocol}, H in heads.heads_sweep",
                    paper="O(1/H) (alpha = 1)", paper_mean=1.0, corrected_mode=mode, learned=learned, scale=scale)
            if entry is None:
                r.verdict, r.reason = "not available", f"heads_converged_fit.json has no {protocol} fit; {cite('not-available')}"
            else:
                r.corrected_mean, (r.corrected_ci_low, r.corrected_ci_high) = (
                    entry["alpha"], entry.get("alpha_ci_total", entry["alpha_ci"]))
                points = fit_points(entry, sorted(values))
                verdict, numbers = rate_verdict(key, entry)
                if len(points) < MIN_FIT_POINTS:
                    r.verdict, r.reason = "not testable at this scale", f"fit over H = {[int(x) for x in points]} only; {cite('too-few')}"
                elif learned == "no":
                    r.verdict, r.reason = "did not learn", f"{why}; {cite('learned')}"
                else:
                    r.verdict, r.reason = verdict, f"{numbers}; {cite('converged-rate')} ({cite(key)})"
            out.append(r)
    return out

