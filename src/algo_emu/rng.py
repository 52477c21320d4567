"""Named random sub-streams derived from a seed.

Every random quantity of a run (data, target weights, split, init, shuffle,
evaluation) comes from ``stream(seed, "name", ...)``. The generator's state is
a hash of the seed and the names, so

* rerunning one seed alone gives the same numbers as running it inside an
  ensemble of seeds, and
* adding a new stream never shifts the numbers of an existing one.

Nothing random happens at import or parse time.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch


def derive(seed: int, *names: object) -> int:
    """A 63-bit integer derived from ``seed`` and ``names`` (stable across runs and platforms)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an integer, got {seed!r}")
    key = "/".join([str(int(seed)), *map(str, names)]).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "little") & ((1 << 63) - 1)


def torch_stream(seed: int, *names: object) -> torch.Generator:
    """A CPU ``torch.Generator`` for the named sub-stream."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(derive(seed, *names))
    return gen


def numpy_stream(seed: int, *names: object) -> np.random.Generator:
    """A numpy ``Generator`` (PCG64) for the named sub-stream."""
    return np.random.default_rng(derive(seed, *names))


def split_indices(seed: int, experiment: str, n_prompts: int, test_fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(train indices, test indices), each sorted, of one seed's ``n_prompts`` prompts: a permutation from
    the stream ``(seed, experiment, "split")``, its first ``round(n_prompts * test_fraction)`` held out.
    Shared by every member of the seed (K/Q/V, every f)."""
    perm = torch.randperm(n_prompts, generator=torch_stream(seed, experiment, "split"))
    n_test = round(n_prompts * test_fraction)
    return perm[n_test:].sort().values, perm[:n_test].sort().values
