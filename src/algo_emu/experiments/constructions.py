"""E5 hand-built frozen attention (no training): error studies, algorithm library, multi-step GD, figures.

Steps (the Snakemake rules in workflow/rules/constructions.smk call these):

  python -m algo_emu constructions study --study {beta,p,n,d} --params JSON --seeds 0 1 ... \
      --out-csv results/tables/construction_<study>.csv --out-per-seed results/constructions/<study>_per_seed.csv \
      [--out-meta results/constructions/<study>.json]
  python -m algo_emu constructions library --params JSON --seeds ... --out-csv results/tables/construction_library.csv \
      --out-per-seed results/constructions/library_per_seed.csv [--out-meta ...]
  python -m algo_emu constructions multistep --params JSON --seeds ... --out-csv results/tables/construction_multistep.csv \
      --out-per-seed results/constructions/multistep_per_seed.csv [--out-meta ...]
  python -m algo_emu constructions figure --kind {beta,p,n,d,library,multistep} [--params JSON] \
      --table results/tables/construction_<kind>.csv --out results/figures/construction_<kind>

``--params`` is the resolved ``constructions`` config section as JSON; the tables are also
written as .md and .tex beside the CSV (algo_emu.tables.write_table).
"""

from __future__ import annotations

import logging
import time

import pandas as pd
import torch

from algo_emu import cli
from algo_emu.cli import Step, arg
from algo_emu.io import write_csv, write_json
from algo_emu.report import captions
from algo_emu.tables import write_table

log = logging.getLogger(__name__)

def _construct(kind: str, step: str, compute, params: dict, seeds: list[int], out_csv: str, out_per_seed: str | None,
               out_meta: str | None, threads: int | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run one construction step (no training): threads, the computation, its table, per-seed rows and
    provenance sidecar."""
    from algo_emu.runtime import config_hash, environment

    if threads:
        torch.set_num_threads(int(threads))
    t0 = time.time()
    per_seed, table = compute(params, seeds)
    if out_per_seed:
        write_csv(out_per_seed, per_seed)
    write_table(table, out_csv, captions.CONSTRUCTIONS[kind], label=f"tab:construction_{kind}")
    if out_meta:
        meta = {"experiment": "constructions", "step": step, "seeds": list(seeds), "params": params,
                "config_hash": config_hash(params), "wall_s": time.time() - t0,
                "environment": environment(torch.device("cpu"))}
        if "module_sha256" in per_seed:
            meta["module_sha256"] = per_seed["module_sha256"].iloc[0]
        write_json(out_meta, meta)
    log.info("%s: %d rows x %d seeds in %.1f s", step, len(table), len(seeds), time.time() - t0)
    return per_seed, table


def study(study: str, params: dict, seeds: list[int], out_csv: str, out_per_seed: str | None = None,
          out_meta: str | None = None, threads: int | None = None) -> None:
    from algo_emu.constructions import studies

    def compute(p, s):
        per_seed = studies.run_study(study, p, s)
        return per_seed, studies.summarise_study(per_seed)

    _construct(study, f"study_{study}", compute, params, seeds, out_csv, out_per_seed, out_meta, threads)


def library(params: dict, seeds: list[int], out_csv: str, out_per_seed: str | None = None, out_meta: str | None = None,
            threads: int | None = None) -> None:
    from algo_emu.constructions import studies

    _construct("library", "library", studies.run_library, params, seeds, out_csv, out_per_seed, out_meta, threads)


def multistep(params: dict, seeds: list[int], out_csv: str, out_per_seed: str | None = None, out_meta: str | None = None,
              threads: int | None = None) -> None:
    from algo_emu.constructions import studies

    _construct("multistep", "multistep", studies.run_multistep, params, seeds, out_csv, out_per_seed, out_meta, threads)


def figure(kind: str, table: str, out: str, params: dict | None = None) -> None:
    from algo_emu.plots import constructions as plots

    plots.plot(kind, pd.read_csv(table), out)


PARAMS = cli.PARAMS.to(required=False, default={}, help="the constructions config section as JSON")
COMMON = [PARAMS, cli.SEEDS.to(help="seeds (random instances per seed)"),
          arg("--out-csv", required=True, help="table to write (results/tables/construction_<kind>.csv); .md and .tex "
                                                "beside it"),
          arg("--out-per-seed", default=None, help="per-seed rows (CSV) to write"),
          arg("--out-meta", default=None, help="provenance JSON to write (environment, config hash, time)"),
          cli.THREADS]
STEPS = [
    Step("study", "one error study of the emulated attention head (beta, p, n or d)", study,
         [arg("--study", required=True, choices=["beta", "p", "n", "d"], help="the knob to sweep"), *COMMON]),
    Step("library", "every algorithm of the library through ONE frozen module", library, COMMON),
    Step("multistep", "stacked GD modules: error after t steps vs t * eps", multistep, COMMON),
    Step("figure", "draw one figure from its table", figure,
         [arg("--kind", required=True, choices=["beta", "p", "n", "d", "library", "multistep"]),
          PARAMS.to(help="the constructions config section (unused; figures read only the table)"),
          arg("--table", required=True, help="the table CSV written by the study/library/multistep step"),
          cli.FIGURE]),
]
add_parser = cli.steps_parser(STEPS)
