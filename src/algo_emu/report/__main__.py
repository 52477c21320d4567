"""``python -m algo_emu.report replication|manifest ...`` (called by workflow/rules/report.smk)."""

from __future__ import annotations

import argparse
import logging
import sys

from algo_emu.cli import Step, arg, json_object, steps_parser
from algo_emu.report import MissingOutputs


def replication_step(config: dict, config_name: str, out_md: str, out_csv: str, tables_dir: str = "results/tables",
                     essay: str | None = None) -> None:
    from algo_emu.report import replication

    frame = replication.write(tables_dir, config, config_name, out_md, out_csv, essay=essay,
                              provenance={"Commit": _commit()})
    logging.info("replication: %d rows -> %s, %s", len(frame), out_md, out_csv)


def manifest_step(config: dict, outputs: list[str], out: str, configfiles: list[str] = (),
                  benchmarks: str = "results/benchmarks") -> None:
    from algo_emu.report import manifest

    m = manifest.write(out, outputs, config, list(configfiles), benchmarks)
    logging.info("manifest: %d outputs hashed -> %s", m["n_outputs"], out)


def _commit() -> str:
    from algo_emu.report.manifest import git_state

    g = git_state()
    return f"{g['commit']}{' (working tree dirty)' if g['dirty'] else ''}"


CONFIG = arg("--config", type=json_object, required=True, help="the resolved config (JSON)")
STEPS = [
    Step("replication", "results/replication.md + results/tables/replication.csv", replication_step,
         [arg("--tables-dir", default="results/tables"), CONFIG,
          arg("--config-name", required=True, help="the config file(s) the run used, for the scale column"),
          arg("--essay", help="results/tables/essay_claims.csv, when the run made it"),
          arg("--out-md", required=True), arg("--out-csv", required=True)]),
    Step("manifest", "results/manifest.json: hashes, commit, config hash, versions, device, timings", manifest_step,
         [CONFIG, arg("--configfiles", nargs="*", default=[]), arg("--benchmarks", default="results/benchmarks"),
          arg("--outputs", nargs="+", required=True), arg("--out", required=True)]),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m algo_emu.report", description=__doc__)
    steps_parser(STEPS)(parser)
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
