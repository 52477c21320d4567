"""E2: one softmax head emulating f(w^T x - y) x (Theorem 3.1) and the one-step GD read-out.

Prompt: n tokens z_i = [x_i; y_i; w] (width 2d + 1; w drawn per prompt and
carried as data, :mod:`algo_emu.data.theorem31`). Target at token i:
f(w^T x_i - y_i) x_i. Model: the emulator block with H = 1 (token-wise affine
map, one softmax attention head, output affine map; no FFN), trained with the
MSE over every token. Corollary 3.1.2: averaging the n outputs with u = (1/n) 1
gives the model's gradient step w - eta * u^T g, compared with the exact step.

Steps (each a Snakemake rule): ``train`` (one p: all seeds x all f as one
ensemble, saved as a frozen file ``<out-dir>/model.pt`` and evaluated from it
read-only (:class:`algo_emu.frozen.FrozenFile`) on the held-out split, intact and
with the weights in the prompt ablated, ``seed<k>/metrics.json``), ``blind`` (the
weight-blind baseline of one p: the same block, data, data order and budget on
tokens [x_i; y_i] without w), ``aggregate`` (tables ``f_emulation`` with
``mse_over_blind``, ``f_gd_step`` and ``f_emulation_ablation``), ``figure`` and
``ablation-figure``. The ablations are those of :mod:`algo_emu.ablation`.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch

from algo_emu import ablation as ab
from algo_emu.data import theorem31 as t31
from algo_emu.frozen import FrozenFile
from algo_emu.io import tensor_digest
from algo_emu.models.emulator import EnsembleEmulator
from algo_emu.rng import split_indices, torch_stream
from algo_emu.experiments.theorem31_tables import ablation_figure, aggregate, figure
from algo_emu.train import Job, Member, Runner, train_config

log = logging.getLogger("algo_emu.theorem31")

EXPERIMENT = "theorem31"
TRAIN_KEYS = ("n_prompts", "n_tokens", "d", "hidden", "heads", "fs", "x_dist", "x_scale", "epochs", "batch_size",
              "lr", "test_fraction", "gd_eta")


def prompt_layout(d: int) -> ab.PromptLayout:
    """Token [x_i; y_i; w]: the weights w are columns d+1 .. 2d of every token."""
    return ab.PromptLayout(EXPERIMENT, 2 * d + 1, ((d + 1, 2 * d + 1),))


def split(seed: int, n_prompts: int, test_fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(train indices, test indices) of one seed, shared by all its f members (:func:`algo_emu.rng.split_indices`)."""
    return split_indices(seed, EXPERIMENT, n_prompts, test_fraction)


def unpack(inputs: torch.Tensor, d: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(X (..., n, d), y (..., n), w (..., d)) from tokens [x_i; y_i; w] (..., n, 2d + 1)."""
    return inputs[..., :d], inputs[..., d], inputs[..., 0, d + 1:]


class Theorem31Task:
    """Per-token regression onto f(w^T x_i - y_i) x_i; member (seed, f).

    Every f of one seed shares its prompts (the data layer's X, y, w streams do not
    depend on f). Every member's training targets are computed once, when the task is
    built (:meth:`train_targets`), so a training step only gathers rows
    (:meth:`batch`). At the paper's scale (10 seeds x 4 f = 40 members, 40,000 training
    prompts, n = 20, d = 24) they take 40 x 40,000 x 20 x 24 x 4 bytes = 3.07 GB
    (float32), beside the 1.57 GB of training tokens.
    """

    def __init__(self, seeds: list[int], params: dict, device: torch.device, dtype: torch.dtype = torch.float32) -> None:
        self.seeds = list(seeds)
        self.fs = tuple(params["fs"])
        self.d = params["d"]
        self.dtype = dtype
        self.members = [Member(s, f) for s in self.seeds for f in self.fs]
        train, test, self.data_sha256 = [], [], {}
        for s in self.seeds:
            data = t31.generate(s, params["n_prompts"], params["n_tokens"], params["d"], f=self.fs[0],
                                x_dist=params["x_dist"], x_scale=params["x_scale"], dtype=torch.float32)
            self.data_sha256[s] = tensor_digest(data["inputs"])
            tr, te = split(s, params["n_prompts"], params["test_fraction"])
            train.append(data["inputs"][tr])
            test.append(data["inputs"][te])
        self.inputs_train = torch.stack(train).to(device)           # (S, n_train, n, 2d+1)
        self.inputs_test = torch.stack(test)                        # (S, n_test, n, 2d+1), CPU
        del train, test, data                                       # the stacks are copies
        self.member_seed = torch.tensor([self.seeds.index(m.seed) for m in self.members], device=device)
        self.member_f = [self.fs.index(m.name) for m in self.members]
        self._f_rows = [torch.tensor([e for e, fk in enumerate(self.member_f) if fk == k], device=device)
                        for k in range(len(self.fs))]
        self.n_train = self.inputs_train.shape[1]
        self.d_out = params["d"]
        self._seed_rows = (self.member_seed * self.n_train)[:, None]     # row of (seed, 0) in the flat tokens
        self._member_rows = (torch.arange(len(self.members), device=device) * self.n_train)[:, None]
        self.targets_train = self.train_targets(params["batch_size"])

    def train_targets(self, chunk: int) -> torch.Tensor:
        """Every member's training targets (E, n_train, n, d) in the task's dtype, on its device.

        Computed by :meth:`targets` -- the same float64 operations a training step used to run on
        its batch -- on consecutive runs of ``chunk`` training prompts per member, i.e. on tensors
        of exactly a training batch's shape (``chunk`` = the batch size; the last run as short as
        the last batch), so every kernel sees the shapes it saw in a step. Shapes matter in one
        place: on the CPU, float64 sigmoid differs in the last bit between its vectorised loop and
        the scalar loop that finishes a tensor whose size is not a multiple of the vector width. At
        the paper's batch shapes ((members per f) x B x n = 10 x 32 x 20) and in the tests' configs
        no scalar tail occurs and every target equals its per-step value bit for bit
        (tests/test_theorem31.py); elsewhere a last-bit float64 difference would also have to
        cross a float32 rounding boundary to show.
        """
        E, n_train, n = len(self.members), self.n_train, self.inputs_train.shape[2]
        device = self.inputs_train.device
        out = torch.empty((E, n_train, n, self.d), dtype=self.dtype, device=device)
        for start in range(0, n_train, chunk):
            index = torch.arange(start, min(start + chunk, n_train), device=device).expand(E, -1)
            x = self.inputs_train[self.member_seed[:, None], index]
            out[:, start:start + chunk] = self.targets(x).to(self.dtype)
        return out

    def map_inputs(self, fn) -> "Theorem31Task":
        """This task with its stored training tokens replaced by ``fn(tokens)`` (token columns only; targets, test
        tokens and the rest shared): its batches are ``fn`` of this task's (:class:`algo_emu.ablation.WeightBlindTask`)."""
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other.inputs_train = fn(self.inputs_train)
        return other

    def targets(self, tokens: torch.Tensor) -> torch.Tensor:
        """Exact targets (float64) of member-stacked tokens (E, B, n, 2d+1) -> (E, B, n, d)."""
        X, y, w = (t.to(torch.float64) for t in unpack(tokens, self.d))
        out = torch.empty(X.shape, dtype=torch.float64, device=X.device)
        for f, rows in zip(self.fs, self._f_rows):
            rows = rows.to(X.device)
            out[rows] = t31.per_sample(w[rows], X[rows], y[rows], f)
        return out

    def batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows ``index`` (E, B) of every member's tokens (E, B, n, 2d+1) and precomputed targets (E, B, n, d)."""
        E, B = index.shape
        tokens = self.inputs_train.flatten(0, 1).index_select(0, (self._seed_rows + index).reshape(-1))
        targets = self.targets_train.flatten(0, 1).index_select(0, (self._member_rows + index).reshape(-1))
        return (tokens.view(E, B, *self.inputs_train.shape[2:]).to(self.dtype),
                targets.view(E, B, *self.targets_train.shape[2:]))

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, eta: float, chunk: int = 1024, inputs: torch.Tensor | None = None,
                 transform=None) -> list[dict]:
        """Per member, on its seed's held-out prompts: test MSE, MSE / Var(target), and the GD step's error.

        ``inputs`` (S, n_test, n, 2d+1) replaces the prompts the model sees (an ablation) while the targets
        stay those of the original held-out prompts; ``transform`` maps each chunk of model inputs
        (the weight-blind baseline strips w).
        """
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        rows = self.member_seed.cpu()
        seen = self.inputs_test if inputs is None else inputs
        if seen.shape != self.inputs_test.shape:
            raise ValueError(f"evaluate: inputs of shape {tuple(seen.shape)}, expected {tuple(self.inputs_test.shape)}")
        transform = transform or (lambda x: x)
        n_test = self.inputs_test.shape[1]
        pred = torch.cat([model(transform(seen[rows, i:i + chunk]).to(device, self.dtype))
                          for i in range(0, n_test, chunk)], dim=1)          # (E, n_test, n, d), on the device
        model.train(was_training)
        out = []
        for e, member in enumerate(self.members):  # the float64 errors on the training device too
            f = member.name
            X, y, w = (t.to(device, torch.float64) for t in unpack(self.inputs_test[rows[e]], self.d))
            g = pred[e].to(torch.float64)
            target = t31.per_sample(w, X, y, f)
            err = (g - target).square()
            var = float(target.var(unbiased=False))
            w_exact = t31.gd_step(w, X, y, f, eta)
            gd_sq = (t31.aggregate_gd(g, w, eta) - w_exact).square()
            step_sq = float((w_exact - w).square().sum(-1).mean())
            out.append({
                "f": f, "mse": float(err.mean()), "target_var": var, "rel_mse": float(err.mean()) / var,
                "mse_per_token": err.mean(dim=(0, 2)).tolist(),
                "gd_mse": float(gd_sq.mean()), "gd_rel": float(gd_sq.sum(-1).mean()) / step_sq,
                "step_sq_norm": step_sq,
            })
        return out


def build_model(task: Theorem31Task, params: dict, p: int, blind: bool = False) -> EnsembleEmulator:
    """The block for every member; ``blind``: the weight-blind baseline (input [x_i; y_i], own init stream)."""
    d = params["d"]
    return EnsembleEmulator(
        [torch_stream(m.seed, EXPERIMENT, "init_blind" if blind else "init", m.name) for m in task.members],
        d_in=(d + 1) if blind else 2 * d + 1, d_out=d, n_tokens=params["n_tokens"], hidden=params["hidden"],
        heads=params["heads"], p=p, attention=params["attention"],
    )


def train_budget(params: dict, p: int) -> dict:
    """What the model and its weight-blind baseline must share (:data:`algo_emu.ablation.BUDGET_KEYS`)."""
    return ab.budget(params, p=p)


def evaluate_ablations(task: Theorem31Task, model: torch.nn.Module, params: dict) -> list[dict]:
    """The trained model on the held-out prompts with w ablated (:mod:`algo_emu.ablation`); call it on a frozen
    model (inside :meth:`algo_emu.frozen.FrozenFile.evaluating`).

    Returns per member ``{ablation: mse}``, including ``none``. Targets stay those of the original prompts; each
    seed's ablation draws come from its own stream ``(seed, "theorem31", "ablation", name)``, so members of one seed
    (the f) see the same ablated prompts.
    """
    lay = prompt_layout(params["d"])
    chunk = params["eval_chunk"]
    out: list[dict] = [{} for _ in task.members]
    for name in (ab.NONE, *ab.ABLATIONS):
        seen = None if name == ab.NONE else torch.stack(
            [ab.ablate(task.inputs_test[i], lay, name, seed=s, stream=(EXPERIMENT,)) for i, s in enumerate(task.seeds)])
        for e, r in enumerate(task.evaluate(model, params["gd_eta"], chunk, inputs=seen)):
            out[e][name] = r["mse"]
    return out


def train_setting(params: dict, p: int, seeds: list[int], out_dir: str | Path,
                  checkpoint: str | Path | None = None,
                  device_spec: str = "auto", threads: int | None = None, blind: bool = False,
                  blind_out_dir: str | Path | None = None, steps_per_call: int = 1, tf32: bool = False) -> dict[int, dict]:
    """Train one p for all seeds x f as one ensemble, evaluate it frozen on the held-out split (with w
    ablated); write ``out_dir/seed<k>/metrics.json``.

    ``blind``: the weight-blind baseline instead -- the same block, prompts, targets, data order (the
    same data-order stream) and budget, on tokens [x_i; y_i] (w removed), initialised from its own stream.
    ``blind_out_dir``: the model and its baseline (records there) as one ensemble from one copy of the data, one
    shape group (the baseline's tokens zero-padded, :meth:`~algo_emu.train.Runner.train_group`; ``steps_per_call``
    and ``tf32`` as there); returns the model's records."""
    run = Runner(device_spec, threads, tf32)
    task = Theorem31Task(seeds, params, run.device)
    lay = prompt_layout(params["d"])
    dirs = {blind: out_dir} if blind_out_dir is None else {False: out_dir, True: blind_out_dir}
    cfg = train_config(EXPERIMENT, params, stream=f"{EXPERIMENT}/shuffle")
    jobs = []
    for b in dirs:
        model = build_model(task, params, p, blind=b).to(run.device)
        run_params = {k: params[k] for k in TRAIN_KEYS} | {"p": p, "attention": model.attention}
        if b:
            run_params["weight_blind"] = True
        log.info("theorem31%s p=%d: %d seeds x %d f = %d members on %s", " weight-blind" if b else "", p, len(seeds),
                 len(task.fs), len(task.members), run.device)
        jobs.append(Job(model, ab.WeightBlindTask(task, lay) if b else task, cfg, run_params, seeds))
    results = run.train_jobs(jobs, checkpoint, steps_per_call)
    return [_write(run, task, params, p, seeds, b, job, result, out)
            for (b, out), job, result in zip(dirs.items(), jobs, results)][0]


def _write(run: Runner, task: Theorem31Task, params: dict, p: int, seeds: list[int], blind: bool, job: Job,
           result, out_dir: str | Path) -> dict[int, dict]:
    """Save one trained model frozen, evaluate it from the file (the model also with w ablated), write its records."""
    lay = prompt_layout(params["d"])
    t_eval = time.perf_counter()
    chunk = params["eval_chunk"]
    # Saved once, evaluated from the file read-only (FrozenFile: digests before and after, the file hashed twice).
    model_file = FrozenFile.saved(Path(out_dir) / "model.pt", job.model,
                                  {"experiment": EXPERIMENT, "p": p, "seeds": list(seeds), "weight_blind": blind},
                                  lambda meta: build_model(task, params, p, blind=blind), run.device)
    with model_file.evaluating() as model:
        if blind:
            evaluation = task.evaluate(model, params["gd_eta"], chunk, transform=lambda x: ab.strip_weights(x, lay))
        else:
            evaluation = task.evaluate(model, params["gd_eta"], chunk)
            ablations = evaluate_ablations(task, model, params)
    frozen_record = model_file.proof()
    timing, provenance = run.timing(result, eval_seconds=time.perf_counter() - t_eval), run.provenance(job.run_params)
    out = {}
    for s in seeds:
        by_f = {}
        for e, m in enumerate(task.members):
            if m.seed != s:
                continue
            r, losses = evaluation[e], [h["train_loss"][e] for h in result.history]
            if blind:
                by_f[m.name] = {"mse": r["mse"], "rel_mse": r["rel_mse"], "target_var": r["target_var"],
                                "gd_rel": r["gd_rel"], "train_loss": losses}
            else:
                res = dict(r)
                res["train_loss"], res["ablation_mse"] = losses, ablations[e]
                by_f[res.pop("f")] = res
        out[s] = {
            "experiment": EXPERIMENT, "setting": {"p": p, "heads": params["heads"]}, "seed": s, "by_f": by_f,
            **provenance, "data_sha256": task.data_sha256[s], "budget": train_budget(params, p),
            "frozen": frozen_record, "timing": timing, "environment": run.environment(),
            **({"weight_blind": True, "input": "tokens [x_i; y_i] (w removed)"} if blind else
               {"n_train": task.n_train, "n_test": int(task.inputs_test.shape[1]), "layout": lay.describe(),
                "ensemble": {"members": len(task.members), "seeds": list(seeds), "fs": list(task.fs)}}),
        }
    return run.write_records(out_dir, out)


#: The steps (``python -m algo_emu theorem31 <step> JOB``, :mod:`algo_emu.cli`); the model and its weight-blind
#: baseline are one train step (``blind``: the same budget by construction).
STEPS = {"train": train_setting, "aggregate": aggregate, "figure": figure, "ablation-figure": ablation_figure}
#: The steps whose ``params`` are checked against their declaration (:mod:`algo_emu.specs`).
PARAMS_OF = {"train": "train", "aggregate": "aggregate"}
