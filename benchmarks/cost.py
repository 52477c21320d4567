"""Predicted hours of the paper-scale DAG from a benchmark JSON (``benchmarks/paper_scale.py``) and a config.

``predict_hours(bench, cfg)`` walks every training job the config's DAG runs and prices it from the
benchmark's rows: a job's seconds = steps x its row's seconds per step + data generation inside the job
+ evaluation + compile warm-up (``job_seconds`` of the row). Settings without a row of their own are
priced from the nearest measured ones:

* E1 prompt-length settings: linear interpolation in p of the H = heads_p_sweep rows;
* weight-blind baselines of E2 (per p) and E3 (per mode and H): the model job of that setting times
  the blind/model ratio measured at the benchmarked blind row.

Not counted: the separate data jobs (E1's data sets, E4's download/prepare/fit), E5 (no training,
minutes), E3's frozen evaluation jobs beyond the evaluation estimate of each row, table and figure jobs.
The sum is for one job at a time on the benchmark's machine (2 torch threads); with ``--cores 2`` the
DAG runs one 2-thread training job at a time, so the sum is the wall-clock prediction.

    python benchmarks/cost.py benchmarks/paper_scale.json [--config config/config.yaml]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _rows(bench: dict, experiment: str, role: str = "model") -> list[dict]:
    return [r for r in bench["rows"].values() if r["shape"]["experiment"] == experiment and r["shape"]["role"] == role]


def _interp(points: list[tuple[float, float]], x: float) -> float:
    points = sorted(points)
    if len(points) == 1:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1 or (x1, y1) == points[-1]:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def predict_hours(bench: dict, cfg: dict) -> dict:
    """``{"experiments": {name: {"jobs", "hours", "steps"}}, "jobs", "hours", "steps", "settings", "note"}`` for
    ``cfg``'s DAG; ``steps``: the optimiser steps of those jobs (what a per-step estimate on other hardware prices)."""
    sys.path.insert(0, str(REPO / "src"))
    from algo_emu.experiments.heads_settings import settings

    exps: dict[str, dict] = {}
    per_setting: dict[str, dict] = {}

    def add(name: str, seconds: float, setting: str | None = None, steps: int = 0) -> None:
        e = exps.setdefault(name, {"jobs": 0, "hours": 0.0, "steps": 0})
        e["jobs"] += 1
        e["hours"] += seconds / 3600
        e["steps"] += steps
        if setting:  # the campaign's setting names (tools.campaign.core.settings)
            s = per_setting.setdefault(setting, {"predicted_seconds": 0.0, "jobs": 0, "steps": 0})
            s["predicted_seconds"] += seconds
            s["jobs"] += 1
            s["steps"] += steps

    # E1: one job per (protocol, H, p)
    hp = dict(cfg["heads"])
    e1 = {(r["shape"]["heads"], r["shape"]["p"]): r["measured"]["job_seconds"] for r in _rows(bench, "heads")}
    steps1 = {(r["shape"]["heads"], r["shape"]["p"]): r["measured"]["steps_per_job"] for r in _rows(bench, "heads")}
    for protocol, H, p in settings(hp):
        sec = e1[(H, p)] if (H, p) in e1 else _interp([(pp, s) for (hh, pp), s in e1.items() if hh == H], p)
        add("E1 heads", sec, f"heads/{protocol}/H{H}_p{p}", next(iter(steps1.values())))
    # E2: model + weight-blind baseline per p
    e2 = {r["shape"]["p"]: r["measured"]["job_seconds"] for r in _rows(bench, "theorem31")}
    steps2 = {r["shape"]["p"]: r["measured"]["steps_per_job"] for r in _rows(bench, "theorem31")}
    b2 = _rows(bench, "theorem31", "blind")
    blind_ratio2 = (b2[0]["measured"]["job_seconds"] / e2[b2[0]["shape"]["p"]]) if b2 else 1.0
    for p in cfg["theorem31"]["p_sweep"]:
        add("E2 theorem31", e2[p], f"theorem31/p{p}", steps2[p])
        add("E2 theorem31", e2[p] * blind_ratio2, f"theorem31/p{p}", steps2[p])
    # E3: model + weight-blind baseline per (mode, H)
    e3 = {(r["shape"]["setting"]["mode"], r["shape"]["heads"]): r["measured"]["job_seconds"] for r in _rows(bench, "statistical")}
    steps3 = {(r["shape"]["setting"]["mode"], r["shape"]["heads"]): r["measured"]["steps_per_job"] for r in _rows(bench, "statistical")}
    ratio3 = {r["shape"]["setting"]["mode"]: r["measured"]["job_seconds"] / e3[(r["shape"]["setting"]["mode"], r["shape"]["heads"])]
              for r in _rows(bench, "statistical", "blind")}
    for mode in cfg["statistical"]["modes"]:
        for H in cfg["statistical"]["heads_sweep"]:
            add("E3 statistical", e3[(mode, H)], f"statistical/{mode}_H{H}", steps3[(mode, H)])
            add("E3 statistical", e3[(mode, H)] * ratio3.get(mode, 1.0), f"statistical/{mode}_H{H}", steps3[(mode, H)])
    # E4: model and baseline per mode (each row is its own job)
    for r in _rows(bench, "ames") + _rows(bench, "ames", "blind"):
        add("E4 ames", r["measured"]["job_seconds"], f"ames/{r['shape']['setting']['mode']}", r["measured"]["steps_per_job"])
    # E6: each depth's variants, per seed; the campaign's one essay setting is its whole DAG
    for r in _rows(bench, "essay"):
        for _ in range(r["shape"]["seeds"]):
            add("E6 essay", r["measured"]["job_seconds"], "essay", r["measured"]["steps_per_job"])
    total = sum(e["hours"] for e in exps.values())
    return {"experiments": exps, "jobs": sum(e["jobs"] for e in exps.values()), "hours": total,
            "steps": sum(e["steps"] for e in exps.values()),
            "settings": per_setting,
            "note": "Training jobs only, one at a time on the benchmark's machine (benchmarks/cost.py says what is "
                    "interpolated and what is not counted); under load the hours scale with the load."}


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench")
    ap.add_argument("--config", default=str(REPO / "config/config.yaml"))
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO / "src"))
    from algo_emu.config import load_config

    out = predict_hours(json.loads(Path(args.bench).read_text()), load_config(args.config, gpu_check=False))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
