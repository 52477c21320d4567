"""Every environment record names the hardware: CPU model, cores, memory; GPU name and memory on CUDA."""

import types

import torch

from algo_emu import runtime
from algo_emu.train import Runner


def test_cpu_record_names_the_machine():
    env = Runner("cpu").environment()  # what every metrics.json / frozen sidecar carries
    hw = env["hardware"]
    assert isinstance(hw["cpu_model"], str) and hw["cpu_model"]
    assert isinstance(hw["cpu_count"], int) and hw["cpu_count"] >= 1
    assert 1 <= hw["cpu_count_usable"] <= hw["cpu_count"]
    assert hw["memory_gib"] > 0
    assert hw["gpu_name"] is None and hw["gpu_memory_gib"] is None  # no GPU used


ZEN3 = "vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\nstepping\t: 1\nflags\t\t: fpu sse4_2 avx avx2 fma\n"
ZEN5 = ("vendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\nstepping\t: 1\n"
        "flags\t\t: fpu sse4_2 avx avx2 avx512f avx512bw\n\nprocessor\t: 1\ncpu family\t: 99\n")


def test_cpu_id_tells_apart_what_the_model_name_does_not():
    """Two CPU generations a virtual machine both names "AMD EPYC" get different identities (family, model and the
    widest vector extension, read from the first processor), and a reader sees both; a record without an identity
    (made before it was recorded) shows its name alone."""
    assert runtime.cpu_id(ZEN3) == "AuthenticAMD family 25 model 1 stepping 1, avx2"
    assert runtime.cpu_id(ZEN5) == "AuthenticAMD family 26 model 2 stepping 1, avx512f"
    assert runtime.cpu_id("processor\t: 0\nmodel name\t: Apple M2\n") is None
    old, z3, z5 = ({"cpu_model": "AMD EPYC"} | ({"cpu_id": runtime.cpu_id(t)} if t else {}) for t in (None, ZEN3, ZEN5))
    assert runtime.cpu_label(z3) != runtime.cpu_label(z5)
    assert runtime.cpu_label(z5) == "AMD EPYC (AuthenticAMD family 26 model 2 stepping 1, avx512f)"
    assert runtime.cpu_label(old) == "AMD EPYC" and runtime.cpu_label(None) == "not recorded"
    assert runtime.hardware()["cpu_id"] == runtime.cpu_id()  # every record carries it


def test_cuda_record_names_the_gpu(monkeypatch):
    props = types.SimpleNamespace(name="Fake GPU 80GB", total_memory=80 * 2**30)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    hw = runtime.hardware(torch.device("cuda", 0))
    assert hw["gpu_name"] == "Fake GPU 80GB" and hw["gpu_memory_gib"] == 80.0
    assert hw["cpu_count"] >= 1 and hw["memory_gib"] > 0  # the host is named too


def test_hardware_without_a_device_is_torch_free():
    """The manifest and campaign records call hardware() with no device: it must not need torch."""
    import subprocess
    import sys

    code = ("import sys; from algo_emu.runtime import hardware; h = hardware(); "
            "assert 'torch' not in sys.modules and h['cpu_count'] >= 1, h")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------------------- denormals

_FLUSH_PROBE = """
import json, os, sys, torch
from algo_emu import runtime
order = sys.argv[1]
torch.set_num_threads(2)
if order == "pool first":  # a multi-threaded op before the flag: the worker threads exist without it
    torch.ones(1 << 22).mul_(2)
requested = runtime.flush_denormals()
x = torch.full((1 << 21,), 0x00400000, dtype=torch.int32).view(torch.float32)  # 5.9e-39, from its bits
print(json.dumps({"requested": requested, "flushed": runtime.denormals_flushed(),
                  "left": int(torch.count_nonzero(x * 0.5))}))
"""


def _probe(order: str, env_value: str | None) -> dict:
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != runtime.FLUSH_ENV}
    if env_value is not None:
        env[runtime.FLUSH_ENV] = env_value
    out = subprocess.run([sys.executable, "-c", _FLUSH_PROBE, order], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def test_denormals_flushed_in_every_worker_thread_only_when_set_before_the_pool_starts():
    """Set before the first multi-threaded op (what the command line does), every thread flushes: a 2M-value
    tensor of denormals halved comes back all zero. Set after (negative control), the workers made before it
    keep their denormals and denormals_flushed says so; ALGO_EMU_FLUSH_DENORMALS=0 turns it off."""
    assert _probe("flag first", None) == {"requested": True, "flushed": True, "left": 0}
    late = _probe("pool first", None)
    assert late["requested"] is True and late["flushed"] is False and late["left"] > 0
    off = _probe("flag first", "0")
    assert off == {"requested": False, "flushed": False, "left": 1 << 21}


def test_a_compute_step_of_the_command_line_records_flushed_denormals():
    """An experiment step taking --threads flushes before it computes, and its records say so."""
    import json
    import subprocess
    import sys

    code = ("import json, sys, types; from algo_emu import cli; from algo_emu.train import Runner\n"
            "def probe(device_spec, threads):\n"
            "    print(json.dumps({k: Runner(device_spec, threads).environment()[k] "
            "for k in ('flush_denormals', 'reuse_freed_memory')}))\n"
            "sys.modules['probe'] = types.SimpleNamespace(STEPS={'probe': probe}); cli.STEP_MODULES['probe'] = 'probe'\n"
            "cli.main(['probe', 'probe', json.dumps({'device_spec': 'cpu'}), '--threads', '2'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"flush_denormals": True, "reuse_freed_memory": True}


# ----------------------------------------------------------------------------------------- freed memory

_FAULT_PROBE = """
import json, resource, sys, torch
from algo_emu import runtime
applied = runtime.reuse_freed_memory()
torch.set_num_threads(2)
from algo_emu.models.emulator import EnsembleEmulator
from algo_emu.train import Member, TrainConfig, make_step
E, n, d_in, keep = 10, 40, 50, (20, 40)  # E3's fitted shape at the paper's scale (H = 6)
class Task:
    members = [Member(s, "m") for s in range(E)]
    n_train = 256
    loss_positions = torch.arange(*keep)
    x, y, rows = torch.randn(E, 256, n, d_in), torch.randn(E, 256, keep[1] - keep[0], 1), torch.arange(E)[:, None]
    def batch(self, index):
        return self.x[self.rows, index], self.y[self.rows, index]
model = EnsembleEmulator([torch.Generator().manual_seed(s) for s in range(E)], d_in, 1, n, 48, 6, 60, attention="fused")
step = make_step(model, Task(), TrainConfig(epochs=1), torch.optim.Adam(model.parameters(), lr=1e-3, fused=True))
index = torch.arange(32).expand(E, 32)
for _ in range(10): step(index)
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(30): step(index)
print(json.dumps({"applied": applied, "recorded": runtime.freed_memory_reused(),
                  "faults": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 30}))
"""


def test_freed_memory_is_reused_without_page_faults_and_off_when_asked():
    """With the allocator set as every compute step sets it, an engine step at E3's paper shape (10 members) takes its
    tensors from memory the previous step freed: a few page faults per step, even where glibc has been told to serve
    every block above 128 KiB with fresh pages (GLIBC_TUNABLES; the step's own setting overrides it). With the step's
    setting off (ALGO_EMU_REUSE_FREED_MEMORY=0, the negative control) under that same glibc setting, every step faults
    its pages in again; records say which it was. (glibc's own default adapts its threshold to the blocks it has seen,
    so how many pages a step faults without either setting depends on the machine and the run: from 64 to over
    2,000 per step measured; the negative control pins it.)"""
    import json
    import os
    import subprocess
    import sys

    def probe(value):
        env = {k: v for k, v in os.environ.items() if k not in (runtime.MALLOC_ENV, "GLIBC_TUNABLES")}
        env |= {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072"} | ({runtime.MALLOC_ENV: value} if value else {})
        out = subprocess.run([sys.executable, "-c", _FAULT_PROBE], env=env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout)

    on, off = probe(None), probe("0")
    assert on["applied"] is True and on["recorded"] is True and on["faults"] < 200
    assert off["applied"] is False and off["recorded"] is False and off["faults"] > 1000
