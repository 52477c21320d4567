"""E4 Ames Housing: emulate LinearRegression, Ridge and Lasso from weights in the prompt.

Steps (the Snakemake rules in workflow/rules/ames.smk call these):

  download   raw CSV + provenance (algo_emu.data.ames)
  prepare    one seed's train/test arrays, preprocessing fitted on its training rows
  fit        one seed's three algorithm fits in one mode (algo_emu.data.ames_fits)
  train      one mode: every seed's emulator, then (--out-blind) its weight-blind
             baseline with the same budget (algo_emu.ablation), both frozen (weights
             saved with a checksum and a parameter digest). corrected trains on the
             fit step's weight pool (many vectors per seed), reference_code as the
             published code (one algorithm's weights per training row)
  evaluate   one mode: the frozen models, loaded read-only, on each seed's held-out
             rows: each algorithm's weights and (corrected) held-out pool vectors in
             the prompt, prompt ablations, the baseline (parameters checked
             bit-identical before and after)
  aggregate  results/tables/ames.{csv,md,tex}, ames_ablation.{csv,md,tex}, ames_runs.csv
  figure     results/figures/ames.{pdf,png} and ames_ablation.{pdf,png}

Examples:

  python -m algo_emu ames download --params JSON --out-csv data/raw/ames.csv \
      --out-provenance data/raw/ames.provenance.json
  python -m algo_emu ames prepare --params JSON --csv data/raw/ames.csv \
      --provenance data/raw/ames.provenance.json --seed 0 \
      --out data/ames/seed0/prepared.npz --out-meta data/ames/seed0/prepared.json
  python -m algo_emu ames fit --params JSON --mode corrected --seed 0 \
      --prepared data/ames/seed0/prepared.npz --out results/ames/corrected/seed0/fits.npz

``--params`` is the resolved ``ames`` config section as JSON (keys a step does not
use are ignored there; the schema checks them).

The emulator (the published code at commit 6d39297; Appendix C.2): one token per prompt (n = 1),
``[x; w]`` in ``reference_code`` mode and ``[x; 1; w; b]`` in ``corrected`` mode,
the project's block (emulator.py) with p = ``total_tokens``, H = ``heads``,
h = the token width rounded up to a multiple of H (``hidden: auto``; the paper's
h = 2F) and ``d_out = 1``. The paper puts a Linear(h -> 1) read-out after a block
whose output projection is Linear(h -> h); two affine maps compose to one affine
map h -> 1, so the block's own output projection with d_out = 1 spans exactly the
same functions (the parameterisation, hence the optimisation path, differs).

Seeds with different feature counts train in one ensemble per hidden width: each
member is initialised exactly as a stand-alone emulator of its own token width
(same init stream, same bounds), then embedded in the group's input width with
zero rows for the extra input columns, which its tokens fill with zeros. A zero
input column contributes nothing to the forward pass and gets an exactly-zero
gradient, so Adam never moves those zero rows: every member is the stand-alone
run of its own seed (a test checks this).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from algo_emu import ablation as abl
from algo_emu import records
from algo_emu.records import KEY, Get, RunSpec
from algo_emu import cli
from algo_emu.experiments.step_keys import reads as _reads
from algo_emu.cli import Step, arg
from algo_emu.config import schema_defaults
from algo_emu.data import ames as data
from algo_emu.data import ames_fits as fits
from algo_emu.data.ames_fits import ALGORITHMS, MODES, POOL_FAMILIES
from algo_emu.io import read_json, sha256_file, write_csv
from algo_emu.models.emulator import EnsembleEmulator
from algo_emu.rng import numpy_stream, torch_stream
from algo_emu.tables import summarise_by, write_table
from algo_emu.runner import Runner, train_config
from algo_emu.train import Member

log = logging.getLogger("algo_emu.ames")

#: The keys the train step reads, declared once in algo_emu.experiments.step_keys (the rule passes exactly these).
TRAIN_KEYS: tuple[str, ...] = _reads("ames", "train").keys
#: Keys that change the trained numbers (the checkpoint fingerprint and the run hash).
RESULT_KEYS: tuple[str, ...] = ("heads", "total_tokens", "hidden", "epochs", "batch_size", "lr", "attention")
#: Defaults of the whole ``ames`` section and of its training keys, read from workflow/schemas/ames.schema.yaml
#: (the only place they are written).
DEFAULTS: dict[str, Any] = schema_defaults("ames")
TRAIN_DEFAULTS: dict[str, Any] = {k: v for k, v in DEFAULTS.items() if k in ("modes",) + TRAIN_KEYS}

#: Prompt sets of the evaluation: the three algorithms' own fits (both modes) and, in corrected
#: mode, weight vectors held out from training (one set per pool family).
HELDOUT_SETS: tuple[str, ...] = tuple(f"heldout_{f}" for f in POOL_FAMILIES)


def prompt_sets(mode: str) -> tuple[str, ...]:
    return ALGORITHMS + (HELDOUT_SETS if mode == "corrected" else ())


AMES_COLUMNS = [
    "mode", "algorithm", "emulation_mse_mean", "emulation_mse_std", "emulation_mse_ci_low", "emulation_mse_ci_high",
    "prediction_mse_mean", "prediction_mse_std", "algorithm_mse_mean", "algorithm_mse_std", "n_seeds",
    "spread_mse_mean", "target_var_mean", "blind_mse_mean", "mse_over_blind",
    "alpha_mean", "n_nonzero_coef_mean", "n_features_mean", "all_coef_zero", "intercept_in_prompt", "target",
]
#: Built-in ablations per prompt set: every prompt of an algorithm set carries the same weights,
#: so ``other_prompt`` is the identity there; they get ``other_algorithm`` (donor) instead.
ALGORITHM_ABLATIONS: tuple[str, ...] = ("permuted", "random", "zeros")
HELDOUT_ABLATIONS: tuple[str, ...] = abl.ABLATIONS


class AmesConfigError(ValueError):
    """A bad ``ames`` training key; the message names it."""


def resolve_train_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    section = dict(TRAIN_DEFAULTS)
    section.update(dict(params or {}))
    check_params(section)
    return section


def check_params(section: Mapping[str, Any]) -> None:
    """Cross-field checks of the training keys (the schema checks types and ranges)."""
    H, hidden = section.get("heads", DEFAULTS["heads"]), section.get("hidden", DEFAULTS["hidden"])
    if hidden != "auto" and (isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1):
        raise AmesConfigError(f"ames.hidden must be 'auto' or a positive integer, got {hidden!r}")
    if hidden != "auto" and hidden % H:
        raise AmesConfigError(f"ames.heads: {H} heads do not divide ames.hidden = {hidden}")
    if section.get("total_tokens", DEFAULTS["total_tokens"]) < 1:
        raise AmesConfigError(f"ames.total_tokens (p) must be >= 1 (n = 1 data token), got {section['total_tokens']}")
    for m in section.get("modes", []):
        if m not in MODES:
            raise AmesConfigError(f"ames.modes: unknown mode {m!r} (allowed: {list(MODES)})")


# --------------------------------------------------------------------------- prompts


def token_width(n_features: int, mode: str) -> int:
    """``reference_code``: [x; w] = 2F; ``corrected``: [x; 1; w; b] = 2F + 2."""
    return 2 * n_features + (2 if mode == "corrected" else 0)


def hidden_width(d_in: int, heads: int, hidden: int | str) -> int:
    """``auto``: the token width rounded up to a multiple of H (the paper: h = 2F); else as given."""
    return heads * math.ceil(d_in / heads) if hidden == "auto" else int(hidden)


def prompt_tokens(X: np.ndarray, coef: np.ndarray, intercept: float, mode: str) -> np.ndarray:
    """One token per row: ``[x; w]`` (reference_code) or ``[x; 1; w; b]`` (corrected)."""
    rows = X.shape[0]
    W = np.broadcast_to(coef, (rows, coef.size))
    if mode == "corrected":
        one, b = np.ones((rows, 1)), np.full((rows, 1), float(intercept))
        return np.concatenate([X, one, W, b], axis=1)
    return np.concatenate([X, W], axis=1)


def prompt_layout(n_features: int, mode: str, name: str = "ames") -> abl.PromptLayout:
    """Where the weights sit in a token (for the shared ablation mechanism): ``w`` (and ``b`` in corrected)."""
    F = n_features
    if mode == "corrected":
        return abl.PromptLayout(f"{name} corrected [x; 1; w; b]", 2 * F + 2, ((F + 1, 2 * F + 1), (2 * F + 1, 2 * F + 2)))
    return abl.PromptLayout(f"{name} reference_code [x; w]", 2 * F, ((F, 2 * F),))


def pool_prompts(X: np.ndarray, coef: np.ndarray, intercept: np.ndarray, pairs: np.ndarray, mode: str = "corrected"
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows paired with pool vectors: ``pairs`` (rows, k) -> tokens (rows * k, d_in), targets, vector index.

    Prompt ``i * k + j`` is row i with vector ``pairs[i, j]``; its target is ``x_i . w + b``."""
    rows, k = pairs.shape
    r = np.repeat(np.arange(rows), k)
    v = pairs.reshape(-1)
    Xr, W, b = X[r], coef[v], intercept[v]
    tokens = np.concatenate([Xr, np.ones((len(r), 1)), W, b[:, None]], axis=1) if mode == "corrected" \
        else np.concatenate([Xr, W], axis=1)
    return tokens, np.einsum("nf,nf->n", Xr, W) + b, v


def algorithm_draw(seed: int, n_train: int) -> np.ndarray:
    """The algorithm of each training example (index into ALGORITHMS), from ``(seed, "ames", "algorithm")``."""
    return numpy_stream(seed, "ames", "algorithm").integers(0, len(ALGORITHMS), size=n_train)


def training_examples(seed: int, prepared: Mapping[str, np.ndarray], fitted: Mapping[str, np.ndarray], mode: str
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens (n_train, d_in), targets (n_train,), label (n_train,)) of one seed.

    corrected: every training row with ``pool_pairs_per_row`` vectors of the training pool (label =
    the vector's family); reference_code (the published code, unchanged): every training row once,
    with the weights of one algorithm drawn per row (label = algorithm index)."""
    X = np.asarray(prepared["X_train"], np.float64)
    if mode == "corrected":
        if "pool_train_coef" not in fitted:
            raise ValueError("corrected fits without a weight pool (written by an older version): rerun `ames fit`")
        tokens, targets, v = pool_prompts(X, fitted["pool_train_coef"], fitted["pool_train_intercept"],
                                          fitted["pool_train_pairs"], mode)
        return tokens, targets, fitted["pool_train_family"][v]
    draw = algorithm_draw(seed, X.shape[0])
    tokens = np.empty((X.shape[0], token_width(X.shape[1], mode)))
    targets = np.empty(X.shape[0])
    for k, a in enumerate(ALGORITHMS):
        rows = draw == k
        tokens[rows] = prompt_tokens(X[rows], fitted[f"coef_{a}"], float(fitted[f"intercept_{a}"]), mode)
        targets[rows] = fitted[f"target_train_{a}"][rows]
    return tokens, targets, draw


# --------------------------------------------------------------------------- the emulators


def member_groups(d_ins: Mapping[int, int], heads: int, hidden: int | str) -> list[dict]:
    """Seeds grouped by hidden width: ``[{"hidden", "d_in" (the group's widest token), "members": [[seed, d_in]]}]``."""
    groups: dict[int, list] = {}
    for s in sorted(d_ins):
        groups.setdefault(hidden_width(d_ins[s], heads, hidden), []).append([int(s), int(d_ins[s])])
    return [{"hidden": h, "d_in": max(d for _, d in m), "members": m} for h, m in sorted(groups.items())]


def _placeholder(k: int) -> list[torch.Generator]:
    return [torch_stream(0, "ames", "placeholder", i) for i in range(k)]


ROLES: tuple[str, ...] = ("emulator", "blind")


def build_group(group: Mapping, heads: int, total_tokens: int, attention: str = "auto", mode: str | None = None,
                dtype: torch.dtype = torch.float32, role: str = "emulator") -> EnsembleEmulator:
    """One ensemble of a group. With ``mode``, member e is initialised exactly as a stand-alone
    emulator of its own token width from ``torch_stream(seed, "ames", mode, "init")`` (the weight-blind
    baseline: ``(seed, "ames", mode, "blind", "init")``), its extra input rows zero; without, the
    values are placeholders (to be overwritten by a state dict)."""
    members = group["members"]
    model = EnsembleEmulator(_placeholder(len(members)), d_in=group["d_in"], d_out=1, n_tokens=1,
                             hidden=group["hidden"], heads=heads, total_tokens=total_tokens, dtype=dtype,
                             attention=attention)
    if mode is None:
        return model
    with torch.no_grad():
        for e, (seed, d_in) in enumerate(members):
            alone = standalone(seed, d_in, group["hidden"], heads, total_tokens, mode, dtype, role)
            for name, param in model.named_parameters():
                src = getattr(alone, name)[0]
                if name == "w_in":
                    param[e].zero_()
                    param[e, :d_in] = src
                else:
                    param[e] = src
    return model


def standalone(seed: int, d_in: int, hidden: int, heads: int, total_tokens: int, mode: str,
               dtype: torch.dtype = torch.float32, role: str = "emulator") -> EnsembleEmulator:
    """The emulator (or weight-blind baseline) of one seed at its own token width (a one-member ensemble)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {list(ROLES)}, got {role!r}")
    gen = torch_stream(seed, "ames", mode, "init") if role == "emulator" else torch_stream(seed, "ames", mode, "blind",
                                                                                           "init")
    return EnsembleEmulator([gen], d_in=d_in, d_out=1, n_tokens=1,
                            hidden=hidden, heads=heads, total_tokens=total_tokens, dtype=dtype)


def build_frozen(meta: Mapping) -> torch.nn.ModuleList:
    """Rebuild the (untrained) module of a frozen file from its meta (see :func:`train_mode`)."""
    return torch.nn.ModuleList([build_group(g, meta["heads"], meta["total_tokens"], meta.get("attention", "auto"))
                                for g in meta["groups"]])


class AmesTask:
    """Training task of one group: member e = one seed; mixed prompts, one token each."""

    def __init__(self, tokens: Sequence[np.ndarray], targets: Sequence[np.ndarray], seeds: Sequence[int], mode: str,
                 d_in: int, device: torch.device, dtype: torch.dtype = torch.float32) -> None:
        n = {len(t) for t in tokens}
        if len(n) != 1:
            raise ValueError(f"seeds of one ensemble need the same number of training rows, got {sorted(n)}")
        self.members = [Member(int(s), mode) for s in seeds]
        self.n_train = n.pop()
        padded = np.zeros((len(tokens), self.n_train, d_in))
        for e, t in enumerate(tokens):
            padded[e, :, : t.shape[1]] = t  # zero columns beyond the member's own token width
        self.tokens = torch.as_tensor(padded, dtype=dtype, device=device)              # (E, n_train, d_in)
        self.targets = torch.as_tensor(np.stack(targets), dtype=dtype, device=device)  # (E, n_train)
        self._rows = torch.arange(len(tokens), device=device)[:, None]

    def batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.tokens[self._rows, index]                                              # (E, B, d_in)
        return x[:, :, None, :], self.targets[self._rows, index][:, :, None, None]


def _check_lengths(seeds, prepared_paths, fits_paths) -> None:
    if not (len(seeds) == len(prepared_paths) == len(fits_paths)):
        raise ValueError(f"{len(seeds)} seeds, {len(prepared_paths)} prepared files, {len(fits_paths)} fit files")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"duplicate seeds: {list(seeds)}")


def _load_seed(prepared_path: str | Path, fits_path: str | Path) -> tuple[dict, dict]:
    for path, step in ((prepared_path, "prepare"), (fits_path, "fit")):
        if not Path(path).is_file():
            raise FileNotFoundError(f"{path}: no such file (run `ames {step}` first)")
    return data.load_prepared(prepared_path), fits.load_fits(fits_path)


def train_mode(params: Mapping[str, Any] | None, mode: str, seeds: Sequence[int], prepared_paths: Sequence[str],
               fits_paths: Sequence[str], out: str | Path, checkpoint_dir: str | Path | None = None,
               device_spec: str = "auto", threads: int | None = None, out_blind: str | Path | None = None) -> dict:
    """Train every seed's emulator of ``mode``; save them frozen to ``out`` (+ ``out.json`` sidecar).

    With ``out_blind``, then also the weight-blind baseline (:mod:`algo_emu.ablation`): the same block,
    hidden width, heads, p, epochs, batch, lr, training prompts, targets and data order (same member
    names, so the same shuffle stream), on tokens whose weight columns are removed
    (:func:`algo_emu.ablation.strip_weights` with each seed's :func:`prompt_layout`); its own init
    stream. Both sidecars record the training budget, which the evaluation checks is the same.
    Returns the emulator's sidecar."""
    if mode not in MODES:
        raise AmesConfigError(f"ames mode must be one of {list(MODES)}, got {mode!r}")
    _check_lengths(seeds, prepared_paths, fits_paths)
    section = resolve_train_params(params)
    runner = Runner(device_spec, threads)
    per_seed, d_ins, inputs, n_features = {}, {}, {}, {}
    for s, pp, fp in zip(seeds, prepared_paths, fits_paths):
        prepared, fitted = _load_seed(pp, fp)
        tokens, targets, draw = training_examples(s, prepared, fitted, mode)
        per_seed[s] = (tokens, targets)
        d_ins[s] = tokens.shape[1]
        n_features[s] = int(prepared["X_train"].shape[1])
        inputs[s] = {"prepared_sha256": sha256_file(pp), "fits_sha256": sha256_file(fp)}
        if mode == "corrected":
            inputs[s]["family_counts"] = {f: int((draw == k).sum()) for k, f in enumerate(POOL_FAMILIES)}
        else:
            inputs[s]["algorithm_counts"] = {a: int((draw == k).sum()) for k, a in enumerate(ALGORITHMS)}
    groups = member_groups(d_ins, section["heads"], section["hidden"])
    run_params = {k: section[k] for k in RESULT_KEYS} | {"mode": mode}
    info = _train_role("emulator", section, mode, seeds, groups, per_seed, inputs, run_params, out, checkpoint_dir, runner)
    if out_blind is not None:
        runner = runner.restarted()  # the same device; the baseline's own wall clock
        blind_tokens = {}
        for s in seeds:
            lay = prompt_layout(n_features[s], mode, f"ames seed {s}")
            blind_tokens[s] = (abl.strip_weights(torch.as_tensor(per_seed[s][0]), lay).numpy(), per_seed[s][1])
        # same hidden width per group as the emulator (the budget), the group's input = the widest blind token
        bgroups = [{"hidden": g["hidden"], "d_in": max(blind_tokens[s][0].shape[1] for s, _ in g["members"]),
                    "members": [[s, int(blind_tokens[s][0].shape[1])] for s, _ in g["members"]]} for g in groups]
        _train_role("blind", section, mode, seeds, bgroups, blind_tokens, inputs, run_params | {"role": "blind"}, out_blind,
                    checkpoint_dir, runner)
    return info


def _budget(section: Mapping[str, Any], hidden: int, n_train: int) -> dict:
    return abl.budget(section, n_prompts=int(n_train), p=section["total_tokens"], hidden=int(hidden))


def _train_role(role: str, section: Mapping[str, Any], mode: str, seeds: Sequence[int], groups: list[dict],
                per_seed: Mapping[int, tuple], inputs: Mapping[int, dict], run_params: dict, out: str | Path,
                checkpoint_dir: str | Path | None, runner: Runner) -> dict:
    from algo_emu.frozen import save_frozen

    device = runner.device
    cfg = train_config("ames", section)
    models, history, seconds, budgets = [], {}, {}, {}
    prefix = "" if role == "emulator" else "blind_"
    for g in groups:
        gseeds = [s for s, _ in g["members"]]
        task = AmesTask([per_seed[s][0] for s in gseeds], [per_seed[s][1] for s in gseeds], gseeds, mode, g["d_in"],
                        device)
        model = build_group(g, section["heads"], section["total_tokens"], section["attention"], mode=mode, role=role).to(device)
        ckpt = Path(checkpoint_dir) / f"{prefix}h{g['hidden']}.pt" if checkpoint_dir else None
        log.info("%s %s: group h=%d, d_in=%d, seeds %s (%d training prompts each) on %s", mode, role, g["hidden"],
                 g["d_in"], gseeds, task.n_train, device)
        res = runner.train(model, task, cfg, run_params, ckpt, fingerprint_extra={"group": g, "inputs": {s: inputs[s] for s in gseeds}})
        models.append(model.to("cpu"))
        budgets[str(g["hidden"])] = _budget(section, g["hidden"], task.n_train)
        for e, s in enumerate(gseeds):
            history[s] = [{"epoch": h["epoch"], "train_loss": h["train_loss"][e]} for h in res.history]
        seconds[g["hidden"]] = {"train_seconds_this_call": res.seconds, "epochs_run_this_call": res.epochs_run,
                                "resumed_from_epoch": res.resumed_from,
                                "epoch_seconds": [h["seconds"] for h in res.history]}
    meta = {"experiment": "ames", "mode": mode, "role": role, "heads": section["heads"], "total_tokens": section["total_tokens"],
            "attention": models[0].resolved_attention(next(models[0].parameters()).device), "groups": groups,
            "seeds": [int(s) for s in seeds]}
    extra = {**runner.provenance(run_params), "inputs": {str(s): v for s, v in inputs.items()},
             "budget": budgets, "history": {str(s): v for s, v in history.items()},
             "timing": {"wall_seconds_job": runner.seconds(), "groups": seconds},
             "environment": runner.environment()}
    return save_frozen(out, torch.nn.ModuleList(models), meta, extra)


# --------------------------------------------------------------------------- evaluation


def eval_sets(prepared: Mapping[str, np.ndarray], fitted: Mapping[str, np.ndarray], mode: str) -> dict[str, dict]:
    """The evaluation prompts of one seed, on its test rows: ``{set: {"tokens" (N, d_in), "encoded" (N,)
    (the prediction the prompt's weights encode), "target" (N,) (the mode's training target: encoded in
    corrected, the log price in reference_code), "row", "vector", "spread_mse", "donor" (N, n_weights)
    or None}}``.

    Algorithm sets: every test row with that algorithm's weights; ``donor`` = the next algorithm's weights
    (linear -> ridge -> lasso -> linear), for the ``other_algorithm`` ablation; ``spread_mse`` = mean over
    the other two algorithms of the MSE between their test predictions and this one's. Held-out sets
    (corrected): test rows paired with held-out pool vectors of one family (``pool_heldout_pairs``);
    ``spread_mse`` = mean squared deviation of the family's test predictions from their per-row mean
    (what a model that ignores w but knows the family loses at best).
    """
    X, y = np.asarray(prepared["X_test"], np.float64), np.asarray(prepared["y_test"], np.float64)
    rows = np.arange(len(X))
    sets: dict[str, dict] = {}
    for i, algo in enumerate(ALGORITHMS):
        coef, b = fitted[f"coef_{algo}"], float(fitted[f"intercept_{algo}"])
        nxt = ALGORITHMS[(i + 1) % len(ALGORITHMS)]
        donor_w = np.concatenate([fitted[f"coef_{nxt}"], [float(fitted[f"intercept_{nxt}"])]]) if mode == "corrected" \
            else fitted[f"coef_{nxt}"]
        enc = fitted[f"pred_test_{algo}"]
        sets[algo] = {"tokens": prompt_tokens(X, coef, b, mode), "encoded": enc,
                      "target": enc if mode == "corrected" else y, "log_price": y, "row": rows,
                      "vector": np.full(len(X), -1), "donor": np.broadcast_to(donor_w, (len(X), donor_w.size)).copy(),
                      "spread_mse": float(np.mean([np.mean((enc - fitted[f"pred_test_{o}"]) ** 2)
                                                   for o in ALGORITHMS if o != algo]))}
    if mode == "corrected":
        coef, icpt, fam = fitted["pool_heldout_coef"], fitted["pool_heldout_intercept"], fitted["pool_heldout_family"]
        tokens, enc, v = pool_prompts(X, coef, icpt, fitted["pool_heldout_pairs"], mode)
        r = np.repeat(rows, fitted["pool_heldout_pairs"].shape[1])
        for f, name in enumerate(POOL_FAMILIES):
            keep = fam[v] == f
            preds = X @ coef[fam == f].T + icpt[fam == f]
            sets[f"heldout_{name}"] = {
                "tokens": tokens[keep], "encoded": enc[keep], "target": enc[keep], "log_price": y[r[keep]],
                "row": r[keep], "vector": v[keep], "donor": None,
                "spread_mse": float(np.mean((preds - preds.mean(axis=1, keepdims=True)) ** 2))}
    return sets


def _forward(model: torch.nn.ModuleList, meta: Mapping, tokens: Mapping[int, np.ndarray], device: torch.device,
             chunk: int = 4096) -> dict[int, np.ndarray]:
    """Outputs of every seed's member on its own tokens ``{seed: (N_s, d_s)}`` (padded per group)."""
    out: dict[int, np.ndarray] = {}
    for gi, g in enumerate(meta["groups"]):
        members = [(s, d) for s, d in g["members"] if s in tokens]
        if not members:
            continue
        for s, d in members:
            if tokens[s].shape[1] != d:
                raise ValueError(f"seed {s}: tokens of width {tokens[s].shape[1]}, its member takes {d}")
        N = max(len(tokens[s]) for s, _ in members)
        res = {s: np.empty(len(tokens[s])) for s, _ in members}
        index = {s: e for e, (s, _) in enumerate(g["members"])}
        for start in range(0, N, chunk):
            stop = min(N, start + chunk)
            batch = np.zeros((len(g["members"]), stop - start, g["d_in"]))
            for s, d in members:
                t = tokens[s][start:stop]
                batch[index[s], :len(t), :d] = t
            x = torch.as_tensor(batch, dtype=torch.float32, device=device)[:, :, None, :]
            y = model[gi](x)[:, :, 0, 0].to("cpu", torch.float64).numpy()
            for s, _ in members:
                n = max(0, min(stop, len(tokens[s])) - start)
                res[s][start:start + n] = y[index[s], :n]
        out.update(res)
    return out


def _load_checked(path: str | Path, role: str, mode: str, device: torch.device):
    """The frozen file of ``role`` (emulator or blind) and ``mode``, loaded read-only (a :class:`FrozenFile`)."""
    from algo_emu.frozen import FrozenFile

    ff = FrozenFile(path, build_frozen, device)
    meta = ff.info["meta"]
    if meta["mode"] != mode:
        raise ValueError(f"{path} holds {meta['mode']!r} emulators, not {mode!r}")
    if meta.get("role", "emulator") != role:
        raise ValueError(f"{path} holds the {meta.get('role', 'emulator')!r} models, not the {role!r} ones")
    return ff


def evaluate_mode(mode: str, seeds: Sequence[int], prepared_paths: Sequence[str], fits_paths: Sequence[str],
                  emulator: str | Path, out_dir: str | Path, predictions_csv: str | Path,
                  device_spec: str = "auto", threads: int | None = None, blind: str | Path | None = None
                  ) -> dict[int, dict]:
    """Evaluate the frozen emulators of ``mode`` on each seed's test rows, per prompt set, with prompt
    ablations (:mod:`algo_emu.ablation`) and, given ``blind``, beside the weight-blind baseline.

    Prompt sets: :func:`eval_sets`. Ablations (the target unchanged): algorithm sets ``permuted``,
    ``random``, ``zeros`` and ``other_algorithm``; held-out sets ``other_prompt``, ``permuted``, ``random``,
    ``zeros``; streams ``(seed, "ames", mode, set, "ablation", name)``. The baseline must have been trained
    with the same budget (:func:`algo_emu.ablation.check_budget`) on the same files.
    Writes ``out_dir/seed<k>/metrics.json`` and one predictions CSV (every seed, set and prompt).
    """
    _check_lengths(seeds, prepared_paths, fits_paths)
    run = Runner(device_spec, threads)
    device = run.device
    emu_file = _load_checked(emulator, "emulator", mode, device)
    info = emu_file.info
    meta = info["meta"]
    where = {s: (gi, e) for gi, g in enumerate(meta["groups"]) for e, (s, _) in enumerate(g["members"])}
    missing = [s for s in seeds if s not in where]
    if missing:
        raise ValueError(f"{emulator} has no emulator for seed(s) {missing} (it has {sorted(where)})")
    loaded = {s: _load_seed(pp, fp) for s, pp, fp in zip(seeds, prepared_paths, fits_paths)}
    for s, pp, fp in zip(seeds, prepared_paths, fits_paths):
        trained_on = info["inputs"][str(s)]
        for path, key in ((pp, "prepared_sha256"), (fp, "fits_sha256")):
            if trained_on[key] != sha256_file(path):
                raise ValueError(f"seed {s}: {path} is not the file {emulator} was trained on (sha256 differs)")
    blind_file = binfo = None
    if blind is not None:
        blind_file = _load_checked(blind, "blind", mode, device)
        binfo = blind_file.info
        for s in seeds:
            if binfo["inputs"].get(str(s)) != info["inputs"][str(s)]:
                raise ValueError(f"seed {s}: the weight-blind baseline {blind} was not trained on the files of {emulator}")
        for h, b in info.get("budget", {}).items():
            if h not in binfo.get("budget", {}):
                raise ValueError(f"the weight-blind baseline {blind} has no model of hidden width {h}")
            abl.check_budget(b, binfo["budget"][h])

    sets = {s: eval_sets(*loaded[s], mode) for s in seeds}
    layouts = {s: prompt_layout(int(loaded[s][0]["X_test"].shape[1]), mode, f"ames seed {s}") for s in seeds}
    names = prompt_sets(mode)
    variants: dict[str, dict[str, dict[int, np.ndarray]]] = {}   # set -> variant -> seed -> tokens
    for name in names:
        variants[name] = {abl.NONE: {s: sets[s][name]["tokens"] for s in seeds}}
        for s in seeds:
            x = torch.as_tensor(sets[s][name]["tokens"], dtype=torch.float64)[:, None, :]
            donor = sets[s][name]["donor"]
            ab = abl.ablated_inputs(x, layouts[s], s, ("ames", mode, name),
                                    ablations=ALGORITHM_ABLATIONS if donor is not None else HELDOUT_ABLATIONS,
                                    donors={"other_algorithm": torch.as_tensor(donor)} if donor is not None else None)
            for a, t in ab.items():
                variants[name].setdefault(a, {})[s] = t[:, 0, :].numpy()
    outputs: dict[str, dict[str, dict[int, np.ndarray]]] = {}
    train_out: dict[str, dict[int, np.ndarray]] = {}
    with emu_file.evaluating() as model:
        for name in names:
            outputs[name] = {a: _forward(model, meta, toks, device) for a, toks in variants[name].items()}
        for algo in ALGORITHMS:  # the training rows with each algorithm's weights
            train_out[algo] = _forward(model, meta, {s: prompt_tokens(loaded[s][0]["X_train"], loaded[s][1][f"coef_{algo}"],
                                                                       float(loaded[s][1][f"intercept_{algo}"]), mode)
                                                     for s in seeds}, device)
    if blind_file is not None:
        with blind_file.evaluating() as bmodel:
            for name in names:
                stripped = {s: abl.strip_weights(torch.as_tensor(variants[name][abl.NONE][s]), layouts[s]).numpy()
                            for s in seeds}
                outputs[name][abl.BLIND] = _forward(bmodel, binfo["meta"], stripped, device)
    record = emu_file.proof()
    brecord = blind_file.proof() if blind_file is not None else None
    env, wall = run.environment(), run.seconds()
    out, pred_rows = {}, []
    for s, pp, fp in zip(seeds, prepared_paths, fits_paths):
        prepared, fitted = loaded[s]
        summary = read_json(Path(fp).with_suffix(".json")) if Path(fp).with_suffix(".json").is_file() else {}
        ytr = prepared["y_train"]
        per_set = {}
        for name in names:
            st = sets[s][name]
            emu = outputs[name][abl.NONE][s]
            mses = {a: float(np.mean((o[s] - st["target"]) ** 2)) for a, o in outputs[name].items()}
            r = {"n_prompts": int(len(emu)), "target": "encoded prediction" if mode == "corrected" else "log price",
                 "emulation_mse": float(np.mean((emu - st["encoded"]) ** 2)),
                 "prediction_mse": float(np.mean((emu - st["log_price"]) ** 2)),
                 "algorithm_mse": float(np.mean((st["encoded"] - st["log_price"]) ** 2)),
                 "target_mse": mses[abl.NONE], "blind_mse": mses.get(abl.BLIND),
                 "mse_over_blind": (mses[abl.NONE] / mses[abl.BLIND]) if abl.BLIND in mses else None,
                 "spread_mse": st["spread_mse"], "target_var": float(np.var(st["target"])),
                 "ablations": mses}
            if name in ALGORITHMS:
                fs = summary.get("algorithms", {}).get(name, {})
                r.update({"algorithm_sklearn_mse": fs.get("sklearn_mse_test"),
                          "train_emulation_mse": float(np.mean((train_out[name][s] - fitted[f"pred_train_{name}"]) ** 2)),
                          "train_prediction_mse": float(np.mean((train_out[name][s] - ytr) ** 2)),
                          "alpha": fs.get("alpha"), "n_nonzero_coef": int(np.count_nonzero(fitted[f"coef_{name}"])),
                          "all_coef_zero": bool(not np.any(fitted[f"coef_{name}"]))})
            else:
                r.update({"algorithm_mse": None, "n_vectors": int(len(np.unique(st["vector"]))),
                          "vector_mse_median": float(pd.Series((emu - st["target"]) ** 2).groupby(st["vector"]).mean()
                                                     .median())})
            per_set[name] = r
            pred_rows.append(pd.DataFrame({
                "mode": mode, "seed": s, "algorithm": name, "row": prepared["test_index"][st["row"]],
                "vector": st["vector"], "log_price": st["log_price"], "algorithm_prediction": st["encoded"],
                "emulated": emu, "blind": outputs[name][abl.BLIND][s] if abl.BLIND in outputs[name] else np.nan}))
        gi, e = where[s]
        metrics = {
            "experiment": "ames", "mode": mode, "seed": int(s), "prompt_sets": per_set,
            "target": "encoded prediction (x.w + b)" if mode == "corrected" else "log1p(SalePrice)",
            "intercept_in_prompt": mode == "corrected",
            "n_features": int(prepared["X_train"].shape[1]), "n_train": int(len(ytr)),
            "n_test": int(len(prepared["y_test"])),
            "token_width": meta["groups"][gi]["members"][e][1], "hidden": meta["groups"][gi]["hidden"],
            "group_input_width": meta["groups"][gi]["d_in"],
            "params": info["params"], "config_hash": info["config_hash"],
            "budget": info.get("budget", {}).get(str(meta["groups"][gi]["hidden"])),
            "fit": {k: v for k, v in summary.items() if k not in ("data",)},
            "data": summary.get("data", {}),
            "history": info["history"][str(s)],
            "blind_history": binfo["history"][str(s)] if binfo else None,
            "frozen": record,
            "blind_frozen": brecord,
            "timing": {"train": info["timing"], "wall_seconds_evaluate": wall},
            "environment": env,
        }
        out[s] = metrics
    run.write_records(out_dir, out)
    write_csv(predictions_csv, pd.concat(pred_rows, ignore_index=True))
    return out


# --------------------------------------------------------------------------- tables


def _has_prompt_sets(record: Mapping, source: str) -> None:
    if "prompt_sets" not in record:
        raise ValueError(f"{source}: metrics without prompt_sets (written by an older version): rerun `ames evaluate`")


#: What an ames record holds, as rows: one per (mode, prompt set, seed).
RUNS = RunSpec(
    experiment="ames", rows="prompt_sets", check=_has_prompt_sets,
    columns={
        "mode": "mode", "algorithm": KEY, "seed": "seed", "emulation_mse": "@.emulation_mse",
        "prediction_mse": "@.prediction_mse", "algorithm_mse": Get("@.algorithm_mse", None),
        "algorithm_sklearn_mse": Get("@.algorithm_sklearn_mse", None),
        "train_emulation_mse": Get("@.train_emulation_mse", None), "target_mse": "@.target_mse",
        "blind_mse": Get("@.blind_mse", None), "mse_over_blind": Get("@.mse_over_blind", None),
        "spread_mse": "@.spread_mse", "target_var": "@.target_var", "n_prompts": "@.n_prompts",
        "alpha": Get("@.alpha", None), "n_nonzero_coef": Get("@.n_nonzero_coef", None), "n_features": "n_features",
        "all_coef_zero": Get("@.all_coef_zero", None), "hidden": "hidden", "epochs": "params.epochs",
        "bit_identical": lambda m, key, r: m["frozen"]["bit_identical"] and (m.get("blind_frozen") or {}).get(
            "bit_identical", True),
        "device": "environment.device", "config_hash": "config_hash",
        "data_provenance": lambda m, key, r: data_provenance([m]),
    },
    setting=("mode", "algorithm"),
    metrics=("emulation_mse", "prediction_mse", "algorithm_mse", "algorithm_sklearn_mse", "train_emulation_mse",
             "target_mse", "blind_mse", "mse_over_blind", "spread_mse", "target_var"),
)
#: Columns of ames_runs.csv, in order.
RUN_COLUMNS = list(RUNS.columns)


def load_runs(paths: Sequence[str]) -> pd.DataFrame:
    """One row per (mode, prompt set, seed) from metrics.json files (:data:`RUNS`)."""
    return records.load_runs(paths, RUNS)


def ablation_runs(paths: Sequence[str]) -> pd.DataFrame:
    """Tidy per-seed ablation rows (:func:`algo_emu.ablation.ablation_rows`; setting column ``algorithm``)."""
    rows = []
    for path in paths:
        m = read_json(path)
        for name, r in m["prompt_sets"].items():
            rows += abl.ablation_rows("ames", m["mode"], {"algorithm": name}, m["seed"], r["ablations"])
    return pd.DataFrame(rows)


def ablation_summary(paths: Sequence[str], modes: Sequence[str]) -> pd.DataFrame:
    """:func:`algo_emu.ablation.ablation_table` of every (mode, prompt set), rows in table order."""
    table = abl.ablation_table(ablation_runs(paths), ["algorithm"])
    order = {(m, a): i for i, (m, a) in enumerate((m, a) for m in modes for a in prompt_sets(m))}
    key = table.apply(lambda r: order.get((r["mode"], r["algorithm"]), len(order)), axis=1)
    return table.assign(_k=key).sort_values("_k", kind="stable").drop(columns="_k").reset_index(drop=True)


def ames_table(runs: pd.DataFrame, modes: Sequence[str], ablations: pd.DataFrame | None = None) -> pd.DataFrame:
    order = [(mode, algo) for mode in modes for algo in prompt_sets(mode)]
    flags = runs.assign(_blind_all=pd.to_numeric(runs.blind_mse, errors="coerce").notna(),
                        _coef_zero=runs.all_coef_zero.astype(bool))
    summary = summarise_by(flags, ["mode", "algorithm"], ["emulation_mse", "prediction_mse", "algorithm_mse"], order,
                           means=["spread_mse", "target_var", "blind_mse", "target_mse", "alpha", "n_nonzero_coef",
                                  "n_features", "_blind_all", "_coef_zero"])
    rows = []
    for r in summary.to_dict("records"):
        held = r["algorithm"] not in ALGORITHMS
        nan = float("nan")
        rows.append({
            "mode": r["mode"], "algorithm": r["algorithm"],
            **{k: r[k] for k in ("emulation_mse_mean", "emulation_mse_std", "emulation_mse_ci_low", "emulation_mse_ci_high")},
            **{k: nan if held else r[k] for k in ("prediction_mse_mean", "prediction_mse_std", "algorithm_mse_mean",
                                                   "algorithm_mse_std")},
            "n_seeds": r["n_seeds"], "spread_mse_mean": r["spread_mse_mean"], "target_var_mean": r["target_var_mean"],
            "blind_mse_mean": r["blind_mse_mean"],
            "mse_over_blind": float(r["target_mse_mean"] / r["blind_mse_mean"]) if r["_blind_all_mean"] == 1.0 else nan,
            "alpha_mean": r["alpha_mean"],
            "n_nonzero_coef_mean": nan if held else r["n_nonzero_coef_mean"],
            "n_features_mean": r["n_features_mean"],
            "all_coef_zero": False if held else bool(r["_coef_zero_mean"] == 1.0),
            "intercept_in_prompt": r["mode"] == "corrected",
            "target": "encoded prediction" if r["mode"] == "corrected" else "log price",
        })
    table = pd.DataFrame(rows, columns=AMES_COLUMNS)
    if ablations is not None:  # the shared mechanism's ratio; equal to the one above (a test checks it)
        tmp = table.assign(_t=[float(runs[(runs["mode"] == r["mode"]) & (runs.algorithm == r["algorithm"])]
                                     .target_mse.mean()) for _, r in table.iterrows()])
        table["mse_over_blind"] = abl.over_blind(tmp, ablations, on=["mode", "algorithm"], column="_t")
    return table


def data_provenance(metrics: Sequence[dict]) -> str:
    """One line: source, rows, sha256 prefix, fallback (from the prepared sidecars, via the fits)."""
    seen = {}
    for m in metrics:
        d = m.get("data") or {}
        seen[(d.get("source"), d.get("n_rows"), d.get("sha256"), str(d.get("fallback")))] = d
    parts = []
    for d in seen.values():
        text = f"source {d.get('source')}, {d.get('n_rows')} rows, sha256 {str(d.get('sha256'))[:12]}"
        fb = d.get("fallback")
        text += (f", FALLBACK {fb.get('from')} -> {fb.get('to')} ({fb.get('reason')})" if isinstance(fb, dict)
                 else ", no fallback")
        parts.append(text)
    return "; ".join(parts) or "unknown"


def lasso_note(runs: pd.DataFrame) -> str:
    sel = runs[(runs["mode"] == "reference_code") & (runs.algorithm == "lasso")]
    if sel.empty:
        return ""
    k, n = int(sel.all_coef_zero.astype(bool).sum()), len(sel)
    verdict = "zeroed every coefficient" if k == n else "did NOT zero every coefficient"
    return (f" Checked on the fits: in reference_code mode Lasso(alpha={sel.alpha.iloc[0]:g}) {verdict} in {k}/{n} "
            f"seeds (mean nonzero {sel.n_nonzero_coef.mean():g} of {sel.n_features.mean():g}), so its prompt "
            f"carries w = 0 and the emulator can only ignore it.")


def _fmt_mse(v: float) -> str:
    return f"{v:.3g}"


def findings(table: pd.DataFrame) -> str:
    """One sentence per mode, stating only what the numbers show (read against the weight-blind baseline)."""
    out = []
    for mode in dict.fromkeys(table["mode"]):
        t = table[table["mode"] == mode].set_index("algorithm")
        ratios = ", ".join(f"{a} {t.loc[a, 'mse_over_blind']:.2f}" for a in t.index)
        if t.mse_over_blind.isna().all():
            continue
        lower = [a for a in t.index if t.loc[a, "mse_over_blind"] < 1]
        not_lower = [a for a in t.index if not t.loc[a, "mse_over_blind"] < 1]
        verdict = "; ".join(x for x in (
            f"lower MSE than the weight-blind baseline on {', '.join(lower)}" if lower else "",
            f"NOT lower on {', '.join(not_lower)}" if not_lower else "") if x)
        out.append(f"{mode}: MSE / weight-blind MSE = {ratios}; {verdict} (means over seeds; "
                   f"see ames_ablation for what the model reads).")
    return " ".join(out)


def caption(runs: pd.DataFrame, metrics: Sequence[dict], table: pd.DataFrame | None = None) -> str:
    m0 = metrics[0]
    section = m0["params"]
    devices = ", ".join(sorted(runs.device.unique()))
    hidden = ", ".join(str(h) for h in sorted(runs.hidden.unique()))
    n_tr, n_te = m0["n_train"], m0["n_test"]
    pool = next((m["fit"].get("pool") for m in metrics if m["mode"] == "corrected" and m["fit"].get("pool")), None)
    fp = next((m["fit"].get("params") for m in metrics if m["mode"] == "corrected"), None) or {}
    pool_text = ""
    if pool:
        pool_text = (
            f" corrected trains on a weight pool per seed: {pool['train']['n_vectors']} vectors ("
            f"Ridge refits on {pool['train']['n_bootstraps']} bootstrap resamples x {fp.get('pool_n_alphas')} alphas "
            f"10^{fp.get('pool_log10_alpha_min')}..10^{fp.get('pool_log10_alpha_max')}, and one perturbed copy of each: "
            f"w scaled by U({fp.get('pool_coef_scale_min')}, {fp.get('pool_coef_scale_max')}) plus a random direction "
            f"and intercept shift of {fp.get('pool_perturb_scale')} x std(y)), each training row paired with "
            f"{pool['train']['pairs_per_row']} of them; heldout_refit/heldout_perturbed rows: test rows with vectors "
            f"from {pool['heldout']['n_bootstraps']} other resamples, never seen in training "
            f"({pool['heldout']['pairs_per_row']} per test row). The three algorithms' fits are not in the training "
            f"pool either.")
    text = (
        "Ames Housing: one frozen emulator per seed and mode, evaluated on the held-out rows. Rows linear/ridge/lasso: "
        "each algorithm's weights in the one-token prompt; emulation_mse: emulator vs the prediction the prompt "
        "encodes; prediction_mse: emulator vs log price; algorithm_mse: the algorithm's prediction vs log price "
        "(mean, sample std over seeds; CI: 95% bootstrap of the mean). spread_mse: algorithm rows, the mean MSE between "
        "this algorithm's test predictions and the other two's; held-out rows, the mean squared deviation of the "
        "family's predictions from their per-row mean (what ignoring w costs at best). blind_mse: a weight-blind "
        "baseline (same block, hidden width, heads, p, prompts, targets, data order, epochs, batch, lr; weight "
        "columns removed from its input) against the same target; mse_over_blind: the emulator's MSE against the "
        "mode's target / blind_mse (1 = no better than ignoring the weights). corrected: fit on training rows, "
        "intercept in the prompt, Ridge/Lasso alpha by seeded K-fold CV, target = the prompt's encoded prediction."
        f"{pool_text} reference_code (the published code): fit on all rows, intercept dropped, alpha = 1, target = "
        "log price for every algorithm, so the weights cannot matter there by construction and algorithm_mse is "
        "the intercept-free prediction's error."
        f"{lasso_note(runs)} Data: {data_provenance(metrics)}; {n_tr} training / {n_te} test rows per seed. "
        f"Emulator: n = 1 token, p = {section['total_tokens']}, H = {section['heads']}, h = {hidden}, d_out = 1; "
        f"{section['epochs']} epochs, batch {section['batch_size']}, Adam lr {section['lr']}. Frozen parameters (emulator and "
        f"baseline) bit-identical before and after evaluation: {bool(runs.bit_identical.all())}. Device: {devices}."
    )
    if table is not None:
        text += " Read against the baseline: " + findings(table)
    return text


def ablation_caption(ablations: pd.DataFrame, metrics: Sequence[dict]) -> str:
    section = metrics[0]["params"]
    return (
        "Ames Housing, prompt ablations (algo_emu.ablation): the frozen emulator's MSE against the ORIGINAL prompt's "
        "target when the prompt's weights (w, and b in corrected) are replaced; mean, sample std and 95% bootstrap "
        "CI over seeds. none: unablated; weight_blind: the weight-blind baseline (same block, budget, prompts and "
        "targets, no weight columns); other_prompt: another prompt's vector (held-out sets); other_algorithm: the "
        "next algorithm's fit (linear->ridge->lasso->linear); permuted: coordinates permuted per prompt; random: "
        "normal draws rescaled to the prompt's own norm per block; zeros: all weights zero. A model that reads the "
        "weights gets much worse under ablation than 'none'; one that ignores them scores the same. "
        "mse_over_blind = mse_mean / weight_blind's mse_mean. "
        f"p = {section['total_tokens']}, H = {section['heads']}, {section['epochs']} epochs."
    )


def aggregate(modes: Sequence[str], metrics_paths: Sequence[str], table_csv: str | Path, runs_csv: str | Path,
              ablation_csv: str | Path | None = None) -> None:
    metrics = [read_json(p) for p in metrics_paths]
    runs = load_runs(metrics_paths)
    write_csv(runs_csv, runs.sort_values(["mode", "algorithm", "seed"]))
    ablations = ablation_summary(metrics_paths, modes) if ablation_csv is not None else None
    table = ames_table(runs, modes, ablations)
    write_table(table, table_csv, caption(runs, metrics, table), label="tab:ames")
    if ablation_csv is not None:
        write_table(ablations, ablation_csv, ablation_caption(ablations, metrics), label="tab:ames_ablation")


# --------------------------------------------------------------------------- command line


def figure(table: str, runs_csv: str, predictions: Sequence[str], out: str, ablation_table: str | None = None,
           ablation_out: str | None = None) -> None:
    from algo_emu.plots import ames as pa

    pa.ames_figure(table, runs_csv, predictions, out)
    if ablation_table:
        pa.ablation_figure(ablation_table, table, ablation_out)


PARAMS = cli.PARAMS.to(required=False, default={}, help="the ames config section as JSON")
MODE = arg("--mode", choices=MODES, required=True)
PER_SEED = [arg("--prepared", "prepared_paths", nargs="+", required=True, help="prepared.npz per seed (same order)"),
            arg("--fits", "fits_paths", nargs="+", required=True, help="fits.npz per seed (same order)")]
STEPS = [
    Step("download", "write the raw CSV (Kaggle column names) and its provenance JSON", data.download,
         [PARAMS, arg("--out-csv", required=True, help="raw CSV to write (e.g. data/raw/ames.csv)"),
          arg("--out-provenance", required=True, help="provenance JSON to write")]),
    Step("prepare", "split one seed, fit the preprocessing on its training rows, write arrays", data.prepare,
         [PARAMS, arg("--csv", "csv_path", required=True, help="raw CSV written by the download step"),
          arg("--provenance", "provenance_path", required=True,
              help="its provenance JSON (sha256 and column types are checked)"),
          cli.SEED.to(help="seed of the split stream ('ames', 'split')"),
          arg("--out", "out_npz", required=True, help="prepared.npz to write"),
          arg("--out-meta", required=True, help="JSON sidecar to write")]),
    Step("fit", "fit LinearRegression, Ridge, Lasso for one seed in one mode", fits.fit_seed,
         [PARAMS, MODE, cli.SEED.to(help="seed (CV folds stream ('ames', 'cv'))"),
          arg("--prepared", "prepared_npz", required=True, help="prepared.npz of this seed"),
          arg("--out", "out_npz", required=True, help="fits.npz to write"),
          arg("--out-json", required=True, help="JSON summary to write")]),
    Step("train", "train every seed's emulator of one mode on mixed prompts; save them frozen", train_mode,
         [PARAMS, MODE, cli.SEEDS, *PER_SEED,
          arg("--out", required=True, help="frozen emulator file to write (+ .json sidecar)"),
          arg("--out-blind", help="also train the weight-blind baseline (same budget); frozen file to write"),
          arg("--checkpoint-dir", help="resumable checkpoints (one per hidden-width group and role)"), *cli.RUNTIME]),
    Step("evaluate", "evaluate the frozen emulators (read-only) per seed and algorithm", evaluate_mode,
         [MODE, cli.SEEDS, *PER_SEED,
          arg("--emulator", required=True, help="frozen emulator file written by the train step"),
          arg("--blind", help="frozen weight-blind baseline written by `train --out-blind`"), cli.OUT_DIR,
          arg("--predictions", "predictions_csv", required=True, help="CSV of every test-row prediction"),
          *cli.RUNTIME]),
    Step("aggregate", "results/tables/ames.{csv,md,tex} and the per-seed runs CSV", aggregate,
         [arg("--modes", nargs="+", choices=MODES, required=True, help="row order of the table"),
          cli.METRICS.to("metrics_paths"), cli.TABLE.to("table_csv"), cli.RUNS,
          arg("--ablation-table", "ablation_csv", help="ablation table CSV to write (+ .md, .tex); needs the baselines")]),
    Step("figure", "emulated vs algorithm scatter and error bars per algorithm", figure,
         [cli.TABLE, cli.RUNS, arg("--predictions", nargs="+", required=True), cli.FIGURE,
          arg("--ablation-table", help="ablation table CSV: also draw the ablation figure"),
          arg("--ablation-out", help="output stem of the ablation figure")]),
]
add_parser = cli.steps_parser(STEPS)
