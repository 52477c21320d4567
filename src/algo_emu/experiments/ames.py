"""E4 Ames Housing: emulate LinearRegression, Ridge and Lasso from weights in the prompt.

Steps, ``python -m algo_emu ames <step> JOB [--threads N]`` (:mod:`algo_emu.cli`; ``JOB`` holds the keyword
arguments of the step's function in :data:`STEPS`; the Snakemake rules in workflow/rules/ames.smk call these;
``params`` is the resolved ``ames`` config section, at least the keys the step reads):

  download   raw CSV + provenance (algo_emu.data.ames)
  prepare    one seed's train/test arrays, preprocessing fitted on its training rows
  fit        one seed's three algorithm fits in one mode (algo_emu.data.ames_fits)
  train      one mode: every seed's emulator (or, ``blind``, its weight-blind baseline with the same
             budget: algo_emu.ablation), frozen; prompts from algo_emu.data.ames_prompts
  evaluate   one mode: the frozen models, loaded read-only, on each seed's held-out rows, with
             prompt ablations and the baseline
  aggregate  results/tables/ames*.{csv,md,tex} (algo_emu.experiments.ames_tables)
  figure     results/figures/ames.{pdf,png} and ames_ablation.{pdf,png}

The emulator (the published code at commit 6d39297; Appendix C.2): one token per prompt (n = 1),
the project's block (emulator.py) with p = ``p``, H = ``heads``, h = the token width rounded
up to a multiple of H (``hidden: auto``; the paper's h = 2F) and ``d_out = 1``. The paper puts a
Linear(h -> 1) read-out after a block whose output projection is Linear(h -> h); two affine maps compose
to one affine map h -> 1, so the block's own output projection with d_out = 1 spans exactly the same
functions (the parameterisation, hence the optimisation path, differs). Seeds with different feature
counts train in one ensemble per hidden width, each member exactly its stand-alone run
(:mod:`algo_emu.models.ragged`).
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
from algo_emu.specs import reads as _reads
from algo_emu.data import ames as data
from algo_emu.data import ames_fits as fits
from algo_emu.data.ames_prompts import (eval_sets, load_seeds, prompt_layout, prompt_sets, prompt_tokens,
                                        training_examples)
from algo_emu.data.ames_fits import ALGORITHMS, MODES, POOL_FAMILIES
from algo_emu.io import read_json, write_csv
from algo_emu.models import ragged
from algo_emu.models.emulator import EnsembleEmulator
from algo_emu.rng import torch_stream
from algo_emu.experiments.ames_tables import aggregate, figure
from algo_emu.train import Member, Runner, train_config

log = logging.getLogger("algo_emu.ames")

#: The keys the train step reads, declared once in algo_emu.specs (the rule passes exactly these).
TRAIN_KEYS: tuple[str, ...] = _reads("ames", "train").keys
#: Keys that change the trained numbers (the checkpoint fingerprint and the run hash).
RESULT_KEYS: tuple[str, ...] = ("heads", "p", "hidden", "epochs", "batch_size", "lr", "attention")

#: Built-in ablations per prompt set: every prompt of an algorithm set carries the same weights,
#: so ``other_prompt`` is the identity there; they get ``other_algorithm`` (donor) instead.
ALGORITHM_ABLATIONS: tuple[str, ...] = ("permuted", "random", "zeros")
HELDOUT_ABLATIONS: tuple[str, ...] = abl.ABLATIONS


def check_modes(*modes: str) -> None:
    """Every mode a step is given must be one of :data:`MODES` (ValueError naming the argument otherwise)."""
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ValueError(f"ames mode must be one of {list(MODES)}, got {', '.join(map(repr, bad))}")


# --------------------------------------------------------------------------- the emulators


def hidden_width(d_in: int, heads: int, hidden: int | str) -> int:
    """``auto``: the token width rounded up to a multiple of H (the paper: h = 2F); else as given."""
    return heads * math.ceil(d_in / heads) if hidden == "auto" else int(hidden)


def member_groups(d_ins: Mapping[int, int], heads: int, hidden: int | str) -> list[dict]:
    """Seeds grouped by hidden width: ``[{"hidden", "d_in" (the group's widest token), "members": [[seed, d_in]]}]``."""
    return ragged.width_groups(d_ins, lambda d: hidden_width(d, heads, hidden))


def _placeholder(k: int) -> list[torch.Generator]:
    return [torch_stream(0, "ames", "placeholder", i) for i in range(k)]


def build_group(group: Mapping, heads: int, p: int, attention: str = "auto", mode: str | None = None,
                dtype: torch.dtype = torch.float32, blind: bool = False) -> EnsembleEmulator:
    """One ensemble of a group. With ``mode``, member e is initialised exactly as a stand-alone
    emulator of its own token width from ``torch_stream(seed, "ames", mode, "init")`` (the weight-blind
    baseline: ``(seed, "ames", mode, "blind", "init")``), its extra input rows zero; without, the
    values are placeholders (to be overwritten by a state dict)."""
    members = group["members"]
    model = EnsembleEmulator(_placeholder(len(members)), d_in=group["d_in"], d_out=1, n_tokens=1,
                             hidden=group["hidden"], heads=heads, p=p, dtype=dtype,
                             attention=attention)
    if mode is None:
        return model
    for e, (seed, d_in) in enumerate(members):
        ragged.embed(model, e, standalone(seed, d_in, group["hidden"], heads, p, mode, dtype, blind), d_in)
    return model


def standalone(seed: int, d_in: int, hidden: int, heads: int, p: int, mode: str,
               dtype: torch.dtype = torch.float32, blind: bool = False) -> EnsembleEmulator:
    """The emulator (or weight-blind baseline) of one seed at its own token width (a one-member ensemble)."""
    gen = torch_stream(seed, "ames", mode, *(("blind",) if blind else ()), "init")
    return EnsembleEmulator([gen], d_in=d_in, d_out=1, n_tokens=1,
                            hidden=hidden, heads=heads, p=p, dtype=dtype)


def build_frozen(meta: Mapping) -> torch.nn.ModuleList:
    """Rebuild the (untrained) module of a frozen file from its meta (see :func:`train_mode`)."""
    return torch.nn.ModuleList([build_group(g, meta["heads"], meta["p"], meta.get("attention", "auto"))
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
        self.tokens = torch.as_tensor(ragged.pad_columns(tokens, d_in), dtype=dtype, device=device)  # (E, n_train, d_in)
        self.targets = torch.as_tensor(np.stack(targets), dtype=dtype, device=device)  # (E, n_train)
        self._rows = torch.arange(len(tokens), device=device)[:, None]

    def batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.tokens[self._rows, index]                                              # (E, B, d_in)
        return x[:, :, None, :], self.targets[self._rows, index][:, :, None, None]


def train_mode(mode: str, seeds: Sequence[int], prepared_paths: Sequence[str], fits_paths: Sequence[str],
               out: str | Path, params: Mapping[str, Any], checkpoint_dir: str | Path | None = None,
               device_spec: str = "auto", threads: int | None = None, blind: bool = False) -> dict:
    """Train every seed's emulator of ``mode``; save them frozen to ``out`` (+ ``out.json`` sidecar).

    ``blind``: the weight-blind baseline instead (:mod:`algo_emu.ablation`): the same block, hidden width,
    heads, p, epochs, batch, lr, training prompts, targets and data order (same member names, so the same
    shuffle stream), on tokens whose weight columns are removed (:func:`algo_emu.ablation.strip_weights`
    with each seed's :func:`~algo_emu.data.ames_prompts.prompt_layout`); its own init stream. Both sidecars
    record the training budget, which the evaluation checks is the same. ``params``: the ``ames`` section
    (:data:`TRAIN_KEYS` at least). ``checkpoint_dir``: resumable checkpoints, one per hidden-width
    group (the baseline's prefixed ``blind_``). Returns the sidecar."""
    from algo_emu.frozen import save_frozen

    check_modes(mode)
    loaded = load_seeds(seeds, prepared_paths, fits_paths)
    section = params
    runner = Runner(device_spec, threads)
    per_seed, d_ins, inputs = {}, {}, {}
    for s, (prepared, fitted, digests) in loaded.items():
        tokens, targets, draw = training_examples(s, prepared, fitted, mode)
        d_ins[s] = tokens.shape[1]
        if blind:
            lay = prompt_layout(int(prepared["X_train"].shape[1]), mode, f"ames seed {s}")
            tokens = abl.strip_weights(torch.as_tensor(tokens), lay).numpy()
        per_seed[s] = (tokens, targets)
        inputs[s] = dict(digests)
        if mode == "corrected":
            inputs[s]["family_counts"] = {f: int((draw == k).sum()) for k, f in enumerate(POOL_FAMILIES)}
        else:
            inputs[s]["algorithm_counts"] = {a: int((draw == k).sum()) for k, a in enumerate(ALGORITHMS)}
    # the baseline keeps the emulator's hidden width per group (the budget); its input: the widest blind token
    groups = [{**g, "d_in": max(per_seed[s][0].shape[1] for s, _ in g["members"]),
               "members": [[s, int(per_seed[s][0].shape[1])] for s, _ in g["members"]]}
              for g in member_groups(d_ins, section["heads"], section["hidden"])]
    run_params = {k: section[k] for k in RESULT_KEYS} | {"mode": mode} | ({"weight_blind": True} if blind else {})
    cfg = train_config("ames", section)
    models, history, seconds, budgets = [], {}, {}, {}
    for g in groups:
        gseeds = [s for s, _ in g["members"]]
        task = AmesTask([per_seed[s][0] for s in gseeds], [per_seed[s][1] for s in gseeds], gseeds, mode, g["d_in"],
                        runner.device)
        model = build_group(g, section["heads"], section["p"], section["attention"], mode=mode,
                            blind=blind).to(runner.device)
        ckpt = Path(checkpoint_dir) / f"{'blind_' if blind else ''}h{g['hidden']}.pt" if checkpoint_dir else None
        log.info("%s%s: group h=%d, d_in=%d, seeds %s (%d training prompts each) on %s", mode,
                 " weight-blind" if blind else "", g["hidden"], g["d_in"], gseeds, task.n_train, runner.device)
        res = runner.train(model, task, cfg, run_params, ckpt, fingerprint_extra={"group": g, "inputs": {s: inputs[s] for s in gseeds}})
        models.append(model.to("cpu"))
        budgets[str(g["hidden"])] = abl.budget(section, n_prompts=int(task.n_train), p=section["p"],
                                               hidden=int(g["hidden"]))
        for e, s in enumerate(gseeds):
            history[s] = [{"epoch": h["epoch"], "train_loss": h["train_loss"][e]} for h in res.history]
        seconds[g["hidden"]] = {"train_seconds_this_call": res.seconds, "epochs_run_this_call": res.epochs_run,
                                "resumed_from_epoch": res.resumed_from,
                                "epoch_seconds": [h["seconds"] for h in res.history]}
    meta = {"experiment": "ames", "mode": mode, "weight_blind": blind, "heads": section["heads"],
            "p": section["p"],
            "attention": models[0].resolved_attention(next(models[0].parameters()).device), "groups": groups,
            "seeds": [int(s) for s in seeds]}
    extra = {**runner.provenance(run_params), "inputs": {str(s): v for s, v in inputs.items()},
             "budget": budgets, "history": {str(s): v for s, v in history.items()},
             "timing": {"wall_seconds_job": runner.seconds(), "groups": seconds},
             "environment": runner.environment()}
    return save_frozen(out, torch.nn.ModuleList(models), meta, extra)


# --------------------------------------------------------------------------- evaluation


def _forward(model: torch.nn.ModuleList, meta: Mapping, tokens: Mapping[int, np.ndarray], device: torch.device
             ) -> dict[int, np.ndarray]:
    """Outputs of every seed's member on its own tokens ``{seed: (N_s, d_s)}`` (one token per prompt)."""
    return ragged.forward_groups(model, meta["groups"], tokens, lambda m, x: m(x[:, :, None, :])[:, :, 0, 0], device)


def _load_checked(path: str | Path, blind: bool, mode: str, device: torch.device):
    """The frozen emulators (or, ``blind``, baselines) of ``mode``, loaded read-only (a :class:`FrozenFile`)."""
    from algo_emu.frozen import FrozenFile

    ff = FrozenFile(path, build_frozen, device)
    if ff.info["meta"]["mode"] != mode:
        raise ValueError(f"{path} holds {ff.info['meta']['mode']!r} emulators, not {mode!r}")
    abl.check_role(ff.info["meta"], blind, path)
    return ff


def evaluate_mode(mode: str, seeds: Sequence[int], prepared_paths: Sequence[str], fits_paths: Sequence[str],
                  emulator: str | Path, out_dir: str | Path, predictions_csv: str | Path,
                  device_spec: str = "auto", threads: int | None = None, blind: str | Path | None = None
                  ) -> dict[int, dict]:
    """Evaluate the frozen emulators of ``mode``, read-only, per seed and prompt set, with ablations and baseline.

    On each seed's test rows, per prompt set, with prompt ablations (:mod:`algo_emu.ablation`) and, given
    ``blind``, beside the weight-blind baseline.

    Prompt sets: :func:`eval_sets`. Ablations (the target unchanged): algorithm sets ``permuted``,
    ``random``, ``zeros`` and ``other_algorithm``; held-out sets ``other_prompt``, ``permuted``, ``random``,
    ``zeros``; streams ``(seed, "ames", mode, set, "ablation", name)``. The baseline must be one
    (:func:`algo_emu.ablation.check_role`), trained on the same files with the same budget per hidden width
    (:func:`algo_emu.ablation.check_baseline`).
    Writes ``out_dir/seed<k>/metrics.json`` and one predictions CSV (every seed, set and prompt).
    """
    check_modes(mode)
    loaded = load_seeds(seeds, prepared_paths, fits_paths)
    run = Runner(device_spec, threads)
    device = run.device
    emu_file = _load_checked(emulator, False, mode, device)
    info = emu_file.info
    meta = info["meta"]
    where = {s: (gi, e) for gi, g in enumerate(meta["groups"]) for e, (s, _) in enumerate(g["members"])}
    missing = [s for s in seeds if s not in where]
    if missing:
        raise ValueError(f"{emulator} has no emulator for seed(s) {missing} (it has {sorted(where)})")
    for s, pp, fp in zip(seeds, prepared_paths, fits_paths):
        for path, key in ((pp, "prepared_sha256"), (fp, "fits_sha256")):
            if info["inputs"][str(s)][key] != loaded[s][2][key]:
                raise ValueError(f"seed {s}: {path} is not the file {emulator} was trained on (sha256 differs)")
    blind_file = binfo = None
    if blind is not None:
        blind_file = _load_checked(blind, True, mode, device)
        binfo = blind_file.info
        abl.check_baseline(info, binfo, emulator, blind, seeds, grouped=True)  # groups: the hidden widths

    sets = {s: eval_sets(loaded[s][0], loaded[s][1], mode) for s in seeds}
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
        prepared, fitted, _ = loaded[s]
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
            "timing": {"train": info["timing"], "eval_seconds": wall},
            "environment": env,
        }
        out[s] = metrics
    run.write_records(out_dir, out)
    write_csv(predictions_csv, pd.concat(pred_rows, ignore_index=True))
    return out


# --------------------------------------------------------------------------- steps


def aggregate_modes(modes: Sequence[str], metrics_paths: Sequence[str], table_csv: str | Path, runs_csv: str | Path,
                    ablation_csv: str | Path | None = None) -> None:
    """Tables results/tables/ames.{csv,md,tex} (and, given ``ablation_csv``, the ablation table) and the runs CSV.

    :func:`algo_emu.experiments.ames_tables.aggregate`, ``modes`` (the table's row order) checked first; the
    ablation table needs the baselines."""
    check_modes(*modes)
    aggregate(modes, metrics_paths, table_csv, runs_csv, ablation_csv)


#: The steps (``python -m algo_emu ames <step> JOB``, :mod:`algo_emu.cli`); those taking the ``ames`` section
#: (``params``) receive the keys their declaration names, checked by the command line (``PARAMS_OF``).
STEPS = {"download": data.download, "prepare": data.prepare, "fit": fits.fit_seed, "train": train_mode,
         "evaluate": evaluate_mode, "aggregate": aggregate_modes, "figure": figure}
PARAMS_OF = {"download": "download", "prepare": "prepare", "fit": "fit", "train": "train"}
