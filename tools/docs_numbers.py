"""The README's one generated block, filled from the committed sets and benchmarks.

Every other result number lives where it is made: the sets' replication reports and tables
(``results/reference/*/``), the benchmarks' own pages (``benchmarks/*.md``, ``tools/benchmarks/*.md``); the docs link
to them. The README's few numbers sit in one marked block,

    <!-- generated: readme -->
    ...                      (written by `python -m tools.docs_numbers --write`)
    <!-- /generated -->

and ``--check`` (run by tools/tests/test_docs_numbers.py) fails when the block differs from what the committed files
give. Sources, all inside the repository:

- ``results/reference/reference-scale/``: ``tables/replication.csv`` (verdicts), ``manifest.json`` (job wall times);
- ``results/reference/paper-scale/``: ``tables/replication.csv`` (verdicts, E1's heads table among them) and
  ``campaign.json`` (settings made, their training time);
- ``benchmarks/paper_scale.json`` (``make bench``): the paper scale's predicted hours on 2 CPU cores;
- ``benchmarks/quickstart.json``: the measured wall time of ``make quick`` and ``make test``;
- :mod:`algo_emu.paper_values`: the paper's heads table.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pandas as pd

from algo_emu import paper_values
from algo_emu.io import read_json
from algo_emu.runtime import REPO_ROOT

REF = Path("results/reference/reference-scale")
PAPER = Path("results/reference/paper-scale")
VERDICTS = Path("tables/replication.csv")
PAPER_BENCH = Path("benchmarks/paper_scale.json")
QUICKSTART = Path("benchmarks/quickstart.json")
#: A row of the paper-scale set whose setting is not made yet (tools.campaign.page.MISSING): not counted.
MISSING = "missing from this set"
BLOCK = re.compile(r"<!-- generated: (?P<name>[\w-]+) -->\n(?P<body>.*?)<!-- /generated -->", re.S)
#: Verdicts in the order the counts print them (others after, alphabetically).
ORDER = ["consistent", "inconsistent (ours higher)", "inconsistent (ours lower)", "supported", "partly supported",
         "not supported", "inconclusive", "not comparable", "did not learn", "not available", "not run at this scale",
         "not tested"]


def _g(x: float, digits: int = 3) -> str:
    """A number as the README prints it: ``digits`` significant figures (no exponent for large numbers)."""
    x = float(x)
    return f"{x:.0f}" if abs(x) >= 10 ** digits else f"{x:.{digits}g}"


def _short_verdict(v: str) -> str:
    v = str(v)
    for cut in (":", " ("):
        if cut in v and not v.startswith("inconsistent"):
            v = v.split(cut, 1)[0]
    return v.strip()


def verdict_counts(path: Path) -> dict[str, str]:
    """Per experiment, its rows' verdicts counted (a row waiting for a missing setting is not counted)."""
    rows = pd.read_csv(path)
    rows = rows[rows.verdict != MISSING]
    out = {}
    for exp, g in rows.groupby("experiment", sort=True):
        counts = g.verdict.map(_short_verdict).value_counts()
        keys = [k for k in ORDER if k in counts] + sorted(k for k in counts.index if k not in ORDER)
        out[exp] = ", ".join(f"{k} {counts[k]}" for k in keys)
    return out


def heads_table(root: Path) -> list[str]:
    """E1's heads table at the paper's scale beside the paper's (the set's report rows), H by H."""
    rows = pd.read_csv(root / PAPER / VERDICTS)
    rows = rows[(rows.experiment == "E1") & rows.claim.str.startswith("heads table")].set_index("setting")
    out = ["| H | paper (mean ± std, 10 seeds) | ours (mean [95 % CI]) | verdict |", "|---:|---|---|---|"]
    for H, m, s in zip(*(paper_values.HEADS_TABLE[k] for k in ("heads", "mse", "std"))):
        r = rows.loc[f"H={H}, p=60"] if f"H={H}, p=60" in rows.index else None
        if r is None or r.verdict == MISSING or pd.isna(r.comparable_mean):
            out.append(f"| {H} | {m} ± {s} | not made yet | -- |")
        else:
            out.append(f"| {H} | {m} ± {s} | {_g(r.comparable_mean)} [{_g(r.comparable_ci_low)}, "
                       f"{_g(r.comparable_ci_high)}] | {r.verdict} |")
    return out


def paper_progress(root: Path) -> tuple[int, int, float]:
    """(settings made, settings in all, summed training hours of those made) of the paper-scale campaign."""
    from tools.campaign import core as cp
    from algo_emu.config import load_config

    state = cp.load_state(root / PAPER)
    settings = cp.settings(load_config(root / state["config"], gpu_check=False))
    done = [s for s in settings if cp.setting_status(root / PAPER, state, s) in ("done", "adopted")]
    hours = sum(float(state["settings"].get(s.name, {}).get("wall_seconds") or 0) for s in done) / 3600
    return len(done), len(settings), hours


def block_readme(root: Path) -> str:
    quick = {r["command"]: r for r in read_json(root / QUICKSTART)["runs"]}
    q, t = quick["make quick"], quick["make test"]
    ref_counts, paper_counts = verdict_counts(root / REF / VERDICTS), verdict_counts(root / PAPER / VERDICTS)
    jobs = read_json(root / REF / "manifest.json").get("benchmarks", {}).get("jobs", {})
    ref_min = sum(float(j.get("wall_s", 0)) for j in jobs.values()) / 60
    made, total, hours = paper_progress(root)
    predicted = float(read_json(root / PAPER_BENCH)["prediction"]["hours"])
    lines = [
        "## Quick start", "",
        "On Linux with Python 3.11 or later (other installs, conda and CPU-only torch: "
        "[docs/reproduce.md](docs/reproduce.md)):", "",
        "```bash",
        "make quick   # every experiment, table, figure and the report, small (config/quick.yaml) -> runs/quick/results/",
        "make test    # the test suite, as CI runs it",
        "```", "",
        f"Measured on {q['machine']} ([`{QUICKSTART.as_posix()}`]({QUICKSTART.as_posix()})): `make quick` "
        f"{_g(q['wall_minutes'], 2)} min wall ({q['jobs']} jobs), `make test` {_g(t['wall_minutes'], 2)} min "
        f"({t['tests']}). Each first creates `.venv/` from `requirements.lock`. `make quick` is a smoke scale: "
        "its models barely train, so most trained rows of its report read *did not learn*; the reference scale "
        "below is the smallest at which they learn. Each config runs in its own folder (its `workdir`: `runs/quick/` "
        "here, the repository itself for the paper's scale), so a small run never touches the paper-scale `results/`.",
        "",
        "## What it replicates, and how faithfully", "",
        "E1, the paper's headline table (test MSE of the emulated attention head against the number of heads H; "
        "arXiv 2508.17550v2, the ablation of Theorem 4.1), at the paper's scale (N = 50,000, 50 epochs, 10 seeds), "
        "beside the paper's:", "",
        *heads_table(root), "",
        "Every number or claim of the paper, with a verdict, counted per experiment from each set's replication "
        "report (the rules: [docs/verdicts.md](docs/verdicts.md)):", "",
        "| experiment | reference scale ([report](results/reference/reference-scale/replication.md); 3 seeds, budgets "
        f"below the paper's) | paper scale ([report](results/reference/paper-scale/README.md); {made} of {total} "
        "settings made so far) |", "|---|---|---|"]
    for exp in sorted(set(ref_counts) | set(paper_counts)):
        lines.append(f"| {exp} | {ref_counts.get(exp, '--')} | "
                     f"{paper_counts.get(exp, 'not a campaign setting (no training)' if exp == 'E5' else 'not made yet')} |")
    lines += [
        "", "At the reference scale a trained row reads *not comparable* wherever its budget is below the paper's.", "",
        "## Scales, and what each costs before you type it", "",
        "| scale | command | on 2 CPU cores | on one GPU |", "|---|---|---|---|",
        f"| small | `make quick` | measured: {_g(q['wall_minutes'], 2)} min wall | not measured yet |",
        f"| reference | `make run CONFIG=config/reference.yaml` | measured: {_g(ref_min, 2)} min, summed over its "
        f"{len(jobs)} jobs ([its page](results/reference/reference-scale/README.md)) | not measured yet |",
        f"| paper | `make run` | predicted: {_g(predicted, 3)} h ([`benchmarks/paper_scale.md`]"
        f"(benchmarks/paper_scale.md)); measured so far: {_g(hours, 2)} h for the {made} of {total} settings made | "
        f"{gpu_paper_cost(root)} |"]
    return "\n".join(lines) + "\n"


#: One step of every shape group at the paper's shapes on a GPU (``benchmarks/gpu_probe.py``): the paper scale's GPU
#: cell once it exists.
GPU_PROBE = Path("benchmarks/gpu_probe.json")


def gpu_paper_cost(root: Path) -> str:
    """The paper scale on one GPU: predicted from the probe's per-group steps where it exists, else not measured."""
    path = root / GPU_PROBE
    if not path.is_file():
        return "not measured yet"
    probe = json.loads(path.read_text())
    if not probe.get("groups"):
        return "not measured yet"
    env, missing = probe["environment"], sorted(probe.get("not_timed", []))
    return (f"predicted: {_g(probe['paper_seconds_one_group_at_a_time'], 3)} s of compute, one shape group at a time, "
            f"from one captured step per group timed on one {env['device_name']} ([`{GPU_PROBE.as_posix()}`]"
            f"({GPU_PROBE.as_posix()}))" + (f"; not timed: {', '.join(missing)}" if missing else ""))


GENERATORS = {"readme": block_readme}


def doc_files(root: Path = REPO_ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def fill(text: str, root: Path, cache: dict[str, str]) -> tuple[str, list[str], list[str]]:
    """``text`` with every block filled; the names of stale blocks and of unknown names."""
    stale, unknown = [], []

    def repl(m: re.Match) -> str:
        name = m.group("name")
        if name not in GENERATORS:
            unknown.append(name)
            return m.group(0)
        if name not in cache:
            cache[name] = GENERATORS[name](root)
        if cache[name] != m.group("body"):
            stale.append(name)
        return f"<!-- generated: {name} -->\n{cache[name]}<!-- /generated -->"

    return BLOCK.sub(repl, text), stale, unknown


def run(write: bool, root: Path = REPO_ROOT) -> list[str]:
    """Fill (``write``) or check every block; returns the problems (``path: block`` stale, unknown names)."""
    cache: dict[str, str] = {}
    problems = []
    for path in doc_files(root):
        text = path.read_text()
        new, stale, unknown = fill(text, root, cache)
        problems += [f"{path.relative_to(root)}: block '{n}' is stale" for n in stale]
        problems += [f"{path.relative_to(root)}: unknown block '{n}'" for n in unknown]
        if write and new != text:
            path.write_text(new)
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.docs_numbers", description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", action="store_true", help="fill the generated block from the committed files")
    g.add_argument("--check", action="store_true", help="exit 1 when the block differs from the committed files")
    args = ap.parse_args(argv)
    problems = run(write=args.write)
    if args.check and problems:
        print("\n".join(problems) + "\nrun: python -m tools.docs_numbers --write", file=sys.stderr)
        return 1
    if args.write:
        print("\n".join(p.replace("is stale", "rewritten") for p in problems) or "the block is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
