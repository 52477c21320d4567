"""``python -m algo_emu.report replication|manifest ...`` (called by workflow/rules/report.smk)."""

from __future__ import annotations

import argparse
import logging
import sys

from algo_emu.cli import json_arg
from algo_emu.report import MissingOutputs


def _replication(a: argparse.Namespace) -> int:
    from algo_emu.report import replication

    frame = replication.write(a.tables_dir, a.config, a.config_name, a.out_md, a.out_csv, essay=a.essay,
                              provenance={"Commit": _commit()})
    logging.info("replication: %d rows -> %s, %s", len(frame), a.out_md, a.out_csv)
    return 0


def _manifest(a: argparse.Namespace) -> int:
    from algo_emu.report import manifest

    m = manifest.write(a.out, a.outputs, a.config, a.configfiles, a.benchmarks)
    logging.info("manifest: %d outputs hashed -> %s", m["n_outputs"], a.out)
    return 0


def _commit() -> str:
    from algo_emu.report.manifest import git_state

    g = git_state()
    return f"{g['commit']}{' (working tree dirty)' if g['dirty'] else ''}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m algo_emu.report", description=__doc__)
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("replication", help="results/replication.md + results/tables/replication.csv")
    p.add_argument("--tables-dir", default="results/tables")
    p.add_argument("--config", type=json_arg, required=True, help="the resolved config (JSON)")
    p.add_argument("--config-name", required=True, help="the config file(s) the run used, for the scale column")
    p.add_argument("--essay", help="results/tables/essay_claims.csv, when the run made it")
    p.add_argument("--out-md", required=True)
    p.add_argument("--out-csv", required=True)
    p.set_defaults(func=_replication)
    p = sub.add_parser("manifest", help="results/manifest.json: hashes, commit, config hash, versions, device, timings")
    p.add_argument("--config", type=json_arg, required=True)
    p.add_argument("--configfiles", nargs="*", default=[])
    p.add_argument("--benchmarks", default="results/benchmarks")
    p.add_argument("--outputs", nargs="+", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(func=_manifest)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except MissingOutputs as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
