"""The narrow-head attention kernel (``two_set_attention.c``): built once per machine, called as a
PyTorch custom operator (so ``torch.compile`` treats it as one opaque step).

The C source is compiled with the system C compiler (``$CC``, default ``cc``) into
``$ALGO_EMU_KERNEL_DIR`` (default ``~/.cache/algo_emu/kernels``). The library's name carries a digest
of the source, the compiler flags, the compiler's version and the CPU (model and instruction-set
flags: it is built with ``-march=native``), so a changed source or another machine never loads a
stale build. The build writes to a temporary file and renames it, so concurrent jobs are safe.

:func:`available` says whether the kernel can be used here (and why not); the emulator's ``auto``
attention uses it for narrow heads on the CPU and falls back, with a warning, to the pure-PyTorch
implementation (:class:`algo_emu.models.emulator.TwoSetAttention`) when it cannot be built. The
implementation a run used is written into its records (``attention``).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("two_set_attention.c")
MAX_KEYS = 256  # keys (n + m) a float32 call takes: the C source's MAXNV * 16
FLAGS = ("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-shared", "-fPIC")


class KernelUnavailable(RuntimeError):
    """The kernel cannot be built or loaded on this machine (the message says why)."""


def _cpu_signature() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine()
    model = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "")
    flags = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith(("flags", "Features"))), "")
    return f"{platform.machine()}|{model}|{flags}"


def _compiler() -> str:
    cc = os.environ.get("CC", "cc")
    path = shutil.which(cc)
    if path is None:
        raise KernelUnavailable(f"no C compiler: {cc!r} is not on PATH (set CC, or install gcc)")
    return path


def library_path() -> Path:
    """Where this machine's build of the current source lives (built or not)."""
    cc = _compiler()
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    key = hashlib.sha256("\0".join([SOURCE.read_text(), " ".join(FLAGS), *version, _cpu_signature()]).encode())
    root = Path(os.environ.get("ALGO_EMU_KERNEL_DIR") or Path.home() / ".cache" / "algo_emu" / "kernels")
    return root / f"two_set_attention-{key.hexdigest()[:16]}.so"


def _build(out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    cmd = [_compiler(), *FLAGS, str(SOURCE), "-o", tmp, "-lm"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        os.unlink(tmp)
        raise KernelUnavailable(f"building {SOURCE.name} failed ({' '.join(cmd)}):\n{res.stderr.strip()}")
    os.replace(tmp, out)


@functools.lru_cache(maxsize=None)
def _load() -> ctypes.CDLL:
    path = library_path()
    if not path.exists():
        _build(path)
    lib = ctypes.CDLL(str(path))
    i64, ptr, f64 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_double
    for suffix in ("f32", "f64"):
        fwd = getattr(lib, f"tsa_forward_{suffix}")
        fwd.argtypes = [ptr] * 5 + [i64] * 7 + [f64, ctypes.c_int]
        fwd.restype = None
        bwd = getattr(lib, f"tsa_backward_{suffix}")
        bwd.argtypes = [ptr] * 9 + [i64] * 7 + [f64, ctypes.c_int]
        bwd.restype = None
    if lib.tsa_max_keys_f32() != MAX_KEYS:
        raise KernelUnavailable(f"{SOURCE.name} takes {lib.tsa_max_keys_f32()} keys, kernel.py expects {MAX_KEYS}")
    return lib


#: ``ALGO_EMU_KERNEL=off`` turns the kernel off without building it: for runs whose models all live on a GPU
#: (the emulator's ``auto`` takes PyTorch's sdpa there whatever this says), where building it in every
#: process would only cost time. The CPU then takes the PyTorch implementation, as when no compiler is found.
OFF_VARIABLE = "ALGO_EMU_KERNEL"


@functools.lru_cache(maxsize=None)
def available() -> tuple[bool, str]:
    """(True, path of the library) when the kernel is usable here, else (False, why not)."""
    if os.environ.get(OFF_VARIABLE, "").strip().lower() == "off":
        return False, f"turned off by {OFF_VARIABLE}=off"
    try:
        return True, str(_load()._name)
    except (KernelUnavailable, OSError) as exc:
        return False, str(exc)


_warned = False


def usable() -> bool:
    """Whether the emulator's ``auto`` attention may use the kernel; warns once (naming the reason)
    when it cannot be built here."""
    global _warned
    ok, why = available()
    if not ok and not _warned:
        log.warning("the narrow-head attention kernel is not available, using the PyTorch implementation "
                    "(slower, same numbers up to float rounding): %s", why)
        _warned = True
    return ok


def _check(q, kv, kv_e, heads) -> tuple[int, ...]:
    if q.device.type != "cpu":
        raise ValueError(f"two_set_attention kernel: CPU tensors only, got {q.device}")
    if q.dtype not in (torch.float32, torch.float64) or kv.dtype != q.dtype or kv_e.dtype != q.dtype:
        raise ValueError("two_set_attention kernel: q, kv, kv_e must all be float32 or all float64")
    if q.dim() != 4 or kv.dim() != 4 or kv_e.dim() != 3:
        raise ValueError(f"two_set_attention kernel: q (E, B, nq, h), kv (E, B, nk, 2h), kv_e (E, m, 2h) expected, "
                         f"got {tuple(q.shape)}, {tuple(kv.shape)}, {tuple(kv_e.shape)}")
    E, B, nq, h = q.shape
    nk, m = kv.shape[2], kv_e.shape[1]
    if heads < 1 or h % heads:
        raise ValueError(f"two_set_attention kernel: heads={heads} must divide h={h}")
    if kv.shape != (E, B, nk, 2 * h) or kv_e.shape != (E, m, 2 * h):
        raise ValueError(f"two_set_attention kernel: shapes q {tuple(q.shape)}, kv {tuple(kv.shape)}, "
                         f"kv_e {tuple(kv_e.shape)} do not fit")
    if q.dtype == torch.float32 and nk + m > MAX_KEYS:
        raise ValueError(f"two_set_attention kernel: {nk + m} keys, more than the {MAX_KEYS} a float32 call takes")
    return E, heads, B, nq, nk, m, h // heads


def _suffix(t: torch.Tensor) -> str:
    return "f32" if t.dtype == torch.float32 else "f64"


@torch.library.custom_op("algo_emu::two_set_attention", mutates_args=())
def two_set_attention_op(q: torch.Tensor, kv: torch.Tensor, kv_e: torch.Tensor, heads: int,
                         scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    E, H, B, nq, nk, m, dh = dims = _check(q, kv, kv_e, heads)
    q, kv, kv_e = (t.contiguous() for t in (q, kv, kv_e))
    o = torch.empty_like(q)
    lse = q.new_empty(E, H, B, nq)
    getattr(_load(), f"tsa_forward_{_suffix(q)}")(
        *(t.data_ptr() for t in (q, kv, kv_e, o, lse)), *dims, float(scale), torch.get_num_threads())
    return o, lse


@two_set_attention_op.register_fake
def _(q, kv, kv_e, heads, scale):  # outputs are contiguous whatever the inputs' strides
    E, B, nq, _ = q.shape
    return q.new_empty(q.shape), q.new_empty(E, heads, B, nq)


@torch.library.custom_op("algo_emu::two_set_attention_backward", mutates_args=())
def two_set_attention_backward_op(do: torch.Tensor, q: torch.Tensor, kv: torch.Tensor, kv_e: torch.Tensor,
                                  o: torch.Tensor, lse: torch.Tensor, heads: int, scale: float
                                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dims = _check(q, kv, kv_e, heads)
    do, q, kv, kv_e, o, lse = (t.contiguous() for t in (do, q, kv, kv_e, o, lse))
    grads = [torch.empty_like(t) for t in (q, kv, kv_e)]
    getattr(_load(), f"tsa_backward_{_suffix(q)}")(
        *(t.data_ptr() for t in (do, q, kv, kv_e, o, lse, *grads)), *dims, float(scale), torch.get_num_threads())
    return tuple(grads)


@two_set_attention_backward_op.register_fake
def _(do, q, kv, kv_e, o, lse, heads, scale):
    return tuple(t.new_empty(t.shape) for t in (q, kv, kv_e))


def _setup_context(ctx, inputs, output):
    q, kv, kv_e, heads, scale = inputs
    ctx.save_for_backward(q, kv, kv_e, *output)
    ctx.heads, ctx.scale = heads, scale


def _backward(ctx, do, dlse):
    q, kv, kv_e, o, lse = ctx.saved_tensors
    return (*two_set_attention_backward_op(do, q, kv, kv_e, o, lse, ctx.heads, ctx.scale), None, None)


two_set_attention_op.register_autograd(_backward, setup_context=_setup_context)


def two_set_attention(q: torch.Tensor, kv: torch.Tensor, kv_e: torch.Tensor, heads: int, scale: float) -> torch.Tensor:
    """Multi-head softmax attention, heads side by side in the last dimension (width dh = h / heads):
    per (member, prompt, head), ``softmax(scale [q k_d^T | q k_e^T]) [v_d ; v_e]``.

    q: (E, B, nq, h); kv: (E, B, nk, 2h), the prompt's keys then values; kv_e: (E, m, 2h), keys then
    values shared by the B prompts. Returns (E, B, nq, h), heads concatenated. The log-sum-exp of each
    query is not differentiable (the backward ignores a gradient flowing into it)."""
    return two_set_attention_op(q, kv, kv_e, heads, scale)[0]
