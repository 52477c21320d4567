"""Ensembles whose members read inputs of different widths (for example one member per seed of a tabular data
set whose preprocessing keeps a different number of features in each seed's split).

Members are grouped by hidden width (one :class:`~algo_emu.models.emulator.EnsembleEmulator` per group); a
group's input width is its widest member's, and a narrower member's inputs are padded with zero columns. A
member is built as the stand-alone model of its own width and embedded with zero input rows beyond it: a
zero input column adds nothing to the forward pass and gets an exactly-zero gradient, so Adam never moves
those rows and every member trains exactly as it would alone (tests/test_ames.py checks this bit for bit).

Groups are plain data (``{"hidden", "d_in", "members": [[key, d_in], ...]}``), so they go into a frozen
file's meta and rebuild the module when it is loaded.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np
import torch


def width_groups(d_ins: Mapping[int, int], hidden_of: Callable[[int], int]) -> list[dict]:
    """Members (keys of ``d_ins``, sorted) grouped by ``hidden_of(d_in)``, groups in increasing hidden width."""
    groups: dict[int, list] = {}
    for key in sorted(d_ins):
        groups.setdefault(hidden_of(d_ins[key]), []).append([int(key), int(d_ins[key])])
    return [{"hidden": h, "d_in": max(d for _, d in m), "members": m} for h, m in sorted(groups.items())]


@torch.no_grad()
def embed(model: torch.nn.Module, e: int, alone: torch.nn.Module, d_in: int) -> None:
    """Member ``e`` of ``model`` := the one-member ensemble ``alone`` of input width ``d_in`` (zero input rows beyond)."""
    for name, param in model.named_parameters():
        src = getattr(alone, name)[0]
        if name == "w_in":
            param[e].zero_()
            param[e, :d_in] = src
        else:
            param[e] = src


def pad_columns(arrays: Sequence[np.ndarray], width: int) -> np.ndarray:
    """Equal-length member arrays (N, d_e) stacked to (E, N, width), zero beyond each member's own columns."""
    out = np.zeros((len(arrays), len(arrays[0]), width))
    for e, a in enumerate(arrays):
        out[e, :, : a.shape[1]] = a
    return out


def forward_groups(models: Sequence[torch.nn.Module], groups: Sequence[Mapping], inputs: Mapping[int, np.ndarray],
                   call: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor], device: torch.device,
                   chunk: int = 4096) -> dict[int, np.ndarray]:
    """Outputs of every member in ``inputs`` (``{key: (N_key, d_key)}``, any lengths) on its own inputs.

    Each group runs on chunks of ``chunk`` rows: ``call(module, x)`` with ``x`` (E, rows, group d_in) float32,
    zero-padded (columns beyond a member's width, rows beyond its length, members absent from ``inputs``),
    returns (E, rows); a member's rows are cut back to its own length (float64 numpy)."""
    out: dict[int, np.ndarray] = {}
    for module, g in zip(models, groups):
        present = [(k, d) for k, d in g["members"] if k in inputs]
        if not present:
            continue
        for k, d in present:
            if inputs[k].shape[1] != d:
                raise ValueError(f"member {k}: inputs of width {inputs[k].shape[1]}, its model takes {d}")
        N = max(len(inputs[k]) for k, _ in present)
        res = {k: np.empty(len(inputs[k])) for k, _ in present}
        index = {k: e for e, (k, _) in enumerate(g["members"])}
        for start in range(0, N, chunk):
            stop = min(N, start + chunk)
            batch = np.zeros((len(g["members"]), stop - start, g["d_in"]))
            for k, d in present:
                t = inputs[k][start:stop]
                batch[index[k], :len(t), :d] = t
            y = call(module, torch.as_tensor(batch, dtype=torch.float32, device=device)).to("cpu", torch.float64).numpy()
            for k, _ in present:
                n = max(0, min(stop, len(inputs[k])) - start)
                res[k][start:start + n] = y[index[k], :n]
        out.update(res)
    return out
