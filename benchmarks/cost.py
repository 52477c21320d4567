"""Predicted hours of a config's whole DAG (``all``) from a benchmark JSON (``benchmarks/paper_scale.py``).

The same prediction a run prints before it starts (``algo_emu.cost``, the workflow's cost block), for every job
of ``all``: Snakemake plans the DAG of the config (a dry run in a scratch folder, one job per setting as on a CPU),
and each training job is priced by ``algo_emu.cost.Pricer`` (its docstring says how rows are rescaled and which
settings without a row of their own take the nearest one). Not counted: data, table, figure and report jobs. The
sum is for one job at a time on the benchmark's machine (its torch threads); with ``--cores 2`` the DAG runs one
2-thread training job at a time, so the sum is the wall-clock prediction.

    python benchmarks/cost.py benchmarks/paper_scale.json [--config config/config.yaml]
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def planned_training_jobs(cfg: dict) -> list[tuple[str, dict]]:
    """(rule, wildcards) of every job of ``all`` that Snakemake plans for ``cfg`` (validated config), ungrouped."""
    import yaml
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, Quietness, ResourceSettings
    from snakemake_interface_logger_plugins.common import LogEvent

    jobs: list[tuple[str, dict]] = []
    with tempfile.TemporaryDirectory() as tmp:
        configfile = Path(tmp) / "config.yaml"
        configfile.write_text(yaml.safe_dump({**cfg, "grouping": False, "workdir": "."}))
        with SnakemakeApi(OutputSettings(dryrun=True, quiet={Quietness.ALL})) as api:
            wf = api.workflow(resource_settings=ResourceSettings(cores=1), snakefile=REPO / "Snakefile",
                              config_settings=ConfigSettings(configfiles=[configfile]), workdir=Path(tmp) / "work")

            def grab(record) -> bool:  # the planned jobs, once Snakemake has built the DAG (as the cost block does)
                if getattr(record, "event", None) == LogEvent.RUN_INFO and not jobs:
                    jobs.extend((j.rule.name, dict(j.wildcards_dict)) for j in wf._workflow.dag.needrun_jobs())
                return True

            log = logging.getLogger("snakemake.logging")
            log.addFilter(grab)
            try:
                wf.dag(DAGSettings(targets={"all"})).execute_workflow(executor="dryrun")
            finally:
                log.removeFilter(grab)
    return jobs


def setting_name(rule: str, wc: dict) -> str:
    """The campaign's name of the setting a training job belongs to (tools.campaign.core.settings)."""
    if rule == "heads_train":
        return f"heads/{wc['protocol']}/H{wc['heads']}_p{wc['p']}"
    if rule.startswith("theorem31_"):
        return f"theorem31/p{wc['p']}"
    if rule.startswith("statistical_"):
        return f"statistical/{wc['stat_mode']}_H{wc['heads']}"
    if rule.startswith("ames_"):
        return f"ames/{wc['ames_mode']}"
    return "essay"


def predict_hours(bench: dict, cfg: dict) -> dict:
    """``{"experiments": {name: {"jobs", "hours", "steps"}}, "jobs", "hours", "steps", "settings", "note"}`` for
    ``cfg``'s DAG; ``steps``: the optimiser steps of those jobs (what a per-step estimate on other hardware prices)."""
    sys.path.insert(0, str(REPO / "src"))
    from algo_emu.cost import TRAINING_RULES, Pricer

    pricer = Pricer(bench, cfg)
    exps: dict[str, dict] = {}
    per_setting: dict[str, dict] = {}
    for rule, wc in planned_training_jobs(cfg):
        if rule not in TRAINING_RULES:
            continue
        seconds, steps = pricer.job(rule, wc)
        e = exps.setdefault(TRAINING_RULES[rule], {"jobs": 0, "hours": 0.0, "steps": 0})
        s = per_setting.setdefault(setting_name(rule, wc), {"predicted_seconds": 0.0, "jobs": 0, "steps": 0})
        e["hours"] += seconds / 3600
        s["predicted_seconds"] += seconds
        for entry in (e, s):
            entry["jobs"] += 1
            entry["steps"] += int(steps)
    return {"experiments": dict(sorted(exps.items())), "jobs": sum(e["jobs"] for e in exps.values()),
            "hours": sum(e["hours"] for e in exps.values()), "steps": sum(e["steps"] for e in exps.values()),
            "settings": dict(sorted(per_setting.items())),
            "note": "Training jobs only, one at a time on the benchmark's machine, priced as the run's own cost "
                    "block prices them (algo_emu.cost); under load the hours scale with the load."}


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench")
    ap.add_argument("--config", default=str(REPO / "config/config.yaml"))
    ap.add_argument("--write", action="store_true", help="replace the benchmark's own prediction (its 'prediction' "
                    "and 'settings', and its .md beside it) by this one; the measured rows stay as they are")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO / "src"))
    from algo_emu.config import load_config
    from algo_emu.io import write_text

    bench = json.loads(Path(args.bench).read_text())
    out = predict_hours(bench, load_config(args.config, gpu_check=False))
    if args.write:
        from paper_scale import markdown

        bench["prediction"] = dict(out)
        bench["settings"] = bench["prediction"].pop("settings")
        write_text(args.bench, json.dumps(bench, indent=1, default=str) + "\n")  # as paper_scale.py writes it
        write_text(Path(args.bench).with_suffix(".md"), markdown(bench))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
