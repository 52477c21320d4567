"""Command line: ``python -m algo_emu <experiment> <step> [options]``.

Each experiment module in :mod:`algo_emu.experiments` registers its steps via
``add_parser(subparsers)``; the Snakemake rules call these steps and nothing else.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys

# experiment name -> module under algo_emu.experiments
EXPERIMENTS = {
    "heads": "algo_emu.experiments.heads",
    "ames": "algo_emu.experiments.ames",
    "constructions": "algo_emu.experiments.constructions",
    "theorem31": "algo_emu.experiments.theorem31",
    "statistical": "algo_emu.experiments.statistical",
    "essay": "algo_emu.experiments.essay",
    # not an experiment: committed reference sets (collect a finished run, learning curves, README)
    "refset": "algo_emu.refset",
}


def json_arg(text: str):
    """Parse a JSON command-line value (used for resolved config sections)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None


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
