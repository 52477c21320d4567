"""E1 data: prompts X and a target attention head, per seed.

Per seed (streams ``(seed, "heads", ...)``):

* X: N prompts of n tokens in R^d, entries 2 z - 1 with z standard normal
  (mean -1, variance 4; the published code draws this, its comment says uniform);
* the target head: W_K, W_Q in R^{h_t x d}, W_V in R^{d x d}, standard normal;
* the train/test split (a permutation of the N prompts).

Two protocols (``heads.protocols``):

* ``independent`` (ours): each seed draws its own data set and head, so seeds
  are fully independent runs;
* ``published`` (the published code's protocol, made reproducible): ONE data
  set and target head for every seed, drawn from the fixed streams
  ``(PUBLISHED_SEED, "heads", "published", ...)``; the seeds vary only the
  initialisation, the split and the data order. The published code draws its
  one data set unseeded, before any seed is set; we fix its stream instead.

In token-major layout (a prompt is an n x d matrix with tokens as rows),
K = X W_K^T, Q = X W_Q^T, V = X W_V^T and the score matrix S = K Q^T has
S[j, i] = k_j . q_i (key j, query i). Target definitions:

* ``paper``: A = softmax over keys j (each column of A sums to 1), the
  paper's W_V X Softmax((W_K X)^T W_Q X);
* ``reference_code``: A = softmax over queries i (the published code's axis).

Output token i is sum_j A[j, i] v_j, i.e. Y = A^T V (n x d).
"""

from __future__ import annotations

from pathlib import Path

import torch

from algo_emu.io import load_tensors, write_tensors
from algo_emu.io import sidecar  # noqa: F401  (one definition, in io; re-exported)
from algo_emu.rng import split_indices, torch_stream

TARGETS = ("paper", "reference_code")
from algo_emu.experiments.heads_settings import PROTOCOLS  # noqa: E402  (one definition)
PUBLISHED_SEED = 0  # the fixed stream of the published protocol's one shared data set
FORMAT_VERSION = 1
#: The config keys a data set is generated from (its sidecar's ``params``).
DATA_KEYS = ("n_prompts", "n_tokens", "d", "target_hidden")


def streams(protocol: str) -> tuple[str, ...]:
    """Name prefix of the data streams of a protocol (independent: per seed; published: one fixed stream)."""
    if protocol == "independent":
        return ("heads",)
    if protocol == "published":
        return ("heads", "published")
    raise ValueError(f"heads.protocols: unknown protocol {protocol!r} (expected one of {PROTOCOLS})")


def generate(seed: int, n_prompts: int, n_tokens: int, d: int, target_hidden: int,
             protocol: str = "independent") -> dict[str, torch.Tensor]:
    """The data set of one seed (or the published protocol's shared one): X (float32) and the target head (float64)."""
    prefix = streams(protocol)
    X = 2 * torch.randn(n_prompts, n_tokens, d, generator=torch_stream(seed, *prefix, "X"), dtype=torch.float32) - 1
    g = torch_stream(seed, *prefix, "target_head")
    W_K = torch.randn(target_hidden, d, generator=g, dtype=torch.float64)
    W_Q = torch.randn(target_hidden, d, generator=g, dtype=torch.float64)
    W_V = torch.randn(d, d, generator=g, dtype=torch.float64)
    return {"X": X, "W_K": W_K, "W_Q": W_Q, "W_V": W_V}


def split(seed: int, n_prompts: int, test_fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(train indices, test indices) of one seed; shared by its K, Q and V emulators (:func:`algo_emu.rng.split_indices`)."""
    return split_indices(seed, "heads", n_prompts, test_fraction)


def attention_weights(scores: torch.Tensor, target: str) -> torch.Tensor:
    """A from S (..., n_keys, n_queries) with S[j, i] = k_j . q_i, per target definition."""
    if target == "paper":
        return torch.softmax(scores, dim=-2)  # over keys j: columns sum to 1
    if target == "reference_code":
        return torch.softmax(scores, dim=-1)  # over queries i: the published code's axis
    raise ValueError(f"target: unknown target definition {target!r} (expected one of {TARGETS})")


def head_output(K: torch.Tensor, Q: torch.Tensor, V: torch.Tensor, target: str) -> torch.Tensor:
    """Y = A^T V with A = softmax(K Q^T) along the target's axis. Shapes (..., n, .) -> (..., n, d)."""
    A = attention_weights(K @ Q.transpose(-1, -2), target)
    return A.transpose(-1, -2) @ V


def projections(X: torch.Tensor, W_K: torch.Tensor, W_Q: torch.Tensor, W_V: torch.Tensor):
    """Exact K, Q, V of prompts X (float64)."""
    X = X.to(torch.float64)
    return X @ W_K.T, X @ W_Q.T, X @ W_V.T


def write_dataset(path: str | Path, seed: int, params: dict, protocol: str = "independent") -> dict:
    """Generate one seed's data set (or, ``protocol="published"``, the one shared data set) with a JSON sidecar."""
    path = Path(path)
    if protocol == "published" and seed != PUBLISHED_SEED:
        raise ValueError(f"the published protocol's data set uses the fixed seed {PUBLISHED_SEED}, got {seed}")
    data = generate(seed, params["n_prompts"], params["n_tokens"], params["d"], params["target_hidden"], protocol)
    prefix = "/".join(streams(protocol))
    meta = {
        "experiment": "heads",
        "format_version": FORMAT_VERSION,
        "seed": seed,
        "protocol": protocol,
        "params": {k: params[k] for k in DATA_KEYS},
        "streams": [f"{prefix}/X", f"{prefix}/target_head"],
        "distribution": "X = 2 z - 1, z ~ N(0, 1); W_K, W_Q, W_V ~ N(0, 1)",
    }
    return write_tensors(path, data, meta)


def load_dataset(path: str | Path, params: dict | None = None) -> dict[str, torch.Tensor]:
    """Load a data set, verifying its checksum, format and (optionally) its generation parameters
    (:func:`algo_emu.io.load_tensors`)."""
    expect = None if params is None else {"params": {k: params.get(k) for k in DATA_KEYS}}
    return load_tensors(path, expect, format_version=FORMAT_VERSION)[0]
