"""Device resolution and the provenance every run records.

Importing this module does not import torch (the config layer reads
:data:`REPO_ROOT` from here, and validating a config must stay cheap); the
functions that need torch import it when called.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = Path(__file__).resolve().parent

#: The package source that defines what a checkpoint holds: the engine and its loss, the
#: random streams, the runner (the TrainConfig it builds), the model, the data and the experiments' tasks
#: (relative to the package).
TRAINING_SOURCES: tuple[str, ...] = ("train.py", "rng.py", "models", "data", "experiments")


def source_digest(parts: tuple[str, ...] = TRAINING_SOURCES, root: str | os.PathLike | None = None) -> str:
    """sha256 over the package's ``.py`` and ``.c`` files under ``parts`` (relative path and bytes, sorted).

    Part of every training fingerprint (:func:`algo_emu.train.train_ensemble`): a checkpoint
    written by other code defining the model, the task or the loss is never resumed.
    ``root``: the package directory (default: this package, digested once per process;
    tests point it at a copy).
    """
    if root is None:
        return _package_source_digest(tuple(parts))
    return _digest_sources(tuple(parts), Path(root))


@functools.lru_cache(maxsize=None)
def _package_source_digest(parts: tuple[str, ...]) -> str:
    return _digest_sources(parts, PACKAGE_DIR)


def _digest_sources(parts: tuple[str, ...], root: Path) -> str:
    files: list[Path] = []
    for part in parts:
        target = Path(root) / part
        files.extend(sorted([*target.rglob("*.py"), *target.rglob("*.c")]) if target.is_dir()
                     else [target] if target.exists() else [])
    h = hashlib.sha256()
    for f in sorted(set(files)):
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    return h.hexdigest()


def code_version() -> str:
    """``algo_emu <version> src <source digest, 16 hex>``: what produced a checkpoint or a number."""
    from algo_emu import __version__

    return f"algo_emu {__version__} src {source_digest()[:16]}"


#: ``0`` turns flushing off (records then say ``flush_denormals: false``); anything else, or unset: on.
FLUSH_ENV = "ALGO_EMU_FLUSH_DENORMALS"


def flush_denormals() -> bool:
    """Flush denormal floats to zero (x86 FTZ/DAZ) in the calling thread, unless ``ALGO_EMU_FLUSH_DENORMALS=0``;
    returns whether it was requested.

    Why: once training sharpens a softmax or shrinks a gradient, values below 1.2e-38 (float32) appear, and
    every operation that touches one runs in microcode, many times slower, and a run slows down as it trains
    (measured: ``tools/benchmarks/denormals.py``). Flushed, such a value is 0, which
    changes a result only where a denormal would have reached it (below float32's smallest normal number).
    The setting belongs to a thread; torch's and the attention kernel's worker threads copy it from the thread
    that creates them, so call this before the first multi-threaded operation of the process (the command
    line does, for every experiment step). :func:`denormals_flushed` checks every worker thread."""
    import torch

    on = os.environ.get(FLUSH_ENV, "1").strip() != "0"
    torch.set_flush_denormal(on)
    return on


#: ``0`` leaves glibc's allocator at its defaults (records then say ``reuse_freed_memory: false``); anything else, or
#: unset: :func:`reuse_freed_memory` applies.
MALLOC_ENV = "ALGO_EMU_REUSE_FREED_MEMORY"
#: glibc's ``mallopt`` parameters: below this size a block comes from the heap, not a fresh ``mmap`` (32 MiB is
#: the largest glibc takes on 64-bit), and the heap is never trimmed below this (freed memory is kept for reuse).
MALLOC_MMAP_THRESHOLD, MALLOC_TRIM_THRESHOLD = 32 << 20, 1 << 30
_REUSING: bool | None = None


def reuse_freed_memory() -> bool:
    """Keep the memory a training step frees for the next step's tensors (glibc ``mallopt``), unless
    ``ALGO_EMU_REUSE_FREED_MEMORY=0``; returns whether it applied (False off glibc).

    Why: a step allocates its outputs and gradients afresh (several MB); by default glibc serves blocks above its
    mmap threshold with fresh pages and gives freed heap back to the system, so a step can pay page faults and the
    kernel's zeroing of those pages (how many depends on glibc's adaptive threshold: from tens to thousands per E3
    step measured, a few with this). Numbers do not change: it is where memory comes from, not what is computed.
    Call it before the first large allocation."""
    global _REUSING
    on = os.environ.get(MALLOC_ENV, "1").strip() != "0"
    if not on:
        _REUSING = False
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        # M_MMAP_THRESHOLD = -3, M_TRIM_THRESHOLD = -1 (malloc.h); mallopt returns 1 on success
        ok = libc.mallopt(-3, MALLOC_MMAP_THRESHOLD) == 1 and libc.mallopt(-1, MALLOC_TRIM_THRESHOLD) == 1
    except (OSError, AttributeError):
        ok = False
    _REUSING = ok
    return ok


def freed_memory_reused() -> bool:
    """Whether :func:`reuse_freed_memory` applied in this process (what a record says)."""
    return bool(_REUSING)


def denormals_flushed() -> bool:
    """Whether torch's intra-op threads all flush denormals: a tensor of denormals large enough for every
    thread to take a share, halved, must come back all zero (one thread that does not flush leaves its share)."""
    import torch

    n = max(1 << 20, (1 << 18) * torch.get_num_threads())
    # made from its bits (0x00400000 = 5.9e-39): converting a Python float would itself be flushed
    x = torch.full((n,), 0x00400000, dtype=torch.int32).view(torch.float32)
    return bool(torch.count_nonzero(x * 0.5).item() == 0)


_GPU_LOCKS: dict[tuple[int, int], object] = {}  # (GPU, slot) -> lock file, held open for the life of the process

#: Training jobs one GPU takes at once (the gpu-local profile's ``gpu`` resource and :func:`claim_gpu`'s slots).
#: Why 4 by default: on one H200 the GPU script's jobs take turns on the GPU, and 16 of them did only a few times
#: the work of one alone (the ratio: ``tools/benchmarks/device_h200.json``, ``sharing``), so about that many keep the GPU
#: as busy while each runs near its alone speed (an inference from that run, docs/gpu.md). ``1``: a GPU per job.
JOBS_PER_GPU_VARIABLE = "ALGO_EMU_JOBS_PER_GPU"
DEFAULT_JOBS_PER_GPU = 4


def jobs_per_gpu() -> int:
    """``$ALGO_EMU_JOBS_PER_GPU`` (a whole number, 1 or more), else :data:`DEFAULT_JOBS_PER_GPU`."""
    raw = os.environ.get(JOBS_PER_GPU_VARIABLE, "").strip()
    if not raw:
        return DEFAULT_JOBS_PER_GPU
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{JOBS_PER_GPU_VARIABLE}={raw!r}: expected a whole number of training jobs per GPU, 1 or more")
    return n


def claim_gpu(n_gpus: int, lock_dir: str | os.PathLike | None = None, per_gpu: int | None = None) -> int:
    """Index of a GPU with a job slot no other algo-emu process on this machine holds.

    Snakemake counts GPU slots (``--resources gpu=N``) but does not say which GPU a
    job should use; each training process therefore takes the first slot whose
    lock file it can ``flock`` (slot 0 of GPU ``i`` is ``<lock_dir>/algo-emu-gpu<i>.lock``,
    slot ``j`` > 0 ``algo-emu-gpu<i>.slot<j>.lock``) and keeps the lock until it exits.
    Slots are taken slot by slot across the GPUs, so jobs spread over every GPU before
    any GPU takes a second. ``per_gpu`` slots per GPU (default :func:`jobs_per_gpu`).
    When every slot is taken it falls back to GPU 0.
    """
    import fcntl
    import tempfile

    per_gpu = jobs_per_gpu() if per_gpu is None else per_gpu
    lock_dir = Path(lock_dir or os.environ.get("ALGO_EMU_GPU_LOCK_DIR") or tempfile.gettempdir())
    for slot in range(per_gpu):
        for i in range(n_gpus):
            if (i, slot) in _GPU_LOCKS:
                continue
            fh = open(lock_dir / (f"algo-emu-gpu{i}.lock" if slot == 0 else f"algo-emu-gpu{i}.slot{slot}.lock"), "a")
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fh.close()
                continue
            _GPU_LOCKS[(i, slot)] = fh
            return i
    return 0


def resolve_device(spec: str = "auto") -> torch.device:
    """``auto`` -> CUDA when available (a free GPU when there are several), else CPU;
    ``cpu``/``cuda``/``cuda:N`` as given."""
    import torch

    if spec == "auto":
        if not torch.cuda.is_available():
            return torch.device("cpu")
        n = torch.cuda.device_count()
        return torch.device("cuda", claim_gpu(n) if n > 1 else 0)
    dev = torch.device(spec)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device: {spec!r} requested but CUDA is not available (use device: auto or cpu)")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device: unsupported device {spec!r} (use auto, cpu, cuda or cuda:N)")
    return dev


def config_hash(cfg: Any) -> str:
    """sha256 of the canonical JSON of a (sub-)config, first 16 hex digits."""
    blob = json.dumps(cfg, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def git_dirty() -> bool | None:
    """Whether tracked files of the checkout differ from :func:`git_commit` (untracked files ignored), or None
    when git cannot tell: a record made from uncommitted changes says so."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(out.stdout.strip()) if out.returncode == 0 else None


def cpu_model_name() -> str | None:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, ``sysctl`` on macOS), or None."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    try:
        out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                             timeout=5, check=False)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


#: The widest vector extension a CPU's ``flags`` name, widest first (what the attention kernel and BLAS are built for).
ISA_LEVELS = ("avx512f", "avx2", "avx", "sse4_2")


def cpu_id(cpuinfo: str | None = None) -> str | None:
    """The CPU's identity, which its model name alone may not give (a virtual machine may show two generations as
    "AMD EPYC"): vendor, family, model and stepping numbers and the widest vector extension, e.g. ``"AuthenticAMD
    family 26 model 2 stepping 1, avx512f"``. From ``/proc/cpuinfo`` (``cpuinfo``: its text, for tests); None where
    there is none (macOS) or it names no family."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block is enough
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    if "cpu family" not in fields:
        return None
    flags = set(fields.get("flags", "").split())
    isa = next((f for f in ISA_LEVELS if f in flags), "no avx")
    return (f"{fields.get('vendor_id', '?')} family {fields['cpu family']} model {fields.get('model', '?')} "
            f"stepping {fields.get('stepping', '?')}, {isa}")


def cpu_label(hw: dict | None) -> str:
    """A hardware record's CPU for a reader: its model name, with its identity (:func:`cpu_id`) where recorded."""
    hw = hw or {}
    name, ident = hw.get("cpu_model"), hw.get("cpu_id")
    return f"{name or '?'} ({ident})" if ident else (name or "not recorded")


def _memory_gib() -> float | None:
    """Physical memory of the machine in GiB (``/proc/meminfo``, else sysconf), or None."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return None


def hardware(device: torch.device | str | None = None) -> dict[str, Any]:
    """The machine a number was made on: CPU model and identity (:func:`cpu_id`), logical cores (all, and those
    this process may use), physical memory (GiB); with a CUDA ``device``, the GPU's name and memory (GiB) as well.
    Torch is imported only for a CUDA device (the manifest and campaign call it torch-free)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    info: dict[str, Any] = {
        "machine": platform.machine(), "cpu_model": cpu_model_name(), "cpu_id": cpu_id(), "cpu_count": os.cpu_count(),
        "cpu_count_usable": usable, "memory_gib": _memory_gib(), "gpu_name": None, "gpu_memory_gib": None,
    }
    if device is not None and str(device).startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(torch.device(device))
            info["gpu_name"] = props.name
            info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
    return info


def environment(device: torch.device) -> dict[str, Any]:
    """What produced a number: device, versions, threads, commit and whether tracked files differed from it,
    package source digest, and the hardware (:func:`hardware`: CPU model, cores, memory; GPU name and memory
    on CUDA)."""
    import torch

    info: dict[str, Any] = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "flush_denormals": denormals_flushed() if device.type == "cpu" else None,
        "reuse_freed_memory": freed_memory_reused(),
        "hostname": platform.node(),
        "git_commit": git_commit(),
        "git_dirty": git_dirty(),
        "code_version": code_version(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "hardware": hardware(device),
    }
    return info
