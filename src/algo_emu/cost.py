"""What a run's planned jobs are predicted to cost, said before Snakemake starts work (and by its dry run).

The workflow (``workflow/rules/common.smk``) hands the planned jobs -- rule names and wildcards, from Snakemake's
DAG once it is built -- to :func:`cost_block`, which prices every training job from the committed CPU benchmark
(``benchmarks/paper_scale.json``, made by ``benchmarks/paper_scale.py``: seconds per optimiser step, evaluation,
data and compile warm-up of each training shape at the paper's scale, on one machine, one job at a time):

* a job's seconds = the optimiser steps its config gives it x the measured seconds per step of its setting's row
  (per step at the paper's shapes, so smaller shapes are priced high), scaled by its seeds (the ensemble's
  members) against the row's; plus the row's evaluation and data time scaled the same way, plus its warm-up;
* a setting without a row of its own takes the nearest one (E1: interpolated in p, else the nearest H; E3: the
  nearest H of its mode); weight-blind jobs take their blind row's ratio to its model row;
* each experiment prices its own training rules (``price`` of its spec, :mod:`algo_emu.specs`) with the helpers of
  :class:`Pricer`; a new experiment adds no branch here;
* every other job (data sets, tables, figures, the report) is counted, not priced (seconds each).

The prediction holds for the benchmark's CPU only: on another CPU model the block says "no benchmark for this
CPU" and gives the benchmark machine's figure for scale. The GPU line reads ``benchmarks/gpu_probe.json``
("not measured yet" until it exists).

Standard library only: the workflow imports it at parse time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from algo_emu.runtime import REPO_ROOT, cpu_model_name
from algo_emu.specs import SPECS

BENCHMARK = Path("benchmarks/paper_scale.json")
GPU_PROBE = Path("benchmarks/gpu_probe.json")
#: Training rules, by the experiment whose benchmark rows price them.
TRAINING_RULES = {rule: f"{s.label} {s.section}" for s in SPECS for rule in s.training_rules}
#: Training rules -> the spec whose ``price`` prices them.
_PRICED_BY = {rule: s for s in SPECS for rule in s.training_rules}


def _hours(h: float) -> str:
    return f"{h:.3g} h" + (f" ({h * 60:.2g} min)" if h < 1 else "")


def interp(points: list[tuple[float, float]], x: float) -> float:
    """Piecewise-linear in x through ``points`` (x, y), flat beyond the ends."""
    points = sorted(points)
    if len(points) == 1 or x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


class Pricer:
    """Seconds of one training job of ``cfg`` (validated, defaults filled) from the benchmark ``bench``. Each
    experiment's spec prices its own training rules (``Spec.price``) from the helpers here."""

    def __init__(self, bench: Mapping[str, Any], cfg: Mapping[str, Any]):
        self.all_rows = list(bench["rows"].values())
        self.cfg = cfg
        self.seeds = len(cfg["seeds"])

    def rows(self, experiment: str, role: str = "model") -> list[dict]:
        """The benchmark rows of ``experiment`` (``role``: model or blind)."""
        return [r for r in self.all_rows if r["shape"]["experiment"] == experiment and r["shape"]["role"] == role]

    @staticmethod
    def rescale(row: dict, steps: float, ratio: float, eval_ratio: float | None = None) -> float:
        """``row``'s job rescaled: ``steps`` optimiser steps, an ensemble ``ratio`` times its own, evaluation and
        data ``eval_ratio`` times its own (default: ``ratio``)."""
        m = row["measured"]
        extra = (m.get("eval_seconds_per_job", 0.0) + m.get("data_seconds_per_job", 0.0))
        return (steps * m["step_seconds"] * ratio + extra * (ratio if eval_ratio is None else eval_ratio)
                + (m.get("warmup_seconds", 0.0) if m.get("compiled") else 0.0))

    def blind_ratio(self, experiment: str, key) -> float:
        """A weight-blind job's seconds over its model's, from the first blind row whose model row (same ``key``)
        was measured; 1 without one."""
        blind = [r for r in self.rows(experiment, "blind") if key(r)]
        models = {key(r): r for r in self.rows(experiment)}
        if not blind or key(blind[0]) not in models:
            return 1.0
        b = blind[0]
        return b["measured"]["job_seconds"] / models[key(b)]["measured"]["job_seconds"]

    def seconds(self, rule: str, wc: Mapping[str, str]) -> float:
        return self.job(rule, wc)[0]

    def job(self, rule: str, wc: Mapping[str, str]) -> tuple[float, int]:
        """Seconds and optimiser steps (per member) of one job of training rule ``rule`` with wildcards ``wc``."""
        spec = _PRICED_BY.get(rule)
        if spec is None or spec.price is None:
            raise KeyError(rule)
        return spec.price(self, rule, wc)


def gpu_line(root: Path = REPO_ROOT) -> str:
    """The GPU line: the committed GPU probe's paper-scale figure, else "not measured yet"."""
    path = root / GPU_PROBE
    try:
        probe = json.loads(path.read_text())
    except (OSError, ValueError):
        return "on one GPU: not measured yet"
    if not probe.get("groups"):
        return "on one GPU: not measured yet"
    return (f"on one GPU: the paper's scale predicted at {probe['paper_seconds_one_group_at_a_time']:.3g} s of "
            f"compute on one {probe['environment']['device_name']} ({GPU_PROBE.as_posix()}); this run's jobs are not "
            "priced separately")


def cost_block(jobs: Iterable[tuple[str, Mapping[str, str]]], cfg: Mapping[str, Any], root: Path = REPO_ROOT,
               cpu_model: str | None = None) -> list[str]:
    """The lines said before a run: ``jobs`` ((rule, wildcards) of every planned job) priced per experiment and in
    total on this machine's CPU (``cpu_model``: this machine's, by default) and on a GPU."""
    jobs = list(jobs)
    try:
        bench = json.loads((root / BENCHMARK).read_text())
    except (OSError, ValueError):
        bench = None
    lines = [f"Predicted cost of the {len(jobs)} planned jobs, one training job at a time:"]
    per: dict[str, list[float]] = {}
    other = 0
    pricer = Pricer(bench, cfg) if bench is not None else None
    for rule, wc in jobs:
        name = TRAINING_RULES.get(rule)
        if name is None or pricer is None:
            other += 1
            continue
        try:
            per.setdefault(name, []).append(pricer.seconds(rule, wc))
        except (KeyError, ValueError, ZeroDivisionError, IndexError):
            other += 1
    if bench is None:
        lines.append(f"  on this machine: no benchmark ({BENCHMARK.as_posix()} is missing)")
    else:
        total = sum(map(sum, per.values())) / 3600
        for name in sorted(per):
            lines.append(f"  {name}: {len(per[name])} training jobs, {_hours(sum(per[name]) / 3600)}")
        lines.append(f"  other jobs (data sets, tables, figures, report): {other}, not priced")
        hw = bench["environment"].get("hardware", {})
        bench_cpu = hw.get("cpu_model")
        here = cpu_model if cpu_model is not None else cpu_model_name()
        where = f"{bench_cpu}, {bench['environment'].get('threads')} torch threads ({BENCHMARK.as_posix()})"
        if here and bench_cpu and here == bench_cpu:
            lines.append(f"  total on this machine: {_hours(total)} (measured on this CPU model: {where})")
        else:
            lines.append(f"  on this machine: no benchmark for this CPU ({here or 'unknown'}); on the benchmark's "
                         f"CPU ({where}): {_hours(total)}")
    lines.append("  " + gpu_line(root))
    return lines
