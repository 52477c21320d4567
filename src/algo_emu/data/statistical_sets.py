"""E3's data sets, read from its config section: each (mode, seed)'s training data set (the mode's mixture of
algorithms, written once by the ``data`` step and read by every H's model and weight-blind baseline) and
the fresh evaluation prompts of each algorithm (a stream of the seed's own, never the training data's).
The generators themselves are :mod:`algo_emu.data.statistical`.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch

from algo_emu.data import statistical as st
from algo_emu.rng import derive

log = logging.getLogger("algo_emu.statistical")

EXPERIMENT = "statistical"


def algorithms(params: dict, mode: str) -> tuple[str, ...]:
    """The mode's training mixture (canonical names); every one is also evaluated."""
    return st.canonical_algorithms(mode, params["algorithms"][mode])


def data_params(params: dict, mode: str) -> dict:
    return st.resolve_params(mode, params["data_params"].get(mode, {}))


def eval_seed(seed: int) -> int:
    """Seed of a run's evaluation data: a stream of its own, never the training data's."""
    return derive(seed, EXPERIMENT, "eval")


def data_spec(params: dict, mode: str) -> dict:
    """What one (mode, seed)'s training data set is generated from (its file's sidecar ``params``); it does
    not depend on H, the model or the training budget."""
    return {"n_prompts": params["n_prompts"], "n_context": params["n_context"],
            "n_query": params["n_query"] if mode == "fitted" else None, "d": params["d"],
            "algorithms": list(algorithms(params, mode)), "data_params": data_params(params, mode)}


def generate_data(params: dict, mode: str, seed: int, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Seed ``seed``'s training data set: the mode's mixture of algorithms (:func:`algo_emu.data.statistical.generate`)."""
    spec = data_spec(params, mode)
    return st.generate(mode, spec["algorithms"], seed=seed, n_prompts=spec["n_prompts"], n_context=spec["n_context"],
                       n_query=spec["n_query"], d=spec["d"], params=spec["data_params"], dtype=dtype)


def _data_expect(params: dict, mode: str, seed: int) -> dict:
    return {"experiment": EXPERIMENT, "mode": mode, "seed": seed, "params": data_spec(params, mode)}


def write_data(params: dict, mode: str, seed: int, path: str | Path) -> dict:
    """Generate one (mode, seed)'s training data set and write it to ``path`` with a JSON sidecar
    (:func:`algo_emu.data.statistical.write_dataset`; generation parameters, sha256, seconds)."""
    t0 = time.perf_counter()
    data = generate_data(params, mode, seed)
    meta = _data_expect(params, mode, seed) | {"streams": f"(seed, {EXPERIMENT}, {mode}, <quantity>)",
                                               "generate_seconds": time.perf_counter() - t0}
    out = st.write_dataset(path, data, meta)
    log.info("statistical %s seed %d: %d prompts in %.1f s -> %s", mode, seed, params["n_prompts"],
             meta["generate_seconds"], path)
    return out


def load_data(params: dict, mode: str, seeds: list[int], paths: list[str | Path]) -> dict[int, dict[str, torch.Tensor]]:
    """``{seed: data set}`` from the files of :func:`write_data`, one per seed in ``seeds``' order; each must
    have been generated for this mode, seed and these data parameters (ValueError naming the difference)."""
    if len(paths) != len(seeds):
        raise ValueError(f"{len(seeds)} seeds but {len(paths)} data files")
    return {s: st.load_dataset(path, _data_expect(params, mode, s))[0] for s, path in zip(seeds, paths)}


def eval_data(params: dict, mode: str, algorithm: str, seed: int) -> dict[str, torch.Tensor]:
    """Fresh prompts that all use ``algorithm`` (the evaluation stream of ``seed``)."""
    return st.generate_for(algorithm, mode, seed=eval_seed(seed), n_prompts=params["eval_prompts"],
                           n_context=params["n_context"], n_query=params["n_query"] if mode == "fitted" else None,
                           d=params["d"], params=data_params(params, mode))


def eval_batches(params: dict, mode: str, seeds: list[int]) -> dict[str, list[dict]]:
    """``{algorithm: [fresh prompts of each seed]}``; prompt i shares X, w*, noise and queries across algorithms."""
    return {alg: [eval_data(params, mode, alg, s) for s in seeds] for alg in algorithms(params, mode)}
