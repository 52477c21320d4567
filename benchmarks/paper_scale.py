"""Training speed of every trained experiment at its paper shapes (config/config.yaml), in one run.

Rows: E1 at each H of the heads sweep (p = p_heads_sweep) and at the smallest and largest p of the
prompt-length sweep; E2 at each p (all seeds x f as one ensemble) and its weight-blind baseline at
the largest p; E3 both modes at each H and each mode's weight-blind baseline at the largest H; E4
both modes (and their weight-blind baselines) at the paper's p; the essay's transformer (both
depths). Each row times, interleaved repetition by repetition (median), on the experiment's own task
class (its real batch assembly) with a reduced number of prompts:

* ``ours``: the engine's step (:func:`algo_emu.train.make_step`, exactly what ``train_ensemble`` runs:
  batch assembly, loss, backward, fused Adam; compiled when the config's section says ``compile``);
* ``loop``: one member at a time, the protocol's style: each member its own full-p block
  (:func:`algo_emu.models.emulator.reference_forward`) and its own Adam, stepped in turn (one seed's
  members timed, scaled to the ensemble; batch assembly not counted, which favours the loop);
* where the time goes (eager, same task): batch assembly, forward, backward, optimiser; per job:
  data generation (scaled from a small draw), evaluation (inference forward on the job's evaluation
  prompts), compile warm-up;
* the floor: useful matmul FLOPs of forward + backward (3 x forward; softmax/exp not counted, the
  exponentials per step are listed beside it) at the large-matmul GFLOP/s measured in the same run.

Writes JSON (``--out``) with per-row seconds per step and the steps, epochs and jobs of every
setting (``benchmarks/cost.py`` turns it into predicted hours; ``settings`` holds them per campaign
setting) and a Markdown table (``--md``).
Timings on a loaded machine are noisy; ratios inside one run are what to read.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "src"))

from algo_emu.config import load_config, schema_defaults  # noqa: E402
from algo_emu.models.emulator import EnsembleEmulator, reference_forward  # noqa: E402
from algo_emu.runtime import environment, resolve_device, flush_denormals, reuse_freed_memory  # noqa: E402
from algo_emu.train import TrainConfig, make_step  # noqa: E402


@dataclass
class Row:
    key: str                 # e.g. "E1 H=12 p=60"
    experiment: str          # heads, theorem31, statistical, ames, essay
    role: str                # model or blind
    setting: dict
    members: int
    d_in: int
    d_outs: list
    n: int                   # data tokens
    hidden: int
    heads: int
    p: int
    batch: int
    keep: list | None        # [start, stop) of the tokens the loss reads (None: all)
    steps_per_epoch: int
    epochs: int
    jobs: int                # training jobs of this exact shape in the paper-scale DAG
    compile: bool
    seeds: int
    extra: dict = field(default_factory=dict)


def _n_train(n_prompts: int, test_fraction: float | None) -> int:
    return n_prompts - math.ceil(n_prompts * test_fraction) if test_fraction else n_prompts


def build_rows(cfg: dict) -> list[Row]:
    """Every benchmarked shape of the paper-scale config ``cfg`` (validated, defaults filled)."""
    rows: list[Row] = []
    S = len(cfg["seeds"])
    # E1 -------------------------------------------------------------------------------------------
    hp = cfg["heads"]
    from algo_emu.rng import split_indices
    n_tr = len(split_indices(0, "heads", hp["n_prompts"], hp["test_fraction"])[0])
    spe = math.ceil(n_tr / hp["batch_size"])
    protocols = hp.get("protocols", schema_defaults("heads").get("protocols", ["published"]))
    d_outs = [hp["target_hidden"], hp["target_hidden"], hp["d"]] * S

    def e1(H, p, jobs, what):
        return Row(f"E1 H={H} p={p}", "heads", "model", {"H": H, "p": p, "what": what}, 3 * S, hp["d"], d_outs,
                   hp["n_tokens"], hp["hidden"], H, p, hp["batch_size"], None, spe, hp["epochs"], jobs,
                   bool(hp.get("compile")), S, {"eval_every": hp.get("eval_every"), "n_test": hp["n_prompts"] - n_tr})
    for H in hp["heads_sweep"]:
        rows.append(e1(H, hp["p_heads_sweep"], len(protocols), "heads sweep (every protocol)"))
    ps = sorted(hp["p_sweep"])
    for p in (ps[0], ps[-1]):
        if not any(r.setting == {"H": hp["heads_p_sweep"], "p": p} for r in rows):
            rows.append(e1(hp["heads_p_sweep"], p, 1, "prompt-length sweep (published); other p interpolated"))
    # E2 -------------------------------------------------------------------------------------------
    tp = cfg["theorem31"]
    E2 = S * len(tp["fs"])
    spe2 = math.ceil(_n_train(tp["n_prompts"], tp["test_fraction"]) / tp["batch_size"])
    for p in tp["p_sweep"]:
        rows.append(Row(f"E2 p={p}", "theorem31", "model", {"p": p}, E2, 2 * tp["d"] + 1, [tp["d"]] * E2,
                        tp["n_tokens"], tp["hidden"], tp["heads"], p, tp["batch_size"], None, spe2, tp["epochs"], 1,
                        bool(tp.get("compile")), S, {"n_test": tp["n_prompts"] - _n_train(tp["n_prompts"], tp["test_fraction"])}))
    pmax = max(tp["p_sweep"])
    rows.append(Row(f"E2 blind p={pmax}", "theorem31", "blind", {"p": pmax}, E2, tp["d"] + 1, [tp["d"]] * E2,
                    tp["n_tokens"], tp["hidden"], tp["heads"], pmax, tp["batch_size"], None, spe2, tp["epochs"], 1,
                    bool(tp.get("compile")), S, {"stands_for": "every p (scaled by the model row's ratio)"}))
    # E3 -------------------------------------------------------------------------------------------
    sp = cfg["statistical"]
    spe3 = math.ceil(sp["n_prompts"] / sp["batch_size"])
    for mode in sp["modes"]:
        fitted = mode == "fitted"
        n = sp["n_context"] + (sp["n_query"] if fitted else 0)
        keep = [sp["n_context"], n] if fitted else None
        d_in = 2 * sp["d"] + (2 if fitted else 0)
        for H in sp["heads_sweep"]:
            rows.append(Row(f"E3 {mode} H={H}", "statistical", "model", {"mode": mode, "H": H}, S, d_in, [1] * S, n,
                            sp["hidden"], H, sp["p"], sp["batch_size"], keep, spe3, sp["epochs"], 1,
                            bool(sp.get("compile")), S, {"eval_prompts": sp["eval_prompts"]}))
        Hm = max(sp["heads_sweep"])
        rows.append(Row(f"E3 {mode} blind H={Hm}", "statistical", "blind", {"mode": mode, "H": Hm}, S,
                        sp["d"] + 1 if fitted else sp["d"], [1] * S, n, sp["hidden"], Hm, sp["p"], sp["batch_size"], keep,
                        spe3, sp["epochs"], 1, bool(sp.get("compile")), S,
                        {"stands_for": "every H (scaled by the model row's ratio)"}))
    # E4 -------------------------------------------------------------------------------------------
    ap = cfg["ames"]
    for mode in ap["modes"]:
        d_in, n_prompts, src = _ames_shape(mode)
        from algo_emu.experiments.ames import hidden_width
        h = hidden_width(d_in, ap["heads"], ap["hidden"])
        spe4 = math.ceil(n_prompts / ap["batch_size"])
        # corrected tokens [x; 1; w; b] (2F + 2) -> blind [x; 1]; reference_code [x; w] (2F) -> blind [x]
        blind_d = (d_in - 2) // 2 + 1 if mode == "corrected" else d_in // 2
        for role, width in (("model", d_in), ("blind", blind_d)):
            rows.append(Row(f"E4 {mode}{' blind' if role == 'blind' else ''} p={ap['p']}", "ames", role,
                            {"mode": mode}, S, width, [1] * S, 1, h, ap["heads"], ap["p"], ap["batch_size"],
                            None, spe4, ap["epochs"], 1, bool(ap.get("compile")), S, {"shape_from": src}))
    # E6 -------------------------------------------------------------------------------------------
    ep = cfg["essay"]
    m = ep["model"]
    for layers, what in ((m["layers"], "main"), (ep["shallow_layers"], "shallow")):
        rows.append(Row(f"E6 transformer L={layers}", "essay", "model", {"layers": layers, "what": what}, 1,
                        2 * ep["d"] + 2, [1], ep["k_max"] + 1, m["d_model"], m["heads"], ep["k_max"] + 1,
                        ep["train"]["batch_size"], None, 0, 0, 0, False, len(ep["seeds"]),
                        {"ff": m["ff"], "steps": _essay_steps(ep, what)}))
    return rows


def _essay_steps(ep: dict, what: str) -> dict:
    """Training steps per seed of the variants at this depth."""
    if what == "shallow":
        return {"shallow": ep["train"]["steps"]}
    steps = {"gaussian": ep["train"]["steps"]}
    for M in ep["diversity"]["M"]:
        steps[f"M{M}"] = ep["diversity"]["steps"]
    steps["narrow"] = steps["control"] = ep["narrow"]["finetune_steps"]
    return steps


def _ames_shape(mode: str) -> tuple[int, int, str]:
    """(token width, training prompts) of E4: from the committed reference set's frozen sidecar (the data's
    feature count does not depend on the scale; the widest seed), else a stated fallback."""
    path = REPO / "results/reference/reference-scale/ames" / mode / "emulator.pt.json"
    try:
        side = json.loads(path.read_text())
        d_in = max(g["d_in"] for g in side["meta"]["groups"])
        n_prompts = max(b["n_prompts"] for b in side["budget"].values())
        return d_in, n_prompts, str(path.relative_to(REPO))
    except (OSError, KeyError, ValueError):
        return (552 if mode == "corrected" else 550), (9376 if mode == "corrected" else 2344), "fallback"


# ----------------------------------------------------------------------------------------------- FLOPs


def flops_step(r: Row) -> tuple[float, float]:
    """(useful FLOPs of one training step, forward + backward = 3 x forward; exponentials per step).

    Per member and prompt: token map 2 n d_in h; keys/values of the n data tokens 2 n h 2h; queries of
    the kept nq tokens 2 nq h h; scores and weighted values 4 nq p h; output 2 nq h d_out. Per member
    and step: keys/values of the (p - n) appended tokens 2 (p - n) h 2h. Exponentials: nq p H per
    member and prompt (forward; the backward recomputes or reads them)."""
    if r.experiment == "essay":
        T, D, F, L, B = r.n, r.hidden, r.extra["ff"], r.setting["layers"], r.batch
        per_tok = L * (2 * 4 * D * D + 2 * 2 * D * F + 2 * 2 * T * D) + 2 * r.d_in * D + 2 * D
        return 3.0 * B * T * per_tok, float(B * L * r.heads * T * T)
    n, h, p, m = r.n, r.hidden, r.p, r.p - r.n
    nq = (r.keep[1] - r.keep[0]) if r.keep else n
    total = 0.0
    for do in r.d_outs:
        per_prompt = 2 * n * r.d_in * h + 2 * n * h * 2 * h + 2 * nq * h * h + 4 * nq * p * h + 2 * nq * h * do
        total += r.batch * per_prompt + 2 * m * h * 2 * h
    return 3.0 * total, float(r.members * r.batch * nq * p * r.heads)


def machine_gflops(device, n: int = 1024, reps: int = 8) -> float:
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    a @ b
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 * reps / best / 1e9


# ----------------------------------------------------------------------------------------------- tasks


def _small(n_batches: int, B: int) -> int:
    return max(n_batches * B, 4 * B)


def make_task(r: Row, cfg: dict, device, n_prompts: int):
    """(the experiment's own task class at this shape with ``n_prompts`` prompts per member,
    seconds it took to build = data generation inside the training job for E2/E3)."""
    S = r.seeds
    seeds = list(cfg["seeds"])[:S]
    t0 = time.perf_counter()
    if r.experiment == "heads":
        from algo_emu.experiments.heads import HeadsTask
        hp = dict(cfg["heads"], n_prompts=n_prompts)
        g = torch.Generator().manual_seed(0)
        ds = {s: {"X": 2 * torch.randn(n_prompts, hp["n_tokens"], hp["d"], generator=g) - 1,
                  **{f"W_{k}": torch.randn(hp["target_hidden"] if k in "KQ" else hp["d"], hp["d"], generator=g,
                                           dtype=torch.float64) for k in "KQV"}} for s in seeds}
        task = HeadsTask(ds, hp, device)
    elif r.experiment == "theorem31":
        from algo_emu.experiments.theorem31 import Theorem31Task, prompt_layout
        tp = dict(cfg["theorem31"], n_prompts=n_prompts)
        task = Theorem31Task(seeds, tp, device)
        if r.role == "blind":
            from algo_emu.ablation import WeightBlindTask
            task = WeightBlindTask(task, prompt_layout(tp["d"]))
    elif r.experiment == "statistical":
        from algo_emu.experiments.statistical import StatisticalTask, prompt_layout
        sp = dict(cfg["statistical"], n_prompts=n_prompts)
        task = StatisticalTask(seeds, r.setting["mode"], sp, device)
        if r.role == "blind":
            from algo_emu.ablation import WeightBlindTask
            task = WeightBlindTask(task, prompt_layout(sp, r.setting["mode"]))
    elif r.experiment == "ames":
        from algo_emu.experiments.ames import AmesTask
        g = torch.Generator().manual_seed(0)
        tokens = [torch.randn(n_prompts, r.d_in, generator=g).numpy() for _ in seeds]
        targets = [torch.randn(n_prompts, generator=g).numpy() for _ in seeds]
        task = AmesTask(tokens, targets, seeds, r.setting["mode"], r.d_in, device)
    else:
        raise ValueError(r.experiment)
    return task, time.perf_counter() - t0


def make_model(r: Row, device) -> EnsembleEmulator:
    gens = [torch.Generator().manual_seed(1000 + e) for e in range(r.members)]
    return EnsembleEmulator(gens, r.d_in, r.d_outs, r.n, r.hidden, r.heads, r.p, attention="auto").to(device)


# ----------------------------------------------------------------------------------------------- timing


def _median(xs):
    return statistics.median(xs) if xs else None


class Timer:
    """Interleaved repetitions: call ``run(name, fn, k)`` in a loop; medians per name."""

    def __init__(self):
        self.samples: dict[str, list[float]] = {}

    def run(self, name: str, fn, k: int = 1) -> None:
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        self.samples.setdefault(name, []).append((time.perf_counter() - t0) / k)

    def median(self, name: str):
        return _median(self.samples.get(name, []))


def bench_emulator_row(r: Row, cfg: dict, device, args) -> dict:
    B = r.batch
    n_prompts = _small(args.steps + 4, B)
    task, build_s = make_task(r, cfg, device, n_prompts)
    model = make_model(r, device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    E = r.members
    g = torch.Generator().manual_seed(0)
    orders = [torch.stack([torch.randperm(task.n_train, generator=g)[:B] for _ in range(E)]).to(device)
              for _ in range(8)]
    it = iter(range(10**9))

    def index():
        return orders[next(it) % len(orders)]

    out: dict = {"prompts_built": n_prompts, "task_build_seconds": build_s}
    compiled = r.compile and not args.no_compile
    if compiled:
        # as a fresh job process: without it, every row compiles the same step function again, and past dynamo's
        # recompile limit (8) the later rows silently run eager while labelled compiled
        torch._dynamo.reset()
    step = make_step(model, task, TrainConfig(epochs=1, batch_size=B, compile=compiled), opt)
    t0 = time.perf_counter()
    for _ in range(2):
        step(index())
    out["warmup_seconds"] = time.perf_counter() - t0  # includes compilation when compiled
    eager = step if not compiled else make_step(model, task, TrainConfig(epochs=1, batch_size=B), opt)
    eager(index())
    variants = {}
    if r.keep:  # the step before the kept-query path: every query computed, then sliced
        def full_queries_step(idx, _m=model, _o=opt, _t=task, _k=slice(*r.keep)):
            from algo_emu.train import member_losses
            x, y = _t.batch(idx)
            losses = member_losses(_m(x)[:, :, _k], y, _m.out_mask)
            _o.zero_grad(set_to_none=True)
            losses.sum().backward()
            _o.step()
        variants["all_queries_eager"] = full_queries_step
        full_queries_step(index())
    if model.resolved_attention(device) == "kernel":  # the C kernel beside the PyTorch attention it replaces
        def attention_step(idx, impl, _m=model):
            _m.attention = impl
            try:
                eager(idx)
            finally:
                _m.attention = "auto"
        for impl in ("kernel", "fused"):
            variants[f"{impl}_attention_eager"] = lambda idx, impl=impl: attention_step(idx, impl)
            variants[f"{impl}_attention_eager"](index())

    # the shape group: a GPU's job trains the r.jobs settings of this shape as one ensemble (algo_emu.grouping);
    # timed eager beside the per-setting eager step, the same run
    if r.jobs > 1:
        from algo_emu.train import StackedTask
        group = EnsembleEmulator.stacked([model] * r.jobs)
        gtask = StackedTask([task] * r.jobs, group.d_in, group.d_out)
        gstep = make_step(group, gtask, TrainConfig(epochs=1, batch_size=B),
                          torch.optim.Adam(group.parameters(), lr=1e-3, fused=True))
        gorders = [torch.cat([o] * r.jobs) for o in orders]
        variants["group_eager"] = lambda idx, _s=gstep: _s(gorders[next(it) % len(gorders)])
        variants["per_setting_eager"] = eager
        variants["group_eager"](index())

    # one member at a time (the protocol's loop): one seed's members, own full-p block, own Adam
    per_seed = E // r.seeds
    loop = []
    for e in range(per_seed):
        state = {k: v.clone().requires_grad_() for k, v in model.member_state(e).items()}
        loop.append((e, state, torch.optim.Adam(list(state.values()), lr=1e-3)))
    x_all, y_all = task.batch(index())
    keep = slice(*r.keep) if r.keep else slice(None)

    def loop_step():
        for e, state, o in loop:
            pred = reference_forward(state, x_all[e], r.heads)[:, keep]
            loss = (pred - y_all[e][..., : r.d_outs[e]]).square().mean()
            o.zero_grad(set_to_none=True)
            loss.backward()
            o.step()
    loop_step()

    # pieces of the eager step
    from algo_emu.train import member_losses
    kp = slice(*r.keep) if r.keep else None
    state = {}

    def p_batch():
        state["xy"] = task.batch(index())

    def p_forward():
        x, y = state["xy"]
        pred = model(x, keep=kp) if kp else model(x)
        state["loss"] = member_losses(pred, y, model.out_mask).sum()

    def p_backward():
        opt.zero_grad(set_to_none=True)
        state["loss"].backward()

    def p_opt():
        opt.step()

    # evaluation: inference forward, no grad, chunks of 512 prompts
    x_eval = task.batch(torch.stack([torch.arange(min(task.n_train, 512))] * E).to(device))[0]

    def p_eval():
        with torch.no_grad():
            model(x_eval)

    T = Timer()
    for _ in range(args.reps):
        T.run("ours", lambda: step(index()), args.steps)
        T.run("loop", loop_step, args.loop_steps)
        for name, fn in variants.items():
            T.run(name, lambda fn=fn: fn(index()), max(1, args.steps // 2))
        for _ in range(2):
            T.run("batch", p_batch)
            T.run("forward", p_forward)
            T.run("backward", p_backward)
            T.run("optimizer", p_opt)
        T.run("eval_forward", p_eval)
    out["step_seconds"] = T.median("ours")
    out["loop_step_seconds"] = T.median("loop") * E / per_seed  # the whole ensemble, one member at a time
    out["loop_members_timed"] = per_seed
    out["speedup_vs_loop"] = out["loop_step_seconds"] / out["step_seconds"]
    out["breakdown_eager_step_seconds"] = {k: T.median(k) for k in ("batch", "forward", "backward", "optimizer")}
    out["eval_seconds_per_prompt"] = T.median("eval_forward") / x_eval.shape[1]
    out["variants_step_seconds"] = {k: T.median(k) for k in variants}
    if "group_eager" in variants:
        g, one = T.median("group_eager"), T.median("per_setting_eager")
        out["grouped"] = {"settings": r.jobs, "group_step_seconds": g, "per_setting_step_seconds": one,
                          "group_over_settings": g / (r.jobs * one)}
    out["compiled"] = compiled
    out["attention"] = model.resolved_attention(device)
    return out


def bench_essay_row(r: Row, cfg: dict, device, args) -> dict:
    from algo_emu.essay import tasks
    from algo_emu.essay.train import build_model
    ep = cfg["essay"]
    torch.manual_seed(0)
    model = build_model(ep, r.setting["layers"]).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    prior = tasks.make_prior("gaussian", ep["tau"])
    gen = torch.Generator().manual_seed(0)
    state = {}

    def p_batch():
        b = tasks.sample_prompts(prior, r.batch, r.n, ep["d"], ep["sigma"], gen, 0)
        state["xy"] = (b["X"].float().to(device), b["y"].float().to(device))

    def p_forward():
        X, y = state["xy"]
        state["loss"] = ((model(X, y) - y) ** 2).mean()

    def p_backward():
        opt.zero_grad(set_to_none=True)
        state["loss"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), ep["train"].get("grad_clip", 1.0) or 1e9)

    def p_opt():
        opt.step()

    def step():
        p_batch(); p_forward(); p_backward(); p_opt()  # noqa: E702

    step()
    T = Timer()
    for _ in range(args.reps):
        T.run("ours", step, args.steps)
        for _ in range(2):
            T.run("batch", p_batch)
            T.run("forward", p_forward)
            T.run("backward", p_backward)
            T.run("optimizer", p_opt)
    s = T.median("ours")
    return {"step_seconds": s, "loop_step_seconds": s, "loop_members_timed": 1, "speedup_vs_loop": 1.0,
            "not_an_ensemble": "one model per (variant, seed), trained by its own loop: nothing to batch",
            "breakdown_eager_step_seconds": {k: T.median(k) for k in ("batch", "forward", "backward", "optimizer")},
            "compiled": False, "warmup_seconds": 0.0, "eval_seconds_per_prompt": None}


# ----------------------------------------------------------------------------------------------- per job


def data_seconds_per_job(r: Row, cfg: dict, res: dict) -> float:
    """Data generation inside one training job: E2/E3 draw every seed's data set in the job
    (scaled from the small draw); E1's and E4's data are separate, once-per-seed jobs (not counted here)."""
    if r.experiment == "theorem31":
        return res["task_build_seconds"] / res["prompts_built"] * cfg["theorem31"]["n_prompts"]
    if r.experiment == "statistical":
        return res["task_build_seconds"] / res["prompts_built"] * cfg["statistical"]["n_prompts"]
    return 0.0


def eval_prompts_per_job(r: Row, cfg: dict) -> int:
    """Prompts each member predicts in evaluation per job (held-out sets; E2 with its ablations)."""
    if r.experiment == "heads":
        evals = max(0, math.ceil(r.epochs / r.extra["eval_every"]) - 1) + 1 if r.extra.get("eval_every") else 1
        return evals * r.extra["n_test"]
    if r.experiment == "theorem31":
        from algo_emu import ablation as ab
        return (1 + len(ab.ABLATIONS)) * r.extra.get("n_test", 10_000) if r.role == "model" else r.extra.get("n_test", 10_000)
    if r.experiment == "statistical":
        from algo_emu import ablation as ab
        from algo_emu.experiments.statistical import algorithms
        n_alg = len(algorithms(cfg["statistical"], r.setting["mode"]))
        return r.extra.get("eval_prompts", 1000) * n_alg * (2 + len(ab.ABLATIONS))
    return 0


def finish_row(r: Row, cfg: dict, res: dict, gflops: float) -> dict:
    fl, exps = flops_step(r)
    res["useful_gflop_per_step"] = fl / 1e9
    res["exp_per_step"] = exps
    res["floor_seconds"] = fl / (gflops * 1e9)
    res["ratio_to_floor"] = res["step_seconds"] / res["floor_seconds"]
    if r.experiment == "essay":
        steps = sum(r.extra["steps"].values())
        res["steps_per_job"] = steps
        res["job_seconds"] = steps * res["step_seconds"]
    else:
        res["steps_per_job"] = r.steps_per_epoch * r.epochs
        res["data_seconds_per_job"] = data_seconds_per_job(r, cfg, res)
        res["eval_seconds_per_job"] = (res["eval_seconds_per_prompt"] or 0) * eval_prompts_per_job(r, cfg)
        res["job_seconds"] = (res["steps_per_job"] * res["step_seconds"] + res["data_seconds_per_job"]
                              + res["eval_seconds_per_job"] + (res["warmup_seconds"] if res["compiled"] else 0))
    return res


# ----------------------------------------------------------------------------------------------- output


def generated_by(script: str, result: dict) -> str:
    """The first line under a benchmark table's title: the command, the machine, torch and the commit."""
    env = result["environment"]
    hw = env.get("hardware", {})
    return (f"Generated by `{script}` ({' '.join(result['argv'])}); "
            f"{hw.get('cpu_model')}, {hw.get('cpu_count')} logical cores, {hw.get('memory_gib')} GiB, "
            f"{env['threads']} torch threads, torch {env['torch']}, commit {str(env.get('git_commit'))[:10]}.")


def markdown(result: dict) -> str:
    lines = [
        "# Training speed at the paper's shapes",
        "",
        generated_by("benchmarks/paper_scale.py", result) + " "
        f"Large-matmul speed in this run: {result['machine_gflops']:.1f} GFLOP/s (the floor's rate).",
        "",
        f"Load: {result['load_note']}",
        "",
        "step: seconds per training step of the whole ensemble (median of interleaved repetitions). "
        "x loop: the one-member-at-a-time loop's time for the same members / ours. x floor: ours / "
        "(useful matmul FLOPs of forward+backward at the run's matmul rate; softmax/exp not counted). "
        "loop / floor: the loop's time / the floor = x loop x x floor, the most x loop could be for a step at the floor. "
        "Breakdown (eager pieces, ms): batch assembly / forward / backward / optimiser. "
        "Per job: data generation and evaluation seconds; hours: predicted for one job.",
        "",
        "| row | members | step ms | x loop | x floor | loop / floor | exp/step (M) | batch | fwd | bwd | opt | data s/job | eval s/job | steps/job | h/job |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, row in result["rows"].items():
        m = row["measured"]
        bd = m["breakdown_eager_step_seconds"]
        ms = lambda v: f"{1e3 * v:.1f}" if v is not None else "-"  # noqa: E731
        lines.append(
            f"| {key}{' (compiled)' if m['compiled'] else ''} | {row['shape']['members']} | {ms(m['step_seconds'])} | "
            f"{m['speedup_vs_loop']:.1f} | {m['ratio_to_floor']:.1f} | {m['speedup_vs_loop'] * m['ratio_to_floor']:.1f} | "
            f"{m['exp_per_step'] / 1e6:.1f} | "
            f"{ms(bd['batch'])} | {ms(bd['forward'])} | {ms(bd['backward'])} | {ms(bd['optimizer'])} | "
            f"{m.get('data_seconds_per_job', 0):.0f} | {m.get('eval_seconds_per_job', 0):.0f} | {m['steps_per_job']} | "
            f"{m['job_seconds'] / 3600:.2f} |")
    if result.get("prediction"):
        pred = result["prediction"]
        lines += ["", "## Predicted hours at the paper's scale (benchmarks/cost.py)", "",
                  "| experiment | jobs | hours |", "|---|---|---|"]
        for k, v in pred["experiments"].items():
            lines.append(f"| {k} | {v['jobs']} | {v['hours']:.1f} |")
        lines.append(f"| **all** | {pred['jobs']} | **{pred['hours']:.1f}** |")
        lines += ["", pred["note"]]
    grouped = {k: r["measured"]["grouped"] for k, r in result["rows"].items() if r["measured"].get("grouped")}
    if grouped:
        lines += ["", "## Shape groups", "", "A GPU's job (`grouping: true`) trains the settings of one shape as one "
                  "ensemble; here, on this run's device, one eager step of the group against one eager step of each "
                  "setting alone (the same run). Below 1 the group is faster than its settings one after another.", "",
                  "| row | settings | group step ms | per-setting step ms | group / (settings x per-setting) |",
                  "|---|---|---|---|---|"]
        for k, g in grouped.items():
            lines.append(f"| {k} | {g['settings']} | {1e3 * g['group_step_seconds']:.1f} | "
                         f"{1e3 * g['per_setting_step_seconds']:.1f} | {g['group_over_settings']:.2f} |")
    variants = {k: r["measured"]["variants_step_seconds"] for k, r in result["rows"].items()
                if r["measured"].get("variants_step_seconds")}
    if variants:
        lines += ["", "## Same-run comparisons", "", "| row | variant | step ms | ours / variant |", "|---|---|---|---|"]
        for k, vs in variants.items():
            for name, v in vs.items():
                lines.append(f"| {k} | {name} | {1e3 * v:.1f} | {result['rows'][k]['measured']['step_seconds'] / v:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "config/config.yaml"))
    ap.add_argument("--out", required=True, help="JSON")
    ap.add_argument("--md", help="Markdown table (default: --out with .md)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10, help="engine steps per repetition")
    ap.add_argument("--loop-steps", type=int, default=2, help="one-at-a-time loop steps per repetition")
    ap.add_argument("--reps", type=int, default=3, help="interleaved repetitions (median)")
    ap.add_argument("--only", nargs="*", help="rows whose key starts with one of these (e.g. 'E1 H=12' E3)")
    ap.add_argument("--no-compile", action="store_true", help="time every row eager, whatever the config says")
    ap.add_argument("--load-note", default="not stated",
                    help="what else ran on the machine (recorded; timings under load are noisy)")
    args = ap.parse_args(argv)
    reuse_freed_memory()  # as every training job does
    flush_denormals()  # as every training job does, before the first multi-threaded op
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    cfg = load_config(args.config, gpu_check=False)
    rows = build_rows(cfg)
    if args.only:
        rows = [r for r in rows if any(r.key.startswith(o) for o in args.only)]
    t_start = time.perf_counter()
    gflops = machine_gflops(device)
    result = {
        "what": __doc__.split("\n\n")[0],
        "config": str(Path(args.config).resolve().relative_to(REPO)) if Path(args.config).resolve().is_relative_to(REPO) else args.config,
        "argv": sys.argv[1:] if argv is None else list(argv),
        "load_note": args.load_note,
        "machine_gflops": gflops,
        "flop_model": flops_step.__doc__,
        "environment": environment(device),
        "rows": {},
    }
    if Path("/proc/loadavg").exists():
        result["loadavg_start"] = Path("/proc/loadavg").read_text().split()[:3]
    for r in rows:
        t0 = time.perf_counter()
        res = bench_essay_row(r, cfg, device, args) if r.experiment == "essay" else bench_emulator_row(r, cfg, device, args)
        res = finish_row(r, cfg, res, gflops)
        res["bench_seconds"] = time.perf_counter() - t0
        result["rows"][r.key] = {"shape": asdict(r), "measured": res}
        print(f"{r.key:32s} step {1e3 * res['step_seconds']:8.1f} ms  x loop {res['speedup_vs_loop']:6.1f}  "
              f"x floor {res['ratio_to_floor']:6.1f}  ({res['bench_seconds']:.0f} s)", flush=True)
    result["gflops_check_end"] = machine_gflops(device)
    result["bench_seconds"] = time.perf_counter() - t_start
    if Path("/proc/loadavg").exists():
        result["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    if not args.only:
        from cost import predict_hours
        result["prediction"] = predict_hours(result, cfg)
        result["settings"] = result["prediction"].pop("settings")  # per campaign setting: predicted_seconds
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str) + "\n")
    tmp.replace(out)
    md = Path(args.md) if args.md else out.with_suffix(".md")
    md.write_text(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
