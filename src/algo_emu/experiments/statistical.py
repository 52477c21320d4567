"""E3: one frozen emulator emulating linear / ridge / lasso (/ GD) from the prompt (Appendix C.1).

Per mode (``reference_code``: the published protocol; ``fitted``: algorithms
really fitted on the context, see :mod:`algo_emu.data.statistical`) and number
of heads H, one model per seed is trained on a mixture of algorithms, saved to a
file and frozen; it is then loaded read-only and evaluated, per algorithm, on
fresh prompts. Seeds are fully independent runs (training data, init, data
order, evaluation data). Read-out: the protocol's block, then Linear(h -> 1);
the block's output Linear(h -> d_out) followed by Linear(h -> 1) composes to one
affine map, so the block with d_out = 1 is the same function class.

Steps (each a Snakemake rule): ``data`` (one (mode, seed)'s training data set,
written once and read by every H's model and weight-blind baseline), ``train``
(one (mode, H): all seeds as one ensemble, writes the frozen model file; with
``blind`` the weight-blind baseline: the same block, data, data order and
budget on tokens without the weights; with ``blind_path`` both, as one
ensemble), ``evaluate`` (loads both read-only, proves them unchanged, evaluates
the model unablated and with the weights in its prompt ablated -- another
prompt's, another algorithm's, permuted, random of the same norm, zeros, and
in fitted mode the context's x and y zeroed -- and the baseline,
``seed<k>/metrics.json``), ``aggregate`` (tables ``statistical_emulation``
with ``mse_over_blind`` and ``statistical_ablation``), ``figure`` and
``ablation-figure``. The ablations are those of :mod:`algo_emu.ablation`.
Each step is ``python -m algo_emu statistical <step> JOB [--threads N]`` (:mod:`algo_emu.cli`): ``JOB`` holds
the keyword arguments of its function in :data:`STEPS`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from algo_emu import ablation as ab
from algo_emu.data import statistical as st
from algo_emu.data.statistical_sets import algorithms, data_params, eval_batches, eval_seed, generate_data, load_data, write_data
from algo_emu.frozen import FrozenFile, save_frozen
from algo_emu.io import tensor_digest
from algo_emu.models.emulator import EnsembleEmulator
from algo_emu.rng import torch_stream
from algo_emu.experiments.statistical_tables import HEADLINE, ablation_figure, aggregate, figure
from algo_emu.train import Job, Member, Runner, train_config

log = logging.getLogger("algo_emu.statistical")

EXPERIMENT = "statistical"
#: The section's defaults, read from workflow/schemas/statistical.schema.yaml (used where a key is absent).
MODES = st.MODES
TRAIN_KEYS = ("n_prompts", "n_context", "n_query", "d", "hidden", "p", "epochs", "batch_size", "lr")
EVAL_KEYS = ("eval_prompts",)
#: Fitted mode's extra ablation: the context tokens' x and y zeroed (the weights and the queries kept).
CONTEXT_ZEROED = "context_zeroed"
#: Donor ablation: the weights another algorithm fitted on the same prompt (the next one of the mixture).
OTHER_ALGORITHM = "other_algorithm"


def check_mode(mode: str) -> None:
    """A step's ``mode`` must be one of :data:`MODES` (ValueError naming the argument otherwise)."""
    if mode not in MODES:
        raise ValueError(f"statistical: mode must be one of {list(MODES)}, got {mode!r}")


def n_tokens(params: dict, mode: str) -> int:
    return params["n_context"] + (params["n_query"] if mode == "fitted" else 0)


def d_in(params: dict, mode: str) -> int:
    return 2 * params["d"] + (2 if mode == "fitted" else 0)


def prompt_layout(params: dict, mode: str) -> ab.PromptLayout:
    """Where the weights are: fitted tokens [x; y; w_A; b_A] (blocks w_A and b_A), reference_code
    tokens [x_i; w]; every token carries them."""
    d = params["d"]
    if mode == "fitted":
        return ab.PromptLayout(f"{EXPERIMENT} fitted", 2 * d + 2, ((d + 1, 2 * d + 1), (2 * d + 1, 2 * d + 2)))
    return ab.PromptLayout(f"{EXPERIMENT} reference_code", 2 * d, ((d, 2 * d),))


def train_budget(params: dict, H: int) -> dict:
    """What a model and its weight-blind baseline must share (:data:`algo_emu.ablation.BUDGET_KEYS`)."""
    return ab.budget(params, heads=H)


def setting_name(mode: str, H: int) -> str:
    return f"{mode}_H{H}"


# --------------------------------------------------------------------------- training


class StatisticalTask:
    """Regression of every seed's mixture data set onto its targets; member (seed, mode).

    reference_code: loss at every token (target y_i, as the published code);
    fitted: loss at the m query tokens only (``loss_positions``), target x_q^T w_A + b_A.
    ``data``: every seed's data set as :func:`load_data` returns it (the workflow's files); None:
    generated here (:func:`generate_data`).
    """

    def __init__(self, seeds: list[int], mode: str, params: dict, device: torch.device,
                 dtype: torch.dtype = torch.float32, data: dict[int, dict[str, torch.Tensor]] | None = None) -> None:
        self.seeds, self.mode = list(seeds), mode
        self.members = [Member(s, mode) for s in self.seeds]
        n, m = params["n_context"], (params["n_query"] if mode == "fitted" else 0)
        xs, ts, self.data_sha256, self.algorithm_counts = [], [], {}, {}
        algs = algorithms(params, mode)
        for s in self.seeds:
            data_s = generate_data(params, mode, s, dtype) if data is None else data[s]
            if data_s["inputs"].dtype != dtype:
                raise ValueError(f"seed {s}: data set of {data_s['inputs'].dtype}, the task needs {dtype}")
            xs.append(data_s["inputs"])
            ts.append(data_s["target"].unsqueeze(-1))
            self.data_sha256[s] = tensor_digest(data_s["inputs"])
            self.algorithm_counts[s] = {a: int((data_s["algorithm"] == k).sum()) for k, a in enumerate(algs)}
        self.inputs = torch.stack(xs).to(device)                    # (S, N, n + m, d_in)
        self.targets = torch.stack(ts).to(device)                   # (S, N, n or m, 1)
        self.loss_positions = torch.arange(n, n + m, device=device) if m else None
        self.n_train = self.inputs.shape[1]
        self._rows = torch.arange(len(self.members), device=device)[:, None]

    def batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[self._rows, index], self.targets[self._rows, index]

    def map_inputs(self, fn) -> "StatisticalTask":
        """This task with its stored inputs replaced by ``fn(inputs)`` (token columns only), the rest shared:
        its batches are ``fn`` of this task's batches (:class:`algo_emu.ablation.WeightBlindTask`)."""
        other = object.__new__(StatisticalTask)
        other.__dict__.update(self.__dict__)
        other.inputs = fn(self.inputs)
        return other


def model_meta(params: dict, mode: str, H: int, seeds: list[int], blind: bool = False) -> dict:
    width = prompt_layout(params, mode).blind().d_in if blind else d_in(params, mode)
    return {"experiment": EXPERIMENT, "mode": mode, "heads": H, "members": [[s, mode] for s in seeds],
            "d_in": width, "d_out": 1, "n_tokens": n_tokens(params, mode), "hidden": params["hidden"],
            "p": params["p"], "attention": params["attention"], "weight_blind": blind,
            **({"readout_hidden": params["hidden"]} if params.get("readout", "block") == "published" else {})}


def build_model(meta: dict, generators: list[torch.Generator] | None = None) -> EnsembleEmulator:
    """The ensemble described by ``meta`` (init from ``generators``, or placeholders when loading)."""
    gens = generators or [torch.Generator().manual_seed(0) for _ in meta["members"]]
    return EnsembleEmulator(gens, d_in=meta["d_in"], d_out=meta["d_out"], n_tokens=meta["n_tokens"],
                            hidden=meta["hidden"], heads=meta["heads"], p=meta["p"],
                            attention=meta["attention"], readout_hidden=meta.get("readout_hidden"))


def train_setting(params: dict, mode: str, H: int, seeds: list[int], model_path: str | Path,
                  checkpoint: str | Path | None = None, device_spec: str = "auto", threads: int | None = None,
                  blind: bool = False, data_paths: list[str | Path] | None = None, blind_path: str | Path | None = None,
                  steps_per_call: int = 1, tf32: bool = False) -> dict:
    """Train one (mode, H) for all seeds as one ensemble and save it frozen to ``model_path``.

    ``blind``: the weight-blind baseline instead -- the same prompts, targets, data order and budget,
    with the weight columns removed from every token (:class:`algo_emu.ablation.WeightBlindTask`),
    initialised from its own stream. ``data_paths``: every seed's training data set (:func:`write_data`,
    in ``seeds``' order); None: generated in this job (the same tensors). ``blind_path``: the model and its
    baseline (saved there) as one ensemble, one shape group (the baseline's tokens zero-padded,
    :meth:`~algo_emu.train.Runner.train_group`; ``steps_per_call`` and ``tf32`` as there); returns the model's sidecar.
    ``checkpoint``: resumable checkpoint file (resumed only by the same run).
    """
    check_mode(mode)
    run = Runner(device_spec, threads, tf32)
    task = StatisticalTask(seeds, mode, params, run.device,
                           data=load_data(params, mode, seeds, data_paths) if data_paths is not None else None)
    t_data = run.seconds()
    paths = {blind: model_path} if blind_path is None else {False: model_path, True: blind_path}
    settings = [_Setting(params, mode, H, seeds, task, b, run.device) for b in paths]
    results = run.train_jobs([s.job for s in settings], checkpoint, steps_per_call)
    return [s.save(run, r, path, t_data) for s, r, path in zip(settings, results, paths.values())][0]


class _Setting:
    """One (mode, H) model or its weight-blind baseline: its model and training job, and its frozen file."""

    def __init__(self, params: dict, mode: str, H: int, seeds: list[int], task: StatisticalTask, blind: bool,
                 device: torch.device) -> None:
        self.params, self.mode, self.H, self.seeds, self.task = params, mode, H, list(seeds), task
        self.meta = meta = model_meta(params, mode, H, seeds, blind)
        init = "init_blind" if blind else "init"
        model = build_model(meta, [torch_stream(s, EXPERIMENT, init, mode) for s in seeds]).to(device)
        meta["attention"] = model.resolved_attention(next(model.parameters()).device)
        cfg = train_config(EXPERIMENT, params, stream=f"{EXPERIMENT}/shuffle")
        run_params = ({k: params[k] for k in TRAIN_KEYS} | {"mode": mode, "heads": H, "algorithms": list(algorithms(params, mode)),
                      "data_params": data_params(params, mode), "attention": model.resolved_attention(next(model.parameters()).device)})
        if mode == "reference_code":
            run_params.pop("n_query")
        if params.get("readout", "block") != "block":  # a default run's parameters (and hash) do not name the key
            run_params["readout"] = params["readout"]
        if blind:
            run_params["weight_blind"] = True
        log.info("statistical %s H=%d%s: %d seeds on %s", mode, H, " weight-blind" if blind else "", len(seeds), device)
        train_task = ab.WeightBlindTask(task, prompt_layout(params, mode)) if blind else task
        self.job = Job(model, train_task, cfg, run_params, seeds)

    def save(self, run: Runner, result, model_path: str | Path, t_data: float) -> dict:
        params, mode, task, seeds = self.params, self.mode, self.task, self.seeds
        extra = {
            **run.provenance(self.job.run_params), "seeds": list(seeds),
            "budget": train_budget(params, self.H), "layout": prompt_layout(params, mode).describe(),
            "data_sha256": {str(s): v for s, v in task.data_sha256.items()},
            "algorithm_counts": {str(s): v for s, v in task.algorithm_counts.items()},
            "history": {str(s): [h["train_loss"][i] for h in result.history] for i, s in enumerate(seeds)},
            "timing": run.timing(result, data_seconds=t_data),
            "environment": run.environment(),
        }
        return save_frozen(model_path, self.job.model, self.meta, extra)


# --------------------------------------------------------------------------- frozen evaluation


def _errors(pred: torch.Tensor, batch: dict, mode: str) -> dict[str, float]:
    """Emulation (vs the algorithm's prediction), prediction (vs noisy y) and the algorithm's own error."""
    e = st.errors(pred, batch)
    if mode == "fitted":
        return e
    y, clean = batch["target"].to(torch.float64), batch["y_clean"].to(torch.float64)
    return {"emulation": e["mse_clean"], "prediction": e["mse"], "algorithm": float((clean - y).square().mean())}


def _predict(model: torch.nn.Module, x: torch.Tensor, chunk: int, m: int) -> torch.Tensor:
    """The ensemble's read-out (E, N, T) -- the last m tokens in fitted mode -- for inputs (E, N, T, d_in)."""
    device = next(model.parameters()).device
    pred = torch.cat([model(x[:, i:i + chunk].to(device)).cpu() for i in range(0, x.shape[1], chunk)], dim=1)[..., 0]
    return pred[..., -m:] if m else pred


def _ablation_variants(params: dict, mode: str, alg: str, seed: int, batches: dict, e: int) -> dict[str, torch.Tensor]:
    """Seed ``seed``'s (member ``e``'s) prompts of ``alg`` with the weights ablated (:mod:`algo_emu.ablation`)."""
    lay = prompt_layout(params, mode)
    algs = list(batches)
    donors, extra = {}, {}
    if len(algs) > 1:  # the weights the next algorithm of the mixture fitted on the same prompt
        other = algs[(algs.index(alg) + 1) % len(algs)]
        donors[OTHER_ALGORITHM] = ab.prompt_weights(batches[other][e]["inputs"], lay)
    if mode == "fitted":
        n, d = params["n_context"], params["d"]

        def context_zeroed(inputs: torch.Tensor, _gen: torch.Generator) -> torch.Tensor:
            inputs[:, :n, :d + 1] = 0  # x and y of every context token; the weights and the queries stay
            return inputs

        extra[CONTEXT_ZEROED] = context_zeroed
    return ab.ablated_inputs(batches[alg][e]["inputs"], lay, seed=seed, stream=(EXPERIMENT, mode, alg),
                             donors=donors, extra=extra)


def evaluate_model(params: dict, model: torch.nn.Module, mode: str, seeds: list[int], chunk: int,
                   batches: dict | None = None, ablations: bool = False, blind: bool = False) -> dict:
    """Per seed and algorithm, errors of the ensemble on fresh data (run it inside
    :meth:`algo_emu.frozen.FrozenFile.evaluating` or :func:`algo_emu.frozen.frozen`).

    ``batches``: from :func:`eval_batches` (generated here when None). ``ablations``: also the headline
    error with the prompt's weights ablated (``ablation_mse[seed][alg][name]``, ``none`` = unablated).
    ``blind``: the model is a weight-blind baseline; its inputs lose the weight columns.
    """
    m = params["n_query"] if mode == "fitted" else 0
    batches = batches if batches is not None else eval_batches(params, mode, seeds)
    lay = prompt_layout(params, mode)
    if ablations and blind:
        ab.require_weights(lay.blind(), "prompt ablations")
    out: dict = {s: {} for s in seeds}
    abl: dict = {s: {} for s in seeds}
    for alg in algorithms(params, mode):
        x = torch.stack([b["inputs"] for b in batches[alg]])      # (E, N_eval, T, d_in)
        pred = _predict(model, ab.strip_weights(x, lay) if blind else x, chunk, m)
        for e, s in enumerate(seeds):
            out[s][alg] = _errors(pred[e], batches[alg][e], mode)
        if not ablations:
            continue
        variants = [_ablation_variants(params, mode, alg, s, batches, e) for e, s in enumerate(seeds)]
        for e, s in enumerate(seeds):
            abl[s][alg] = {ab.NONE: out[s][alg][HEADLINE[mode]]}
        for name in variants[0]:
            pred = _predict(model, torch.stack([v[name] for v in variants]), chunk, m)
            for e, s in enumerate(seeds):
                abl[s][alg][name] = _errors(pred[e], batches[alg][e], mode)[HEADLINE[mode]]
    result = {"errors": out}
    if ablations:
        result["ablation_mse"] = abl
    return result


def _check_same_data(params: dict, trained: dict, mode: str, model_path) -> None:
    """The evaluation data must come from the distribution the model was trained on."""
    keys = ("n_context", "d") + (("n_query",) if mode == "fitted" else ())
    here = {k: params[k] for k in keys} | {"algorithms": list(algorithms(params, mode)),
                                             "data_params": data_params(params, mode)}
    there = {k: trained[k] for k in here}
    if here != there:
        raise ValueError(f"{model_path}: trained with {there}, asked to evaluate with {here}; retrain it")


def _evaluate_file(params: dict, mode: str, H: int, seeds: list[int], path: str | Path, device, batches: dict,
                   blind: bool) -> tuple[dict, dict, dict]:
    """Load one frozen model file read-only, evaluate it (with ablations unless ``blind``), prove it unchanged.

    Returns (sidecar, evaluation, frozen record). A weight-blind file where the model is expected (or the
    reverse) is an error naming the mismatch.
    """
    ff = FrozenFile(path, build_model, device)
    info = ff.info
    members = [tuple(x) for x in info["meta"]["members"]]
    if members != [(s, mode) for s in seeds] or info["meta"]["heads"] != H or info["meta"]["mode"] != mode:
        raise ValueError(f"{path}: holds members {members} (H={info['meta']['heads']}), "
                         f"asked for mode={mode}, H={H}, seeds={seeds}")
    ab.check_role(info["meta"], blind, path)
    _check_same_data(params, info["params"], mode, path)
    with ff.evaluating() as model:
        result = evaluate_model(params, model, mode, seeds, params["eval_chunk"], batches=batches,
                                ablations=not blind, blind=blind)
    return info, result, ff.proof()


def evaluate_setting(params: dict, mode: str, H: int, seeds: list[int], model_path: str | Path, out_dir: str | Path,
                     device_spec: str = "auto", threads: int | None = None,
                     blind_path: str | Path | None = None) -> dict[int, dict]:
    """Evaluate one (mode, H)'s frozen model and its weight-blind baseline, read-only, per algorithm.

    Loads the frozen model (and its weight-blind baseline, when given) read-only, evaluates both on the same
    fresh prompts -- the model also with its prompt's weights ablated -- proves them unchanged; writes
    ``out_dir/seed<k>/metrics.json``. The baseline's budget must equal the model's."""
    check_mode(mode)
    run = Runner(device_spec, threads)
    device = run.device
    batches = eval_batches(params, mode, seeds)
    info, result, frozen_info = _evaluate_file(params, mode, H, seeds, model_path, device, batches, blind=False)
    blind = None
    if blind_path is not None:
        b_info, b_result, b_frozen = _evaluate_file(params, mode, H, seeds, blind_path, device, batches, blind=True)
        ab.check_baseline(info, b_info, model_path, blind_path, seeds, inputs_key="data_sha256")
        blind = (b_info, b_result, b_frozen)
    env, wall = run.environment(), run.seconds()
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
            "timing": {"train": info["timing"], "eval_seconds": wall},
            "environment": {"train": info["environment"], "eval": env},
            "budget": info.get("budget"), "layout": prompt_layout(params, mode).describe(),
            "ablation_mse": result["ablation_mse"][s],
        }
        if blind is not None:
            b_info, b_result, b_frozen = blind
            metrics["blind"] = {
                "model_file": str(blind_path), "input": prompt_layout(params, mode).blind().describe(),
                "errors": b_result["errors"][s], "mse": {a: e[HEADLINE[mode]] for a, e in b_result["errors"][s].items()},
                "budget": b_info["budget"], "train_history": b_info["history"][str(s)], "frozen": b_frozen,
                "train_timing": b_info["timing"],
            }
        out[s] = metrics
    return run.write_records(out_dir, out)


def write_mode_data(params: dict, mode: str, seed: int, path: str | Path) -> dict:
    """Generate one (mode, seed)'s training data set (the mixture of algorithms); write it to ``path``.

    :func:`algo_emu.data.statistical_sets.write_data` (``path`` and ``<path>.json``), ``mode`` checked first."""
    check_mode(mode)
    return write_data(params, mode, seed, path)


#: The steps (``python -m algo_emu statistical <step> JOB``, :mod:`algo_emu.cli`); a (mode, H)'s model and its
#: weight-blind baseline are one train step (``blind``, or both with ``blind_path``).
STEPS = {"data": write_mode_data, "train": train_setting, "evaluate": evaluate_setting, "aggregate": aggregate,
         "figure": figure, "ablation-figure": ablation_figure}
#: The steps whose ``params`` are checked against their declaration (:mod:`algo_emu.specs`).
PARAMS_OF = {"data": "data", "train": "train", "evaluate": "evaluate", "aggregate": "aggregate"}
