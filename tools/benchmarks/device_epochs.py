"""Seconds per epoch and milliseconds per optimiser step of the GPU script's training steps, read from what
its runs returned (a per-setting GPU scheduler since replaced by grouped jobs, docs/gpu.md): the measurements that replace the
estimates of docs/gpu.md and size the next run.

Each run folder holds the files the script returns (status.json, device.json, logs.tar.gz; gpu_util.csv when
the GPU's utilisation was sampled beside it). Per training step: the epochs reached, the median seconds of its
epochs after the first (the first holds start-up and CUDA's warm-up), the steps per epoch of its experiment
(from the config, as the trainer batches it), hence milliseconds per step, how many steps of the run were
running beside it, the minutes its every epoch would take at that rate, and its logged mean training loss per
epoch (the docs set it beside the same setting's CPU records).

    python tools/benchmarks/device_epochs.py tools/benchmarks/device_runs/h200_16jobs tools/benchmarks/device_runs/h200_1job \
        --out tools/benchmarks/device_h200.json
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import statistics
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))

from algo_emu.config import load_config  # noqa: E402
from algo_emu.io import write_json, write_text  # noqa: E402

EPOCH = re.compile(r"epoch (\d+)/(\d+)\s+([0-9.]+)s(?:\s+mean train loss ([0-9.eE+-]+))?")
MEMBERS = re.compile(r"(\d+) members on (\w+)")
GROUP = (("heads_train_", "heads", "E1"), ("theorem31_", "theorem31", "E2"), ("statistical_", "statistical", "E3"),
         ("ames_train", "ames", "E4"))


def steps_per_epoch(cfg: dict) -> dict[str, int]:
    """Optimiser steps per epoch of E1, E2 and E3's training at ``cfg`` (batches of ``batch_size`` over the training
    prompts, the last one partial), keyed by config section."""
    h, t, st = cfg["heads"], cfg["theorem31"], cfg["statistical"]
    return {"heads": math.ceil(h["n_prompts"] * (1 - h["test_fraction"]) / h["batch_size"]),
            "theorem31": math.ceil(t["n_prompts"] * (1 - t["test_fraction"]) / t["batch_size"]),
            "statistical": math.ceil(st["n_prompts"] / st["batch_size"])}


def _logs(folder: Path) -> dict[str, str]:
    with tarfile.open(folder / "logs.tar.gz") as tf:
        return {Path(m.name).stem: tf.extractfile(m).read().decode(errors="replace")
                for m in tf.getmembers() if m.isfile() and m.name.endswith(".log")}


def _utilisation(folder: Path) -> dict | None:
    f = folder / "gpu_util.csv"
    if not f.is_file():
        return None
    rows = list(csv.reader(io.StringIO(f.read_text())))[1:]
    busy = [r for r in rows if len(r) == 3 and int(r[2].split()[0]) > 100]  # samples with our processes on the GPU
    if not busy:
        return None
    return {"samples": len(busy), "utilisation_pct_median": statistics.median(int(r[1].split()[0]) for r in busy),
            "memory_mib_max": max(int(r[2].split()[0]) for r in busy), "every_s": 10}


def run_rows(folder: Path, per_epoch: dict[str, int]) -> dict:
    status = json.loads((folder / "status.json").read_text())
    device = json.loads((folder / "device.json").read_text())
    logs = _logs(folder)
    spans = [(s["start_s"], s["start_s"] + s["wall_s"]) for s in status["steps"] if s.get("start_s") is not None
             and s.get("wall_s") is not None]
    rows = []
    for s in status["steps"]:
        text = logs.get(s["name"])
        kind = next(((g, e) for prefix, g, e in GROUP if s["name"].startswith(prefix)), None)
        if text is None or kind is None or s.get("start_s") is None:
            continue
        found = EPOCH.findall(text)
        epochs = [(int(k), int(n), float(t)) for k, n, t, _ in found]
        if len(epochs) < 2:
            continue
        group, exp = kind
        later = [t for k, _, t in epochs if k > 1]
        med = statistics.median(later)
        total = epochs[-1][1]
        mid = s["start_s"] + s["wall_s"] / 2
        mem = MEMBERS.search(text)
        spe = per_epoch.get(group)
        rows.append({
            "step": s["name"], "experiment": exp, "state": s["state"], "members": int(mem.group(1)) if mem else None,
            "jobs_at_once": sum(a <= mid <= b for a, b in spans), "epochs_reached": epochs[-1][0], "epochs": total,
            "first_epoch_s": epochs[0][2], "s_per_epoch_median": round(med, 3),
            "s_per_epoch_min_max": [min(later), max(later)], "steps_per_epoch": spe,
            "ms_per_step": round(1000 * med / spe, 2) if spe else None,
            "minutes_every_epoch": round(total * med / 60, 1),
            # the trainer's mean over members of each epoch's training loss, as logged (4 significant digits)
            "mean_train_loss": {int(k): float(v) for k, _, _, v in found if v}})
    return {"folder": folder.relative_to(REPO).as_posix() if folder.is_relative_to(REPO) else str(folder),
            "gpu": device.get("gpu"), "gpu_memory_gib": device.get("gpu_memory_gib"), "nvidia_smi": device.get("nvidia_smi"),
            "torch": device.get("torch"), "cuda": device.get("cuda"), "cpu_count": device.get("cpu_count"),
            "git_commit": device.get("git_commit"), "code_version": device.get("code_version"),
            "max_jobs": status["max_jobs"], "budget_s": status["budget_s"], "reserve_s": status["reserve_s"],
            "compile": status["compile"], "threads": status["threads"], "order": status["order"],
            "config": status["config"], "config_hash": status["config_hash"], "wall_s": status.get("wall_s"),
            "complete_settings": sum(len(e["complete"]) for e in status["experiments"].values()),
            "wanted_settings": sum(len(e["wanted"]) for e in status["experiments"].values()),
            "utilisation": _utilisation(folder), "rows": rows}


def sharing(runs: list[dict]) -> list[dict]:
    """Per step timed both alone and beside others: how much slower each shared job ran, and how much more the
    shared GPU did in all (jobs at once x alone / shared seconds per epoch)."""
    alone = {r["step"]: r for run in runs for r in run["rows"] if r["jobs_at_once"] == 1}
    out = []
    for run in runs:
        for r in run["rows"]:
            a = alone.get(r["step"])
            if a is not None and r["jobs_at_once"] > 1:
                out.append({"step": r["step"], "jobs_at_once": r["jobs_at_once"],
                            "alone_s_per_epoch": a["s_per_epoch_median"], "shared_s_per_epoch": r["s_per_epoch_median"],
                            "slowdown": round(r["s_per_epoch_median"] / a["s_per_epoch_median"], 2),
                            "throughput_vs_alone": round(r["jobs_at_once"] * a["s_per_epoch_median"]
                                                         / r["s_per_epoch_median"], 2)})
    return out


def markdown(res: dict) -> str:
    lines = []
    for run in res["runs"]:
        u = run["utilisation"]
        lines += [f"## {run['folder']}", "",
                  f"{run['gpu']} ({run['gpu_memory_gib']} GiB; {run['nvidia_smi']}), torch {run['torch']}, CUDA {run['cuda']}, "
                  f"{run['cpu_count']} CPUs; commit `{run['git_commit']}`; `MAX_JOBS={run['max_jobs']}`, budget "
                  f"{run['budget_s']:g} s (training until {run['budget_s'] - run['reserve_s']:g} s), compile {run['compile']}; "
                  f"{run['complete_settings']} of {run['wanted_settings']} settings complete."
                  + (f" GPU utilisation (nvidia-smi, every {u['every_s']} s): median {u['utilisation_pct_median']} %, "
                     f"memory up to {u['memory_mib_max']:,} MiB." if u else ""), "",
                  "| step | members | jobs at once | epochs reached | s/epoch (median after the first) | ms/step | "
                  "minutes for every epoch at this rate |", "|---|---:|---:|---:|---:|---:|---:|"]
        for r in run["rows"]:
            lines.append(f"| {r['step']} | {r['members']} | {r['jobs_at_once']} | {r['epochs_reached']}/{r['epochs']} | "
                         f"{r['s_per_epoch_median']:g} | {r['ms_per_step']:g} | {r['minutes_every_epoch']:g} |")
        lines.append("")
    if res["sharing"]:
        lines += ["## Alone and shared", "", "| step | jobs at once | s/epoch alone | s/epoch shared | slowdown | "
                  "throughput of the shared GPU / one job alone |", "|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {s['step']} | {s['jobs_at_once']} | {s['alone_s_per_epoch']:g} | {s['shared_s_per_epoch']:g} | "
                  f"{s['slowdown']:g} | {s['throughput_vs_alone']:g} |" for s in res["sharing"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="folders holding one run's returned files")
    ap.add_argument("--out", required=True, type=Path, help="JSON (a Markdown table is written beside it)")
    args = ap.parse_args(argv)
    for f in args.runs:
        missing = [n for n in ("status.json", "device.json", "logs.tar.gz") if not (f / n).is_file()]
        if missing:
            ap.error(f"{f}: missing {', '.join(missing)} (the files tools/benchmarks/device_paper_scale.sh returns)")
    runs = []
    for f in args.runs:
        status = json.loads((f / "status.json").read_text())
        cfg = load_config(REPO / status["config"], gpu_check=False)
        runs.append(run_rows(f.resolve(), steps_per_epoch(cfg)))
    res = {"what": "training steps of tools/benchmarks/device_paper_scale.sh, timed by their own per-epoch log lines",
           "runs": runs, "sharing": sharing(runs)}
    write_json(args.out, res)
    md = args.out.with_suffix(".md")
    write_text(md, markdown(res))
    print(md.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
