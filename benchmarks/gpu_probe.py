"""A first probe of a GPU (a few minutes at most): one step of every shape group of the paper scale, captured.

A shape group is what a grouped job trains as one ensemble (``grouping: true``, algo_emu.grouping): E1's
protocols at each (H, p), E2's model and weight-blind baseline at each p, E3's per (mode, H); E4's model and
baseline are timed each alone (not grouped). For each group, on the experiment's own task class with a few
prompts (benchmarks/paper_scale.py's shapes): the engine's eager step, then ``--steps-per-call`` steps per
call as the grouped job runs them (:func:`algo_emu.train.make_steps`: one CUDA graph replay on CUDA; eager on
the CPU, where this script is tried at tiny scale). Per group: ms per step, the useful FLOPs of a step
(paper_scale.flops_step) and the rate they were done at, against the device's large-matmul rate; then the
paper scale priced at these rates, group by group (steps x ms per step, one group at a time). A group that
fails or does not fit in ``--budget`` is named, not priced.

    python benchmarks/gpu_probe.py --out benchmarks/gpu_probe.json                   # on the GPU machine
    python benchmarks/gpu_probe.py --config tests/tiny.yaml --device cpu --out /tmp/p.json --steps-per-call 3
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import traceback
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "src"))

from paper_scale import Row, build_rows, flops_step, make_model, make_task  # noqa: E402

from algo_emu.config import load_config  # noqa: E402
from algo_emu.models.emulator import EnsembleEmulator  # noqa: E402
from algo_emu.runtime import environment, resolve_device  # noqa: E402
from algo_emu.train import StackedTask, TrainConfig, make_optimizer, make_step, make_steps  # noqa: E402


def groups(cfg: dict) -> dict[str, list[Row]]:
    """Every shape group of ``cfg``'s paper scale -> the rows (settings) it stacks."""
    rows = [r for r in build_rows(cfg) if r.experiment != "essay"]
    out: dict[str, list[Row]] = {}
    e1 = next(r for r in rows if r.experiment == "heads")
    hp = cfg["heads"]
    for r in rows:
        if r.experiment == "heads" and r.setting["p"] == hp["p_heads_sweep"]:
            out[r.key] = [r] * r.jobs
    for p in hp["p_sweep"]:
        if p != hp["p_heads_sweep"]:
            key = f"E1 H={hp['heads_p_sweep']} p={p}"
            out[key] = [dataclasses.replace(e1, key=key, heads=hp["heads_p_sweep"], p=p, jobs=1,
                                            setting={"H": hp["heads_p_sweep"], "p": p})]
    blind = {r.experiment: r for r in rows if r.role == "blind" and r.experiment in ("theorem31", "statistical")}
    for r in rows:
        if r.experiment == "theorem31" and r.role == "model":
            out[r.key] = [r, dataclasses.replace(r, key=f"E2 blind p={r.p}", role="blind", d_in=blind["theorem31"].d_in)]
        if r.experiment == "statistical" and r.role == "model":
            width = next(b.d_in for b in rows if b.role == "blind" and b.setting.get("mode") == r.setting["mode"])
            out[r.key] = [r, dataclasses.replace(r, key=f"{r.key} blind", role="blind", d_in=width)]
        if r.experiment == "ames":
            out[r.key] = [r]
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def probe_group(rows: list[Row], cfg: dict, device: torch.device, k: int, reps: int) -> dict:
    """One group: its stacked model and task, the eager step and the K-step call, timed (ms per step)."""
    B = rows[0].batch
    tasks, models = [], []
    for r in rows:
        task, _ = make_task(r, cfg, device, 2 * k * B)
        tasks.append(task)
        models.append(make_model(r, device))
    model = EnsembleEmulator.stacked(models) if len(models) > 1 else models[0]
    task = StackedTask(tasks, model.d_in, model.d_out) if len(tasks) > 1 else tasks[0]
    E = len(task.members)
    tcfg = TrainConfig(epochs=1, batch_size=B, steps_per_call=k, capture=device.type == "cuda")
    opt = make_optimizer(model, tcfg)
    running = torch.zeros(E, dtype=torch.float64, device=device)
    g = torch.Generator().manual_seed(0)
    blocks = [torch.stack([torch.stack([torch.randperm(task.n_train, generator=g)[:B] for _ in range(E)])
                           for _ in range(k)]).to(device) for _ in range(2)]
    out = {"members": E, "settings": [r.key for r in rows], "batch": B, "attention": model.resolved_attention(device)}
    steps = make_steps(model, task, tcfg, opt, running)
    t0 = time.perf_counter()
    steps(blocks[0])  # on CUDA: k eager steps on a side stream, then the capture
    _sync(device)
    out["first_call_seconds"] = time.perf_counter() - t0
    times = []
    for i in range(reps):
        _sync(device)
        t0 = time.perf_counter()
        steps(blocks[i % 2])
        _sync(device)
        times.append(time.perf_counter() - t0)
    out["ms_per_step_k_call"] = 1e3 * sorted(times)[len(times) // 2] / k
    step = make_step(model, task, tcfg, opt)
    step(blocks[0][0])
    _sync(device)
    t0 = time.perf_counter()
    for j in range(k):
        step(blocks[1][j])
    _sync(device)
    out["ms_per_step_eager"] = 1e3 * (time.perf_counter() - t0) / k
    if not torch.isfinite(running).all():
        raise FloatingPointError("a training loss is not finite")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "config/config.yaml"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", required=True, help="JSON (and the same name .md)")
    ap.add_argument("--steps-per-call", type=int, default=50)
    ap.add_argument("--reps", type=int, default=3, help="K-step calls timed per group (median)")
    ap.add_argument("--budget", type=float, default=170, help="seconds; groups not reached by then are named")
    ap.add_argument("--tf32", action="store_true", help="matmuls in TF32 (CUDA)")
    ap.add_argument("--only", nargs="*", help="groups whose key starts with one of these")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    device = resolve_device(args.device)
    if args.tf32 and device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    cfg = load_config(args.config, gpu_check=False)
    n = 4096 if device.type == "cuda" else 512
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    a @ b
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(10):
        a @ b
    _sync(device)
    matmul_tflops = 2 * n**3 * 10 / (time.perf_counter() - t0) / 1e12
    result = {"what": __doc__.split("\n\n")[0], "argv": sys.argv[1:] if argv is None else list(argv),
              "config": args.config, "steps_per_call": args.steps_per_call, "tf32": bool(args.tf32),
              "matmul_tflops": matmul_tflops, "environment": environment(device), "groups": {}, "not_timed": {}}
    for key, rows in groups(cfg).items():
        if args.only and not any(key.startswith(o) for o in args.only):
            continue
        if time.perf_counter() - t_start > args.budget:
            result["not_timed"][key] = "budget"
            continue
        try:
            res = probe_group(rows, cfg, device, args.steps_per_call, args.reps)
        except Exception as exc:  # a failing group is named with why, and the others still run
            result["not_timed"][key] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
            continue
        flop = sum(flops_step(r)[0] for r in rows)
        ms = res["ms_per_step_k_call"]
        res |= {"useful_gflop_per_step": flop / 1e9, "achieved_tflops": flop / (ms / 1e3) / 1e12,
                "floor_ms_per_step": flop / (matmul_tflops * 1e12) * 1e3,
                "paper_steps": rows[0].steps_per_epoch * rows[0].epochs,
                "paper_seconds": rows[0].steps_per_epoch * rows[0].epochs * ms / 1e3}
        result["groups"][key] = res
        print(f"{key:28s} {res['members']:4d} members  eager {res['ms_per_step_eager']:7.2f} ms  "
              f"{args.steps_per_call}/call {ms:7.3f} ms  {res['achieved_tflops']:.3g} TFLOP/s  "
              f"paper {res['paper_seconds']:.0f} s", flush=True)
    g = result["groups"].values()
    result["paper_seconds_one_group_at_a_time"] = sum(r["paper_seconds"] for r in g)
    result["floor_seconds"] = sum(r["paper_steps"] * r["floor_ms_per_step"] / 1e3 for r in g)
    result["probe_seconds"] = time.perf_counter() - t_start
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    return 0


def markdown(result: dict) -> str:
    env = result["environment"]
    lines = ["# One step per shape group (benchmarks/gpu_probe.py)", "",
             f"{env['device_name']}, torch {env['torch']}, CUDA {env['cuda']}, commit {str(env['git_commit'])[:10]}; "
             f"{result['steps_per_call']} steps per call{' (TF32)' if result['tf32'] else ''}; large-matmul rate "
             f"{result['matmul_tflops']:.3g} TFLOP/s; probe {result['probe_seconds']:.0f} s.", "",
             "| group | members | eager ms/step | K-call ms/step | useful GFLOP/step | TFLOP/s achieved | floor ms/step | "
             "paper steps | paper s |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key, r in result["groups"].items():
        lines.append(f"| {key} | {r['members']} | {r['ms_per_step_eager']:.2f} | {r['ms_per_step_k_call']:.3f} | "
                     f"{r['useful_gflop_per_step']:.3g} | {r['achieved_tflops']:.3g} | {r['floor_ms_per_step']:.3g} | "
                     f"{r['paper_steps']:,} | {r['paper_seconds']:.0f} |")
    lines += ["", f"The paper scale at these rates, one group at a time: {result['paper_seconds_one_group_at_a_time']:.0f} s "
              f"of compute (the arithmetic floor at the matmul rate: {result['floor_seconds']:.0f} s)."]
    if result["not_timed"]:
        lines += ["", "Not timed: " + "; ".join(f"{k} ({v})" for k, v in result["not_timed"].items()) + "."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
