"""The published code's numbers (``records/``) beside this pipeline's, made the same way.

E1: the published protocol's composed-head test MSE (mean of per-batch means on the 20 % split, the code's softmax
axis), per seed, against the paper-scale set's records of the same protocol, H and p (``tables/heads_runs.csv``):
both are means over independently trained models, compared by rule [paper-number] (|difference| <= 2 combined
standard errors). E3: the published script's one model on its five evaluation sets, against the set's
reference_code models at H = 6 (``tables/statistical_runs.csv``), by rule [one-model]; with two or more such models
(data seeds), their spread against ours by rule [published-models]; and where the published
model's training loss first reaches the paper's level (the mean of its three Appendix C.1 values at H = 6), beside
ours; and each side's frozen models on the other side's test prompts (``swap_eval.py``), by rule [swap]: does the
gap follow the models or the test data; our training step against the published script's from the same parameters
on the same batches (``step_equiv.py``), by rules [step] and [step-rounding]; the published read-out as a variant of ours
(``readout_eval.py``), by rules [readout] and [readout-share]. E4: how the published script fails.

    python tools/crosscheck/table.py [--set results/reference/paper-scale] [--out <set>/crosscheck]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
if str(ROOT) not in sys.path:  # run as a script (as documented) or from published.py: tools/ importable
    sys.path.insert(0, str(ROOT))

from algo_emu.report.replication import Z_AGREE  # noqa: E402


def _load(pattern: str, records: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(records.glob(pattern))]


def _ms(values: list[float]) -> tuple[float, float, int]:
    n = len(values)
    return statistics.fmean(values), (statistics.stdev(values) if n > 1 else float("nan")), n


def _ours_h6(runs: pd.DataFrame, algo: str) -> list[float]:
    """Our reference_code H = 6 models' test MSEs for one algorithm (``tables/statistical_runs.csv``)."""
    return runs[(runs["mode"] == "reference_code") & (runs.heads == 6) & (runs.algorithm == algo)].mse.tolist()


def e1_rows(records: Path, set_dir: Path) -> list[dict]:
    from algo_emu.report.replication import agreement
    from algo_emu import paper_values

    runs = pd.read_csv(set_dir / "tables" / "heads_runs.csv")
    ours_all = runs[(runs.protocol == "published") & (runs.target == "reference_code") & (runs.p == 60)]
    out = []
    recs = _load("e1_H*_seed*.json", records)
    for H in sorted({r["heads"] for r in recs}):
        theirs = [r for r in recs if r["heads"] == H and r["epochs"] == 50]
        vals = [r["test_mse"] for r in sorted(theirs, key=lambda r: r["seed"])]
        ours = ours_all[ours_all.heads == H].sort_values("seed")
        ov = ours.mse_batchmean.tolist()
        tm, ts, tn = _ms(vals)
        om, osd, on = _ms(ov) if ov else (float("nan"), float("nan"), 0)
        pm, ps = paper_values.paper_heads(H)
        row = {"experiment": "E1", "setting": f"H={H}, p=60, 50 epochs, N=50000", "metric":
               "composed-head test MSE, mean of per-batch means (published protocol)",
               "published_code": ", ".join(f"{v:.3g}" for v in vals), "published_code_mean": tm, "published_code_sd": ts,
               "published_code_n": tn, "ours_mean": om, "ours_sd": osd, "ours_n": on, "paper_mean": pm, "paper_sd": ps,
               "seeds_published_code": [r["seed"] for r in sorted(theirs, key=lambda r: r["seed"])],
               "kqv_published_code": [round(statistics.fmean(r["test_kqv"][i] for r in theirs), 4) for i in range(3)]
               if theirs and all(r.get("test_kqv") for r in theirs) else None,
               "kqv_ours": [round(float(ours[f"mse_{m}"].mean()), 4) for m in "KQV"] if on else None,
               "minutes_per_seed_published_code": statistics.fmean(r["seconds"] for r in theirs) / 60 if theirs else None}
        row["verdict"] = (agreement(tm, ts, tn, om, osd, on) if tn > 1 and on > 1  # "ours": this pipeline
                          else f"too few runs (published code n = {tn}; the rule needs at least 2 on each side)")
        row["rule"] = "[paper-number]: both are means over independently trained models"
        out.append(row)
    return out


def e3_rows(records: Path, set_dir: Path) -> list[dict]:
    from algo_emu.report.replication import agreement_one_model
    from algo_emu import paper_values

    runs = pd.read_csv(set_dir / "tables" / "statistical_runs.csv")
    i = paper_values.STATISTICAL_HEADS["heads"].index(6)
    out = []
    for rec in _load("e3_H6_data*.json", records):
        for algo in ("lasso", "ridge", "linear"):
            vals = rec["test_loss_per_eval_seed"][algo]
            k = len(vals)
            mean0 = statistics.fmean(vals)
            sd0 = statistics.pstdev(vals)  # the script prints numpy's std (ddof = 0)
            om, osd, on = _ms(_ours_h6(runs, algo))
            verdict, z = agreement_one_model(mean0, sd0, k, om, osd, on)
            out.append({"experiment": "E3", "setting": f"{algo}, H=6, 300 epochs, N=50000 (data seed {rec['data_seed']})",
                        "metric": "test MSE against the noisy y, one model, five evaluation sets",
                        "published_code": ", ".join(f"{v:.4g}" for v in vals), "published_code_mean": mean0,
                        "published_code_sd": sd0, "published_code_n": k, "ours_mean": om, "ours_sd": osd, "ours_n": on,
                        "paper_mean": paper_values.STATISTICAL_HEADS[algo]["mean"][i],
                        "paper_sd": paper_values.STATISTICAL_HEADS[algo]["std"][i],
                        "verdict": verdict, "z": z, "rule": "[one-model]: the published script trains one model",
                        "minutes_published_code": rec["seconds"] / 60})
    pooled, _ = e3_pooled(records, runs)
    for r in pooled:
        out.append({"experiment": "E3", "setting": f"{r['algorithm']}, H=6, 300 epochs, N=50000 (models of data seeds "
                                                   f"{', '.join(map(str, r['data_seeds']))})",
                    "metric": "test MSE against the noisy y, each model's mean over its five evaluation sets",
                    "published_code": ", ".join(f"{v:.4g}" for v in r["values"]), "published_code_mean": r["mean"],
                    "published_code_sd": r["sd"], "published_code_n": r["n"], "ours_mean": r["ours_mean"],
                    "ours_sd": r["ours_sd"], "ours_n": r["ours_n"],
                    "paper_mean": paper_values.STATISTICAL_HEADS[r["algorithm"]]["mean"][i],
                    "paper_sd": paper_values.STATISTICAL_HEADS[r["algorithm"]]["std"][i], "verdict": r["verdict"],
                    "rule": "[published-models]: means over independently trained models"})
    return out


def e3_epochs(records: Path, set_dir: Path) -> list[str]:
    """Where the published model's training loss first reaches the paper's level, beside ours (the product's own
    reading of our curves: :func:`tools.campaign.training.paper_on_training_curve`)."""
    from tools.campaign.training import paper_on_training_curve

    ours = paper_on_training_curve(sorted(str(p) for p in
                                          set_dir.glob("statistical/runs/reference_code_H6/seed*/metrics.json")))
    ours = [d for d in ours if d["heads"] == 6]
    lines = []
    level = ours[0]["level"] if ours else None
    for rec in _load("e3_H6_data*.json", records):
        curve = rec["train_loss_per_epoch"]
        if level is None or not curve:
            continue
        first = next((e + 1 for e, v in enumerate(curve) if v <= level), None)
        at = lambda e: f"{curve[min(e, len(curve)) - 1]:.3g} at epoch {min(e, len(curve))}"  # noqa: E731
        lines.append(f"- published code (data seed {rec['data_seed']}, one model): {at(1)}, {at(100)}, {at(len(curve))}; "
                     f"first at or below the paper's level {level:.4g} at epoch {first if first else 'never'}")
    if ours and not _load("e3_H6_data*.json", records):
        d = ours[0]
        lines.append(f"- the epoch reading: our curve reaches the paper's level at epoch {d['cross_epoch']} and ends at "
                     f"{d['mean_curve'][-1] / level:.2f} x that level at epoch {len(d['mean_curve'])}, the published "
                     "script's own epoch count; so the paper's values match our models after about "
                     f"{d['cross_epoch']} epochs, not after the script's {len(d['mean_curve'])}. Whether the published "
                     "code's own model ends at the paper's level (and so whether epochs explain the gap) is decided "
                     "by its E3 run, which has no record here yet.")
    for d in ours:
        mc = d["mean_curve"]
        lines.append(f"- ours (the set's reference_code H = 6, mean over {len(d['seeds'])} seeds): {mc[0]:.3g} at epoch 1, "
                     f"{mc[99]:.3g} at epoch 100, {mc[-1]:.3g} at epoch {len(mc)}; first at or below the paper's level at "
                     f"epoch {d['cross_epoch']} (each seed: {min(c for c in d['seed_cross'] if c)}-"
                     f"{max(c for c in d['seed_cross'] if c)}); held out at the end: {d['heldout_mixed']:.3g}")
    return lines


#: Where the published code's own E3 model sits, stated before its numbers (the page prints it).
PUBLISHED_MODEL_RULE = (
    "[published-model]: two single trained models differ by chance as much as two of ours do, so the published "
    "model's mean over its five evaluation sets is *at the paper's level* for an algorithm when it lies within "
    f"{Z_AGREE:g} x sqrt(2) x our between-model sample sd of the paper's value. The epoch hypothesis (the paper's "
    "values come from a model trained less far than the script's 300 epochs) is *contradicted* when the published "
    "model is at the paper's level for all three algorithms after those 300 epochs, and *not contradicted* "
    "otherwise. Against ours, the count of our models at or above its value says where in our between-model "
    "spread it falls (one published model cannot separate its own draw from a difference of implementation).")


#: With two or more published-code E3 models, what their spread says of the factor of two (stated before the numbers).
PUBLISHED_MODELS_RULE = (
    "[published-models]: with two or more published-code models (different data seeds), each read as its mean over "
    "its five evaluation sets, their mean and sample sd over models are compared with our models' by rule "
    f"[paper-number] (both are means over independently trained models: consistent when the means differ by at most "
    f"{Z_AGREE:g} combined standard errors). The factor of two between the paper's one model and ours is *one-model "
    "variance* when the published models are consistent with ours for all three algorithms, *a difference of "
    "implementation* when they are inconsistent, the published code higher, for at least two of the three, and *not "
    "decided* otherwise. With two models the published sd has one degree of freedom, so the test is weak; each "
    "further model strengthens it.")


def e3_pooled(records: Path, runs: pd.DataFrame, ours=None) -> tuple[list[dict], str | None]:
    """Rule :data:`PUBLISHED_MODELS_RULE`: per algorithm, the published models' mean, sd and n over data seeds beside
    our reference_code H = 6 models (or ``ours(algorithm)``'s values), with its verdict; and the reading (None under
    two published models)."""
    from algo_emu.report.replication import agreement

    recs = _load("e3_H6_data*.json", records)
    if len(recs) < 2:
        return [], None
    out = []
    for algo in ("lasso", "ridge", "linear"):
        vals = [statistics.fmean(r["test_loss_per_eval_seed"][algo]) for r in recs]
        (tm, ts, tn), (om, osd, on) = _ms(vals), _ms(ours(algo) if ours else _ours_h6(runs, algo))
        out.append({"algorithm": algo, "values": vals, "data_seeds": [r["data_seed"] for r in recs], "mean": tm,
                    "sd": ts, "n": tn, "ours_mean": om, "ours_sd": osd, "ours_n": on,
                    "verdict": agreement(tm, ts, tn, om, osd, on)})
    higher = sum(r["verdict"] == "inconsistent (ours lower)" for r in out)
    reading = ("one-model variance" if all(r["verdict"] == "consistent" for r in out)
               else "a difference of implementation" if higher >= 2 else "not decided")
    return out, reading


def e3_published_model(records: Path, set_dir: Path) -> list[str]:
    """The published code's own E3 model (``records/e3_H6_data*.json``) against the paper and against our
    reference_code models at H = 6: rule :data:`PUBLISHED_MODEL_RULE`, then the numbers, then the reading."""
    runs = pd.read_csv(set_dir / "tables" / "statistical_runs.csv")
    ours = runs[(runs["mode"] == "reference_code") & (runs.heads == 6)]
    recs = _load("e3_H6_data*.json", records)
    if not recs or ours.empty:
        return []
    from algo_emu import paper_values

    i = paper_values.STATISTICAL_HEADS["heads"].index(6)
    lines = ["", "## E3: where the published code's own model sits", "", f"The rule, stated before the numbers: "
             f"{PUBLISHED_MODEL_RULE}", ""]
    for rec in recs:
        at_level = []
        for algo in ("lasso", "ridge", "linear"):
            value = statistics.fmean(rec["test_loss_per_eval_seed"][algo])
            mine = ours[ours.algorithm == algo].mse.tolist()
            mean, sd, n = _ms(mine)
            paper = paper_values.STATISTICAL_HEADS[algo]["mean"][i]
            z = abs(value - paper) / (math.sqrt(2) * sd)
            at_level.append(z <= Z_AGREE)
            lines.append(f"- {algo} (data seed {rec['data_seed']}): the published model {value:.4g}, the paper "
                         f"{paper:.4g} ({'at' if z <= Z_AGREE else 'not at'} the paper's level: the difference is {z:.2f} "
                         f"x sqrt(2) x our sd); {sum(m >= value for m in mine)} of our {n} models at or above it "
                         f"(ours {min(mine):.3g}-{max(mine):.3g}, mean {mean:.3g})")
        train = rec["train_loss_per_epoch"]
        finals = ours.groupby("seed").final_train_loss.first().tolist() if "final_train_loss" in ours else []
        if train and finals:
            last = statistics.fmean(train[-10:])
            lines.append(f"- training loss at epoch {len(train)}: the published model {train[-1]:.3g} (mean of its "
                         f"last 10 epochs {last:.3g}); ours {min(finals):.3g}-{max(finals):.3g}, "
                         f"{sum(f >= last for f in finals)} of {len(finals)} at or above that mean")
        lines += ["", f"**Reading (data seed {rec['data_seed']}): the epoch hypothesis is "
                  + ("contradicted** (the published code reaches the paper's level at all three algorithms after its "
                     "own 300 epochs)" if all(at_level) else
                     f"not contradicted** (the published model is at the paper's level for {sum(at_level)} of 3 "
                     "algorithms)") + "."]
    pooled, reading = e3_pooled(records, runs)
    if pooled:
        lines += ["", f"Over the published models, the rule, stated before the numbers: {PUBLISHED_MODELS_RULE}", ""]
        lines += [f"- {r['algorithm']}: the published models {', '.join(f'{v:.4g}' for v in r['values'])} (data seeds "
                  f"{', '.join(map(str, r['data_seeds']))}; mean {r['mean']:.4g} ± {r['sd']:.2g}), ours "
                  f"{r['ours_mean']:.4g} ± {r['ours_sd']:.2g} ({r['ours_n']} models): {r['verdict']}" for r in pooled]
        lines += ["", f"**Reading over {pooled[0]['n']} published models: the factor of two is {reading}.**"]
    return lines


#: The read-out question, stated before its numbers (the page prints it). Our default read-out's E3 means are about
#: half the paper's, mostly within the paper's one-model spread, so "consistent" alone cannot settle it: what counts
#: is whether the published read-out MOVES our means to the paper's.
READOUT_RULE = ("[readout]: an algorithm's mean moves toward the paper when the published read-out's mean differs "
                "from our default read-out's by more than 2 combined standard errors and lies closer to the paper's "
                "value; the published read-out explains the gap when it moves at least 2 of the 3 algorithms and all "
                "3 of its means are consistent with the paper's one model by rule [one-model]; it does not explain it "
                "when it moves none; otherwise it explains part of it")


def readout_record(records: Path) -> dict | None:
    """The published read-out variant's records (``e3_readout_H6*.json``, ``readout_eval.py``) pooled into one: their
    seeds, test MSEs and training curves. Records of several commits are refused (one evidence set, one commit), as
    are two records of one seed."""
    recs = [json.loads(p.read_text()) for p in sorted(records.glob("e3_readout_H6*.json"))]
    if not recs:
        return None
    commits = {(r["commit"], bool(r.get("commit_dirty"))) for r in recs}
    if len(commits) > 1:
        raise ValueError(f"{records}: the read-out records were made by several commits ({sorted(commits)}); "
                         "pool only records of one")
    versions = {r["code_version"] for r in recs if r.get("code_version")}
    if len(versions) > 1:
        raise ValueError(f"{records}: the read-out records name several training-source digests ({sorted(versions)}); "
                         "pool only records of one")
    seeds = [s for r in recs for s in r["seeds"]]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"{records}: two read-out records hold the same seed ({sorted(seeds)})")
    out = dict(recs[0], seeds=sorted(seeds))
    for key in ("test_mse_vs_noisy_y", "train_loss_per_epoch"):
        out[key] = {k: v for r in recs for k, v in r[key].items()}
    out["bit_identical"] = all(r.get("bit_identical") for r in recs)
    out["configs"] = {r.get("config", "config/e3_readout.yaml"): r["seeds"] for r in recs}
    return out


def e3_readout(records: Path, set_dir: Path) -> tuple[list[dict], list[str]]:
    """The published read-out variant at H = 6 (``records/e3_readout_H6.json``, made by ``readout_eval.py``) beside
    our default read-out (the set's reference_code H = 6 models) and the paper: rows, and the page's lines."""
    from algo_emu import paper_values
    from algo_emu.report.replication import Z_AGREE, agreement_one_model

    rec = readout_record(records)
    if rec is None:
        return [], []
    runs = pd.read_csv(set_dir / "tables" / "statistical_runs.csv")
    i = paper_values.STATISTICAL_HEADS["heads"].index(6)
    rows, moved, consistent = [], 0, 0
    for algo in ("lasso", "ridge", "linear"):
        vals = [rec["test_mse_vs_noisy_y"][str(s)][algo] for s in rec["seeds"]]
        rm, rsd, rn = _ms(vals)
        om, osd, on = _ms(_ours_h6(runs, algo))
        pm = paper_values.STATISTICAL_HEADS[algo]["mean"][i]
        ps = paper_values.STATISTICAL_HEADS[algo]["std"][i]
        v_read, z_read = agreement_one_model(pm, ps, 5, rm, rsd, rn)
        v_def, z_def = agreement_one_model(pm, ps, 5, om, osd, on)
        se = math.sqrt((rsd**2 / rn if rn > 1 else 0.0) + (osd**2 / on if on > 1 else 0.0))
        z_vs_default = abs(rm - om) / se if se > 0 else math.inf
        toward = z_vs_default > Z_AGREE and abs(rm - pm) < abs(om - pm)
        moved += toward
        consistent += v_read == "consistent"
        rows.append({"experiment": "E3 (read-out variant, ours)",
                     "setting": f"{algo}, H=6, {rec['epochs']} epochs, published read-out "
                                f"(Linear({rec['readout_hidden']}->{rec['readout_hidden']}) then Linear(->1))",
                     "metric": "test MSE against the noisy y, mean over independently trained models",
                     "published_code": "", "readout_mean": rm, "readout_sd": rsd, "readout_n": rn,
                     "ours_mean": om, "ours_sd": osd, "ours_n": on, "paper_mean": pm, "paper_sd": ps,
                     "verdict": v_read, "z": z_read, "verdict_default_readout": v_def, "z_default_readout": z_def,
                     "z_readout_vs_default": z_vs_default, "moves_toward_paper": toward,
                     "paper_over_readout": pm / rm, "paper_over_default": pm / om, "rule": "[one-model] against the paper; Welch z against ours"})
    answer = ("explains it" if moved >= 2 and consistent == 3 else "does not explain it" if moved == 0
              else "explains part of it")
    lines = ["", "## E3's factor of two: the published read-out (ours, a diagnostic)", "",
             f"The rule, stated before the numbers: {READOUT_RULE}.", "",
             f"Made by commit `{rec['commit'][:12]}`{' (uncommitted changes)' if rec.get('commit_dirty') else ''} from "
             + "; ".join(f"`{c}` (seeds {', '.join(map(str, sd))})" for c, sd in rec["configs"].items())
             + " (`tools/crosscheck/readout_eval.py`).", "",
             "| algorithm | published read-out mean ± sd (n) | vs paper [one-model] | our default read-out mean ± sd (n) "
             "| vs paper [one-model] | read-out vs default (z) | paper | paper / read-out | paper / default |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['setting'].split(',')[0]} | {_g(r['readout_mean'])} ± {_g(r['readout_sd'])} ({r['readout_n']}) | "
                     f"{r['verdict']} (z {r['z']:.2f}) | {_g(r['ours_mean'])} ± {_g(r['ours_sd'])} ({r['ours_n']}) | "
                     f"{r['verdict_default_readout']} (z {r['z_default_readout']:.2f}) | {r['z_readout_vs_default']:.2f} | "
                     f"{_g(r['paper_mean'])} ± {_g(r['paper_sd'])} | {r['paper_over_readout']:.2f} | "
                     f"{r['paper_over_default']:.2f} |")
    curve = [statistics.fmean(v) for v in zip(*rec["train_loss_per_epoch"].values())] if rec.get("train_loss_per_epoch") else []
    if curve:
        from tools.campaign.training import paper_on_training_curve

        ours = [d for d in paper_on_training_curve(sorted(str(p) for p in set_dir.glob(
            "statistical/runs/reference_code_H6/seed*/metrics.json"))) if d["heads"] == 6]
        level = ours[0]["level"] if ours else None
        first = next((e + 1 for e, v in enumerate(curve) if level is not None and v <= level), None)
        lines += ["", f"Its training loss (mean over its {len(rec['seeds'])} models): {curve[0]:.3g} at epoch 1, "
                  f"{curve[min(100, len(curve)) - 1]:.3g} at epoch {min(100, len(curve))}, {curve[-1]:.3g} at epoch "
                  f"{len(curve)}" + (f"; first at or below the paper's level {level:.4g} at epoch "
                                     f"{first if first else 'never'}" if level is not None else "") + "."]
    lines += ["", f"**Verdict: the published read-out {answer}** (it moves {moved} of 3 algorithms toward the paper; "
              f"{consistent} of 3 of its means consistent with the paper's one model)."]
    return rows, lines + readout_share_lines(rows)


#: [readout]'s "does not explain it" is "no move past 2 standard errors", which a test too weak to see a move also
#: gives. This rule, written after [readout] was read on seeds 0-5 (the page says so), asks how much of the gap the
#: published read-out closes and says "cannot tell" where the models cannot tell.
SHARE_LEVEL = 0.95
#: the read-out seeds whose numbers had been read when [readout-share] was written
SHARE_SEEN = (0, 1, 2, 3, 4, 5)
READOUT_SHARE_RULE = (
    "[readout-share]: per algorithm, the share of our default read-out's gap to the paper that the published read-out "
    "closes, (read-out mean - default mean) / (paper - default mean), the paper's one value taken as fixed, with its "
    f"{SHARE_LEVEL * 100:g} % interval (Welch's t over the two sets of models). An algorithm's read-out closes all of "
    "the gap when the interval lies above 0 and reaches 1; part of it when it lies above 0 and below 1; not all of it "
    "when it reaches 0 and lies below 1 (a move of the whole gap excluded, no move shown); it cannot tell when it "
    "reaches both 0 and 1; with no gap (our default at or past the paper) it says nothing. Reading: the published read-out explains it, "
    "explains part of it or does not explain it when 2 of the 3 algorithms say all, part or not all of it; otherwise "
    "cannot tell")
SHARE_READINGS = {"all of it": "explains it", "part of it": "explains part of it",
                  "not all of it": "does not explain it"}


def readout_share(rm: float, rsd: float, rn: int, om: float, osd: float, on: int, pm: float) -> dict:
    """Rule :data:`READOUT_SHARE_RULE` for one algorithm: the read-out models' mean, sd and count, our default's, and
    the paper's value. Also ``needed``: the number of read-out models (the default's count and both sds as they are)
    at which the interval would be narrower than 1, so it could not reach both 0 and 1 (None: no number of read-out
    models is enough, the default models' own spread is too wide)."""
    from scipy import stats

    def half(n: int) -> float:
        a, b = rsd**2 / n, osd**2 / on
        df = (a + b) ** 2 / (a**2 / (n - 1) + b**2 / (on - 1))
        return stats.t.ppf(0.5 + SHARE_LEVEL / 2, df) * math.sqrt(a + b)

    if rn < 2 or on < 2:
        raise ValueError(f"[readout-share] needs 2 or more models on each side, not {rn} read-out and {on} default")
    gap = pm - om
    if gap <= 0:
        return {"share": math.nan, "low": math.nan, "high": math.nan, "says": "no gap", "needed": None}
    share, h = (rm - om) / gap, half(rn) / gap
    low, high = share - h, share + h
    says = ("cannot tell" if low <= 0 and high >= 1 else "not all of it" if low <= 0
            else "all of it" if high >= 1 else "part of it")
    needed = next((n for n in range(2, 1001) if half(n) / gap < 0.5), None)
    return {"share": share, "low": low, "high": high, "says": says, "needed": needed}


def share_reading(says: list[str]) -> str:
    """[readout-share]'s reading from the algorithms' answers."""
    for said, reading in SHARE_READINGS.items():
        if says.count(said) >= 2:
            return reading
    return "cannot tell"


def readout_share_lines(rows: list[dict]) -> list[str]:
    """The page's [readout-share] section from :func:`e3_readout`'s rows."""
    shares = [(r["setting"].split(",")[0], readout_share(r["readout_mean"], r["readout_sd"], r["readout_n"],
                                                          r["ours_mean"], r["ours_sd"], r["ours_n"], r["paper_mean"]))
              for r in rows]
    n = rows[0]["readout_n"]
    seen = ", ".join(map(str, SHARE_SEEN))
    lines = ["", "### The published read-out: how much of the gap it closes", "",
             f"Written after [readout] was read on the read-out models of seeds {seen}: [readout] has no outcome for a "
             "test that cannot see a move, so its \"does not explain it\" may be that. The models of any other seed "
             f"were trained after this rule was committed. The rule: {READOUT_SHARE_RULE}.", "",
             f"| algorithm | share of the gap closed | {SHARE_LEVEL * 100:g} % interval | says | read-out models for an "
             "interval narrower than 1 |", "|---|---|---|---|---|"]
    for algo, s in shares:
        lines.append(f"| {algo} | {s['share']:.2f} | {s['low']:.2f} to {s['high']:.2f} | {s['says']} | "
                     f"{s['needed'] if s['needed'] else 'none is enough (our default models spread too widely)'} |")
    return lines + ["", f"**Reading by [readout-share]: {share_reading([s['says'] for _, s in shares])}** "
                    f"(over {n} read-out models and {rows[0]['ours_n']} of our default read-out)."]


#: Where E3's gap lives, stated before the numbers (the page prints it): each side's models on both sides' test sets.
SWAP_RULE = ("[swap]: per algorithm, the model gap on a test set is the published models' mean MSE there minus ours, "
             "and a side's data shift is its models' mean MSE on the other side's test set minus on its own. The gap "
             "follows the models when it is positive on both test sets and each side's |data shift| is under a "
             "quarter of the smaller gap; it follows the test data when a side's |data shift| is at least the larger "
             "|gap|; otherwise both")


def swap_reading(pub: dict[str, float], ours: dict[str, float]) -> tuple[str, dict[str, float]]:
    """Rule :data:`SWAP_RULE` for one algorithm. ``pub`` / ``ours``: that side's models' mean MSE on the test sets
    ``"published"`` and ``"ours"``. Returns the reading ("the models", "the test data", "both") and its terms."""
    gap = {k: pub[k] - ours[k] for k in ("published", "ours")}
    shift = {"published": pub["ours"] - pub["published"], "ours": ours["published"] - ours["ours"]}
    big = max(abs(v) for v in shift.values())
    if min(gap.values()) > 0 and big < 0.25 * min(gap.values()):
        reading = "the models"
    elif big >= max(abs(v) for v in gap.values()):
        reading = "the test data"
    else:
        reading = "both"
    return reading, {"gap_published_set": gap["published"], "gap_our_set": gap["ours"],
                     "shift_published_models": shift["published"], "shift_our_models": shift["ours"]}


#: Which half of "the models" carries the gap, stated before the numbers: our trainer on the published training set.
TRAINER_RULE = ("[trainer]: per algorithm, with p the published models' mean MSE, o our models' (our trainer, our "
                "training sets) and x our trainer's on the published training set (the same member seeds, so the same "
                "inits and data orders as o; each mean over both test sets), the share of the gap that moves with the "
                "training set is f = (x - o) / (p - o). The gap follows the trainer when f < 1/3, the training set "
                "when f > 2/3, otherwise both")


def trainer_reading(p: float, o: float, x: float) -> tuple[str, float]:
    """Rule :data:`TRAINER_RULE` for one algorithm: (reading, f)."""
    f = (x - o) / (p - o) if p != o else math.nan
    return ("the trainer" if f < 1 / 3 else "the training set" if f > 2 / 3 else "both"), f


def e3_swap(records: Path) -> list[str]:
    """Each side's frozen E3 models on both sides' test sets (``records/e3_swap_H6.json``, ``swap_eval.py``)."""
    path = records / "e3_swap_H6.json"
    if not path.is_file():
        return []
    rec = json.loads(path.read_text())
    mse, checks = rec["mse"], rec["checks"]

    def side(models: dict, test: str, algo: str) -> list[float]:
        return [statistics.fmean(m[test][algo]) for m in models.values()]

    lines = ["", "## E3's factor of two: each side's models on the other side's test prompts", "",
             f"The rule, stated before the numbers: {SWAP_RULE}.", "",
             f"Published models: {', '.join(sorted(mse['published_models']))} (the published script's, above); ours: "
             f"the set's reference_code H = 6 models of seeds {', '.join(map(str, rec['our_seeds']))}, retrained "
             f"from the set's data at commit `{str(rec.get('our_model_trained_at'))[:12]}`; evaluated by "
             f"`tools/crosscheck/swap_eval.py` at commit `{rec['commit'][:12]}`"
             f"{' (uncommitted changes)' if rec.get('commit_dirty') else ''}. Test sets: the "
             f"published script's (evaluation seeds {', '.join(map(str, rec['published_eval_seeds']))}, 1,000 prompts "
             f"per algorithm) and ours (the set's evaluation prompts of those seeds); score: {rec['score']}. "
             f"Checks: the published models on their own sets reproduce their records within "
             f"{max(checks['published_vs_record_max_abs'].values()):.1e} (the records print 4 decimals); our models "
             f"on their own sets reproduce the set's records within {checks['ours_vs_set_records_max_abs']:.1e}.", "",
             "| algorithm | published models on their sets | published models on ours | ours on the published sets "
             "| ours on ours | gap on published / our sets | data shift of published / our models | reading |",
             "|---|---|---|---|---|---|---|---|"]
    readings = []
    for algo in ("lasso", "ridge", "linear"):
        pub = {t: side(mse["published_models"], t, algo) for t in ("published", "ours")}
        our = {t: side(mse["our_models"], t, algo) for t in ("published", "ours")}
        reading, terms = swap_reading({t: statistics.fmean(v) for t, v in pub.items()},
                                      {t: statistics.fmean(v) for t, v in our.items()})
        readings.append(reading)
        lines.append(f"| {algo} | {_cell(pub['published'])} | {_cell(pub['ours'])} | {_cell(our['published'])} | "
                     f"{_cell(our['ours'])} | {terms['gap_published_set']:.3g} / {terms['gap_our_set']:.3g} | "
                     f"{terms['shift_published_models']:.2g} / {terms['shift_our_models']:.2g} | {reading} |")
    overall = _overall(readings)
    lines += ["", "Each cell: the mean over that side's models, then each model's mean over the test set's seeds."]
    if rec.get("train_set"):
        lines += ["", "Each model on its own training set (50,000 mixed prompts; its final parameters), beside the mean "
                  "training loss of its last epoch (the running mean over that epoch's steps, as the logs print it): "
                  + _final_vs_running(rec["train_set"], lambda name: "published data" not in name) + "."]
    lines += ["", f"**Reading: the gap follows {overall}.**"]
    return lines + _trainer_lines(rec)


#: Whether our training step is the published script's, stated before the numbers (the page prints it). The bounds
#: sit far above what rounding alone gives (the order seen in trial runs: 1e-15 in float64, 1e-6 in float32) and
#: below what a 1 % change of one hyper-parameter gives (the record's control, which must exceed them).
STEP_F64, STEP_F32 = 1e-9, 1e-4
STEP_RULE = (f"[step]: from the same parameters on the same batches, the two training steps are the same arithmetic "
             f"when every matched run's largest relative loss difference over its steps is at most {STEP_F64:g} in "
             f"float64 and {STEP_F32:g} in float32, and the control (our learning rate 1 % higher) exceeds its bound; "
             f"they differ when a matched run exceeds its bound; the check cannot tell when the control does not")


#: A [step] or [step-rounding] reading as the page says it.
STEP_SAID = {"the same arithmetic": "the two training steps are the same arithmetic",
             "differ": "the two training steps differ", "cannot tell": "the check cannot tell"}


def _step_verdict(runs: dict[str, dict], over) -> str:
    """[step] and [step-rounding]'s common reading: ``runs`` our engine's runs (a run whose ``lr_ratio`` is not 1 is a
    control), ``over(run)`` whether a run exceeds its rule's bound."""
    controls = [r for r in runs.values() if r["lr_ratio"] != 1.0]
    matched = [r for r in runs.values() if r["lr_ratio"] == 1.0]
    if not matched or not controls:
        raise ValueError("a step record needs matched runs and a control")
    if any(over(r) for r in matched):
        return "differ"
    return "the same arithmetic" if all(over(r) for r in controls) else "cannot tell"


def step_reading(runs: dict[str, dict]) -> str:
    """Rule :data:`STEP_RULE` over a step record's runs."""
    return _step_verdict(runs, lambda r: r["worst_rel_loss_diff"] > (STEP_F64 if r["dtype"] == "float64" else STEP_F32))


#: Written after [step] read the first record (it said "differ" on one float32 run and nothing else), applied to a
#: second record with fresh prompts and batch order: each float32 run read against rounding measured in that record.
STEP_ROUNDING_FACTOR = 10
STEP_ROUNDING_RULE = (
    "[step-rounding]: a float32 run agrees when its largest relative loss difference is at most "
    f"{STEP_ROUNDING_FACTOR} x the rounding control's from the same start (the published step against itself, one copy "
    f"started one float32 unit in the last place away); a float64 run agrees when at most {STEP_F64:g}, as in [step]. "
    "The two steps are the same arithmetic when every matched run agrees and the learning-rate control exceeds "
    f"{STEP_ROUNDING_FACTOR} x its start's rounding control; they differ when a matched run does not agree; otherwise "
    "the check cannot tell")


def step_rounding_reading(runs: dict[str, dict]) -> str:
    """Rule :data:`STEP_ROUNDING_RULE` over a step record with rounding controls."""
    rounding = {r["start"]: r["worst_rel_loss_diff"] for r in runs.values() if r.get("side") == "published+1ulp"}
    engine = {n: r for n, r in runs.items() if r.get("side", "engine") == "engine"}
    if any(r["dtype"] == "float32" and r["start"] not in rounding for r in engine.values()):
        raise ValueError("a step-rounding record needs a rounding control per float32 start")
    return _step_verdict(engine, lambda r: r["worst_rel_loss_diff"] > (
        STEP_F64 if r["dtype"] == "float64" else STEP_ROUNDING_FACTOR * rounding[r["start"]]))


def e3_step(records: Path, set_dir: Path) -> list[str]:
    """Our training step against the published script's (``records/e3_step_equiv_H6*.json``, ``step_equiv.py``): the
    first record by [step], a second with rounding controls by [step-rounding]; then, measured, the training loss of
    the models of each read-out."""
    recs = [json.loads(p.read_text()) for p in sorted(records.glob("e3_step_equiv_H6*.json"))]
    if not recs:
        return []
    lines = ["", "## E3's trainer, step for step", "",
             "The published script's model and step (its `nn.MSELoss`, its `optim.Adam(lr=1e-3)`) beside our engine's "
             "step (`make_step`: our forward, per-member MSE, fused Adam) on our model with the published read-out, "
             "given the published model's parameters and the same batches of 32 prompts from the published data "
             "generator (`tools/crosscheck/step_equiv.py`). The trained start: the published E3 model after its 300 "
             "epochs."]
    for rec in sorted(recs, key=lambda r: r.get("data_seed", 0)):
        rounding = any(r.get("side") == "published+1ulp" for r in rec["runs"].values())
        rule, reading = ((STEP_ROUNDING_RULE, step_rounding_reading(rec["runs"])) if rounding
                         else (STEP_RULE, step_reading(rec["runs"])))
        lines += ["", f"### Data seed {rec.get('data_seed', 0)}: rule {rule.split(':')[0]}", "",
                  f"The rule, stated before the numbers: {rule}.", "",
                  f"Commit `{rec['commit'][:12]}`{' (uncommitted changes)' if rec.get('commit_dirty') else ''}, torch "
                  f"{rec['torch']}, trained start `{rec['trained_start']}`.", "",
                  "| run | start | dtype | our side | our attention | our lr / published | ours flushes denormals | "
                  "steps | largest relative loss difference | published's subnormal numbers at the end |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        order = lambda item: (item[1].get("side", "engine") != "engine", item[1]["lr_ratio"] != 1.0, item[0])  # noqa: E731
        for name, r in sorted(rec["runs"].items(), key=order):
            lines.append(f"| {name} | {r['start']} | {r['dtype']} | {r.get('side', 'engine')} | {r['attention']} | "
                         f"{r['lr_ratio']:g} | {'yes' if r['ours_flush_denormals'] else 'no'} | {r['steps']} | "
                         f"{r['worst_rel_loss_diff']:.2g} | {r['published_subnormals_at_end']} |")
        lines += ["", f"**Reading by {rule.split(':')[0]}: {STEP_SAID[reading]}.**"]
        if not rounding and len(recs) > 1:
            lines += ["", "[step]'s float32 bound is one fixed number. The next record, with fresh prompts and batch "
                      "order, reads each float32 run against rounding measured beside it, by a rule written after this "
                      "reading."]
    return lines + _readout_loss_lines(records, set_dir)


#: Whether the published models are draws of the process that makes ours with their read-out (the same arithmetic,
#: by [step-rounding]), stated before the numbers of the read-out's seeds 3-5 (the page prints it).
RANK_ALPHA = 0.05
RANK_RULE = ("[rank]: on each test measure (lasso, ridge, linear MSE), the chance that the published models would "
             "rank as high as they do among all models with the published read-out were all of them draws of one "
             f"process (C(r, k) / C(n, k): k published models of n, r the lower of their ranks, 1 = highest). The published models differ from ours with that "
             f"read-out when the chance is at most {RANK_ALPHA:g} on at least 2 of the 3; no difference is found when it "
             f"exceeds {RANK_ALPHA:g} on all 3 and the counts could give {RANK_ALPHA:g} or less; otherwise the check "
             "cannot tell")


def rank_chance(published: list[float], ours: list[float]) -> tuple[list[int], float]:
    """The published values' ranks among all (1 = highest) and the chance that k of n draws of one process would all
    rank at or above the lowest of them."""
    every = sorted(published + ours, reverse=True)
    ranks = sorted(every.index(v) + 1 for v in published)
    return ranks, math.comb(ranks[-1], len(published)) / math.comb(len(every), len(published))


def rank_reading(chances: list[float], k: int, n: int) -> str:
    """Rule :data:`RANK_RULE` over the test measures' chances (k published models of n)."""
    if sum(c <= RANK_ALPHA for c in chances) >= 2:
        return "differ"
    if all(c > RANK_ALPHA for c in chances) and 1 / math.comb(n, k) <= RANK_ALPHA:
        return "no difference found"
    return "cannot tell"


def _readout_loss_lines(records: Path, set_dir: Path) -> list[str]:
    """E3 H = 6 models by read-out: each one's training loss over its last 10 epochs and its test MSE (measured, not
    a verdict), and how likely the published models' rank among the models of their read-out would be by chance."""
    ro = readout_record(records)
    pub = [json.loads(p.read_text()) for p in sorted(records.glob("e3_H6_data*.json"))]
    ours = [json.loads(p.read_text())["train_history"] for p in sorted(set_dir.glob(
        "statistical/runs/reference_code_H6/seed*/metrics.json"))]
    if not (ro and pub and ours):
        return []
    last10 = lambda c: statistics.fmean(c[-10:])  # noqa: E731
    fmt = lambda v: ", ".join(f"{y:.3g}" for y in sorted(v))  # noqa: E731
    loss = {"published code": [last10(r["train_loss_per_epoch"]) for r in pub],
            "ours, published read-out": [last10(c) for c in ro["train_loss_per_epoch"].values()],
            "ours, default read-out (d_out = 1)": [last10(c) for c in ours]}
    runs = pd.read_csv(set_dir / "tables" / "statistical_runs.csv")
    mse = {a: {"published code": [statistics.fmean(r["test_loss_per_eval_seed"][a]) for r in pub],
               "ours, published read-out": [ro["test_mse_vs_noisy_y"][str(s)][a] for s in ro["seeds"]],
               "ours, default read-out (d_out = 1)": _ours_h6(runs, a)} for a in ("lasso", "ridge", "linear")}
    lines = ["", "### E3's models by read-out", "",
             "Measured, not a verdict: E3's H = 6 models by read-out, each one's training loss over its last 10 "
             "epochs and its test MSE against the noisy y (the published models' on their own test sets).", "",
             "| models | n | training loss, last 10 epochs | lasso | ridge | linear |", "|---|---|---|---|---|---|"]
    for group, v in loss.items():
        lines.append(f"| {group} | {len(v)} | {fmt(v)} | " + " | ".join(fmt(mse[a][group]) for a in mse) + " |")
    k = len(pub)
    n = k + len(ro["seeds"])
    ranks, chances = [], []
    for name, values in [("training loss", loss)] + [(a, mse[a]) for a in mse]:
        r, chance = rank_chance(values["published code"], values["ours, published read-out"])
        ranks.append(f"{name} {', '.join(map(str, r))} (chance {chance:.2g})")
        chances += [chance] if name in mse else []
    lines += ["", f"The published models' ranks among the {n} models with the published read-out (1 = highest), and the "
              f"chance that {k} of {n} draws of one process would all rank that high or higher: " + "; ".join(ranks)
              + f". With {k} + {n - k} models the smallest chance this can give is {1 / math.comb(n, k):.2g}.", "",
              f"The rule, stated before the numbers of the read-out's seeds 3-5: {RANK_RULE}.", "",
              f"**Reading by [rank]: {rank_reading(chances, k, n)}.**"]
    pooled, reading = e3_pooled(records, runs, lambda a: mse[a]["ours, published read-out"])
    if not pooled:
        return lines
    lines += ["", "The same comparison by [published-models] (above), like with like: the published models against ours "
              "with the published read-out instead of our default read-out; applied after the read-out's seeds 3-5 "
              "were seen ([rank] is the test stated before them): "
              + "; ".join(f"{r['algorithm']} {r['verdict']}" for r in pooled) + f"; reading: {reading}."]
    return lines


def _cell(values: list[float]) -> str:
    """Mean, then each value."""
    return f"{statistics.fmean(values):.4g} ({', '.join(f'{v:.3g}' for v in values)})"


def _overall(readings: list[str]) -> str:
    """One reading for lasso, ridge, linear: the common one, or each named."""
    return readings[0] if len(set(readings)) == 1 else "mixed (" + ", ".join(
        f"{a}: {r}" for a, r in zip(("lasso", "ridge", "linear"), readings)) + ")"


def _trainer_lines(rec: dict) -> list[str]:
    """The [trainer] reading of a swap record whose ``mse`` holds ``our_models_on_published_data``."""
    mse = rec["mse"]
    if "our_models_on_published_data" not in mse:
        return []
    on = rec["on_published_data"]

    def both(models: dict, algo: str) -> list[float]:  # each model's mean over both test sets' seeds
        return [statistics.fmean(m["published"][algo] + m["ours"][algo]) for m in models.values()]

    lines = ["", "### Our trainer on the published training set", "", f"The rule, stated before the numbers: "
             f"{TRAINER_RULE}.", "", f"Our trainer's models of seeds {', '.join(k[4:] for k in mse['our_models_on_published_data'])}, "
             f"each trained on the published script's training set of data seed {on['data_seed']} (redrawn; "
             f"`swap_eval.py --write-published-data`) at commit `{str(on['trained_at'])[:12]}`.", "",
             "| algorithm | published (p) | ours (o) | our trainer, published training set (x) | f | reading |",
             "|---|---|---|---|---|---|"]
    readings, spreads = [], []
    for algo in ("lasso", "ridge", "linear"):
        p, o, x = (both(mse[k], algo) for k in ("published_models", "our_models", "our_models_on_published_data"))
        reading, f = trainer_reading(statistics.fmean(p), statistics.fmean(o), statistics.fmean(x))
        readings.append(reading)
        lines.append(f"| {algo} | {_cell(p)} | {_cell(o)} | {_cell(x)} | {f:.2f} | {reading} |")
        spreads.append(f"{algo} {min(x):.3g}-{max(x):.3g}, {(max(x) - min(x)) / abs(statistics.fmean(p) - statistics.fmean(o)):.1f} x |p - o|")
    overall = _overall(readings)
    lines += ["", "How far one model's end point decides it: our trainer's models on the one published training set "
              "span " + "; ".join(spreads) + "."]
    if rec.get("train_set"):
        lines += ["", "These models on the published training set (their final parameters), beside their last epoch's "
                  "mean training loss: " + _final_vs_running(rec["train_set"], lambda name: "published data" in name)
                  + "."]
    lines += _loss_level_lines(rec)
    return lines + ["", f"**Reading: within the models, the gap follows {overall}.**", "",
                    "Here \"the trainer\" is everything of ours but the training set: our engine's arithmetic and our "
                    "default read-out (d_out = 1, where the published code stacks Linear(48->48) and Linear(48->1)). "
                    "The next section takes the arithmetic apart from the read-out."]


def _final_vs_running(train: dict, keep) -> str:
    return "; ".join(f"{name} {t['final_params_mse']:.4g} vs {t['last_epoch_running_mean']:.4g}"
                     for name, t in train.items() if keep(name))


def _loss_level_lines(rec: dict) -> list[str]:
    """Each model's training loss over its last 10 epochs, grouped as in [trainer] (measured, not a verdict)."""
    train = rec.get("train_set", {})
    if not all("last_10_epochs_mean" in t for t in train.values()):
        return []
    groups = {"p": [t["last_10_epochs_mean"] for k, t in train.items() if k.endswith(".pth")],
              "x": [t["last_10_epochs_mean"] for k, t in train.items() if k.endswith("on the published data")]}
    groups["o"] = [t["last_10_epochs_mean"] for k, t in train.items() if k.startswith("seed") and "published" not in k]
    if not all(groups.values()):
        return []
    _, f = trainer_reading(*(statistics.fmean(groups[k]) for k in ("p", "o", "x")))
    fmt = lambda v: ", ".join(f"{y:.3g}" for y in v)  # noqa: E731
    return ["", f"The training loss over each model's last 10 epochs (the running means of the steps, steadier than "
            f"one end point): published (p) {fmt(groups['p'])}; ours (o) {fmt(groups['o'])}; our trainer on the "
            f"published training set (x) {fmt(groups['x'])}; f on it {f:.2f}. Measured, not a verdict: this measure "
            f"was chosen after the end points' spread above was seen."]


def readings_in_one_place(lines: list[str]) -> list[str]:
    """E3's readings and verdicts (the bold lines of its sections), each under its section's title, as one list."""
    heading, out = "", []
    for line in lines:
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif line.startswith("**"):
            out.append(f"- {heading}: {line}")
    return ["", "## E3's factor of two: the readings in one place", "",
            "Each reading by the rule its section states before its numbers; in the order the questions were asked.",
            "", *out] if out else []


def _g(x) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4g}"


def write(records: Path, set_dir: Path, out: Path) -> pd.DataFrame:
    from algo_emu.io import write_csv, write_text

    rows = e1_rows(records, set_dir) + e3_rows(records, set_dir)
    readout_rows, readout_lines = e3_readout(records, set_dir)
    frame = pd.DataFrame(rows + readout_rows)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "crosscheck.csv", frame)
    e4 = json.loads((records / "e4.json").read_text()) if (records / "e4.json").is_file() else None
    recs = [r for r in _load("*.json", records) if "changes" in r]
    changes = {r["experiment"]: r.get("changes", []) for r in recs}
    envs = sorted({json.dumps(r.get("environment", {}), sort_keys=True) for r in recs})
    md = ["# The published code beside ours", "",
          "The paper's published code (its authors' repository at commit 6d39297, not part of this project) run on "
          "a CPU (environment at the end), changing only what is listed below, beside this set's records of the same settings, "
          "made the same way. Rebuild: `python tools/crosscheck/table.py`; run the code again (a checkout of that "
          f"repository; the runs here took {sum(r.get('seconds') or 0 for r in recs) / 3600:.1f} h of wall time in "
          "all, their records say on how many threads): the commands at the top of `tools/crosscheck/published.py`.",
          "",
          "| experiment | setting | published code (per run) | published code mean ± sd (n) | ours mean ± sd (n) | "
          "paper | verdict (rule) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['experiment']} | {r['setting']} | {r['published_code']} | {_g(r['published_code_mean'])} ± "
                  f"{_g(r['published_code_sd'])} ({r['published_code_n']}) | {_g(r['ours_mean'])} ± {_g(r['ours_sd'])} "
                  f"({r['ours_n']}) | {_g(r['paper_mean'])} ± {_g(r['paper_sd'])} | {r['verdict']} ({r['rule']}) |")
    k = [r for r in rows if r["experiment"] == "E1" and r.get("kqv_published_code")]
    if k:
        md += ["", "E1's K / Q / V emulators' test MSE (mean over runs): " + "; ".join(
            f"H = {r['setting'].split(',')[0][2:]}: published code {r['kqv_published_code']}, ours {r['kqv_ours']}"
            for r in k) + "."]
    ep = e3_epochs(records, set_dir)
    if ep:
        md += ["", "E3, training loss (MSE against the noisy y on the mixed training prompts) against the paper's level "
               "(the mean of its three H = 6 values):", "", *ep]
    if e4:
        md += ["", "E4: the published script as written. `main()` first downloads its data from OpenML (" + e4["main"]
               + " where the run had no network); it then builds its model, before any training, with its own values "
               "(hidden 2 x 262 = 524, 8 heads), and that model, built alone here, fails: "
               + e4["model_with_main_values"] + ". So the script cannot train as published, with or without the data."]
    e3 = e3_published_model(records, set_dir) + readout_lines + e3_swap(records) + e3_step(records, set_dir)
    md += readings_in_one_place(e3) + e3
    md += ["", "## What was changed to run it", ""]
    for exp, ch in sorted(changes.items()):
        md += [f"- {exp}: " + "; ".join(ch)]
    md += ["", "Environment(s): " + "; ".join(envs), ""]
    write_text(out / "README.md", "\n".join(md))
    return frame


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=Path, default=HERE / "records")
    ap.add_argument("--set", dest="set_dir", type=Path, default=ROOT / "results/reference/paper-scale")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    write(args.records, args.set_dir, args.out or args.set_dir / "crosscheck")


if __name__ == "__main__":
    main()
