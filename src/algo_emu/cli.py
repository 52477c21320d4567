"""Command line.

``python -m algo_emu <experiment> <step> JOB [--threads N]`` runs one step of an experiment (the Snakemake rules call
these and nothing else). ``JOB`` is one JSON object: the keyword arguments of the step's function, as its rule builds
them (``step_job(...)`` in ``workflow/rules/common.smk``), in one form. Its ``params``, where the step declares which keys of its
experiment's config section it reads (:mod:`algo_emu.specs`, named in the module's ``PARAMS_OF``), is
checked against that declaration. ``--threads`` (torch intra-op threads: the rule's ``{threads}``) stays out of
``JOB``, so a run with another ``--cores`` reruns nothing. Each experiment module declares its steps as data:
``STEPS = {step: function}``. ``python -m algo_emu <experiment>`` lists them with their arguments.

The report and the manifest of a run are steps in the same form (``python -m algo_emu report replication|manifest
JOB``, :mod:`algo_emu.report.steps`); ``python -m algo_emu manifest verify|seal ...`` checks or seals a results tree
or committed set (:mod:`algo_emu.report.manifest`, flags of its own).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import logging
import sys
from typing import Any, Callable, Mapping

from algo_emu.specs import SPECS

# experiment name -> its steps' module (one per spec, algo_emu.specs)
EXPERIMENTS = {s.section: s.module for s in SPECS}
#: the workflow's steps beyond the experiments': the replication report and the run manifest
STEP_MODULES = {**EXPERIMENTS, "report": "algo_emu.report.steps"}
# not an experiment: check a results tree or committed set against its manifest (flags of its own)
TOOLS = {"manifest": "algo_emu.report.manifest"}


def json_object(text: str) -> dict:
    """A JSON object on the command line (a step's job)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {value!r}")
    return value


def _prepare_compute_step() -> None:
    """A compute step (one taking ``threads``): flush denormals before any thread starts, keep freed memory before
    the first tensor."""
    from algo_emu.runtime import flush_denormals, reuse_freed_memory

    reuse_freed_memory()
    flush_denormals()


def _module(experiment: str):
    """The module of ``experiment`` (only that one is imported)."""
    if experiment not in STEP_MODULES:
        raise SystemExit(f"algo_emu: no experiment {experiment!r} (experiments: {', '.join(STEP_MODULES)}; "
                         f"tools: {', '.join(TOOLS)})")
    return importlib.import_module(STEP_MODULES[experiment])


def step_function(experiment: str, step: str) -> Callable[..., Any]:
    """The function of ``python -m algo_emu <experiment> <step>``."""
    steps = _module(experiment).STEPS
    if step not in steps:
        raise SystemExit(f"algo_emu {experiment}: no step {step!r} (steps: {', '.join(steps)})")
    return steps[step]


def bind_job(experiment: str, step: str, job: Mapping[str, Any], threads: int | None = None) -> dict:
    """The keyword arguments of ``step`` from ``job``: an argument the function does not take or a required one
    missing is an error naming it; ``params`` checked against the step's declaration where it has one."""
    func = step_function(experiment, step)
    name = f"algo_emu {experiment} {step}"
    sig = inspect.signature(func)
    kwargs = dict(job)
    if "threads" in kwargs:
        raise SystemExit(f"{name}: threads goes in --threads, not in the job")
    if threads is not None and "threads" in sig.parameters:  # without --threads: the function's own default
        kwargs["threads"] = threads
    unknown = sorted(set(kwargs) - set(sig.parameters))
    missing = [p for p, v in sig.parameters.items() if v.default is inspect.Parameter.empty and p not in kwargs]
    if unknown or missing:
        raise SystemExit(f"{name}: " + "; ".join(
            ([f"unknown argument(s) {', '.join(unknown)}"] if unknown else [])
            + ([f"missing argument(s) {', '.join(missing)}"] if missing else []))
            + f" (it takes {', '.join(sig.parameters)})")
    reads_as = getattr(_module(experiment), "PARAMS_OF", {}).get(step)
    if reads_as is not None:
        from algo_emu.specs import parse_params

        try:
            kwargs["params"] = parse_params(kwargs["params"], experiment, reads_as)
        except ValueError as exc:
            raise SystemExit(f"{name}: {exc}") from None
    return kwargs


def run_job(experiment: str, step: str, job: Mapping[str, Any], threads: int | None = None) -> int:
    """Run one step with the keyword arguments ``job`` (and torch's ``threads``)."""
    from algo_emu.guard import die_with_job

    kwargs = bind_job(experiment, step, job, threads)
    func = step_function(experiment, step)
    die_with_job()  # started by a Snakemake job: end with it (no orphan writes after a kill); else nothing
    if "threads" in inspect.signature(func).parameters:  # a compute step
        _prepare_compute_step()
    func(**kwargs)
    return 0


def describe(experiment: str) -> str:
    """The steps of ``experiment``, each with its arguments and the first line of its docstring."""
    lines = [f"python -m algo_emu {experiment} <step> JOB [--threads N]; JOB holds the keyword arguments:"]
    for step, func in _module(experiment).STEPS.items():
        doc = (func.__doc__ or "").strip().splitlines()
        lines += [f"  {step}{inspect.signature(func)}", f"      {doc[0] if doc else ''}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in TOOLS:
        parser = argparse.ArgumentParser(prog=f"algo-emu {argv[0]}")
        importlib.import_module(TOOLS[argv[0]]).add_parser(parser)
        args = parser.parse_args(argv[1:])
        return int(args.func(args) or 0)
    parser = argparse.ArgumentParser(prog="algo-emu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", help=f"one of {', '.join(STEP_MODULES)} (or the tool {', '.join(TOOLS)})")
    parser.add_argument("step", nargs="?", help="omitted: list the experiment's steps")
    parser.add_argument("job", nargs="?", type=json_object, help="the step's keyword arguments as one JSON object")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (compute steps)")
    args = parser.parse_args(argv)
    if args.step is None:
        print(describe(args.experiment))
        return 0
    if args.job is None:
        parser.error(f"{args.experiment} {args.step}: no JOB (a JSON object of the step's keyword arguments)")
    return run_job(args.experiment, args.step, args.job, args.threads)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
