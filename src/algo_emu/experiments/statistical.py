"""E3: one frozen emulator emulating linear / ridge / lasso (/ GD) from the prompt (Appendix C.1).

Per mode (``reference_code``: the published protocol; ``fitted``: algorithms
really fitted on the context, see :mod:`algo_emu.data.statistical`) and number
of heads H, one model per seed is trained on a mixture of algorithms, saved to a
file and frozen; it is then loaded read-only and evaluated, per algorithm, on
fresh prompts. Seeds are fully independent runs (training data, init, data
order, evaluation data). Read-out: the protocol's block, then Linear(h -> 1);
the block's output Linear(h -> d_out) followed by Linear(h -> 1) composes to one
affine map, so the block with d_out = 1 is the same function class.

Steps (each a Snakemake rule): ``train`` (one (mode, H): all seeds as one
ensemble, writes the frozen model file), ``evaluate`` (loads it read-only,
proves it unchanged, ``seed<k>/metrics.json``), ``aggregate`` (table),
``figure``.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import pandas as pd
import torch

from algo_emu import paper_values
from algo_emu.cli import json_arg
from algo_emu.data import statistical as st
from algo_emu.frozen import frozen, load_frozen, save_frozen
from algo_emu.io import read_json, seed_metrics_path, sha256_file, tensor_digest, write_csv, write_json
from algo_emu.models.emulator import EnsembleEmulator
from algo_emu.rng import derive, torch_stream
from algo_emu.runtime import config_hash, environment, resolve_device
from algo_emu.tables import summarise, write_table
from algo_emu.train import Member, TrainConfig, train_ensemble

log = logging.getLogger("algo_emu.statistical")

EXPERIMENT = "statistical"
MODES = st.MODES
TRAIN_KEYS = ("n_prompts", "n_context", "n_query", "d", "hidden", "p", "epochs", "batch_size", "lr")
EVAL_KEYS = ("eval_prompts",)
COLUMNS = ["mode", "algorithm", "heads", "mse_mean", "mse_std", "mse_ci_low", "mse_ci_high", "n_seeds",
           "paper_mse", "paper_std", "mse_is", "emulation_mean", "emulation_std", "prediction_mean",
           "prediction_std", "alg_error_mean", "alg_error_std"]
#: What ``mse`` means in each mode: the paper's loss (against the noisy y) for the published protocol,
#: the emulation error (against the algorithm's own prediction) for the fitted mode.
HEADLINE = {"reference_code": "prediction", "fitted": "emulation"}
#: Fitted-mode names of the paper's three algorithms (for the figure's panels).
PAPER_NAME = {"linear": "linear", "ols": "linear", "ridge": "ridge", "lasso": "lasso"}


def algorithms(params: dict, mode: str) -> tuple[str, ...]:
    """The mode's training mixture (canonical names); every one is also evaluated."""
    return st.canonical_algorithms(mode, params["algorithms"][mode])


def data_params(params: dict, mode: str) -> dict:
    return st.resolve_params(mode, params["data_params"].get(mode, {}))


def n_tokens(params: dict, mode: str) -> int:
    return params["n_context"] + (params["n_query"] if mode == "fitted" else 0)


def d_in(params: dict, mode: str) -> int:
    return 2 * params["d"] + (2 if mode == "fitted" else 0)


def eval_seed(seed: int) -> int:
    """Seed of a run's evaluation data: a stream of its own, never the training data's."""
    return derive(seed, EXPERIMENT, "eval")


def setting_name(mode: str, H: int) -> str:
    return f"{mode}_H{H}"


# --------------------------------------------------------------------------- training


class StatisticalTask:
    """Regression of every seed's mixture data set onto its targets; member (seed, mode).

    reference_code: loss at every token (target y_i, as the published code);
    fitted: loss at the m query tokens only (``loss_positions``), target x_q^T w_A + b_A.
    """

    def __init__(self, seeds: list[int], mode: str, params: dict, device: torch.device,
                 dtype: torch.dtype = torch.float32) -> None:
        self.seeds, self.mode = list(seeds), mode
        self.members = [Member(s, mode) for s in self.seeds]
        n, m = params["n_context"], (params["n_query"] if mode == "fitted" else 0)
        xs, ts, self.data_sha256, self.algorithm_counts = [], [], {}, {}
        algs = algorithms(params, mode)
        for s in self.seeds:
            data = st.generate(mode, algs, seed=s, n_prompts=params["n_prompts"], n_context=n,
                               n_query=m or None, d=params["d"], params=data_params(params, mode), dtype=dtype)
            xs.append(data["inputs"])
            ts.append(data["target"].unsqueeze(-1))
            self.data_sha256[s] = tensor_digest(data["inputs"])
            self.algorithm_counts[s] = {a: int((data["algorithm"] == k).sum()) for k, a in enumerate(algs)}
        self.inputs = torch.stack(xs).to(device)                    # (S, N, n + m, d_in)
        self.targets = torch.stack(ts).to(device)                   # (S, N, n or m, 1)
        self.loss_positions = torch.arange(n, n + m, device=device) if m else None
        self.n_train = self.inputs.shape[1]
        self._rows = torch.arange(len(self.members), device=device)[:, None]

    def batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[self._rows, index], self.targets[self._rows, index]


def model_meta(params: dict, mode: str, H: int, seeds: list[int]) -> dict:
    return {"experiment": EXPERIMENT, "mode": mode, "heads": H, "members": [[s, mode] for s in seeds],
            "d_in": d_in(params, mode), "d_out": 1, "n_tokens": n_tokens(params, mode), "hidden": params["hidden"],
            "total_tokens": params["p"], "attention": params.get("attention", "auto")}


def build_model(meta: dict, generators: list[torch.Generator] | None = None) -> EnsembleEmulator:
    """The ensemble described by ``meta`` (init from ``generators``, or placeholders when loading)."""
    gens = generators or [torch.Generator().manual_seed(0) for _ in meta["members"]]
    return EnsembleEmulator(gens, d_in=meta["d_in"], d_out=meta["d_out"], n_tokens=meta["n_tokens"],
                            hidden=meta["hidden"], heads=meta["heads"], total_tokens=meta["total_tokens"],
                            attention=meta["attention"])


def train_setting(params: dict, mode: str, H: int, seeds: list[int], model_path: str | Path,
                  checkpoint: str | Path | None, device_spec: str = "auto", threads: int | None = None) -> dict:
    """Train one (mode, H) for all seeds as one ensemble and save it frozen to ``model_path``."""
    if threads:
        torch.set_num_threads(threads)
    device = resolve_device(device_spec)
    t0 = time.perf_counter()
    task = StatisticalTask(seeds, mode, params, device)
    t_data = time.perf_counter() - t0
    meta = model_meta(params, mode, H, seeds)
    model = build_model(meta, [torch_stream(s, EXPERIMENT, "init", mode) for s in seeds]).to(device)
    meta["attention"] = model.resolved_attention(next(model.parameters()).device)
    cfg = TrainConfig(epochs=params["epochs"], batch_size=params["batch_size"], lr=params["lr"],
                      checkpoint_every=params.get("checkpoint_every", 1), compile=params.get("compile", False),
                      stream=f"{EXPERIMENT}/shuffle")
    run_params = ({k: params[k] for k in TRAIN_KEYS} | {"mode": mode, "heads": H, "algorithms": list(algorithms(params, mode)),
                  "data_params": data_params(params, mode), "attention": model.resolved_attention(next(model.parameters()).device)})
    if mode == "reference_code":
        run_params.pop("n_query")
    fingerprint = config_hash(run_params | {"seeds": list(seeds)})
    log.info("statistical %s H=%d: %d seeds on %s", mode, H, len(seeds), device)
    result = train_ensemble(model, task, cfg, checkpoint=checkpoint, fingerprint=fingerprint)
    extra = {
        "params": run_params, "config_hash": config_hash(run_params), "seeds": list(seeds),
        "data_sha256": {str(s): v for s, v in task.data_sha256.items()},
        "algorithm_counts": {str(s): v for s, v in task.algorithm_counts.items()},
        "history": {str(s): [h["train_loss"][i] for h in result.history] for i, s in enumerate(seeds)},
        "timing": {"wall_seconds_job": time.perf_counter() - t0, "data_seconds": t_data,
                   "train_seconds_this_call": result.seconds, "epochs_run_this_call": result.epochs_run,
                   "resumed_from_epoch": result.resumed_from, "epoch_seconds": [h["seconds"] for h in result.history]},
        "environment": environment(device),
    }
    return save_frozen(model_path, model, meta, extra)


# --------------------------------------------------------------------------- frozen evaluation


def eval_data(params: dict, mode: str, algorithm: str, seed: int) -> dict[str, torch.Tensor]:
    """Fresh prompts that all use ``algorithm`` (the evaluation stream of ``seed``)."""
    return st.generate_for(algorithm, mode, seed=eval_seed(seed), n_prompts=params["eval_prompts"],
                           n_context=params["n_context"], n_query=params["n_query"] if mode == "fitted" else None,
                           d=params["d"], params=data_params(params, mode))


def _errors(pred: torch.Tensor, batch: dict, mode: str) -> dict[str, float]:
    """Emulation (vs the algorithm's prediction), prediction (vs noisy y) and the algorithm's own error."""
    e = st.errors(pred, batch)
    if mode == "fitted":
        return e
    y, clean = batch["target"].to(torch.float64), batch["y_clean"].to(torch.float64)
    return {"emulation": e["mse_clean"], "prediction": e["mse"], "algorithm": float((clean - y).square().mean())}


def evaluate_model(params: dict, model: torch.nn.Module, mode: str, seeds: list[int], chunk: int = 1000) -> dict:
    """Per seed and algorithm, errors of the frozen ensemble on fresh data; records the parameter digests."""
    device = next(model.parameters()).device
    m = params["n_query"] if mode == "fitted" else 0
    record: dict = {}
    out: dict = {s: {} for s in seeds}
    with frozen(model, record):
        for alg in algorithms(params, mode):
            batches = [eval_data(params, mode, alg, s) for s in seeds]
            x = torch.stack([b["inputs"] for b in batches])           # (E, N_eval, T, d_in)
            pred = torch.cat([model(x[:, i:i + chunk].to(device)).cpu() for i in range(0, x.shape[1], chunk)], dim=1)
            pred = pred[..., 0]
            if m:
                pred = pred[..., -m:]
            for e, s in enumerate(seeds):
                out[s][alg] = _errors(pred[e], batches[e], mode)
    return {"errors": out, "frozen": record}


def _check_same_data(params: dict, trained: dict, mode: str, model_path) -> None:
    """The evaluation data must come from the distribution the model was trained on."""
    keys = ("n_context", "d") + (("n_query",) if mode == "fitted" else ())
    here = {k: params[k] for k in keys} | {"algorithms": list(algorithms(params, mode)),
                                             "data_params": data_params(params, mode)}
    there = {k: trained[k] for k in here}
    if here != there:
        raise ValueError(f"{model_path}: trained with {there}, asked to evaluate with {here}; retrain it")


def evaluate_setting(params: dict, mode: str, H: int, seeds: list[int], model_path: str | Path, out_dir: str | Path,
                     device_spec: str = "auto", threads: int | None = None) -> dict[int, dict]:
    """Load the frozen model read-only, evaluate it, prove it unchanged; write ``out_dir/seed<k>/metrics.json``."""
    if threads:
        torch.set_num_threads(threads)
    device = resolve_device(device_spec)
    t0 = time.perf_counter()
    file_before = sha256_file(model_path)
    model, info = load_frozen(model_path, build_model, device)
    members = [tuple(x) for x in info["meta"]["members"]]
    if members != [(s, mode) for s in seeds] or info["meta"]["heads"] != H or info["meta"]["mode"] != mode:
        raise ValueError(f"{model_path}: holds members {members} (H={info['meta']['heads']}), "
                         f"asked for mode={mode}, H={H}, seeds={seeds}")
    _check_same_data(params, info["params"], mode, model_path)
    result = evaluate_model(params, model, mode, seeds, params.get("eval_chunk", 1000))
    file_after = sha256_file(model_path)
    frozen_info = result["frozen"] | {"file_sha256_before": file_before, "file_sha256_after": file_after,
                                      "file_unchanged": file_before == file_after,
                                      "matches_saved_digest": result["frozen"]["param_digest_before"] == info["param_digest"]}
    if not (frozen_info["bit_identical"] and frozen_info["file_unchanged"] and frozen_info["matches_saved_digest"]):
        raise RuntimeError(f"{model_path}: the frozen model changed during evaluation: {frozen_info}")
    env = environment(device)
    wall = time.perf_counter() - t0
    eval_params = {k: params[k] for k in EVAL_KEYS}
    out = {}
    for s in seeds:
        metrics = {
            "experiment": EXPERIMENT, "setting": {"mode": mode, "heads": H}, "seed": s, "mode": mode,
            "errors": result["errors"][s], "headline": HEADLINE[mode],
            "mse": {a: e[HEADLINE[mode]] for a, e in result["errors"][s].items()},
            "train_history": info["history"][str(s)], "algorithm_counts": info["algorithm_counts"][str(s)],
            "params": info["params"], "eval_params": eval_params, "eval_seed": eval_seed(s),
            "config_hash": info["config_hash"], "data_sha256": info["data_sha256"][str(s)],
            "model_file": str(model_path), "frozen": frozen_info,
            "timing": {"train": info["timing"], "eval_wall_seconds_job": wall},
            "environment": {"train": info["environment"], "eval": env},
        }
        write_json(seed_metrics_path(out_dir, s), metrics)
        out[s] = metrics
    return out


# --------------------------------------------------------------------------- tables


def load_runs(paths: list[str]) -> pd.DataFrame:
    """One row per (mode, heads, seed, algorithm) from metrics.json files."""
    rows = []
    for path in paths:
        mt = read_json(path)
        for alg, e in mt["errors"].items():
            rows.append({
                "mode": mt["mode"], "heads": mt["setting"]["heads"], "seed": mt["seed"], "algorithm": alg,
                "mse": e[mt["headline"]], "mse_is": mt["headline"], "emulation": e["emulation"],
                "prediction": e["prediction"], "alg_error": e["algorithm"],
                "final_train_loss": mt["train_history"][-1] if mt["train_history"] else float("nan"),
                "epochs": mt["params"]["epochs"], "n_prompts": mt["params"]["n_prompts"],
                "bit_identical": mt["frozen"]["bit_identical"], "device": mt["environment"]["train"]["device"],
                "train_seconds": mt["timing"]["train"]["train_seconds_this_call"], "config_hash": mt["config_hash"],
            })
    if not rows:
        raise ValueError("no metrics files given")
    return pd.DataFrame(rows)


def paper_value(mode: str, algorithm: str, H: int) -> tuple[float, float]:
    """(mean, std) of the paper's figure for reference_code lasso/ridge/linear, else (nan, nan)."""
    pv = paper_values.STATISTICAL_HEADS
    if mode != "reference_code" or algorithm not in pv or H not in pv["heads"]:
        return float("nan"), float("nan")
    i = pv["heads"].index(H)
    return pv[algorithm]["mean"][i], pv[algorithm]["std"][i]


def emulation_table(runs: pd.DataFrame, params: dict) -> pd.DataFrame:
    rows = []
    for mode in params["modes"]:
        for alg in algorithms(params, mode):
            for H in params["heads_sweep"]:
                sel = runs[(runs["mode"] == mode) & (runs.algorithm == alg) & (runs.heads == H)].sort_values("seed")
                if sel.empty:
                    raise ValueError(f"no runs for mode={mode}, algorithm={alg}, H={H}")
                pm, ps = paper_value(mode, alg, H)
                row = {"mode": mode, "algorithm": alg, "heads": H, **summarise(sel.mse.to_numpy()),
                       "paper_mse": pm, "paper_std": ps, "mse_is": HEADLINE[mode]}
                for k in ("emulation", "prediction", "alg_error"):
                    s = summarise(sel[k].to_numpy(), prefix=k)
                    row[f"{k}_mean"], row[f"{k}_std"] = s[f"{k}_mean"], s[f"{k}_std"]
                rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def caption(params: dict, runs: pd.DataFrame) -> str:
    devices = ", ".join(sorted(runs.device.unique()))
    return ("Statistical algorithms (Appendix C.1): one model per seed trained on a mixture of algorithms, frozen, "
            f"evaluated per algorithm on {params['eval_prompts']} fresh prompts per seed (mean, sample std, 95% bootstrap "
            "CI over seeds; each seed a full independent run). mse = the headline named by mse_is: reference_code mode, "
            "the paper's loss against the noisy y; fitted mode, the emulation error against the algorithm's own "
            "prediction at the query. emulation / prediction / alg_error: model vs the algorithm's prediction, model vs "
            "noisy y, the algorithm itself vs noisy y. "
            f"N={params['n_prompts']}, n={params['n_context']} context (+{params['n_query']} query in fitted mode), "
            f"d={params['d']}, h={params['hidden']}, p={params['p']}, {params['epochs']} epochs, batch "
            f"{params['batch_size']}, Adam lr {params['lr']}. Device: {devices}. "
            f"Paper values (reference_code rows): {paper_values.STATISTICAL_HEADS['source']}.")


def aggregate(params: dict, metrics: list[str], runs_csv: str, table_csv: str) -> None:
    runs = load_runs(metrics)
    if not runs.bit_identical.all():
        raise ValueError("a run's frozen model changed during evaluation")
    write_csv(runs_csv, runs.sort_values(["mode", "heads", "algorithm", "seed"]))
    write_table(emulation_table(runs, params), table_csv, caption(params, runs), label="tab:statistical")


def add_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="step", required=True)

    p = sub.add_parser("train", help="train one (mode, H), all seeds as one ensemble; save it frozen")
    p.add_argument("--params", type=json_arg, required=True)
    p.add_argument("--mode", choices=MODES, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--seeds", type=int, nargs="+", required=True)
    p.add_argument("--model", required=True, help="frozen model file to write (and <model>.json)")
    p.add_argument("--checkpoint")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int)
    p.set_defaults(func=lambda a: train_setting(a.params, a.mode, a.heads, a.seeds, a.model, a.checkpoint,
                                                a.device, a.threads) and 0)

    p = sub.add_parser("evaluate", help="load a frozen model read-only and evaluate it per algorithm")
    p.add_argument("--params", type=json_arg, required=True)
    p.add_argument("--mode", choices=MODES, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--seeds", type=int, nargs="+", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int)
    p.set_defaults(func=lambda a: evaluate_setting(a.params, a.mode, a.heads, a.seeds, a.model, a.out_dir,
                                                   a.device, a.threads) and 0)

    p = sub.add_parser("aggregate", help="statistical_emulation table from per-seed metrics")
    p.add_argument("--params", type=json_arg, required=True)
    p.add_argument("--metrics", nargs="+", required=True)
    p.add_argument("--runs", required=True)
    p.add_argument("--table", required=True)
    p.set_defaults(func=lambda a: aggregate(a.params, a.metrics, a.runs, a.table))

    p = sub.add_parser("figure", help="loss vs heads, panels Lasso / Ridge / Linear, with the paper's values")
    p.add_argument("--table", required=True)
    p.add_argument("--runs", required=True)
    p.add_argument("--out", required=True, help="output stem (writes .pdf and .png)")
    p.set_defaults(func=_figure)


def _figure(a: argparse.Namespace) -> int:
    from algo_emu.plots import statistical as ps

    ps.statistical_heads_figure(a.table, a.runs, a.out)
    return 0
