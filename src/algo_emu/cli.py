"""Command line: ``python -m algo_emu <experiment> <step> [options]``.

Each experiment module in :mod:`algo_emu.experiments` declares its steps as data (:class:`Step`: a
name, a function and its :class:`Arg` list) and registers them with ``add_parser = steps_parser(STEPS)``;
the arguments every trained experiment shares (``--params``, ``--seeds``, ``--out-dir``,
``--checkpoint``, ``--device``, ``--threads``, ...) are declared once, here. A step calls its function
with one keyword argument per :class:`Arg` (named by ``dest``). The Snakemake rules call these steps
and nothing else.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

# experiment name -> module under algo_emu.experiments
EXPERIMENTS = {
    "heads": "algo_emu.experiments.heads",
    "ames": "algo_emu.experiments.ames",
    "constructions": "algo_emu.experiments.constructions",
    "theorem31": "algo_emu.experiments.theorem31",
    "statistical": "algo_emu.experiments.statistical",
    "essay": "algo_emu.experiments.essay",
    # not an experiment: committed reference sets (collect a finished run, learning curves, README)
    # not an experiment: check a results tree or committed set against its manifest
    "manifest": "algo_emu.report.manifest",
}


def json_arg(text: str):
    """Parse a JSON command-line value (used for resolved config sections)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None


def json_object(text: str) -> dict:
    """A JSON object on the command line (a resolved config section)."""
    value = json_arg(text)
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object (a config section), got {value!r}")
    return value


@dataclass(frozen=True)
class Arg:
    """One command-line option: ``add_argument(flag, dest=dest, **kwargs)``; the step's function receives
    it as the keyword argument ``dest`` (default: the flag's name with ``-`` as ``_``)."""

    flag: str
    dest: str = ""
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.dest:
            object.__setattr__(self, "dest", self.name)

    @property
    def name(self) -> str:
        """The flag's name as argparse would make it a dest (``--out-dir`` -> ``out_dir``)."""
        return self.flag.lstrip("-").replace("-", "_")

    def to(self, dest: str = "", **kwargs) -> "Arg":
        """This option passed as ``dest`` (default: its own) and with ``kwargs`` changed."""
        return replace(self, dest=dest or self.dest, kwargs={**self.kwargs, **kwargs})


def arg(flag: str, dest: str = "", **kwargs) -> Arg:
    return Arg(flag, dest, kwargs)


@dataclass(frozen=True)
class Step:
    """One step of an experiment: ``python -m algo_emu <experiment> <name> [args]`` calls ``func(**args)``."""

    name: str
    help: str
    func: Callable[..., Any]
    args: Sequence[Arg]


# The options the experiments share, declared once.
PARAMS = arg("--params", type=json_object, required=True, help="the resolved config section as JSON")
SEEDS = arg("--seeds", type=int, nargs="+", required=True)
SEED = arg("--seed", type=int, required=True)
OUT_DIR = arg("--out-dir", required=True, help="writes <out-dir>/seed<k>/metrics.json")
CHECKPOINT = arg("--checkpoint", help="resumable checkpoint file (resumed only by the same run)")
DEVICE = arg("--device", "device_spec", default="auto", help="auto (CUDA when present, else CPU), cpu, cuda, cuda:N")
THREADS = arg("--threads", type=int, help="torch intra-op threads")
#: Where a job runs: every training and evaluation step takes these.
RUNTIME = (DEVICE, THREADS)
#: A grouped training job's (several settings of one shape as one ensemble) options beside RUNTIME.
GROUP = (arg("--steps-per-call", type=int, default=1, help="optimiser steps per call (one CUDA graph replay on CUDA)"),
         arg("--tf32", action="store_true", help="on CUDA, matmuls in TF32 (records say tf32: true)"))
METRICS = arg("--metrics", nargs="+", required=True, help="per-seed metrics.json files")
RUNS = arg("--runs", "runs_csv", required=True, help="per-seed runs CSV")
TABLE = arg("--table", required=True, help="table CSV")
FIGURE = arg("--out", required=True, help="output stem (writes .pdf and .png)")


def _run_step(step: Step, namespace: argparse.Namespace) -> int:
    from algo_emu.guard import die_with_job

    die_with_job()  # started by a Snakemake job: end with it (no orphan writes after a kill); else nothing
    if any(a.flag == THREADS.flag for a in step.args):
        # a compute step: flush denormals before any thread starts, keep freed memory before the first tensor
        from algo_emu.runtime import flush_denormals, reuse_freed_memory

        reuse_freed_memory()
        flush_denormals()
    step.func(**{a.dest: getattr(namespace, a.dest) for a in step.args})
    return 0


def steps_parser(steps: Sequence[Step]) -> Callable[[argparse.ArgumentParser], None]:
    """``add_parser`` of an experiment whose steps are ``steps``."""
    names = [s.name for s in steps]
    if len(set(names)) != len(names):
        raise ValueError(f"steps declared twice: {names}")

    def add_parser(parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="step", required=True)
        for step in steps:
            p = sub.add_parser(step.name, help=step.help)
            for a in step.args:
                kwargs = dict(a.kwargs)
                if a.dest != a.name and kwargs.get("action") not in ("store_true", "store_false"):
                    kwargs.setdefault("metavar", a.name.upper())  # the help shows the flag's name, not the dest
                if a.flag.startswith("-"):
                    p.add_argument(a.flag, dest=a.dest, **kwargs)
                else:  # a positional argument: argparse names it after itself
                    if a.dest != a.name:
                        raise ValueError(f"positional argument {a.flag!r} cannot be passed as {a.dest!r}")
                    p.add_argument(a.flag, **kwargs)
            p.set_defaults(func=lambda ns, step=step: _run_step(step, ns))

    return add_parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="algo-emu", description=__doc__)
    sub = parser.add_subparsers(dest="experiment", required=True)
    for name, modname in EXPERIMENTS.items():
        module = importlib.import_module(modname)
        module.add_parser(sub.add_parser(name, help=(module.__doc__ or "").strip().splitlines()[0]))
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
