"""Every environment record names the hardware: CPU model, cores, memory; GPU name and memory on CUDA."""

import types

import torch

from algo_emu import runtime
from algo_emu.runner import Runner


def test_cpu_record_names_the_machine():
    env = Runner("cpu").environment()  # what every metrics.json / frozen sidecar carries
    hw = env["hardware"]
    assert isinstance(hw["cpu_model"], str) and hw["cpu_model"]
    assert isinstance(hw["cpu_count"], int) and hw["cpu_count"] >= 1
    assert 1 <= hw["cpu_count_usable"] <= hw["cpu_count"]
    assert hw["memory_gib"] > 0
    assert hw["gpu_name"] is None and hw["gpu_memory_gib"] is None  # no GPU used


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
