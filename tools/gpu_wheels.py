"""Snakemake and everything it needs as wheels for a GPU machine without network (tools/gpu_run.sh installs them).

The versions are this environment's (requirements.lock), the dependency closure is read from the installed
packages' metadata. Pure-Python packages become ``py3-none-any`` wheels here (``pip wheel``: some are published
as source only); packages with compiled parts are downloaded as binary wheels for the GPU machine's Python and
platform (``--python-version``, ``--platform``). ``make gpu-wheels`` runs it into ``.whl/``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from importlib import metadata

ROOTS = ("snakemake", "jsonschema")
#: manylinux tags a Python 3.12 x86_64 GPU machine takes, newest first
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def closure(roots=ROOTS) -> dict[str, metadata.Distribution]:
    """The installed distributions ``roots`` need (their required dependencies, no extras), by normalised name."""
    out: dict[str, metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in out:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a requirement for another Python or platform (markers not evaluated here)
        out[name] = dist
        for req in dist.requires or []:
            if "extra ==" in req:
                continue
            todo.append(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", req).group(0))
    return out


def pure(dist: metadata.Distribution) -> bool:
    text = dist.read_text("WHEEL") or ""
    return "Root-Is-Purelib: true" in text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dest", default=".whl")
    ap.add_argument("--python-version", default="3.12")
    args = ap.parse_args(argv)
    dists = closure()
    pins = {name: f"{d.metadata['Name']}=={d.version}" for name, d in sorted(dists.items())}
    pip = [sys.executable, "-m", "pip", "-q"]
    py = [p for n, p in pins.items() if pure(dists[n])]
    binary = [p for n, p in pins.items() if not pure(dists[n])]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", args.dest, *py], check=True)
    plat = [x for p in PLATFORMS for x in ("--platform", p)]
    subprocess.run([*pip, "download", "--no-deps", "--only-binary=:all:", "--python-version", args.python_version,
                    "--implementation", "cp", *plat, "-d", args.dest, *binary], check=True)
    print(f"{len(pins)} packages into {args.dest}: {len(py)} pure-Python, {len(binary)} binary ({' '.join(binary)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
