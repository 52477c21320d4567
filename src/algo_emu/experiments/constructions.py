"""E5 hand-built frozen attention (no training): error studies, algorithm library, multi-step GD, figures.

Steps (the Snakemake rules in workflow/rules/constructions.smk call these,
``python -m algo_emu constructions <step> JOB [--threads N]``; ``JOB`` is one JSON object of the step function's
keyword arguments):

  python -m algo_emu constructions study '{"study": "beta", "params": {...}, "seeds": [0, 1],
      "out_csv": "results/tables/construction_beta.csv", "out_per_seed": "results/constructions/beta_per_seed.csv",
      "out_meta": "results/constructions/beta.json"}' --threads 2          (study: beta, p, n or d)
  python -m algo_emu constructions library '{"params": {...}, "seeds": [0, 1],
      "out_csv": "results/tables/construction_library.csv", ...}' --threads 2
  python -m algo_emu constructions multistep '{"params": {...}, "seeds": [0, 1],
      "out_csv": "results/tables/construction_multistep.csv", ...}' --threads 2
  python -m algo_emu constructions figure '{"kind": "beta", "table": "results/tables/construction_beta.csv",
      "out": "results/figures/construction_beta"}'        (kind: beta, p, n, d, library or multistep)

``params`` is the resolved ``constructions`` config section (or the keys the step reads; omitted: every default);
``out_per_seed`` and ``out_meta`` are optional. The tables are also written as .md and .tex beside the CSV
(algo_emu.tables.write_table).
"""

from __future__ import annotations

import logging
import time

import pandas as pd
import torch

from algo_emu.io import write_csv, write_json
from algo_emu.tables import write_table

log = logging.getLogger(__name__)


# --- captions: the text above this experiment's tables (.md) and in their .tex

_ENDS = (" end_flagged_mean: fraction of read-out values within end_margin of a grid end, where the "
         "error can exceed constructions.end_tol (1 where the margin covers the whole grid).")
_REFUSED = (" Every value read out lay at least end_margin from the grid ends (constructions.end_tol); a closer one "
            "stops the run with an error.")
#: E5's tables, by kind (no parameters: the tables carry their grids).
CAPTIONS = {
    "beta": "E5: hand-built two-layer attention emulating a random attention head; output MSE against the read-out "
            "sharpness beta*D^2 (fixed grid), mean over seeds." + _ENDS,
    "p": "E5: output MSE against the prompt length P (grid tokens) for fixed beta*D^2 and fixed beta; "
         "fit_slope is the log-log slope over the upper half of P (theory -2 at fixed beta*D^2)." + _ENDS,
    "n": "E5: output MSE against the number of data tokens n (P fixed)." + _ENDS,
    "d": "E5: output MSE against the data dimension d (h = key_ratio * d, P fixed)." + _ENDS,
    "library": "E5 (Corollary 4.2.1): one frozen interpreter runs every algorithm, switched by the prompt alone; "
               "error against the exact algorithm." + _REFUSED,
    "multistep": "E5: stacked GD modules; l-infinity error after t steps against exact GD, and the bound t*eps "
                 "(eps = largest one-step error of the run)." + _REFUSED,
}


def _construct(kind: str, step: str, compute, params: dict | None, seeds: list[int], out_csv: str,
               out_per_seed: str | None, out_meta: str | None,
               threads: int | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run one construction step (no training): threads, the computation, its table, per-seed rows and
    provenance sidecar. ``params`` None is the empty section (every default)."""
    from algo_emu.runtime import config_hash, environment

    params = {} if params is None else params
    if threads:
        torch.set_num_threads(int(threads))
    t0 = time.time()
    per_seed, table = compute(params, seeds)
    if out_per_seed:
        write_csv(out_per_seed, per_seed)
    write_table(table, out_csv, CAPTIONS[kind], label=f"tab:construction_{kind}")
    if out_meta:
        meta = {"experiment": "constructions", "step": step, "seeds": list(seeds), "params": params,
                "config_hash": config_hash(params), "wall_s": time.time() - t0,
                "environment": environment(torch.device("cpu"))}
        if "module_sha256" in per_seed:
            meta["module_sha256"] = per_seed["module_sha256"].iloc[0]
        write_json(out_meta, meta)
    log.info("%s: %d rows x %d seeds in %.1f s", step, len(table), len(seeds), time.time() - t0)
    return per_seed, table


def study(study: str, seeds: list[int], out_csv: str, params: dict | None = None, out_per_seed: str | None = None,
          out_meta: str | None = None, threads: int | None = None) -> None:
    """One error study of the emulated attention head (``study``: the knob to sweep, beta, p, n or d)."""
    from algo_emu.constructions import studies

    def compute(p, s):
        per_seed = studies.run_study(study, p, s)
        return per_seed, studies.summarise_study(per_seed)

    _construct(study, f"study_{study}", compute, params, seeds, out_csv, out_per_seed, out_meta, threads)


def library(seeds: list[int], out_csv: str, params: dict | None = None, out_per_seed: str | None = None,
            out_meta: str | None = None, threads: int | None = None) -> None:
    """Every algorithm of the library through ONE frozen module."""
    from algo_emu.constructions import studies

    _construct("library", "library", studies.run_library, params, seeds, out_csv, out_per_seed, out_meta, threads)


def multistep(seeds: list[int], out_csv: str, params: dict | None = None, out_per_seed: str | None = None,
              out_meta: str | None = None, threads: int | None = None) -> None:
    """Stacked GD modules: error after t steps vs t * eps."""
    from algo_emu.constructions import studies

    _construct("multistep", "multistep", studies.run_multistep, params, seeds, out_csv, out_per_seed, out_meta, threads)


def figure(kind: str, table: str, out: str, params: dict | None = None) -> None:
    """Draw one figure from its table (``kind``: beta, p, n, d, library or multistep; ``params`` unused)."""
    from algo_emu.plots import constructions as plots

    plots.plot(kind, pd.read_csv(table), out)


#: The steps (``python -m algo_emu constructions <step> JOB``, :mod:`algo_emu.cli`); ``params`` is passed as given
#: (no PARAMS_OF: the steps fill their defaults themselves, algo_emu.constructions.studies.resolve).
STEPS = {"study": study, "library": library, "multistep": multistep, "figure": figure}
