"""Prompts for in-context linear regression (Garg et al. 2022) and the task priors of E6.

A prompt is k labelled examples (x_i, y_i) and a query x_q, with x ~ N(0, I_d), y = w.x + sigma * noise,
and w drawn per prompt from a prior:

* ``gaussian``: w ~ N(0, tau^2 I_d) (the main set-up; ridge with lam = sigma^2 / tau^2 is the posterior mean);
* ``discrete``: w uniform on M tasks w_1..w_M drawn once from N(0, tau^2 I_d) (Raventos et al. 2024);
  the M tasks are fixed by the seed (stream ``essay/tasks/M<M>``), so train and test share them;
* ``sparse``: one coordinate (uniform) is N(0, d tau^2), the rest 0 (same E|w|^2: a narrow family).

Every draw comes from a named stream (algo_emu.rng); nothing random happens at import time.
A prior is a dict ``{"family": ..., "tau": ..., "M": ...}``; :func:`prior_key` is its canonical name,
used to check that a model is evaluated only on the prior it was trained on (else it is reported OOD).
"""

from __future__ import annotations

import math

import torch

from algo_emu.rng import torch_stream

FAMILIES = ("gaussian", "discrete", "sparse")


def make_prior(family: str, tau: float, M: int | None = None) -> dict:
    if family not in FAMILIES:
        raise ValueError(f"prior family must be one of {FAMILIES}, got {family!r}")
    if not (tau > 0):
        raise ValueError(f"prior tau must be > 0, got {tau!r}")
    if family == "discrete":
        if M is None or int(M) < 1:
            raise ValueError(f"discrete prior needs M >= 1 tasks, got M = {M!r}")
        return {"family": family, "tau": float(tau), "M": int(M)}
    return {"family": family, "tau": float(tau)}


def prior_key(prior: dict) -> str:
    key = f"{prior['family']}(tau={float(prior['tau']):g}"
    if prior["family"] == "discrete":
        key += f",M={int(prior['M'])}"
    return key + ")"


def discrete_tasks(seed: int, d: int, M: int, tau: float) -> torch.Tensor:
    """The M fixed tasks of the discrete prior (float64, (M, d)); same for train and test of one seed."""
    gen = torch_stream(seed, "essay", "tasks", f"M{M}", f"d{d}")
    return tau * torch.randn(M, d, generator=gen, dtype=torch.float64)


def sample_w(prior: dict, n: int, d: int, gen: torch.Generator, seed: int) -> torch.Tensor:
    fam, tau = prior["family"], float(prior["tau"])
    if fam == "gaussian":
        return tau * torch.randn(n, d, generator=gen, dtype=torch.float64)
    if fam == "discrete":
        tasks = discrete_tasks(seed, d, int(prior["M"]), tau)
        idx = torch.randint(0, tasks.shape[0], (n,), generator=gen)
        return tasks[idx]
    if fam == "sparse":
        w = torch.zeros(n, d, dtype=torch.float64)
        idx = torch.randint(0, d, (n,), generator=gen)
        w[torch.arange(n), idx] = tau * math.sqrt(d) * torch.randn(n, generator=gen, dtype=torch.float64)
        return w
    raise ValueError(f"unknown prior family {fam!r}")


def sample_prompts(prior: dict, n: int, n_points: int, d: int, sigma: float, gen: torch.Generator,
                   seed: int) -> dict[str, torch.Tensor]:
    """n prompts of ``n_points`` examples each (float64): X (n, n_points, d), y (n, n_points), w (n, d).

    Any prefix of k examples plus example k+1 as the query is a prompt with k examples.
    """
    w = sample_w(prior, n, d, gen, seed)
    X = torch.randn(n, n_points, d, generator=gen, dtype=torch.float64)
    y = torch.einsum("bkd,bd->bk", X, w) + sigma * torch.randn(n, n_points, generator=gen, dtype=torch.float64)
    return {"X": X, "y": y, "w": w}


def kl_gaussian_priors(tau_test: float, tau_train: float, d: int) -> float:
    """KL( N(0, tau_test^2 I_d) || N(0, tau_train^2 I_d) ): the prior shift of an OOD evaluation."""
    r = (tau_test / tau_train) ** 2
    return 0.5 * d * (r - 1.0 - math.log(r))
