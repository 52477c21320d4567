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
      --table results/tables/construction_<kind>.csv --out-stem results/figures/construction_<kind>

``--params`` is the resolved ``constructions`` config section as JSON; the tables are also
written as .md and .tex beside the CSV (algo_emu.tables.write_table).
"""

from __future__ import annotations

import argparse
import logging
import time

import pandas as pd
import torch

from algo_emu.cli import json_arg
from algo_emu.io import write_csv, write_json
from algo_emu.tables import write_table

log = logging.getLogger(__name__)

_ENDS = (" end_flagged_mean: fraction of read-out values within end_margin of a grid end, where the "
         "error can exceed constructions.end_tol (1 where the margin covers the whole grid).")
_REFUSED = (" Every value read out lay at least end_margin from the grid ends (constructions.end_tol); a closer one "
            "stops the run with an error.")

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


def _params(args) -> dict:
    if not isinstance(args.params, dict):
        raise SystemExit(f"--params must be a JSON object (the constructions config section), got {args.params!r}")
    return args.params


def _setup(args) -> None:
    if getattr(args, "threads", None):
        torch.set_num_threads(int(args.threads))


def _meta(args, step: str, started: float, extra: dict | None = None) -> None:
    if not getattr(args, "out_meta", None):
        return
    from algo_emu.runtime import config_hash, environment

    meta = {
        "experiment": "constructions", "step": step, "seeds": list(args.seeds), "params": _params(args),
        "config_hash": config_hash(_params(args)), "wall_s": time.time() - started,
        "environment": environment(torch.device("cpu")),
    }
    meta.update(extra or {})
    write_json(args.out_meta, meta)


def _write(per_seed: pd.DataFrame, table: pd.DataFrame, args, kind: str) -> None:
    if args.out_per_seed:
        write_csv(args.out_per_seed, per_seed)
    write_table(table, args.out_csv, CAPTIONS[kind], label=f"tab:construction_{kind}")


def cmd_study(args: argparse.Namespace) -> int:
    from algo_emu.constructions import studies

    _setup(args)
    t0 = time.time()
    per_seed = studies.run_study(args.study, _params(args), args.seeds)
    table = studies.summarise_study(per_seed)
    _write(per_seed, table, args, args.study)
    log.info("study %s: %d settings x %d seeds in %.1f s; smallest mean MSE %.3g", args.study, len(table),
             len(args.seeds), time.time() - t0, table["mse_mean"].min())
    _meta(args, f"study_{args.study}", t0)
    return 0


def cmd_library(args: argparse.Namespace) -> int:
    from algo_emu.constructions import studies

    _setup(args)
    t0 = time.time()
    per_seed, table = studies.run_library(_params(args), args.seeds)
    _write(per_seed, table, args, "library")
    log.info("library: %d algorithms through one module (sha256 %s) in %.1f s", len(table),
             per_seed["module_sha256"].iloc[0][:16], time.time() - t0)
    _meta(args, "library", t0, {"module_sha256": per_seed["module_sha256"].iloc[0]})
    return 0


def cmd_multistep(args: argparse.Namespace) -> int:
    from algo_emu.constructions import studies

    _setup(args)
    t0 = time.time()
    per_seed, table = studies.run_multistep(_params(args), args.seeds)
    _write(per_seed, table, args, "multistep")
    log.info("multistep: %d rows in %.1f s", len(table), time.time() - t0)
    _meta(args, "multistep", t0)
    return 0


def cmd_figure(args: argparse.Namespace) -> int:
    from algo_emu.plots import constructions as plots

    table = pd.read_csv(args.table)
    plots.plot(args.kind, table, args.out_stem)
    return 0


def add_parser(parser: argparse.ArgumentParser) -> None:
    steps = parser.add_subparsers(dest="step", required=True)

    def common(p, kind_help: str):
        p.add_argument("--params", type=json_arg, default={}, help="the constructions config section as JSON")
        p.add_argument("--seeds", type=int, nargs="+", required=True, help="seeds (random instances per seed)")
        p.add_argument("--out-csv", required=True, help=f"table to write ({kind_help}); .md and .tex beside it")
        p.add_argument("--out-per-seed", default=None, help="per-seed rows (CSV) to write")
        p.add_argument("--out-meta", default=None, help="provenance JSON to write (environment, config hash, time)")
        p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")

    s = steps.add_parser("study", help="one error study of the emulated attention head (beta, p, n or d)")
    s.add_argument("--study", required=True, choices=["beta", "p", "n", "d"], help="the knob to sweep")
    common(s, "results/tables/construction_<study>.csv")
    s.set_defaults(func=cmd_study)

    lib = steps.add_parser("library", help="every algorithm of the library through ONE frozen module")
    common(lib, "results/tables/construction_library.csv")
    lib.set_defaults(func=cmd_library)

    ms = steps.add_parser("multistep", help="stacked GD modules: error after t steps vs t * eps")
    common(ms, "results/tables/construction_multistep.csv")
    ms.set_defaults(func=cmd_multistep)

    f = steps.add_parser("figure", help="draw one figure from its table")
    f.add_argument("--kind", required=True, choices=["beta", "p", "n", "d", "library", "multistep"])
    f.add_argument("--params", type=json_arg, default={},
                   help="the constructions config section (unused; figures read only the table)")
    f.add_argument("--table", required=True, help="the table CSV written by the study/library/multistep step")
    f.add_argument("--out-stem", required=True, help="figure path without suffix (.pdf and .png are written)")
    f.set_defaults(func=cmd_figure)
