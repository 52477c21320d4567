"""Every result number in README.md and docs/*.md, generated from the committed sets.

A result number (an MSE, a ratio, a verdict count, a time) is never typed by hand into the prose: it lives
in a marked block that this module fills from the committed files,

    <!-- generated: NAME -->
    ...                      (written by `python -m algo_emu.docs_numbers --write`)
    <!-- /generated -->

and ``--check`` (run by tests/test_docs_numbers.py) fails when a block differs from what the committed
files give, naming the block. Sources, all inside the repository:

- ``results/reference/reference-scale/`` (``config/reference.yaml``): ``tables/replication.csv`` (verdicts),
  the experiments' tables, ``tables/learning_curves_summary.csv``, ``manifest.json`` (job wall times);
- ``results/reference/paper-scale/`` (``config/config.yaml``, made by ``make campaign``): the E1 tables and
  per-seed records (wall time, learning curves); the settings still missing come from
  :func:`algo_emu.campaign.settings` (a setting is present when all its per-seed records are in the set);
- ``benchmarks/engine.json`` (``make bench``) and, once it exists, ``benchmarks/paper_scale.json`` (the
  paper-scale cost benchmark the campaign predicts from) with ``benchmarks/paper_scale_<machine>.json`` (the same
  benchmark on other CPUs), and ``benchmarks/essay_bar.json`` (what the essay's model reaches against its gate);
- ``benchmarks/device_h200.json`` (``benchmarks/device_epochs.py``): the per-setting GPU runs' training steps as they
  timed them (docs/gpu.md, the README's GPU line);
- :mod:`algo_emu.paper_values` for the paper's own numbers.
- the configs (``config/*.yaml``) for sizes derived from them, and
  :mod:`algo_emu.constructions.grid` for E5's end margin (the code's own deterministic numbers).

Estimates that no committed file records (how long the toy and small configs take) are the constants in
:data:`ESTIMATES`, and every block prints them as estimates.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Callable

import pandas as pd

from algo_emu import paper_values, records
from algo_emu.io import read_json
from algo_emu.runtime import REPO_ROOT, cpu_key, cpu_label

REF = Path("results/reference/reference-scale")
PAPER = Path("results/reference/paper-scale")
ENGINE = Path("benchmarks/engine.json")
ATTENTION_BENCH = Path("benchmarks/attention.json")
DENORMAL_BENCH = Path("benchmarks/denormals.json")
STEP_PROFILE_BENCH = Path("benchmarks/step_profile.json")
MEMBERS_BENCH = Path("benchmarks/members.json")
PAPER_BENCH = Path("benchmarks/paper_scale.json")

BLOCK = re.compile(r"<!-- generated: (?P<name>[\w-]+) -->\n(?P<body>.*?)<!-- /generated -->", re.S)

#: Times no committed file records: printed as estimates, never as measurements.
ESTIMATES = {
    "tiny": "a few minutes of CPU (estimate; much longer on a loaded machine; CI runs it on every submission)",
    "quick": "about 10 minutes with `--cores 2` (estimate: one run, not recorded in a committed set)",
}
#: Milliseconds per optimiser step of one process alone on a large GPU (kernel launches and Python bound):
#: the guess docs/gpu.md prices with where no GPU run has timed a step (:data:`DEVICE_BENCH`), never a measurement.
GPU_STEP_MS = (1, 2)
#: One step of every shape group at the paper's shapes on a GPU (``benchmarks/gpu_probe.py``): the cost block's GPU
#: line once it exists.
GPU_PROBE = Path("benchmarks/gpu_probe.json")
#: The per-setting GPU runs' training steps as they timed them (``python benchmarks/device_epochs.py``).
DEVICE_BENCH = Path("benchmarks/device_h200.json")

EXPERIMENT_OF_RULE = (("heads", "E1"), ("theorem31", "E2"), ("statistical", "E3"), ("ames", "E4"),
                      ("construction", "E5"), ("essay", "E6"))


def _g(x: float, digits: int = 3) -> str:
    """A number as the docs print it: ``digits`` significant figures (no exponent for large numbers)."""
    x = float(x)
    return f"{x:.0f}" if abs(x) >= 10 ** digits else f"{x:.{digits}g}"


def _range(values, digits: int = 2) -> str:
    v = [float(x) for x in values if pd.notna(x)]
    if not v:
        return "--"
    lo, hi = min(v), max(v)
    if _g(lo, digits) == _g(hi, digits):
        return _g(lo, digits)
    return f"{_g(lo, digits)} to {_g(hi, digits)}" if lo < 0 else f"{_g(lo, digits)}-{_g(hi, digits)}"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h"


# ---------------------------------------------------------------------------------------------------------
# What the committed sets hold
# ---------------------------------------------------------------------------------------------------------

def _short_verdict(v: str) -> str:
    v = str(v)
    for cut in (":", " ("):
        if cut in v and not v.startswith("inconsistent"):
            v = v.split(cut, 1)[0]
    return v.strip()


def reference_verdicts(root: Path) -> pd.DataFrame:
    rep = pd.read_csv(root / REF / "tables" / "replication.csv")
    rep["short"] = rep.verdict.map(_short_verdict)
    return rep


def job_seconds(root: Path, manifest: Path) -> dict[str, float]:
    """Summed Snakemake-benchmark wall seconds per experiment (E1..E6) of a committed set's manifest."""
    jobs = read_json(root / manifest).get("benchmarks", {}).get("jobs", {})
    out: dict[str, float] = {}
    for name, rec in jobs.items():
        exp = next((e for prefix, e in EXPERIMENT_OF_RULE if name.startswith(prefix)), "other")
        out[exp] = out.get(exp, 0.0) + float(rec.get("wall_s", 0.0))
    return out


def _config(root: Path, name: str) -> dict:
    from algo_emu.config import load_config

    return load_config(root / name, gpu_check=False)


def paper_scale_settings(root: Path) -> list[tuple[object, bool, float | None]]:
    """(setting, present, wall seconds) for every campaign setting of config/config.yaml; present: made at the
    campaign's commit or adopted by a replay (the campaign's own status), never records it left out."""
    from algo_emu import campaign as cp

    state = cp.load_state(root / PAPER)
    out = []
    for s in cp.settings(_config(root, "config/config.yaml")):
        paths = [root / PAPER / s.set_path(r) for r in s.records]
        present = cp.setting_status(root / PAPER, state, s) in ("done", "adopted")
        wall = None
        if present:
            wall = max(float(read_json(p).get("timing", {}).get("wall_seconds_job") or 0.0) for p in paths) or None
        out.append((s, present, wall))
    return out


def paper_e1_rows(root: Path, sub: str = ""):
    """The heads-table rows of the paper-scale set (``sub``: its pre-campaign part); none without tables."""
    from algo_emu.report import replication as rep

    tables = root / PAPER / sub / "tables"
    if not (tables / "heads_vs_mse.csv").is_file():
        return []
    rows = rep.e1_rows(tables, _config(root, "config/config.yaml"), "config.yaml (the paper's scale)")
    return [r for r in rows if r.claim.startswith("heads table")]


def _has_mean(r) -> bool:
    return r is not None and r.comparable_mean is not None and r.comparable_mean == r.comparable_mean


# ---------------------------------------------------------------------------------------------------------
# Blocks
# ---------------------------------------------------------------------------------------------------------

def block_summary(root: Path) -> str:
    rep = reference_verdicts(root)
    order = ["consistent", "inconsistent (ours higher)", "inconsistent (ours lower)", "supported",
             "partly supported", "not supported", "inconclusive", "not comparable", "did not learn",
             "not available", "not run at this scale", "not tested"]
    lines = ["**Reference scale** (`config/reference.yaml`: 3 seeds, budgets below the paper's; committed in "
             "[`results/reference/reference-scale/`](results/reference/reference-scale/README.md)). Verdicts of "
             "its `replication.md`, counted per experiment:", "",
             "| experiment | rows | verdicts |", "|---|---:|---|"]
    for exp, g in rep.groupby("experiment", sort=True):
        counts = g.short.value_counts()
        keys = [k for k in order if k in counts] + sorted(k for k in counts.index if k not in order)
        lines.append(f"| {exp} | {len(g)} | " + ", ".join(f"{k} {counts[k]}" for k in keys) + " |")
    lines += ["", "A trained row at this scale reads *not comparable* wherever its budget is below the paper's; "
              "*supported* there means supported at reduced scale.", ""]
    # E1 at the paper's scale beside the paper
    from algo_emu.campaign import PRE

    rows = {r.setting: r for r in paper_e1_rows(root)}
    pre = {r.setting: r for r in paper_e1_rows(root, PRE)}
    lines += ["**E1 at the paper's scale** (`config/config.yaml`: N = 50,000, 50 epochs, 10 seeds; committed in "
              "[`results/reference/paper-scale/`](results/reference/paper-scale/README.md)): test MSE of the "
              "emulated head, published protocol, beside the paper's heads table (arXiv 2508.17550v2, the "
              "ablation of Theorem 4.1):", "",
              "| H | paper (mean ± std, 10 seeds) | ours (mean [95 % CI]) | verdict |", "|---:|---|---|---|"]
    for H, m, s in zip(paper_values.HEADS_TABLE["heads"], paper_values.HEADS_TABLE["mse"],
                       paper_values.HEADS_TABLE["std"]):
        r, q = rows.get(f"H={H}, p=60"), pre.get(f"H={H}, p=60")
        if not _has_mean(r) and _has_mean(q):
            lines.append(f"| {H} | {m} ± {s} | before the campaign: {_g(q.comparable_mean)} [{_g(q.comparable_ci_low)}, "
                         f"{_g(q.comparable_ci_high)}] | {q.verdict}, from records of an earlier commit not "
                         f"reproduced bit for bit at the campaign's commit: not evidence yet (`make campaign` "
                         f"replays or retrains it) |")
        elif not _has_mean(r):
            lines.append(f"| {H} | {m} ± {s} | missing | not yet run (`make campaign`) |")
        else:
            lines.append(f"| {H} | {m} ± {s} | {_g(r.comparable_mean)} [{_g(r.comparable_ci_low)}, "
                         f"{_g(r.comparable_ci_high)}] | {r.verdict} |")
    lines += paper_other_lines(root, order)
    lines += ["", "**Missing at the paper's scale** (settings of `config/config.yaml` not yet made at the campaign's "
              "commit; `make campaign` runs them in priority order):", ""]
    by_exp: dict[str, list[str]] = {}
    total: dict[str, int] = {}
    for s, present, _ in paper_scale_settings(root):
        total[s.experiment] = total.get(s.experiment, 0) + 1
        if not present:
            by_exp.setdefault(s.experiment, []).append(s.name.split("/", 1)[-1])
    names = {"heads": "E1", "theorem31": "E2", "statistical": "E3", "ames": "E4", "essay": "E6 (the essay)"}
    for exp in ("heads", "theorem31", "statistical", "ames", "essay"):
        miss = by_exp.get(exp, [])
        lines.append(f"- {names[exp]}: {len(miss)} of {total.get(exp, 0)} settings missing"
                     + (f": {', '.join(miss)}" if miss else ""))
    lines.append("- E5 (no training) is not a campaign setting: it is exact at every scale. E6 is one setting (its whole "
                 "DAG); its verdicts count only from a trained model within 10 % of the Bayes-optimal error; before the "
                 f"campaign: {essay_bar_summary(root)}.")
    return "\n".join(lines) + "\n"


def paper_other_lines(root: Path, order: list[str]) -> list[str]:
    """E2-E4 and the essay at the paper's scale: the campaign page's own verdict rows (``campaign_page.VERDICTS``),
    counted per experiment, and each row with a paper number beside ours; nothing while the set has none."""
    from algo_emu.campaign_page import MISSING, VERDICTS

    path = root / PAPER / VERDICTS
    if not path.is_file():
        return []
    rows = pd.read_csv(path)
    rows["short"] = rows.verdict.map(_short_verdict)
    made = rows[rows.verdict != MISSING]
    lines = ["", "**E2-E4 and the essay at the paper's scale**, from the campaign's settings done (its page's verdict "
             f"rows, `{PAPER.as_posix()}/{VERDICTS}`; a row whose setting is not made yet is not counted):", "",
             "| experiment | rows made | verdicts |", "|---|---:|---|"]
    for exp, g in made.groupby("experiment", sort=True):
        counts = g.short.value_counts()
        keys = [k for k in order if k in counts] + sorted(k for k in counts.index if k not in order)
        lines.append(f"| {exp} | {len(g)} | " + ", ".join(f"{k} {counts[k]}" for k in keys) + " |")
    paired = made[made.paper_mean.notna() & made.comparable_mean.notna()]
    if not paired.empty:
        lines += ["", "Each of those rows with a number in the paper, beside ours made the same way (where they differ, "
                  "the campaign's page says what was measured about why):", "",
                  "| experiment | claim | setting | paper | ours (mean [95 % CI]) | verdict |", "|---|---|---|---|---|---|"]
        for r in paired.itertuples():
            ci = (f" [{_g(r.comparable_ci_low)}, {_g(r.comparable_ci_high)}]"
                  if pd.notna(r.comparable_ci_low) and pd.notna(r.comparable_ci_high) else "")
            lines.append(f"| {r.experiment} | {r.claim} | {r.setting} | {r.paper_mean:g} ± {r.paper_std:g} | "
                         f"{_g(r.comparable_mean)}{ci} | {r.verdict} |")
    return lines


ESSAY_BAR = Path("benchmarks/essay_bar.json")


def essay_bar_summary(root: Path) -> str:
    """One sentence: what the essay's main model reached against its gate at each measured budget
    (``benchmarks/essay_bar.json``, ``benchmarks/essay_bar.py``), or that nothing was measured."""
    path = root / ESSAY_BAR
    rows = read_json(path).get("rows") if path.is_file() else None
    if not rows:
        return "no configuration that reaches it has been measured"
    rows = sorted(rows, key=lambda r: (r["steps"], r["batch_size"], r["lr"], r["seed"]))
    K = rows[0]["k_max"]
    parts = [f"{r['steps']} steps (batch {r['batch_size']}, lr {r['lr']:g}, seed {r['seed']}): "
             f"{_g(r['ratios'][f'k{K}']['ratio'], 3)}" for r in rows]
    passing = [r for r in rows if r["passes"]]
    return (f"the main model alone, at the config's width and depth (`{ESSAY_BAR}`), model / ridge MSE at k = "
            f"{K}: " + "; ".join(parts) + (f"; the gate ({rows[0]['gate']:g}) is reached from {passing[0]['steps']} steps"
                                           if passing else f"; none reaches the gate ({rows[0]['gate']:g})"))


def block_essay_bar(root: Path) -> str:
    path = root / ESSAY_BAR
    if not path.is_file():
        return f"**TODO:** `{ESSAY_BAR}` is not committed yet (`python benchmarks/essay_bar.py --steps N --out {ESSAY_BAR}`).\n"
    b = read_json(path)
    rows = sorted(b["rows"], key=lambda r: (r["steps"], r["batch_size"], r["lr"], r["seed"]))
    K = rows[0]["k_max"]
    m = rows[0]["model"]
    lines = [f"The main (`gaussian`) model at `config/config.yaml`'s width and depth (d_model {m['d_model']}, "
             f"{m['layers']} layers, {m['heads']} heads, ff {m['ff']}; d = {rows[0]['d']}, k_max = {K}), trained at "
             f"several budgets by `benchmarks/essay_bar.py` (the pipeline's own `train_variant`), against the gate: "
             f"model MSE / ridge MSE at k = {K} <= {rows[0]['gate']:g}, each row on fresh prompts of the training "
             "prior (a stream the pipeline never uses):", "",
             "| seed | steps | batch | peak lr | k = 8 | k = 16 | k = " + str(K) + " (the gate's) | gate | training time | CPU | "
             "load |", "|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|"]
    for r in rows:
        q = r["ratios"]
        cells = [_g(q[k]["ratio"], 3) if k in q else "-" for k in ("k8", "k16")]
        lines.append(f"| {r['seed']} | {r['steps']} | {r['batch_size']} | {r['lr']:g} | {cells[0]} | {cells[1]} | "
                     f"{_g(q[f'k{K}']['ratio'], 3)} ({_g(q[f'k{K}']['model_mse'], 3)} / {_g(q[f'k{K}']['ridge_mse'], 3)}) | "
                     f"{'reached' if r['passes'] else 'missed'} | {_minutes(r['train_seconds'])} | "
                     f"{cpu_label(r['environment'].get('hardware'))}, {r['environment'].get('threads')} "
                     f"thread(s) | {r['load_note']} |")
    if b.get("note"):
        lines += ["", b["note"]]
    return "\n".join(lines) + "\n"


def block_scales(root: Path) -> str:
    ref = job_seconds(root, REF / "manifest.json")
    n_ref = len(read_json(root / REF / "manifest.json").get("benchmarks", {}).get("jobs", {}))
    done = [(s, w) for s, present, w in paper_scale_settings(root) if present and w]
    e1 = [w for s, w in done if s.experiment == "heads"]
    from algo_emu.campaign import PRE

    pre = []
    for d in sorted((root / PAPER / PRE).glob("heads/*/runs/H*_p*")):
        walls = [read_json(p).get("timing", {}).get("wall_seconds_job") for p in sorted(d.glob("seed*/metrics.json"))]
        if walls and all(walls):
            pre.append(max(walls))
    lines = ["| scale | command | config | what it costs on 2 CPU cores |", "|---|---|---|---|",
             f"| toy (CI) | `make run CONFIG=tests/tiny.yaml` | `tests/tiny.yaml` | {ESTIMATES['tiny']} |",
             f"| small | `make quick` | `config/quick.yaml` | {ESTIMATES['quick']} |",
             f"| reference | `make run CONFIG=config/reference.yaml` | `config/reference.yaml` | measured: "
             f"{_minutes(sum(ref.values()))} summed over its {n_ref} timed jobs (Snakemake benchmark records in "
             f"its manifest; jobs ran one or two at a time beside other work), of which E1 {_minutes(ref.get('E1', 0))}, "
             f"E2 {_minutes(ref.get('E2', 0))}, E3 {_minutes(ref.get('E3', 0))}, E4 {_minutes(ref.get('E4', 0))}, "
             f"E5 {_minutes(ref.get('E5', 0))}, E6 {_minutes(ref.get('E6', 0))} |",
             "| paper | `make campaign` (or `make run`) | `config/config.yaml` | measured: "
             + (f"E1 {_hours(min(e1))}-{_hours(max(e1))} per setting at the campaign's commit ({len(e1)} settings, "
                f"all 10 seeds as one job, shared machine); " if e1 else "no setting yet at the campaign's commit; ")
             + (f"E1 {_hours(min(pre))}-{_hours(max(pre))} per heads setting before it ({len(pre)} settings); "
                if pre else "")
             + "predictions for the rest: the paper-scale cost table below |"]
    return "\n".join(lines) + "\n"


#: The whole paper scale's target on the 2-core machine, hours (the performance goal the cost table is read against).
TARGET_HOURS = 48.0
#: :data:`GPU_STEP_MS` in seconds: the README prices the benchmark's step count with it, saying so, where no GPU run
#: has timed a step.
GPU_STEP_GUESS_S = tuple(ms / 1000 for ms in GPU_STEP_MS)
#: Within this fraction a real setting's wall time confirms its prediction.
PREDICTION_TOLERANCE = 0.25


def paper_benchmarks(root: Path) -> list[tuple[Path, dict]]:
    """Every committed paper-scale benchmark: ``benchmarks/paper_scale.json`` (the machine the cost table is
    priced on) first, then ``benchmarks/paper_scale_*.json`` (the same benchmark on other machines)."""
    from algo_emu import campaign as cp

    return [(p, read_json(p)) for p in cp.benchmark_files(root)]


def _done_settings(root: Path) -> list[tuple[object, dict]]:
    """(setting, its campaign.json entry) of every setting the campaign finished."""
    from algo_emu import campaign as cp

    state_path = root / PAPER / "campaign.json"
    if not state_path.is_file():
        return []
    entries = read_json(state_path)["settings"]
    return [(s, entries[s.name]) for s in cp.settings(_config(root, "config/config.yaml"))
            if entries.get(s.name, {}).get("status") == "done" and entries[s.name].get("wall_seconds")]


def _last_call(root: Path, s, entry: dict) -> dict:
    """What the records of a done setting say of the call that finished it: its CPU, the epochs it trained
    (all of them unless resumed) and their training seconds (each job's slowest record; jobs summed). Without
    records in the tree: the campaign entry's wall time and hardware, every epoch."""
    paths = [root / PAPER / s.set_path(r) for r in s.records]
    recs = {p: read_json(p) for p in paths if p.is_file()}
    sidecars = {p: read_json(p) for p in (root / PAPER / s.set_path(r) for r in s.extras if r.endswith(".pt.json"))
                if p.is_file()}
    blocks = records.training_jobs(recs, sidecars) if recs else {}
    # the CPU: the campaign's record of the last call where it names the CPU's identity (the records, made by the
    # pinned commit's code, may predate it), else the records' own, else the entry's
    calls = entry.get("calls") or []
    last_hw = (calls[-1].get("hardware") if calls else None) or {}
    hw = entry.get("hardware", {})
    if not blocks:
        hw = last_hw if last_hw.get("cpu_id") else hw
        return {"cpu": cpu_label(hw), "cpu_key": cpu_key(hw), "seconds": float(entry["wall_seconds"]), "first": 1,
                "epochs": None, "of": None, "timed": "all"}
    # each training job's epochs of its last call (records.training_jobs: E2's model and baseline folders, E3's
    # two blocks, E4's sidecars per hidden-width group)
    jobs = {k: (sum(t["epoch_seconds"][int(t.get("resumed_from_epoch") or 0):]),
                int(t.get("resumed_from_epoch") or 0) + 1, len(t["epoch_seconds"])) for k, t in blocks.items()}
    if not last_hw.get("cpu_id"):
        last_hw = next((e["hardware"] for r in recs.values() for e in records.environments(r) if e.get("hardware")), hw)
    ranges = sorted({(first, of) for _, first, of in jobs.values()})
    timed = "all" if all(first == 1 for first, _ in ranges) else ", ".join(f"{a}-{b}" for a, b in ranges)
    return {"cpu": cpu_label(last_hw), "cpu_key": cpu_key(last_hw), "seconds": sum(v[0] for v in jobs.values()),
            "first": min(first for first, _ in ranges), "epochs": sum(of - first + 1 for _, first, of in jobs.values()),
            "of": sum(of for _, _, of in jobs.values()), "timed": timed,
            "resumed_at": sorted({first - 1 for _, first, _ in jobs.values()})}


def _calls_of_timed_epochs(calls: list[dict], resumed_at: list[int]) -> list[int]:
    """Indices of the campaign calls that trained a done setting's timed epochs (each job's epochs of its last
    call), read from the checkpoints each call resumed: a job resumed at epoch k > 0 ran from the last call that
    resumed a checkpoint at k; a job timed from its first epoch ran from the call before the last one that first
    resumed a checkpoint no earlier call had (its own, once it was done), or else from the last call. A job
    whose call cannot be told counts every call."""
    if not calls:
        return []
    last, first = len(calls) - 1, len(calls) - 1
    seen: set = set()
    new_at = []
    for i, c in enumerate(calls):
        names = set(c.get("resumed_from") or {})
        if names - seen:
            new_at.append(i)
        seen |= names
    for k in resumed_at:
        if k > 0:
            hits = [i for i, c in enumerate(calls) if k in (c.get("resumed_from") or {}).values()]
            first = min(first, hits[-1] if hits else 0)
        elif new_at and new_at[-1] > 0:
            first = min(first, new_at[-1] - 1)
    return list(range(first, last + 1))


def _prediction_check(root: Path, s, entry: dict, benches: list[tuple[Path, dict]]) -> str | None:
    """One row of the README's check table: a done setting against the benchmark made by its code on its CPU."""
    from algo_emu import campaign as cp

    call = _last_call(root, s, entry)
    code = entry.get("code_version")
    with_row = [(p, b) for p, b in benches if cp.predicted_from_benchmark(s, b) is not None]
    if not with_row:
        return None
    same_code = [(p, b) for p, b in with_row if b.get("environment", {}).get("code_version") == code]
    match = [(p, b) for p, b in same_code if cpu_key(b.get("environment", {}).get("hardware")) == call["cpu_key"]]
    path, b = (match or same_code or with_row)[0]
    share = call["epochs"] / call["of"] if call["epochs"] else 1.0
    pred = cp.predicted_from_benchmark(s, b) * share
    meas = call["seconds"]
    if not same_code:
        verdict = "other code: not a check"
    elif not match:
        verdict = f"no benchmark on its CPU ({call['cpu']}): not a check"
    else:
        verdict = ("within" if abs(meas / pred - 1) <= PREDICTION_TOLERANCE else "outside") + \
                  f" {PREDICTION_TOLERANCE:.0%} (`{path.name}`)"
    calls = entry.get("calls") or []
    timed_calls = [calls[i] for i in _calls_of_timed_epochs(calls, call.get("resumed_at", [0]))]
    if any(c.get("load") for c in timed_calls):
        # measured while each call ran (algo_emu.load): a stall or others' share explains a slow call
        from algo_emu.load import load_words

        if len(timed_calls) == 1:
            verdict += f"; that call: {load_words(timed_calls[0]['load'])}"
        else:
            verdict += "; the calls that trained its timed epochs: " + "; ".join(
                f"from {str(c.get('started', '?'))[:16].replace('T', ' ')}: {load_words(c.get('load'))}" for c in timed_calls)
        stalled = sum((c.get("load") or {}).get("stalled_s", 0.0) for c in timed_calls)
        if stalled and same_code and match:
            r = (meas - stalled) / pred
            verdict += (f"; without those stalls (every job paused) {_g(r, 2)}, "
                        f"{'within' if abs(r - 1) <= PREDICTION_TOLERANCE else 'outside'} {PREDICTION_TOLERANCE:.0%}")
    timed = call["timed"]
    return (f"| `{s.name}` | {call['cpu']} | {timed} | {_hours(pred)} | {_hours(meas)} | "
            f"{_g(meas / pred, 2)} | {str(entry.get('commit'))[:10]} ({str(code or '?').rsplit(' ', 1)[-1]}) | {verdict} |")


def block_paper_scale_cost(root: Path) -> str:
    path = root / PAPER_BENCH
    if not path.is_file():
        return ("**TODO (generated once `benchmarks/paper_scale.json` exists):** the predicted cost of every "
                "paper-scale setting on 2 CPU cores, from a benchmark of each experiment's training step at the "
                "paper's shapes. Until it is committed, the only paper-scale times are the measured E1 settings "
                "above; no estimate of E2-E4 at the paper's scale is given here.\n")
    from algo_emu import campaign as cp

    b = read_json(path)
    rows = b.get("settings", {})
    pred = b["prediction"]
    env = b.get("environment", {})
    hw = env.get("hardware", {})
    per: dict[str, list[float]] = {}
    jobs: dict[str, int] = {}
    for s in cp.settings(_config(root, "config/config.yaml")):
        if s.name in rows:
            per.setdefault(s.experiment, []).append(float(rows[s.name]["predicted_seconds"]))
            jobs[s.experiment] = jobs.get(s.experiment, 0) + int(rows[s.name]["jobs"])
    names = {"heads": "E1", "theorem31": "E2", "statistical": "E3", "ames": "E4"}
    total = 3600 * float(pred["hours"])
    lines = [f"Predicted from `{PAPER_BENCH}` ([table](benchmarks/paper_scale.md)): each experiment's training step "
             f"timed at the paper's shapes on {cpu_label(hw)} ({hw.get('cpu_count', '?')} cores, "
             f"{hw.get('memory_gib', '?')} GiB; {env.get('threads', '?')} torch threads; commit "
             f"{str(env.get('git_commit'))[:10]}), priced per training job by `benchmarks/cost.py` (steps x seconds "
             "per step + data + evaluation + compile warm-up). A prediction, not a full run; one job at a time.", "",
             "| experiment | settings | training jobs | predicted per setting | predicted in all |",
             "|---|---:|---:|---|---|"]
    for exp in ("heads", "theorem31", "statistical", "ames"):
        v = per.get(exp, [])
        if v:
            lines.append(f"| {names[exp]} | {len(v)} | {jobs[exp]} | {_hours(min(v))}-{_hours(max(v))} | "
                         f"{_hours(sum(v))} |")
    essay = pred["experiments"].get("E6 essay")
    if essay:
        lines.append(f"| E6 (essay) | - | {essay['jobs']} | - | {_hours(3600 * essay['hours'])} |")
    lines.append(f"| **all** | | {pred['jobs']} | | **{_hours(total)}** |")
    meas = b["rows"]
    loop = min(meas.items(), key=lambda kv: kv[1]["measured"]["speedup_vs_loop"]
               if kv[1]["shape"]["experiment"] != "essay" else float("inf"))
    floors = [f"{k} {_g(meas[k]['measured']['ratio_to_floor'], 2)}x" for k in meas
              if k.startswith(("E1 H=12 ", "E3 fitted H=12"))]
    lines += ["", f"The whole paper scale on these 2 cores of {cpu_label(hw)}: **{_hours(total)}**, "
              + ("within" if total <= 3600 * TARGET_HOURS else "over")
              + f" the {TARGET_HOURS:.0f} h it should take. Against a one-member-at-a-time loop timed in the same run "
              f"every ensemble row is at least {_g(loop[1]['measured']['speedup_vs_loop'], 2)}x faster (least: "
              f"{loop[0]}); against the arithmetic floor (useful matmul FLOPs at the run's matmul rate): "
              + ", ".join(floors) + "."]
    benches = paper_benchmarks(root)
    others = [(path, ob) for path, ob in benches[1:] if ob.get("prediction")]
    if others:
        lines += ["", "The same benchmark on other machines this project ran on, or again on this one (the hours are "
                  "the machine's, not a scaled guess; on a shared virtual machine the same code's hours move between "
                  "runs, so read a speed-up from `benchmarks/ab_commits.md`, which times two versions in "
                  "alternation):", ""]
        code, key = env.get("code_version"), cpu_key(hw)
        for opath, ob in others:
            ohw = ob.get("environment", {}).get("hardware", {})
            oexp = {k.split()[0]: v["hours"] for k, v in ob["prediction"]["experiments"].items()}
            same_cpu, same_code = cpu_key(ohw) == key, ob.get("environment", {}).get("code_version") == code
            what = ("the same code again on the same CPU, " if same_cpu and same_code else
                    f"the same CPU, the code of {str(ob.get('environment', {}).get('git_commit'))[:7]}, "
                    if same_cpu else "")
            lines.append(f"- `{opath.relative_to(root)}` ({opath.with_suffix('.md').name}): {what}{cpu_label(ohw)} "
                         f"({ohw.get('cpu_count', '?')} cores, {ohw.get('memory_gib', '?')} GiB; large-matmul rate "
                         f"{ob.get('machine_gflops', 0):.0f} GFLOP/s against {b.get('machine_gflops', 0):.0f} above): the "
                         f"whole paper scale **{_hours(3600 * float(ob['prediction']['hours']))}** ("
                         + ", ".join(f"{k} {_hours(3600 * h)}" for k, h in oexp.items()) + ")")
    same = [(ob["prediction"]["hours"], ob.get("machine_gflops") or 0.0, ob.get("environment", {}).get("git_commit"),
             str(ob.get("load_note", "")))
            for _, ob in benches if ob.get("prediction") and cpu_key(ob.get("environment", {}).get("hardware")) == cpu_key(hw)]
    if len(same) > 1:
        hours, rates = [x[0] for x in same], [x[1] for x in same]
        quiet = "each quiet" if all(x[3].startswith("quiet") for x in same) else "not all quiet: see each one's load note"
        lines += ["", f"Every benchmark on this CPU ({len(same)} runs, {len({x[2] for x in same})} commits, {quiet}): "
                  f"the whole paper scale **{_hours(3600 * min(hours))} to {_hours(3600 * max(hours))}**, large-matmul "
                  f"rate {min(rates):.0f}-{max(rates):.0f} GFLOP/s. The machine's speed moves between runs, minutes "
                  "apart as well as days, by as much as the spread shows (docs/speed.md), so the total above is one "
                  "run's, and a code change is read from `benchmarks/ab_commits.md` instead."]
    checks = [_prediction_check(root, s, e, benches) for s, e in _done_settings(root)]
    checks = [c for c in checks if c]
    lines += ["", "Real paper-scale settings against their prediction (a setting checks the prediction only when a "
              "benchmark was made by its training code, the source digest, on its CPU; a setting resumed on another "
              "machine is checked on the epochs of its last call, against that share of the prediction):", ""]
    if checks:
        lines += ["| setting | CPU of the (last) call | epochs timed | predicted | measured | measured / predicted | "
                  "made at (source digest) | check |", "|---|---|---|---|---|---:|---|---|", *checks]
    else:
        lines.append("No setting of the campaign is done yet.")
    steps = int(pred.get("steps", 0))
    gpu = gpu_measured(root)
    probe = read_json(root / GPU_PROBE) if (root / GPU_PROBE).is_file() else None
    if probe and probe["groups"]:
        env, missing = probe["environment"], sorted(probe["not_timed"])
        lines += ["", f"**On a GPU:** measured per shape group on one {env['device_name']} (`{GPU_PROBE.as_posix()}`, "
                  f"one step of every group at the paper's shapes, {probe['steps_per_call']} steps per captured call"
                  f"{', TF32' if probe['tf32'] else ''}): the paper scale's grouped jobs take "
                  f"{_g(probe['paper_seconds_one_group_at_a_time'], 3)} s of compute one group at a time (its "
                  f"arithmetic at the device's large-matmul rate: {_g(probe['floor_seconds'], 3)} s)"
                  + (f"; not timed: {', '.join(missing)}" if missing else "") + " ([docs/gpu.md](docs/gpu.md))."]
    elif steps and gpu:
        alone_h = steps * gpu["alone_ms"] / 3.6e6
        lines += ["", f"**On a GPU:** measured on one {gpu['gpu']} (`{DEVICE_BENCH.as_posix()}`): one job alone "
                  f"{_g(gpu['alone_ms'], 3)} ms per step ({gpu['alone_shape']}, the one shape timed alone); "
                  f"{gpu['shared_jobs']} jobs sharing it {_g(gpu['shared_ms'][0], 2)}-{_g(gpu['shared_ms'][1], 3)} ms per "
                  f"step each, together {_g(gpu['throughput'], 3)}x one job alone. Priced at the alone rate (an "
                  f"extrapolation: E3's and E4's shapes were not timed), the same {steps:,} steps take "
                  f"{alone_h:.1f} h one job at a time, about {alone_h / gpu['throughput']:.1f} h with the GPU as "
                  "shared as in that run ([docs/gpu.md](docs/gpu.md)). No setting has been finished on a GPU yet."]
    elif steps:
        lo, hi = (steps * g / 3600 for g in GPU_STEP_GUESS_S)
        lines += ["", f"**On a GPU (an estimate, not a measurement):** the same jobs take {steps:,} optimiser steps; "
                  f"at a guessed {GPU_STEP_GUESS_S[0] * 1e3:g}-{GPU_STEP_GUESS_S[1] * 1e3:g} ms per step (these shapes "
                  f"are too small to load a large GPU, so launches and Python bound a step) that is {lo:.1f}-{hi:.1f} h "
                  "one job at a time, less where jobs share the GPU ([docs/gpu.md](docs/gpu.md)). No run of the "
                  "pipeline on a GPU has been made."]
    return "\n".join(lines) + "\n"


def block_speed(root: Path) -> str:
    e = read_json(root / ENGINE)
    lines = ["| H | published loop (protocol) | one-at-a-time full-p baseline, same run | ours, eager | "
             "ours, `compile: true` | speed-up vs published / vs same-run baseline |",
             "|---|---:|---:|---:|---:|---|"]
    pub = e.get("published_loop_s_per_epoch_per_seed", {})
    for H, v in e["heads"].items():
        eager = min((x for k, x in v.items() if k.startswith("ours_eager")), key=lambda x: x["s_per_epoch_per_seed"])
        comp = min((x for k, x in v.items() if k.startswith("ours_compiled")), key=lambda x: x["s_per_epoch_per_seed"])
        lines.append(f"| {H} | {_g(pub.get(H, float('nan')))} | {_g(v['one_at_a_time_full_p']['s_per_epoch_per_seed'] if isinstance(v['one_at_a_time_full_p'], dict) else v['one_at_a_time_full_p'])} | "
                     f"{_g(eager['s_per_epoch_per_seed'])} ({eager['attention']}) | {_g(comp['s_per_epoch_per_seed'])} "
                     f"({comp['attention']}) | {_g(v['speedup_vs_published_loop'], 2)}x / "
                     f"{_g(v['speedup_vs_one_at_a_time_same_run'], 2)}x |")
    h1 = e["heads"].get("1")
    if h1:
        eager = min(x["s_per_epoch_per_seed"] for k, x in h1.items() if k.startswith("ours_eager"))
        comp = min(x["s_per_epoch_per_seed"] for k, x in h1.items() if k.startswith("ours_compiled"))
        lines += ["", f"`torch.compile` (`heads.compile: true`) against the best eager implementation at H = 1: "
                      f"{_g(eager / comp, 3)}x. Useful work at H = 1: {_g(h1['gflops'], 2)} GFLOP/s, against "
                      f"{_g(e['machine_matmul_gflops'], 2)} GFLOP/s for a large matrix multiply on the same machine. "
                      f"The published loop's seconds per epoch are the figures its authors' set-up implies on a "
                      f"2-core machine like ours, not a run here."]
    return "\n".join(lines) + "\n"


def block_kernel_by_cpu(root: Path) -> str:
    """The kernel's eager training step against PyTorch's fused attention, same run, on every CPU a paper-scale
    benchmark was made on (``benchmarks/paper_scale*.json``, its ``variants_step_seconds``)."""
    benches = paper_benchmarks(root)
    if not benches:
        return "**TODO:** no paper-scale benchmark is committed yet (`make bench`).\n"
    cols, rows = [], {}
    for path, b in benches:
        hw = b.get("environment", {}).get("hardware", {})
        cols.append(f"{cpu_label(hw)} (`{path.name}`; matmul {b.get('machine_gflops', 0):.0f} GFLOP/s)")
        for key, r in b["rows"].items():
            v = r["measured"].get("variants_step_seconds", {})
            if "kernel_attention_eager" in v and "fused_attention_eager" in v:
                rows.setdefault(key, {})[path.name] = (v["kernel_attention_eager"], v["fused_attention_eager"])
    lines = ["Eager training step with the kernel / with PyTorch's fused attention, milliseconds, one run per CPU "
             "(below 1: the kernel is faster):", "", "| shape | " + " | ".join(cols) + " |",
             "|---|" + "---|" * len(cols)]
    for key, per in rows.items():
        cells = [f"{1e3 * per[p.name][0]:.0f} / {1e3 * per[p.name][1]:.0f} = {_g(per[p.name][0] / per[p.name][1], 2)}"
                 if p.name in per else "-" for p, _ in benches]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


AB_BENCH = Path("benchmarks/ab_commits.json")


def block_ab_commits(root: Path) -> str:
    """What the last engine change gained, timed in alternation with the code before it
    (``benchmarks/ab_commits.json``): per row the two versions' medians and the median of the per-round ratios."""
    path = root / AB_BENCH
    if not path.is_file():
        return f"**TODO:** `{AB_BENCH}` is not committed yet (`python benchmarks/ab_commits.py`).\n"
    b = read_json(path)
    lines = [f"On {b['hardware']}; base `{b['base']['commit'][:10]}` ({b['base']['code_version'].rsplit(' ', 1)[-1]}), "
             f"new `{b['new']['commit'][:10]}` ({b['new']['code_version'].rsplit(' ', 1)[-1]}); {b['rounds']} rounds, "
             f"each timing every row once per version in a fresh process, the order alternating; load: {b['load_note']}.",
             "", "| row | base ms | new ms | new / base, per round | median | compiled (base, new) |",
             "|---|---:|---:|---|---:|---|"]
    for key, r in b["rows"].items():
        lines.append(f"| {key} | {1e3 * r['base_median']:.1f} | {1e3 * r['new_median']:.1f} | "
                     + ", ".join(f"{x:.2f}" for x in r["ratios"]) + f" | {r['ratio_median']:.2f} | "
                     f"{'yes' if r['compiled'][0] else 'no'}, {'yes' if r['compiled'][1] else 'no'} |")
    return "\n".join(lines) + "\n"


def block_attention_kernel(root: Path) -> str:
    path = root / ATTENTION_BENCH
    if not path.is_file():
        return f"**TODO:** `{ATTENTION_BENCH}` is not committed yet (`python benchmarks/attention.py`).\n"
    b = read_json(path)
    hw = b.get("environment", {}).get("hardware", {})
    lines = ["| shape | members | head width | attention fwd+bwd, fused -> kernel (ms) | speed-up | "
             "eager training step, fused -> kernel (ms) | speed-up |", "|---|---:|---:|---|---:|---|---:|"]
    for r in b["rows"]:
        ms = r["ms"]
        lines.append(f"| {r['key']} | {r['E']} | {r['head_width']} | {_g(ms['attention_fused'])} -> "
                     f"{_g(ms['attention_kernel'])} | {_g(r['attention_speedup'], 2)}x | {_g(ms['step_fused'])} -> "
                     f"{_g(ms['step_kernel'])} | {_g(r['step_speedup'], 2)}x |")
    lines += ["", "The attention alone takes each implementation's own input layout (heads split out for `fused`, "
                  "heads side by side, as the projections give them, for the kernel); the training step is the "
                  "same model with either. "
                  f"CPU milliseconds of one thread (process CPU time, median of interleaved repetitions) on "
                  f"{hw.get('cpu_model', 'the machine named in the file')} ({hw.get('cpu_count', '?')} cores; 1-minute "
                  f"load average {_g(b['load_average_1min_at_start'], 2)} at the start, "
                  f"{_g(b['load_average_1min_at_end'], 2)} at the end"
                  f"{': other work shared the machine' if b['load_average_1min_at_start'] >= 1 else ''}); "
                  f"`{b['command'].strip()}`."]
    return "\n".join(lines) + "\n"


def block_denormals(root: Path) -> str:
    path = root / DENORMAL_BENCH
    if not path.is_file():
        return f"**TODO:** `{DENORMAL_BENCH}` is not committed yet (`python benchmarks/denormals.py`).\n"
    b = read_json(path)
    lines = ["| shape | steps | ms/step, flushed | ms/step, not flushed | not flushed / flushed | losses of the two runs |",
             "|---|---:|---:|---:|---:|---|"]
    for key, r in b["rows"].items():
        same = "bit-identical" if r["losses_bit_identical"] else (
            f"differ from step {r['first_step_losses_differ']} (largest relative difference "
            f"{r['max_relative_loss_difference']:.1e})")
        lines.append(f"| {key} | {r['steps']} | {_g(r['last_quarter_ms_flushed'])} | "
                     f"{_g(r['last_quarter_ms_not_flushed'])} | {_g(r['slowdown_not_flushed'], 2)}x | {same} |")
    lines += ["", f"Each shape trained twice from the same initialisation on the same batches, each run in its own "
                  f"process; ms/step: median over the last quarter of the steps; {b['hardware']}, {b['threads']} "
                  f"threads, commit {b['commit']}; load: {b['load_note']}; made by "
                  + "; ".join(f"`python benchmarks/denormals.py {' '.join(a)}`"
                              for a in dict.fromkeys(tuple(r.get("argv", b["argv"])) for r in b["rows"].values()))
                  + "."]
    if not any(r["denormal_values_not_flushed"][x] for r in b["rows"].values()
               for x in ("parameters", "gradients", "adam_state")):
        lines[-1] += (" At the end of every unflushed run no parameter, gradient or Adam value is denormal: what costs "
                      "the time are values made and used inside a step.")
    return "\n".join(lines) + "\n"


def block_members(root: Path) -> str:
    path = root / MEMBERS_BENCH
    if not path.is_file():
        return f"**TODO:** `{MEMBERS_BENCH}` is not committed yet (`python benchmarks/members.py`).\n"
    b = read_json(path)
    mults = sorted({int(k) for r in b["rows"].values() for k in r["by_multiple"]})
    lines = ["| shape | " + " | ".join(f"x{k}: members, ms/step" for k in mults) + " | per-member ratio at "
             + ", ".join(f"x{k}" for k in mults[1:]) + " |", "|---|" + "---:|" * len(mults) + "---|"]
    ratios, reps = [], set()
    for key, r in b["rows"].items():
        cells = [r["by_multiple"][str(k)] for k in mults]
        ratios += [c["per_member_ratio"] for c in cells[1:]]
        reps |= {len(c["ms_per_step_samples"]) for c in cells}
        lines.append(f"| {key}{' (compiled)' if r['compiled'] else ''} | "
                     + " | ".join(f"{c['members']}, {_g(c['ms_per_step'])}" for c in cells) + " | "
                     + ", ".join(_g(c["per_member_ratio"], 2) for c in cells[1:]) + " |")
    hw = b["environment"].get("hardware", {})
    lines += ["", f"Per-member ratio = (ms per step at xk / k) / (ms per step at x1), from {_g(min(ratios), 2)} to "
                  f"{_g(max(ratios), 2)} here; medians of {'/'.join(map(str, sorted(reps)))} "
                  f"interleaved repetitions; {hw.get('cpu_model')}, {hw.get('cpu_count')} logical cores, commit "
                  f"{str(b['environment'].get('git_commit'))[:10]}; load: {b['load_note']}; made by "
                  f"`python benchmarks/members.py {' '.join(b['argv'])}`."]
    return "\n".join(lines) + "\n"


def block_step_profile(root: Path) -> str:
    """What bounds a training step (``benchmarks/step_profile.json``): the per-step and per-member parts, the useful
    FLOP rate against the large-matmul rate, the profile's classes, and the step's matrix products run alone."""
    path = root / STEP_PROFILE_BENCH
    if not path.is_file():
        return f"**TODO:** `{STEP_PROFILE_BENCH}` is not committed yet (`python benchmarks/step_profile.py`).\n"
    b = read_json(path)
    m, env = b["machine"], b["environment"]
    hw = env.get("hardware", {})
    lines = ["| row | members | ms/step | per step, any member count (share) | useful GFLOP/s (/ large matmul) | "
             "matrix products | attention kernel | compiled elementwise/layout | rest | matrix products: in the step "
             "/ alone, ms (alone: GFLOP/s) |", "|---|---:|---:|---|---|---:|---:|---:|---:|---|"]
    for key, r in b["rows"].items():
        sh = r["profile_shares"]
        named = sh["matrix products"] + sh["attention kernel"] + sh["compiled elementwise/layout"]
        lines.append(f"| {key} | {r['members']} | {_g(r['ms_per_step'])} | {max(r['fixed_ms_per_step'], 0.0):.2f} ms "
                     f"({max(r['fixed_share'], 0.0):.0%}) | {r['useful_gflops']:.0f} ({r['useful_gflops'] / m['matmul_gflops']:.2f}) | "
                     f"{sh['matrix products']:.0%} | {sh['attention kernel']:.0%} | {sh['compiled elementwise/layout']:.0%} | "
                     f"{1 - named:.0%} | {_g(r['matmul_in_step_ms'])} / {_g(r['matmul_isolated_ms'])} "
                     f"({r['matmul_isolated_gflops']:.0f}) |")
    lines += ["", f"{hw.get('cpu_model')} ({hw.get('cpu_id', '')}), {hw.get('cpu_count')} logical cores, "
                  f"{env.get('threads')} torch threads, commit {str(env.get('git_commit'))[:10]}; large matmul "
                  f"{m['matmul_gflops']:.0f} GFLOP/s, copy bandwidth {m['copy_gbps_4mib']:.0f} GB/s in cache (4 MiB) and "
                  f"{m['copy_gbps_256mib']:.0f} GB/s from memory (256 MiB); load: {b['load_note']}; made by "
                  f"`python benchmarks/step_profile.py {' '.join(b['argv'])}` (its table: `benchmarks/step_profile.md`)."]
    return "\n".join(lines) + "\n"


def _refset_tables(root: Path) -> Path:
    return root / REF / "tables"


def block_reference_results(root: Path) -> str:
    t = _refset_tables(root)
    lines = []
    pl = pd.read_csv(t / "prompt_length_vs_mse.csv")
    pl = pl[(pl.protocol == "published") & (pl.target == "reference_code")].sort_values("p")
    curves = pd.read_csv(t / "learning_curves_summary.csv")
    e1c = curves[(curves.experiment == "E1") & curves.quantity.str.startswith("test MSE")]
    lines.append("- **E1** (published protocol, the code's softmax axis, mean of per-batch means): composed-head "
                 "MSE at the last epoch " + ", ".join(f"{_g(m)} (p = {p})" for p, m in zip(pl.p, pl.mse_mean))
                 + f" against Var(Y) = {_g(pl.target_var_mean.mean())}; the lowest held-out MSE over the "
                 f"evaluations was {_range(e1c['min'], 3)}, at the first evaluation (train loss kept falling): "
                 "the emulators overfit early.")
    f = pd.read_csv(t / "f_emulation.csv")
    parts = []
    for fn, g in f.groupby("f", sort=False):
        parts.append(f"{fn} " + ", ".join(f"{_g(r.rel_mse_mean, 2)} (blind {_g(r.blind_rel_mse_mean, 2)})"
                                          for r in g.sort_values("p").itertuples()))
    ps = sorted(f.p.unique())
    lines.append(f"- **E2** MSE / Var(target) at p = {', '.join(str(p) for p in ps)}: " + "; ".join(parts)
                 + ". Model / blind by p: " + ", ".join(f"p = {p}: {_range(f[f.p == p].mse_over_blind)}" for p in ps)
                 + ".")
    s = pd.read_csv(t / "statistical_emulation.csv")
    lines.append("- **E3** model / blind: " + ", ".join(
        f"{mode} {_range(g.mse_over_blind, 2)}" for mode, g in s.groupby("mode", sort=False))
        + "; reference_code MSE against the noisy y " + _range(s[s["mode"] == "reference_code"].mse_mean, 3)
        + " (the paper: " + _range([v for a in ("lasso", "ridge", "linear")
                                    for v in paper_values.STATISTICAL_HEADS[a]["mean"]], 3)
        + " at 300 epochs on N = 50,000); fitted ols emulation MSE by H: " + ", ".join(
        f"{_g(r.mse_mean, 3)} (H = {r.heads})" for r in s[(s["mode"] == "fitted") & (s.algorithm == "ols")]
        .sort_values("heads").itertuples()) + ".")
    a = pd.read_csv(t / "ames.csv")
    c = a[a["mode"] == "corrected"]
    algs = c[c.algorithm.isin(["linear", "ridge", "lasso"])]
    lines.append("- **E4** corrected, model / blind: " + ", ".join(
        f"{r.algorithm} {_g(r.mse_over_blind, 2)}" for r in c.itertuples())
        + f"; emulation MSE on the three algorithms' fits {_range(algs.emulation_mse_mean)} against the spread "
          f"between their predictions {_range(algs.spread_mse_mean)}; reference_code model / blind "
        + _range(a[a["mode"] == "reference_code"].mse_over_blind) + ".")
    late = curves[(curves.model == "model") & curves.quantity.str.startswith("train")]
    blind = curves[(curves.model != "model") & curves.quantity.str.startswith("train")]
    lines.append("- **Still falling at the end** (`late_drop`: the fall of the train loss over the last fifth of "
                 "training): " + ", ".join(
                     f"{exp} {_range(100 * g.late_drop, 2)} %" for exp, g in late.groupby("experiment"))
                 + "; weight-blind baselines " + ", ".join(
                     f"{exp} {_range(100 * g.late_drop, 2)} %" for exp, g in blind.groupby("experiment")) + ".")
    return "\n".join(lines) + "\n"


def block_reference_cost(root: Path) -> str:
    sec = job_seconds(root, REF / "manifest.json")
    n = len(read_json(root / REF / "manifest.json").get("benchmarks", {}).get("jobs", {}))
    return (f"Summed job wall time of the committed run: {_minutes(sum(sec.values()))} over {n} timed jobs "
            "(the Snakemake benchmark records in its `manifest.json`; aggregation and figure rules are not timed), "
            + ", ".join(f"{k} {_minutes(v)}" for k, v in sorted(sec.items())) + ".\n")


def block_paper_e1_curves(root: Path) -> str:
    from algo_emu.campaign import PRE

    lines = []
    for H in (1, 2):
        rel = Path("heads") / "published" / "runs" / f"H{H}_p60"
        recs = sorted((root / PAPER / rel).glob("seed*/metrics.json"))
        label = ""
        if not recs:  # the records this choice was made from, kept apart from the campaign's
            recs = sorted((root / PAPER / PRE / rel).glob("seed*/metrics.json"))
            label = ", records made before the campaign"
        if not recs:
            continue
        by_epoch: dict[int, list[float]] = {}
        for p in recs:
            for h in read_json(p).get("history", []):
                v = h.get("test_mse")
                if isinstance(v, dict):
                    v = v.get("reference_code_batchmean", v.get("reference_code"))
                if isinstance(v, (int, float)):
                    by_epoch.setdefault(int(h["epoch"]), []).append(float(v))
        if by_epoch:
            lines.append(f"- H = {H} ({len(recs)} seeds{label}): " + ", ".join(
                f"epoch {ep}: {_g(sum(v) / len(v))}" for ep, v in sorted(by_epoch.items())))
    return ("\n".join(lines) or "- no learning curve in the committed E1 records") + "\n"


ESSAY_CLAIMS_HEAD = ["| claim (as we test it) | the essay | measured [95 % CI] | verdict |", "|---|---|---|---|"]


def _essay_claim_line(claim, essay, measured, lo, hi, verdict) -> str:
    m = "--" if pd.isna(measured) else _g(measured)
    if not pd.isna(measured) and not pd.isna(lo):
        m += f" [{_g(lo)}, {_g(hi)}]"
    return f"| {str(claim).replace('|', '/')} | {str(essay).replace('|', '/')} | {m} | {str(verdict).replace('|', '/')} |"


def block_essay_claims(root: Path) -> str:
    c = pd.read_csv(_refset_tables(root) / "essay_claims.csv")
    lines = ESSAY_CLAIMS_HEAD + [_essay_claim_line(r.claim, r.essay_prediction, r.measured, r.ci_low, r.ci_high,
                                                   r.verdict) for r in c.itertuples()]
    return "\n".join(lines) + "\n"


def block_essay_claims_paper(root: Path) -> str:
    """The essay's claims at config/config.yaml's scale, from the paper-scale set, with the report's verdicts
    (gated on the main model's distance to the Bayes-optimal ridge), or that the setting is not done yet."""
    from algo_emu import campaign as cp
    from algo_emu.essay import claims as ec
    from algo_emu.report import replication as rep

    tables = root / PAPER / "tables"
    state = cp.load_state(root / PAPER)
    if state["settings"].get("essay", {}).get("status") != "done" or not (tables / "essay_claims.csv").is_file():
        return "- not done yet: the campaign's `essay` setting (`make campaign`) makes it\n"
    cfg = _config(root, "config/config.yaml")
    check = ec.learning_check(pd.read_csv(tables / "essay_curves.csv"))
    rows = rep.essay_rows(tables / "essay_claims.csv", cfg)
    counts = Counter(r.verdict for r in rows)
    e = state["settings"]["essay"]
    lines = [f"Made by the campaign at `{str(e['commit'])[:10]}` on {cpu_label(e['hardware'])} "
             f"({_hours(e['wall_seconds'])}); the gate: {check['text']} "
             f"({'learned: the trained rows count' if check['learned'] == 'yes' else 'did not learn: no trained row counts'}). "
             "Verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ".", "", *ESSAY_CLAIMS_HEAD]
    lines += [_essay_claim_line(r.claim, r.paper, r.comparable_mean, r.comparable_ci_low, r.comparable_ci_high,
                                r.verdict) for r in rows]
    return "\n".join(lines) + "\n"


def block_essay_equivalences(root: Path) -> str:
    e = pd.read_csv(_refset_tables(root) / "essay_equivalences.csv")

    def at(check: str, param_value=None, col: str = "result_max"):
        g = e[e.check == check]
        if param_value is not None:
            g = g[g.value.astype(float) == float(param_value)]
        return g

    gd = at("lsa_vs_gd")
    rg = at("ridge_lsa_vs_ridge_gd")
    pm = at("ridge_lsa_vs_posterior_mean").sort_values("value", key=lambda v: v.astype(float))
    lines = [f"- linear attention vs GD: max abs error {_range(gd.result_max)} over L = "
             f"{', '.join(str(int(float(v))) for v in gd.value)} layers; ridge version {_range(rg.result_max)}",
             "- ridge layers vs the closed-form posterior mean, max abs error by layers: " + ", ".join(
                 f"{int(float(r.value))}: {_g(r.result_max, 3)}" for r in pm.itertuples()),
             "- softmax vs linear: the slope of the relative deviation against eps is the claims table's row"]
    return "\n".join(lines) + "\n"


def block_essay_cost(root: Path) -> str:
    jobs = read_json(root / REF / "manifest.json").get("benchmarks", {}).get("jobs", {})
    ess = {k: v for k, v in jobs.items() if k.startswith("essay")}
    if not ess:
        return "- no essay job is timed in the committed reference set\n"
    return ("Wall time per essay job of the committed reference run (`config/reference.yaml`, its Snakemake "
            "benchmark records; shared machine): " + ", ".join(
                f"`{k}` {_g(v['wall_s'], 3)} s" for k, v in sorted(ess.items()))
            + f"; {_minutes(sum(v['wall_s'] for v in ess.values()))} in all.\n")


def steps_per_epoch(cfg: dict) -> dict[str, int]:
    """Optimiser steps per epoch of E1, E2 and E3's training at ``cfg`` (batches of ``batch_size`` over the training
    prompts, the last one partial), keyed by config section."""
    h, t, st = cfg["heads"], cfg["theorem31"], cfg["statistical"]
    return {"heads": math.ceil(h["n_prompts"] * (1 - h["test_fraction"]) / h["batch_size"]),
            "theorem31": math.ceil(t["n_prompts"] * (1 - t["test_fraction"]) / t["batch_size"]),
            "statistical": math.ceil(st["n_prompts"] / st["batch_size"])}


_DEVICE_STEP = re.compile(r"^(heads_train_(?P<protocol>\w+?)_H(?P<H>\d+)_p(?P<p>\d+)|theorem31_(?P<kind>train|blind)_p(?P<p2>\d+)"
                          r"|statistical_(?P<skind>train|blind)_(?P<mode>\w+)_H(?P<sH>\d+))$")


def device_step_label(step: str) -> str:
    """A GPU-script step's name in the docs' words (``heads_train_published_H1_p60`` -> ``E1 H = 1, p = 60``)."""
    m = _DEVICE_STEP.match(step)
    if not m:
        return step
    if m["H"]:
        return f"E1 H = {m['H']}, p = {m['p']}" + ("" if m["protocol"] == "published" else f" ({m['protocol']})")
    if m["p2"]:
        return f"E2 p = {m['p2']}" + (" weight-blind" if m["kind"] == "blind" else "")
    return f"E3 {m['mode']} H = {m['sH']}" + (" weight-blind" if m["skind"] == "blind" else "")


def _most_shared_run(bench: dict) -> dict:
    """The run of :data:`DEVICE_BENCH` whose steps ran with the most jobs at once."""
    return max(bench["runs"], key=lambda run: max((r["jobs_at_once"] for r in run["rows"]), default=0))


def gpu_measured(root: Path) -> dict | None:
    """What the committed per-setting GPU runs (:data:`DEVICE_BENCH`) timed: the GPU, one job alone (ms per step,
    its shape), the most-shared run (jobs at once, its range of ms per step), and the shared GPU's throughput
    against one job alone; None when no run timed a job alone and beside others."""
    f = root / DEVICE_BENCH
    if not f.is_file():
        return None
    b = read_json(f)
    rows = [r for run in b["runs"] for r in run["rows"]]
    alone = [r for r in rows if r["jobs_at_once"] == 1 and r["ms_per_step"]]
    shared = _most_shared_run(b)
    if not alone or not b["sharing"] or not shared["rows"]:
        return None
    ms = [r["ms_per_step"] for r in shared["rows"] if r["ms_per_step"]]
    return {"gpu": b["runs"][0]["gpu"], "alone_ms": alone[0]["ms_per_step"], "alone_step": alone[0]["step"],
            "alone_shape": device_step_label(alone[0]["step"]),
            "shared_jobs": max(r["jobs_at_once"] for r in shared["rows"]), "shared_ms": (min(ms), max(ms)),
            "shared_window_s": shared["budget_s"] - shared["reserve_s"], "shared_rows": shared["rows"],
            "throughput": b["sharing"][0]["throughput_vs_alone"], "runs": b["runs"], "sharing": b["sharing"]}


def _cpu_train_loss(root: Path, protocol: str, H: int, p: int, epoch: int) -> float | None:
    """Mean training loss at ``epoch`` over every member of an E1 setting of the paper-scale set (None if absent)."""
    vals = []
    for f in sorted((root / PAPER / "heads" / protocol / "runs" / f"H{H}_p{p}").glob("seed*/metrics.json")):
        vals += [v for h in read_json(f)["history"] if h["epoch"] == epoch for v in h["train_loss"].values()]
    return sum(vals) / len(vals) if vals else None


def block_gpu_measured(root: Path) -> str:
    """Each training step the GPU runs timed (:data:`DEVICE_BENCH`): jobs at once, epochs reached, seconds per
    epoch and per step; then one job alone against the same job beside others."""
    f = root / DEVICE_BENCH
    if not f.is_file():
        return "No GPU run has timed a training step yet.\n"
    b = read_json(f)
    lines = []
    for run in b["runs"]:
        u = run["utilisation"]
        lines += [f"`{run['folder']}`: {run['gpu']} ({_g(run['gpu_memory_gib'], 4)} GiB), torch {run['torch']}, CUDA "
                  f"{run['cuda']}, {run['cpu_count']} CPUs, commit `{run['git_commit'][:10]}`; `MAX_JOBS={run['max_jobs']}`, "
                  f"`EXPERIMENTS=\"{' '.join(run['order'])}\"`, training window {_g(run['budget_s'] - run['reserve_s'], 3)} s; "
                  f"{run['complete_settings']} settings finished."
                  + (f" nvidia-smi every {u['every_s']} s: utilisation median {_g(u['utilisation_pct_median'], 3)} %, "
                     f"memory up to {u['memory_mib_max']:,} MiB." if u else ""), "",
                  "| step | members | jobs at once | epochs reached | s per epoch (median after the first) | ms per step | "
                  "minutes for every epoch at that rate |", "|---|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {device_step_label(r['step'])} | {r['members']} | {r['jobs_at_once']} | {r['epochs_reached']}/"
                  f"{r['epochs']} | {_g(r['s_per_epoch_median'], 3)} | {_g(r['ms_per_step'], 3)} | "
                  f"{_g(r['minutes_every_epoch'], 3)} |" for r in run["rows"]]
        lines.append("")
    cmp = []
    for r in _most_shared_run(b)["rows"]:
        m = _DEVICE_STEP.match(r["step"])
        losses = {int(k): v for k, v in r.get("mean_train_loss", {}).items()}
        if not m or not m["H"] or not losses:
            continue
        last = max(losses)
        cpu = {e: _cpu_train_loss(root, m["protocol"], int(m["H"]), int(m["p"]), e) for e in (2, last)}
        if None in cpu.values():
            continue
        cmp.append(f"| {device_step_label(r['step'])} | {_g(losses[2], 4)} | {_g(cpu[2], 4)} | {last} | "
                   f"{_g(losses[last], 4)} | {_g(cpu[last], 4)} | {_g(losses[last] / cpu[last], 3)} |")
    if cmp:
        lines += ["Training on the GPU beside the CPU: the mean training loss over a setting's members, as the GPU "
                  "job logged it (4 significant digits), and as the paper-scale set's per-seed records of the same "
                  "setting (same seeds and data, CPU, its own commit) give it:", "",
                  "| setting | epoch 2, GPU | epoch 2, CPU | last epoch the GPU reached | GPU | CPU | GPU / CPU |",
                  "|---|---:|---:|---:|---:|---:|---:|", *cmp, ""]
    cpu_rows = read_json(root / PAPER_BENCH)["rows"] if (root / PAPER_BENCH).is_file() else {}
    for sh in b["sharing"]:
        line = (f"{device_step_label(sh['step'])}: {_g(sh['alone_s_per_epoch'], 3)} s per epoch alone, "
                f"{_g(sh['shared_s_per_epoch'], 3)} s with {sh['jobs_at_once']} jobs at once ({_g(sh['slowdown'], 3)}x "
                f"slower each); the shared GPU did {_g(sh['throughput_vs_alone'], 3)}x the work of one job alone.")
        m = _DEVICE_STEP.match(sh["step"])
        alone = next((r for run in b["runs"] for r in run["rows"] if r["step"] == sh["step"] and r["jobs_at_once"] == 1), None)
        cpu = cpu_rows.get(f"E1 H={m['H']} p={m['p']}") if m and m["H"] and m["protocol"] == "published" else None
        if cpu and alone:
            cpu_ms = cpu["measured"]["step_seconds"] * 1000
            line += (f" The CPU benchmark the cost table is priced on (`{PAPER_BENCH.as_posix()}`, the same shape) takes "
                     f"{_g(cpu_ms, 3)} ms per step: the GPU alone runs it {_g(cpu_ms / alone['ms_per_step'], 3)}x as fast, "
                     f"and shared it did the work of {_g(cpu_ms / alone['ms_per_step'] * sh['throughput_vs_alone'], 3)} "
                     "such CPU jobs.")
        lines.append(line)
    return "\n".join(lines).rstrip("\n") + "\n"


def _sci(x: float, digits: int = 2) -> str:
    """``_g`` with a short exponent (``4.8e-9``, not ``4.8e-09``)."""
    return re.sub(r"e([-+])0*(\d)", r"e\1\2", _g(x, digits))


def block_construction_end_margin(root: Path) -> str:
    """The end margin of config/config.yaml's E5 grids and the read-out error inside and outside it, computed
    by :mod:`algo_emu.constructions.grid` (deterministic: the code's numbers, not a run's)."""
    import numpy as np

    from algo_emu.constructions.grid import Grid, end_margin, soft_readout

    c = _config(root, "config/config.yaml")["constructions"]
    tol = c["end_tol"]
    g = Grid.symmetric(c["grid_half_width"], c["P"])
    beta = g.beta_for(c["beta_d2"])
    m = end_margin(g, beta, tol)
    D = (g.hi - g.lo) / (c["P"] - 1)

    def err(x: float) -> float:
        return abs(float(soft_readout(np.array([x]), g, beta)[0]) - x)

    inside = float(np.abs(soft_readout(np.linspace(g.lo + m, g.hi - m, 4001), g, beta)
                          - np.linspace(g.lo + m, g.hi - m, 4001)).max())
    lib = c["library"]
    gl = Grid.symmetric(lib["grid_half_width"], lib["P"])
    ml = end_margin(gl, gl.beta_for(lib["beta_d2"]), tol)
    R = g.hi
    return (f"On the default grid (`[{-R:g}, {R:g}]`, `P = {c['P']}`, `beta D^2 = {c['beta_d2']:g}`; "
            f"`config/config.yaml`) and the default `end_tol` the margin is {_sci(m, 4)} ({_sci(m / D, 4)} D): values in "
            f"`[{_sci(g.lo + m, 4)}, {_sci(g.hi - m, 4)}]` are read out with an error below {_sci(inside, 1)} (the "
            f"largest over a fine sweep of that range), while the error is {_sci(err(R - 0.75 * m), 2)} at "
            f"`R - 0.75 m`, {_sci(err(R - 0.5 * m), 2)} at `R - m/2`, {_sci(err(0.95 * R), 2)} at `0.95 R` and "
            f"{_sci(err(R), 3)} at `R` itself (computed by `algo_emu.constructions.grid`; tests/test_constructions.py "
            f"checks them). The library grid (`[{-gl.hi:g}, {gl.hi:g}]`, `P = {lib['P']}`) has margin {_sci(ml, 3)}.\n")


def block_construction_results(root: Path) -> str:
    """E5's studies as the committed reference set measured them (its tables ``construction_*.csv``)."""
    t = _refset_tables(root)
    c = _config(root, "config/reference.yaml")["constructions"]
    b = pd.read_csv(t / "construction_beta.csv").sort_values("beta_d2")
    pp = pd.read_csv(t / "construction_p.csv")
    n = pd.read_csv(t / "construction_n.csv").sort_values("n")
    d = pd.read_csv(t / "construction_d.csv").sort_values("d")
    lib = pd.read_csv(t / "construction_library.csv")
    ms = pd.read_csv(t / "construction_multistep.csv")
    r0 = b.iloc[0]
    lines = [f"Committed reference set (`config/reference.yaml`: {int(b.n_seeds.max())} seeds, {c['instances']} "
             f"instances per seed, shorter sweeps than `config/config.yaml`; tables in "
             f"`results/reference/reference-scale/tables/construction_*.csv`), mean over seeds of the per-seed MSE:", "",
             f"* `beta` (P = {int(r0.P)} on [-{r0.grid_half_width:g}, {r0.grid_half_width:g}], n = {int(r0.n)}, "
             f"d = {int(r0.d)}), by `beta D^2`: " + ", ".join(
                 f"{_sci(r.mse_mean, 2)} at {r.beta_d2:g}" for r in b.itertuples()) + "."]
    parts = []
    for pol, g in pp.groupby("policy", sort=False):
        g = g.sort_values("P")
        txt = f"`{pol}`: " + ", ".join(f"{_sci(r.mse_mean, 2)} (P = {int(r.P)})" for r in g.itertuples())
        slope = g.fit_slope.dropna()
        if len(slope):
            txt += f", log-log slope {_sci(slope.iloc[0], 3)} (theory {_sci(g.theory_slope.dropna().iloc[0], 2)})"
        parts.append(txt)
    r1 = pp.iloc[0]
    lines.append(f"* `p` (n = {int(r1.n)}, d = {int(r1.d)}): " + "; ".join(parts) + ".")
    lines.append(f"* `n` (P = {int(n.P.iloc[0])}): " + ", ".join(f"{_sci(r.mse_mean, 2)} (n = {int(r.n)})"
                                                              for r in n.itertuples())
                 + f"; `d` (P = {int(d.P.iloc[0])}, `h = 2d`): " + ", ".join(
                     f"{_sci(r.mse_mean, 2)} (d = {int(r.d)})" for r in d.itertuples()) + ".")
    l0 = lib.iloc[0]
    lines.append(f"* `library` (one module, capacity `{l0.capacity}`, P = {int(l0.P)} on [-{l0.grid_half_width:g}, "
                 f"{l0.grid_half_width:g}], `beta D^2 = {l0.beta_d2:g}`): " + ", ".join(
                     f"{r.algorithm} {_sci(r.mse_mean, 2)}" for r in lib.itertuples()) + ".")
    last = ms[ms.t == ms.t.max()]
    held = bool(ms.within_inf.min() >= 1 and ms.within_2.min() >= 1)
    lines.append(f"* `multistep` ({int(ms.t.max())} stacked modules, `eta = {ms.eta.iloc[0]:g}`): l-infinity error "
                 f"after the last step " + ", ".join(
                     f"{r.loss} {_sci(r.err_inf_mean, 2)} (`t eps` = {_sci(r.bound_inf_mean, 2)})" for r in last.itertuples())
                 + ("; `err_t <= t eps` held for every instance and step, in l2 and l-infinity." if held else
                    "; `err_t <= t eps` failed somewhere (columns `within_inf`, `within_2`)."))
    return "\n".join(lines) + "\n"


def _job_walls(root: Path, prefix: str) -> str:
    """The wall seconds of the committed reference run's jobs whose name starts with ``prefix``."""
    jobs = read_json(root / REF / "manifest.json").get("benchmarks", {}).get("jobs", {})
    sel = {k: v for k, v in sorted(jobs.items()) if k.startswith(prefix)}
    if not sel:
        return f"no `{prefix}` job is timed in the committed reference set"
    return (", ".join(f"`{k}` {_g(v['wall_s'], 3)} s" for k, v in sel.items())
            + f" ({_minutes(sum(v['wall_s'] for v in sel.values()))} in all)")


def _late_drops(root: Path, experiment: str) -> str:
    c = pd.read_csv(_refset_tables(root) / "learning_curves_summary.csv")
    c = c[(c.experiment == experiment) & c.quantity.str.startswith("train")]
    return "; ".join(f"{'model' if m == 'model' else m} {_range(100 * g.late_drop, 2)} %"
                     for m, g in c.groupby("model", sort=False))


def block_theorem31_results(root: Path) -> str:
    """E2 as the committed reference set measured it (``f_emulation``, its ablations, ``f_gd_step``)."""
    t = _refset_tables(root)
    c = _config(root, "config/reference.yaml")["theorem31"]
    f = pd.read_csv(t / "f_emulation.csv")
    gd = pd.read_csv(t / "f_gd_step.csv").set_index(["f", "p"])
    ab = pd.read_csv(t / "f_emulation_ablation.csv")
    ab = ab[ab.ablation.isin(["other_prompt", "permuted", "random", "zeros"])]
    lines = [f"Committed reference set (`config/reference.yaml`: N = {c['n_prompts']:,}, {c['epochs']} epochs, "
             f"{int(f.n_seeds.max())} seeds, x ~ U[-{f.x_scale.iloc[0]:g}, {f.x_scale.iloc[0]:g}]; "
             "`results/reference/reference-scale/tables/f_emulation*.csv`, `f_gd_step.csv`), means over seeds:", "",
             "| f | p | `rel_mse` | baseline's `rel_mse` | `mse_over_blind` | `mse_over_blind` with w ablated "
             "(other_prompt, permuted, random, zeros) | `gd_rel` |", "|---|---:|---:|---:|---:|---|---:|"]
    for r in f.itertuples():
        a = ab[(ab.f == r.f) & (ab.p == r.p)].mse_over_blind
        lines.append(f"| {r.f} | {r.p} | {_g(r.rel_mse_mean, 2)} | {_g(r.blind_rel_mse_mean, 2)} | "
                     f"{_g(r.mse_over_blind, 2)} | {_range(a, 3)} | {_g(gd.loc[(r.f, r.p), 'gd_rel_mean'], 2)} |")
    lines += _run_footer(root, 'E2', 'theorem31_')
    return "\n".join(lines) + "\n"


def _run_footer(root: Path, experiment: str, rule_prefix: str) -> list[str]:
    """The late fall of the train loss and the job wall times of the committed reference run."""
    return ["", f"Fall of the train loss over the last fifth of training (`late_drop`, "
                f"`learning_curves_summary.csv`): {_late_drops(root, experiment)}.",
            "", f"Job wall times of that run (its `manifest.json`, shared 2-core machine): "
                f"{_job_walls(root, rule_prefix)}."]


def block_statistical_results(root: Path) -> str:
    """E3 as the committed reference set measured it (``statistical_emulation``, ``statistical_ablation``)."""
    t = _refset_tables(root)
    c = _config(root, "config/reference.yaml")["statistical"]
    e = pd.read_csv(t / "statistical_emulation.csv")
    ab = pd.read_csv(t / "statistical_ablation.csv")
    Hs = sorted(e.heads.unique())
    lines = [f"Committed reference set (`config/reference.yaml`: N = {c['n_prompts']:,}, {c['epochs']} epochs, "
             f"{c['eval_prompts']} evaluation prompts per algorithm, {int(e.n_seeds.max())} seeds; "
             "`results/reference/reference-scale/tables/statistical_emulation.csv`, `statistical_ablation.csv`): "
             "mean MSE over seeds (reference_code: against the noisy y; fitted: the emulation error), "
             "`mse_over_blind` in brackets, and the paper's value (its heads table at 300 epochs on N = 50,000) "
             "where it has one:", "",
             "| mode, algorithm | " + " | ".join(f"H={H}" for H in Hs) + " | algorithm's own error |",
             "|---|" + "---|" * len(Hs) + "---:|"]
    for (mode, alg), g in e.groupby(["mode", "algorithm"], sort=False):
        g = g.set_index("heads")
        cells = []
        for H in Hs:
            r = g.loc[H]
            cell = f"{_g(r.mse_mean, 2)} ({_g(r.mse_over_blind, 2)})"
            if pd.notna(r.paper_mse):
                cell += f"; paper {_g(r.paper_mse, 3)}"
            cells.append(cell)
        lines.append(f"| {mode}, {alg} | " + " | ".join(cells) + f" | {_g(g.alg_error_mean.iloc[0], 3)} |")
    lines += ["", "`mse_over_blind` under each ablation, over algorithms and H:"]
    for mode, g in ab.groupby("mode", sort=False):
        lines.append(f"- {mode}: " + ", ".join(
            f"{a} {_range(ga.mse_over_blind, 2)}" for a, ga in g.groupby("ablation", sort=False) if a != "weight_blind"))
    lines += _run_footer(root, 'E3', 'statistical_')
    return "\n".join(lines) + "\n"


def _ames_results(t: Path, intro: str) -> list[str]:
    """E4's two modes as one committed set measured them (``ames.csv``, ``ames_runs.csv``, ``ames_ablation.csv``
    in ``t``), under ``intro``; the same rows for every set."""
    a = pd.read_csv(t / "ames.csv")
    runs = pd.read_csv(t / "ames_runs.csv")
    ab = pd.read_csv(t / "ames_ablation.csv")

    def abl(mode: str, alg: str, name: str) -> float:
        g = ab[(ab["mode"] == mode) & (ab.algorithm == alg) & (ab.ablation == name)]
        return float(g.mse_over_blind.iloc[0]) if len(g) else float("nan")

    lines = [intro, "",
             "**corrected**: MSE against the prompt's own target `x.w + b`, mean ± sample std over seeds; spread: "
             "what ignoring `w` costs at best within the set; ratio: emulator / weight-blind baseline (ratio of "
             "the means); the ablations as MSE / the baseline's (`other_*`: `other_algorithm` for the algorithm "
             "rows, `other_prompt` for the held-out rows):", "",
             "| prompt set | spread | emulator MSE | Var(target) | baseline MSE | ratio | per seed | emulator lower "
             "| `permuted` | `other_*` |", "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
    cor = a[a["mode"] == "corrected"]
    for r in cor.itertuples():
        per = runs[(runs["mode"] == "corrected") & (runs.algorithm == r.algorithm)].sort_values("seed")
        lower = int((per.mse_over_blind < 1).sum())
        other = abl("corrected", r.algorithm, "other_prompt" if r.algorithm.startswith("heldout") else "other_algorithm")
        lines.append(f"| {r.algorithm} | {_g(r.spread_mse_mean, 2)} | {_g(r.emulation_mse_mean, 2)} ± "
                     f"{_g(r.emulation_mse_std, 2)} | {_g(r.target_var_mean, 2)} | {_g(r.blind_mse_mean, 2)} | "
                     f"{_g(r.mse_over_blind, 2)} | " + ", ".join(_g(x, 2) for x in per.mse_over_blind)
                     + f" | {lower}/{len(per)} | {_g(abl('corrected', r.algorithm, 'permuted'), 3)} | {_g(other, 2)} |")
    rz = ab[(ab["mode"] == "corrected") & ab.ablation.isin(["random", "zeros"])]
    algs = cor[cor.algorithm.isin(["linear", "ridge", "lasso"])]
    lines += ["", f"`random` and `zeros` (which replace the intercept too) give {_range(rz.mse_mean, 2)} in MSE, "
                  f"{_range(rz.mse_over_blind, 2)} times the baseline's. On the three algorithms' own fits the "
                  f"emulator's MSE is {_range(algs.emulation_mse_mean / algs.spread_mse_mean, 2)} times the spread "
                  f"between their predictions and {_range(algs.emulation_mse_mean / algs.algorithm_mse_mean, 2)} "
                  f"times their own error against the log price; another algorithm's weights (`other_algorithm`) "
                  f"move its MSE by {_range([abl('corrected', x, 'other_algorithm') - abl('corrected', x, 'none') for x in algs.algorithm], 2)} "
                  "in units of the baseline's.", "",
             "**reference_code** (mean over seeds; emulation: against `x.coef_`, the intercept-free prediction the "
             "prompt encodes; prediction: against the log price, the number comparable with the published code; "
             "scikit-learn's own `predict()` error with the intercept beside it):", "",
             "| algorithm | emulation MSE | prediction MSE | algorithm MSE | scikit-learn MSE | alpha | nonzero coef "
             "| all zero | model / blind |", "|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in a[a["mode"] == "reference_code"].itertuples():
        per = runs[(runs["mode"] == "reference_code") & (runs.algorithm == r.algorithm)]
        alpha = "--" if pd.isna(r.alpha_mean) else _g(r.alpha_mean, 3)
        lines.append(f"| {r.algorithm} | {_g(r.emulation_mse_mean, 4)} ± {_g(r.emulation_mse_std, 2)} | "
                     f"{_g(r.prediction_mse_mean, 2)} | {_g(r.algorithm_mse_mean, 4)} | "
                     f"{_g(per.algorithm_sklearn_mse.mean(), 2)} | {alpha} | {_g(r.n_nonzero_coef_mean, 3)} of "
                     f"{_range(per.n_features, 3)} | {int(per.all_coef_zero.astype(bool).sum())}/{len(per)} seeds | "
                     f"{_g(r.mse_over_blind, 3)} |")
    return lines


def block_ames_results(root: Path) -> str:
    """E4 as the committed reference set measured it."""
    c = _config(root, "config/reference.yaml")["ames"]
    n_seeds = int(pd.read_csv(_refset_tables(root) / "ames.csv").n_seeds.max())
    lines = _ames_results(_refset_tables(root), (
        f"Committed reference set (`config/reference.yaml`: packaged data, h = {c['hidden']}, p = "
        f"{c['total_tokens']}, H = {c['heads']}, {c['epochs']} epochs, batch {c['batch_size']}, the default "
        f"pool, {n_seeds} seeds; `results/reference/reference-scale/tables/ames.csv`, `ames_runs.csv`, "
        "`ames_ablation.csv`). Not the paper's scale (h about 550, p = 100, 300 epochs)."))
    lines += ["", f"Fall of the train loss over the last fifth of training (`late_drop`, "
                  f"`learning_curves_summary.csv`): {_late_drops(root, 'E4')}.",
              "", f"Job wall times of that run (its `manifest.json`, shared 2-core machine): {_job_walls(root, 'ames_')}."]
    return "\n".join(lines) + "\n"


def block_ames_results_paper(root: Path) -> str:
    """E4 as the committed paper-scale set measured it (both modes, made by the campaign at its pinned commit)."""
    t = root / PAPER / "tables"
    c = _config(root, "config/config.yaml")["ames"]
    runs = pd.read_csv(t / "ames_runs.csv")
    if set(runs["mode"]) != set(c["modes"]):
        return (f"The paper-scale set has E4 in mode(s) {', '.join(sorted(set(runs['mode'])))} only; this block "
                f"is made once every mode of `config/config.yaml` ({', '.join(c['modes'])}) is in it.\n")
    hidden = ", ".join(str(h) for h in sorted(runs.hidden.unique()))
    lines = _ames_results(t, (
        f"Committed paper-scale set (`config/config.yaml`: data {runs.data_provenance.iloc[0].split(',')[0]}, "
        f"h = {hidden} (auto: set by each seed's feature count), p = {c['total_tokens']}, H = {c['heads']}, "
        f"{_range(runs.epochs, 3)} epochs, batch {c['batch_size']}, the default pool, {runs.seed.nunique()} seeds; "
        "`results/reference/paper-scale/tables/ames.csv`, `ames_runs.csv`, `ames_ablation.csv`; its verdicts "
        "and training time on the campaign's page, `results/reference/paper-scale/README.md`)."))
    fits = [read_json(f)["algorithms"] for f in sorted((root / PAPER / "ames" / "corrected").glob("seed*/fits.json"))]
    lines += ["", f"Largest |coefficient| of each corrected-mode fit (each seed's `fits.json`, `max_abs_coef`; range "
                  f"over {len(fits)} seeds): " + "; ".join(
                      f"{alg} {_range([f[alg]['max_abs_coef'] for f in fits], 2)}" for alg in ("linear", "ridge", "lasso"))
              + "."]
    return "\n".join(lines) + "\n"


GENERATORS: dict[str, Callable[[Path], str]] = {
    "summary": block_summary,
    "scales": block_scales,
    "paper-scale-cost": block_paper_scale_cost,
    "speed": block_speed,
    "attention-kernel": block_attention_kernel,
    "denormals": block_denormals,
    "members": block_members,
    "step-profile": block_step_profile,
    "kernel-by-cpu": block_kernel_by_cpu,
    "ab-commits": block_ab_commits,
    "essay-bar": block_essay_bar,
    "reference-results": block_reference_results,
    "reference-cost": block_reference_cost,
    "paper-e1-curves": block_paper_e1_curves,
    "essay-claims": block_essay_claims,
    "essay-claims-paper": block_essay_claims_paper,
    "essay-equivalences": block_essay_equivalences,
    "essay-cost": block_essay_cost,
    "gpu-measured": block_gpu_measured,
    "construction-end-margin": block_construction_end_margin,
    "construction-results": block_construction_results,
    "theorem31-results": block_theorem31_results,
    "statistical-results": block_statistical_results,
    "ames-results": block_ames_results,
    "ames-results-paper": block_ames_results_paper,
}


def doc_files(root: Path = REPO_ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def fill(text: str, root: Path, cache: dict[str, str]) -> tuple[str, list[str], list[str]]:
    """``text`` with every block filled; the names of stale blocks and of unknown names."""
    stale, unknown = [], []

    def repl(m: re.Match) -> str:
        name = m.group("name")
        if name not in GENERATORS:
            unknown.append(name)
            return m.group(0)
        if name not in cache:
            cache[name] = GENERATORS[name](root)
        body = cache[name]
        if body != m.group("body"):
            stale.append(name)
        return f"<!-- generated: {name} -->\n{body}<!-- /generated -->"

    return BLOCK.sub(repl, text), stale, unknown


def run(write: bool, root: Path = REPO_ROOT) -> list[str]:
    """Fill (``write``) or check every block; returns the problems (``path: block`` stale, unknown names)."""
    cache: dict[str, str] = {}
    problems = []
    for path in doc_files(root):
        text = path.read_text()
        new, stale, unknown = fill(text, root, cache)
        problems += [f"{path.relative_to(root)}: block '{n}' is stale" for n in stale]
        problems += [f"{path.relative_to(root)}: unknown block '{n}'" for n in unknown]
        if write and new != text:
            path.write_text(new)
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m algo_emu.docs_numbers", description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", action="store_true", help="fill every generated block from the committed files")
    g.add_argument("--check", action="store_true", help="exit 1 when a block differs from the committed files")
    args = ap.parse_args(argv)
    problems = run(write=args.write)
    if args.check and problems:
        print("\n".join(problems) + "\nrun: python -m algo_emu.docs_numbers --write", file=sys.stderr)
        return 1
    if args.write:
        print("\n".join(p.replace("is stale", "rewritten") for p in problems) or "every block up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
