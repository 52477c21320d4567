"""E4 Ames Housing: emulate LinearRegression, Ridge and Lasso from weights in the prompt.

Steps (the Snakemake rules in workflow/rules/ames.smk call these):

  download   raw CSV + provenance (algo_emu.data.ames)
  prepare    one seed's train/test arrays, preprocessing fitted on its training rows
  fit        one seed's three algorithm fits in one mode (algo_emu.data.ames_fits)
  train      one mode: every seed's emulator, trained on mixed prompts, then frozen
             (weights saved with a checksum and a parameter digest)
  evaluate   one mode: the frozen emulators, loaded read-only, on each seed's held-out
             rows with each algorithm's weights in the prompt (parameters checked
             bit-identical before and after)
  aggregate  results/tables/ames.{csv,md,tex} and results/tables/ames_runs.csv
  figure     results/figures/ames.{pdf,png}

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

The emulator (reference-protocol.md, E4): one token per prompt (n = 1),
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

import argparse
import logging
import math
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from algo_emu.cli import json_arg
from algo_emu.data import ames as data
from algo_emu.data import ames_fits as fits
from algo_emu.data.ames_fits import ALGORITHMS, MODES
from algo_emu.io import read_json, seed_metrics_path, sha256_file, write_csv, write_json
from algo_emu.models.emulator import EnsembleEmulator
from algo_emu.rng import numpy_stream, torch_stream
from algo_emu.runtime import config_hash, environment, resolve_device
from algo_emu.tables import summarise, write_table
from algo_emu.train import Member, TrainConfig, train_ensemble

log = logging.getLogger("algo_emu.ames")

#: Defaults of the training keys of the ``ames`` config section (the schema carries the same).
TRAIN_DEFAULTS: dict[str, Any] = {
    "modes": ["corrected", "reference_code"],
    "heads": 8,
    "total_tokens": 100,
    "hidden": "auto",
    "epochs": 300,
    "batch_size": 32,
    "lr": 0.001,
    "checkpoint_every": 10,
    "compile": False,
    "attention": "auto",
}
#: The keys the train step reads (workflow/rules/ames.smk passes exactly these; a test checks it).
TRAIN_KEYS: tuple[str, ...] = ("heads", "total_tokens", "hidden", "epochs", "batch_size", "lr", "checkpoint_every",
                               "compile", "attention")
#: Keys that change the trained numbers (the checkpoint fingerprint and the run hash).
RESULT_KEYS: tuple[str, ...] = ("heads", "total_tokens", "hidden", "epochs", "batch_size", "lr", "attention")
DEFAULTS: dict[str, Any] = {**data.DEFAULTS, **fits.FIT_DEFAULTS, **TRAIN_DEFAULTS}

AMES_COLUMNS = [
    "mode", "algorithm", "emulation_mse_mean", "emulation_mse_std", "emulation_mse_ci_low", "emulation_mse_ci_high",
    "prediction_mse_mean", "prediction_mse_std", "algorithm_mse_mean", "algorithm_mse_std", "n_seeds",
    "alpha_mean", "n_nonzero_coef_mean", "n_features_mean", "all_coef_zero", "intercept_in_prompt", "target",
]
RUN_COLUMNS = [
    "mode", "algorithm", "seed", "emulation_mse", "prediction_mse", "algorithm_mse", "algorithm_sklearn_mse",
    "train_emulation_mse", "alpha", "n_nonzero_coef", "n_features", "all_coef_zero", "hidden", "epochs",
    "bit_identical", "device", "config_hash", "data_provenance",
]


class AmesConfigError(ValueError):
    """A bad ``ames`` training key; the message names it."""


def resolve_train_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    p = dict(TRAIN_DEFAULTS)
    p.update(dict(params or {}))
    check_params(p)
    return p


def check_params(p: Mapping[str, Any]) -> None:
    """Cross-field checks of the training keys (the schema checks types and ranges)."""
    H, hidden = p.get("heads", 8), p.get("hidden", "auto")
    if hidden != "auto" and (isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1):
        raise AmesConfigError(f"ames.hidden must be 'auto' or a positive integer, got {hidden!r}")
    if hidden != "auto" and hidden % H:
        raise AmesConfigError(f"ames.heads: {H} heads do not divide ames.hidden = {hidden}")
    if p.get("total_tokens", 100) < 1:
        raise AmesConfigError(f"ames.total_tokens (p) must be >= 1 (n = 1 data token), got {p['total_tokens']}")
    for m in p.get("modes", []):
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


def algorithm_draw(seed: int, n_train: int) -> np.ndarray:
    """The algorithm of each training example (index into ALGORITHMS), from ``(seed, "ames", "algorithm")``."""
    return numpy_stream(seed, "ames", "algorithm").integers(0, len(ALGORITHMS), size=n_train)


def training_examples(seed: int, prepared: Mapping[str, np.ndarray], fitted: Mapping[str, np.ndarray], mode: str
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens (n_train, d_in), targets (n_train,), algorithm index (n_train,)) of one seed."""
    X = np.asarray(prepared["X_train"], np.float64)
    draw = algorithm_draw(seed, X.shape[0])
    tokens = np.empty((X.shape[0], token_width(X.shape[1], mode)))
    targets = np.empty(X.shape[0])
    for k, a in enumerate(ALGORITHMS):
        rows = draw == k
        tokens[rows] = prompt_tokens(X[rows], fitted[f"coef_{a}"], float(fitted[f"intercept_{a}"]), mode)
        targets[rows] = fitted[f"target_train_{a}"][rows]
    return tokens, targets, draw


# --------------------------------------------------------------------------- the emulators


def layout(d_ins: Mapping[int, int], heads: int, hidden: int | str) -> list[dict]:
    """Seeds grouped by hidden width: ``[{"hidden", "d_in" (the group's widest token), "members": [[seed, d_in]]}]``."""
    groups: dict[int, list] = {}
    for s in sorted(d_ins):
        groups.setdefault(hidden_width(d_ins[s], heads, hidden), []).append([int(s), int(d_ins[s])])
    return [{"hidden": h, "d_in": max(d for _, d in m), "members": m} for h, m in sorted(groups.items())]


def _placeholder(k: int) -> list[torch.Generator]:
    return [torch_stream(0, "ames", "placeholder", i) for i in range(k)]


def build_group(group: Mapping, heads: int, total_tokens: int, attention: str = "auto", mode: str | None = None,
                dtype: torch.dtype = torch.float32) -> EnsembleEmulator:
    """One ensemble of a group. With ``mode``, member e is initialised exactly as a stand-alone
    emulator of its own token width from ``torch_stream(seed, "ames", mode, "init")``, its extra
    input rows zero; without, the values are placeholders (to be overwritten by a state dict)."""
    members = group["members"]
    model = EnsembleEmulator(_placeholder(len(members)), d_in=group["d_in"], d_out=1, n_tokens=1,
                             hidden=group["hidden"], heads=heads, total_tokens=total_tokens, dtype=dtype,
                             attention=attention)
    if mode is None:
        return model
    with torch.no_grad():
        for e, (seed, d_in) in enumerate(members):
            alone = standalone(seed, d_in, group["hidden"], heads, total_tokens, mode, dtype)
            for name, param in model.named_parameters():
                src = getattr(alone, name)[0]
                if name == "w_in":
                    param[e].zero_()
                    param[e, :d_in] = src
                else:
                    param[e] = src
    return model


def standalone(seed: int, d_in: int, hidden: int, heads: int, total_tokens: int, mode: str,
               dtype: torch.dtype = torch.float32) -> EnsembleEmulator:
    """The emulator of one seed at its own token width (a one-member ensemble)."""
    return EnsembleEmulator([torch_stream(seed, "ames", mode, "init")], d_in=d_in, d_out=1, n_tokens=1,
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
               device_spec: str = "auto", threads: int | None = None) -> dict:
    """Train every seed's emulator of ``mode``; save them frozen to ``out`` (+ ``out.json`` sidecar)."""
    from algo_emu.frozen import save_frozen

    if mode not in MODES:
        raise AmesConfigError(f"ames mode must be one of {list(MODES)}, got {mode!r}")
    _check_lengths(seeds, prepared_paths, fits_paths)
    p = resolve_train_params(params)
    if threads:
        torch.set_num_threads(threads)
    device = resolve_device(device_spec)
    t0 = time.perf_counter()
    per_seed, d_ins, inputs = {}, {}, {}
    for s, pp, fp in zip(seeds, prepared_paths, fits_paths):
        prepared, fitted = _load_seed(pp, fp)
        tokens, targets, draw = training_examples(s, prepared, fitted, mode)
        per_seed[s] = (tokens, targets)
        d_ins[s] = tokens.shape[1]
        inputs[s] = {"prepared_sha256": sha256_file(pp), "fits_sha256": sha256_file(fp),
                     "algorithm_counts": {a: int((draw == k).sum()) for k, a in enumerate(ALGORITHMS)}}
    groups = layout(d_ins, p["heads"], p["hidden"])
    run = {k: p[k] for k in RESULT_KEYS} | {"mode": mode}
    cfg = TrainConfig(epochs=p["epochs"], batch_size=p["batch_size"], lr=p["lr"],
                      checkpoint_every=p["checkpoint_every"], compile=p["compile"])
    models, history, seconds = [], {}, {}
    for g in groups:
        gseeds = [s for s, _ in g["members"]]
        task = AmesTask([per_seed[s][0] for s in gseeds], [per_seed[s][1] for s in gseeds], gseeds, mode, g["d_in"],
                        device)
        model = build_group(g, p["heads"], p["total_tokens"], p["attention"], mode=mode).to(device)
        fingerprint = config_hash(run | {"group": g, "inputs": {s: inputs[s] for s in gseeds}})
        ckpt = Path(checkpoint_dir) / f"h{g['hidden']}.pt" if checkpoint_dir else None
        log.info("%s: group h=%d, d_in=%d, seeds %s (%d training rows each) on %s", mode, g["hidden"], g["d_in"],
                 gseeds, task.n_train, device)
        res = train_ensemble(model, task, cfg, checkpoint=ckpt, fingerprint=fingerprint)
        models.append(model.to("cpu"))
        for e, s in enumerate(gseeds):
            history[s] = [{"epoch": h["epoch"], "train_loss": h["train_loss"][e]} for h in res.history]
        seconds[g["hidden"]] = {"train_seconds_this_call": res.seconds, "epochs_run_this_call": res.epochs_run,
                                "resumed_from_epoch": res.resumed_from,
                                "epoch_seconds": [h["seconds"] for h in res.history]}
    meta = {"experiment": "ames", "mode": mode, "heads": p["heads"], "total_tokens": p["total_tokens"],
            "attention": models[0].resolved_attention(next(models[0].parameters()).device), "groups": groups, "seeds": [int(s) for s in seeds]}
    extra = {"params": run, "config_hash": config_hash(run), "inputs": {str(s): v for s, v in inputs.items()},
             "history": {str(s): v for s, v in history.items()}, "timing": {"wall_seconds_job": time.perf_counter() - t0,
                                                                            "groups": seconds},
             "environment": environment(device)}
    return save_frozen(out, torch.nn.ModuleList(models), meta, extra)


# --------------------------------------------------------------------------- evaluation


def evaluate_mode(mode: str, seeds: Sequence[int], prepared_paths: Sequence[str], fits_paths: Sequence[str],
                  emulator: str | Path, out_dir: str | Path, predictions_csv: str | Path,
                  device_spec: str = "auto", threads: int | None = None) -> dict[int, dict]:
    """Evaluate the frozen emulators of ``mode`` on each seed's test rows, per algorithm.

    Writes ``out_dir/seed<k>/metrics.json`` and one predictions CSV (every seed, algorithm and test row).
    """
    from algo_emu.frozen import frozen, load_frozen, parameter_digest

    _check_lengths(seeds, prepared_paths, fits_paths)
    if threads:
        torch.set_num_threads(threads)
    device = resolve_device(device_spec)
    t0 = time.perf_counter()
    file_sha_before = sha256_file(emulator)
    model, info = load_frozen(emulator, build_frozen, device)
    meta = info["meta"]
    if meta["mode"] != mode:
        raise ValueError(f"{emulator} holds {meta['mode']!r} emulators, not {mode!r}")
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

    def run(gi: int, rows_key: str, algo: str) -> dict[int, np.ndarray]:
        g = meta["groups"][gi]
        batch = np.zeros((len(g["members"]), loaded[g["members"][0][0]][0][rows_key].shape[0], g["d_in"]))
        for e, (s, d_in) in enumerate(g["members"]):
            prepared, fitted = loaded[s]
            batch[e, :, :d_in] = prompt_tokens(prepared[rows_key], fitted[f"coef_{algo}"],
                                               float(fitted[f"intercept_{algo}"]), mode)
        x = torch.as_tensor(batch, dtype=torch.float32, device=device)[:, :, None, :]
        y = model[gi](x)[:, :, 0, 0].to("cpu", torch.float64).numpy()
        return {s: y[e] for e, (s, _) in enumerate(g["members"])}

    record: dict = {}
    emulated: dict[str, dict[str, dict[int, np.ndarray]]] = {"X_test": {}, "X_train": {}}
    with frozen(model, record):
        for rows_key in emulated:
            for algo in ALGORITHMS:
                emulated[rows_key][algo] = {}
                for gi in range(len(meta["groups"])):
                    emulated[rows_key][algo].update(run(gi, rows_key, algo))
    record["digest_at_save"] = info["param_digest"]
    record["matches_saved"] = parameter_digest(model) == info["param_digest"]
    record["file_sha256_before"], record["file_sha256_after"] = file_sha_before, sha256_file(emulator)
    if not (record["bit_identical"] and record["matches_saved"] and file_sha_before == record["file_sha256_after"]):
        raise RuntimeError(f"{emulator}: the frozen emulator changed during evaluation: {record}")
    env = environment(device)
    wall = time.perf_counter() - t0
    out, pred_rows = {}, []
    for s, pp, fp in zip(seeds, prepared_paths, fits_paths):
        prepared, fitted = loaded[s]
        summary = read_json(Path(fp).with_suffix(".json")) if Path(fp).with_suffix(".json").is_file() else {}
        yte, ytr = prepared["y_test"], prepared["y_train"]
        per_algo = {}
        for algo in ALGORITHMS:
            emu, alg = emulated["X_test"][algo][s], fitted[f"pred_test_{algo}"]
            emu_tr = emulated["X_train"][algo][s]
            fs = summary.get("algorithms", {}).get(algo, {})
            per_algo[algo] = {
                "emulation_mse": float(np.mean((emu - alg) ** 2)),
                "prediction_mse": float(np.mean((emu - yte) ** 2)),
                "algorithm_mse": float(np.mean((alg - yte) ** 2)),
                "algorithm_sklearn_mse": fs.get("sklearn_mse_test"),
                "train_emulation_mse": float(np.mean((emu_tr - fitted[f"pred_train_{algo}"]) ** 2)),
                "train_prediction_mse": float(np.mean((emu_tr - ytr) ** 2)),
                "alpha": fs.get("alpha"), "n_nonzero_coef": int(np.count_nonzero(fitted[f"coef_{algo}"])),
                "all_coef_zero": bool(not np.any(fitted[f"coef_{algo}"])),
            }
            pred_rows.append(pd.DataFrame({"mode": mode, "seed": s, "algorithm": algo,
                                           "row": prepared["test_index"], "log_price": yte,
                                           "algorithm_prediction": alg, "emulated": emu}))
        gi, e = where[s]
        metrics = {
            "experiment": "ames", "mode": mode, "seed": int(s), "algorithms": per_algo,
            "target": "algorithm prediction" if mode == "corrected" else "log1p(SalePrice)",
            "intercept_in_prompt": mode == "corrected",
            "n_features": int(prepared["X_train"].shape[1]), "n_train": int(len(ytr)), "n_test": int(len(yte)),
            "token_width": meta["groups"][gi]["members"][e][1], "hidden": meta["groups"][gi]["hidden"],
            "group_input_width": meta["groups"][gi]["d_in"],
            "params": info["params"], "config_hash": info["config_hash"],
            "fit": {k: v for k, v in summary.items() if k not in ("data",)},
            "data": summary.get("data", {}),
            "history": info["history"][str(s)],
            "frozen": {"file": str(emulator), "sha256": info["sha256"], **record},
            "timing": {"train": info["timing"], "wall_seconds_evaluate": wall},
            "environment": env,
        }
        write_json(seed_metrics_path(out_dir, s), metrics)
        out[s] = metrics
    write_csv(predictions_csv, pd.concat(pred_rows, ignore_index=True))
    return out


# --------------------------------------------------------------------------- tables


def load_runs(paths: Sequence[str]) -> pd.DataFrame:
    rows = []
    for path in paths:
        m = read_json(path)
        for algo, r in m["algorithms"].items():
            rows.append({
                "mode": m["mode"], "algorithm": algo, "seed": m["seed"], "emulation_mse": r["emulation_mse"],
                "prediction_mse": r["prediction_mse"], "algorithm_mse": r["algorithm_mse"],
                "algorithm_sklearn_mse": r["algorithm_sklearn_mse"], "train_emulation_mse": r["train_emulation_mse"],
                "alpha": r["alpha"], "n_nonzero_coef": r["n_nonzero_coef"], "n_features": m["n_features"],
                "all_coef_zero": r["all_coef_zero"], "hidden": m["hidden"], "epochs": m["params"]["epochs"],
                "bit_identical": m["frozen"]["bit_identical"], "device": m["environment"]["device"],
                "config_hash": m["config_hash"], "data_provenance": data_provenance([m]),
            })
    if not rows:
        raise ValueError("no metrics files given")
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def ames_table(runs: pd.DataFrame, modes: Sequence[str]) -> pd.DataFrame:
    rows = []
    for mode in modes:
        for algo in ALGORITHMS:
            sel = runs[(runs["mode"] == mode) & (runs.algorithm == algo)].sort_values("seed")
            if sel.empty:
                raise ValueError(f"no runs for mode={mode}, algorithm={algo}")
            emu = summarise(sel.emulation_mse.to_numpy(), prefix="emulation_mse")
            pred = summarise(sel.prediction_mse.to_numpy(), prefix="prediction_mse")
            alg = summarise(sel.algorithm_mse.to_numpy(), prefix="algorithm_mse")
            alphas = pd.to_numeric(sel.alpha, errors="coerce")
            rows.append({
                "mode": mode, "algorithm": algo, **emu,
                "prediction_mse_mean": pred["prediction_mse_mean"], "prediction_mse_std": pred["prediction_mse_std"],
                "algorithm_mse_mean": alg["algorithm_mse_mean"], "algorithm_mse_std": alg["algorithm_mse_std"],
                "alpha_mean": float(alphas.mean()) if alphas.notna().any() else float("nan"),
                "n_nonzero_coef_mean": float(sel.n_nonzero_coef.mean()), "n_features_mean": float(sel.n_features.mean()),
                "all_coef_zero": bool(sel.all_coef_zero.astype(bool).all()),
                "intercept_in_prompt": mode == "corrected",
                "target": "algorithm prediction" if mode == "corrected" else "log price",
            })
    return pd.DataFrame(rows, columns=AMES_COLUMNS)


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


def caption(runs: pd.DataFrame, metrics: Sequence[dict]) -> str:
    m0 = metrics[0]
    p = m0["params"]
    devices = ", ".join(sorted(runs.device.unique()))
    hidden = ", ".join(str(h) for h in sorted(runs.hidden.unique()))
    n_tr, n_te = m0["n_train"], m0["n_test"]
    return (
        "Ames Housing: one frozen emulator per seed and mode, trained on mixed prompts (algorithm drawn per training "
        "example), evaluated on the held-out rows with each algorithm's weights in its one-token prompt. "
        "emulation_mse: emulator vs the algorithm's prediction as the prompt encodes it; prediction_mse: emulator vs "
        "log price; algorithm_mse: the algorithm's prediction vs log price (mean, sample std over seeds; CI: 95% "
        "bootstrap of the mean). corrected: fit on training rows, intercept in the prompt, Ridge/Lasso alpha by "
        "seeded K-fold CV, training target = the algorithm's prediction. reference_code (the published code): fit "
        "on all rows, intercept dropped, alpha = 1, training target = log price for every algorithm, so "
        "algorithm_mse there is the intercept-free prediction's error."
        f"{lasso_note(runs)} Data: {data_provenance(metrics)}; {n_tr} training / {n_te} test rows per seed. "
        f"Emulator: n = 1 token, p = {p['total_tokens']}, H = {p['heads']}, h = {hidden}, d_out = 1; "
        f"{p['epochs']} epochs, batch {p['batch_size']}, Adam lr {p['lr']}. Frozen parameters bit-identical before "
        f"and after evaluation: {bool(runs.bit_identical.all())}. Device: {devices}."
    )


def aggregate(modes: Sequence[str], metrics_paths: Sequence[str], table_csv: str | Path, runs_csv: str | Path) -> None:
    metrics = [read_json(p) for p in metrics_paths]
    runs = load_runs(metrics_paths)
    write_csv(runs_csv, runs.sort_values(["mode", "algorithm", "seed"]))
    write_table(ames_table(runs, modes), table_csv, caption(runs, metrics), label="tab:ames")


# --------------------------------------------------------------------------- command line


def _params(args) -> dict:
    if not isinstance(args.params, dict):
        raise SystemExit(f"--params must be a JSON object (the ames config section), got {args.params!r}")
    return args.params


def cmd_download(args: argparse.Namespace) -> int:
    data.download(_params(args), args.out_csv, args.out_provenance)
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    data.prepare(_params(args), args.csv, args.provenance, args.seed, args.out, args.out_meta)
    return 0


def cmd_fit(args: argparse.Namespace) -> int:
    fits.fit_seed(_params(args), args.mode, args.seed, args.prepared, args.out, args.out_json)
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    train_mode(_params(args), args.mode, args.seeds, args.prepared, args.fits, args.out, args.checkpoint_dir,
               args.device, args.threads)
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    evaluate_mode(args.mode, args.seeds, args.prepared, args.fits, args.emulator, args.out_dir, args.predictions,
                  args.device, args.threads)
    return 0


def cmd_aggregate(args: argparse.Namespace) -> int:
    aggregate(args.modes, args.metrics, args.table, args.runs)
    return 0


def cmd_figure(args: argparse.Namespace) -> int:
    from algo_emu.plots import ames as pa

    pa.ames_figure(args.table, args.runs, args.predictions, args.out)
    return 0


def add_parser(parser: argparse.ArgumentParser) -> None:
    steps = parser.add_subparsers(dest="step", required=True)

    d = steps.add_parser("download", help="write the raw CSV (Kaggle column names) and its provenance JSON")
    d.add_argument("--params", type=json_arg, default={}, help="the ames config section as JSON")
    d.add_argument("--out-csv", required=True, help="raw CSV to write (e.g. data/raw/ames.csv)")
    d.add_argument("--out-provenance", required=True, help="provenance JSON to write")
    d.set_defaults(func=cmd_download)

    p = steps.add_parser("prepare", help="split one seed, fit the preprocessing on its training rows, write arrays")
    p.add_argument("--params", type=json_arg, default={}, help="the ames config section as JSON")
    p.add_argument("--csv", required=True, help="raw CSV written by the download step")
    p.add_argument("--provenance", required=True, help="its provenance JSON (sha256 and column types are checked)")
    p.add_argument("--seed", type=int, required=True, help="seed of the split stream ('ames', 'split')")
    p.add_argument("--out", required=True, help="prepared.npz to write")
    p.add_argument("--out-meta", required=True, help="JSON sidecar to write")
    p.set_defaults(func=cmd_prepare)

    f = steps.add_parser("fit", help="fit LinearRegression, Ridge, Lasso for one seed in one mode")
    f.add_argument("--params", type=json_arg, default={}, help="the ames config section as JSON")
    f.add_argument("--mode", choices=MODES, required=True)
    f.add_argument("--seed", type=int, required=True, help="seed (CV folds stream ('ames', 'cv'))")
    f.add_argument("--prepared", required=True, help="prepared.npz of this seed")
    f.add_argument("--out", required=True, help="fits.npz to write")
    f.add_argument("--out-json", required=True, help="JSON summary to write")
    f.set_defaults(func=cmd_fit)

    t = steps.add_parser("train", help="train every seed's emulator of one mode on mixed prompts; save them frozen")
    t.add_argument("--params", type=json_arg, default={}, help="the ames config section as JSON")
    t.add_argument("--mode", choices=MODES, required=True)
    t.add_argument("--seeds", type=int, nargs="+", required=True)
    t.add_argument("--prepared", nargs="+", required=True, help="prepared.npz per seed (same order)")
    t.add_argument("--fits", nargs="+", required=True, help="fits.npz per seed (same order)")
    t.add_argument("--out", required=True, help="frozen emulator file to write (+ .json sidecar)")
    t.add_argument("--checkpoint-dir", help="resumable checkpoints (one per hidden-width group)")
    t.add_argument("--device", default="auto")
    t.add_argument("--threads", type=int)
    t.set_defaults(func=cmd_train)

    e = steps.add_parser("evaluate", help="evaluate the frozen emulators (read-only) per seed and algorithm")
    e.add_argument("--mode", choices=MODES, required=True)
    e.add_argument("--seeds", type=int, nargs="+", required=True)
    e.add_argument("--prepared", nargs="+", required=True)
    e.add_argument("--fits", nargs="+", required=True)
    e.add_argument("--emulator", required=True, help="frozen emulator file written by the train step")
    e.add_argument("--out-dir", required=True, help="writes <out-dir>/seed<k>/metrics.json")
    e.add_argument("--predictions", required=True, help="CSV of every test-row prediction")
    e.add_argument("--device", default="auto")
    e.add_argument("--threads", type=int)
    e.set_defaults(func=cmd_evaluate)

    a = steps.add_parser("aggregate", help="results/tables/ames.{csv,md,tex} and the per-seed runs CSV")
    a.add_argument("--modes", nargs="+", choices=MODES, required=True, help="row order of the table")
    a.add_argument("--metrics", nargs="+", required=True)
    a.add_argument("--table", required=True)
    a.add_argument("--runs", required=True)
    a.set_defaults(func=cmd_aggregate)

    g = steps.add_parser("figure", help="emulated vs algorithm scatter and error bars per algorithm")
    g.add_argument("--table", required=True)
    g.add_argument("--runs", required=True)
    g.add_argument("--predictions", nargs="+", required=True)
    g.add_argument("--out", required=True, help="output stem (writes .pdf and .png)")
    g.set_defaults(func=cmd_figure)
