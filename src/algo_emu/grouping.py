"""Which jobs the workflow schedules: one per setting, or one per shape group (torch-free: the workflow parses it).

A shape group is a set of trained settings whose models have the same shapes (tokens, hidden width, heads, p)
and whose training has the same batch, learning rate, epochs and training-set size, so they train as one
ensemble in one process (:meth:`algo_emu.train.Runner.train_group`): E1's protocols at each (H, p), E3's model
and weight-blind baseline per (mode, H). On a GPU this is where the speed is (one step drives every member of
the group); on the CPU a step is bound by BLAS, so the per-setting jobs stay.
"""

from __future__ import annotations

from typing import Mapping

from algo_emu.config import visible_gpus


def grouping_on(config: Mapping) -> bool:
    """Whether the workflow schedules grouped jobs: ``grouping: true``; ``auto`` when the device resolves to CUDA
    (``device: cuda[:N]``, or ``auto`` with a GPU visible: :func:`algo_emu.config.visible_gpus`, without
    importing torch); ``false`` never."""
    mode = config.get("grouping", "auto")
    if isinstance(mode, bool):
        return mode
    device = str(config.get("device", "auto"))
    return device.startswith("cuda") or (device == "auto" and visible_gpus() != 0)


def heads_groups(settings: list[tuple[str, int, int]]) -> dict[tuple[int, int], list[str]]:
    """E1's shape groups: (H, p) -> the protocols with a setting there, in ``settings``' order (every protocol's
    block at one (H, p) has the same shapes and budget; a setting alone is a group of one)."""
    out: dict[tuple[int, int], list[str]] = {}
    for protocol, H, p in settings:
        out.setdefault((H, p), []).append(protocol)
    return out
