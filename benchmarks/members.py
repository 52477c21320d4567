"""Does a training step get cheaper per member when more members share it? The step time of one ensemble at
1x, 2x and 4x its paper-scale member count, in one run, interleaved.

Why: two of the ways to make the paper's scale cheaper need it. Training a weight-blind baseline in the same
program as its model (one ensemble of 2x the members instead of two jobs), or several settings of one shape
side by side, only pays if part of a step's time is per step (Python dispatch, thread start, small-kernel
latency) rather than per member. If the step time is proportional to the member count, there is nothing to
share, and the remaining cost is each member's own arithmetic.

Each row is a ``paper_scale.py`` row (its own task class, the engine's step: batch assembly, loss, backward,
fused Adam; compiled when the config says so), built at ``seeds x k`` seeds for each multiple ``k``; each
repetition times every multiple once (``--steps`` steps each), in turn, and the medians are reported with
``per-member ratio`` = (ms per step at k / k) / (ms per step at 1): 1.0 = no per-step share; 0.5 at k = 2
would mean half of the step was shared.

    python benchmarks/members.py --out tools/benchmarks/members.json [--only 'E3 fitted H=6' ...] [--multiples 1 2 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "src"))

import paper_scale as ps  # noqa: E402
from algo_emu.config import load_config  # noqa: E402
from algo_emu.runtime import environment, flush_denormals, resolve_device, reuse_freed_memory  # noqa: E402
from algo_emu.train import TrainConfig, make_step  # noqa: E402

DEFAULT_ROWS = ("E1 H=12 p=60", "E2 p=60", "E3 fitted H=6", "E3 reference_code H=6", "E4 corrected p=100")


def _row(cfg: dict, key: str, seeds: int):
    c = dict(cfg, seeds=list(range(seeds)))
    rows = {r.key: r for r in ps.build_rows(c)}
    if key not in rows:
        raise SystemExit(f"--only {key!r}: no such row (rows: {', '.join(rows)})")
    return rows[key], c


def _stepper(r, cfg, device, n_steps: int):
    task, _ = ps.make_task(r, cfg, device, ps._small(n_steps + 4, r.batch))
    model = ps.make_model(r, device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    step = make_step(model, task, TrainConfig(epochs=1, batch_size=r.batch, compile=r.compile), opt)
    g = torch.Generator().manual_seed(0)
    orders = [torch.stack([torch.randperm(task.n_train, generator=g)[:r.batch] for _ in range(r.members)]).to(device)
              for _ in range(4)]
    for i in range(3):  # warm-up (compilation when compiled)
        step(orders[i % 4])

    def run():
        t0 = time.perf_counter()
        for i in range(n_steps):
            step(orders[i % 4])
        return (time.perf_counter() - t0) / n_steps
    return run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "config/config.yaml"))
    ap.add_argument("--out", required=True, help="JSON (the Markdown table beside it, .md)")
    ap.add_argument("--only", nargs="*", default=list(DEFAULT_ROWS), help="paper_scale.py row keys")
    ap.add_argument("--multiples", nargs="*", type=int, default=[1, 2, 4])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--load-note", default="not stated", help="what else ran on the machine (recorded)")
    args = ap.parse_args(argv)
    reuse_freed_memory()
    flush_denormals()  # as every training job does, before the first multi-threaded op
    torch.set_num_threads(args.threads)
    device = resolve_device("cpu")
    cfg = load_config(args.config, gpu_check=False)
    S = len(cfg["seeds"])
    result = {"what": __doc__.split("\n\n")[0], "argv": sys.argv[1:] if argv is None else list(argv),
              "load_note": args.load_note, "environment": environment(device), "rows": {}}
    for key in args.only:
        torch._dynamo.reset()  # a fresh job's compile state per row
        runs, members = {}, {}
        for k in args.multiples:
            r, c = _row(cfg, key, S * k)
            members[k] = r.members
            runs[k] = _stepper(r, c, device, args.steps)
        samples = {k: [] for k in args.multiples}
        for _ in range(args.reps):
            for k in args.multiples:
                samples[k].append(runs[k]())
        ms = {k: 1e3 * statistics.median(v) for k, v in samples.items()}
        base = ms[args.multiples[0]] / args.multiples[0]
        result["rows"][key] = {"compiled": r.compile, "by_multiple": {
            str(k): {"members": members[k], "ms_per_step": ms[k], "ms_per_step_samples": [1e3 * x for x in samples[k]],
                     "per_member_ratio": (ms[k] / k) / base} for k in args.multiples}}
        print(f"{key:24s} " + "  ".join(f"x{k} ({members[k]}): {ms[k]:.1f} ms ({(ms[k] / k) / base:.2f})"
                                        for k in args.multiples), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str) + "\n")
    tmp.replace(out)
    out.with_suffix(".md").write_text(markdown(result))
    return 0


def markdown(result: dict) -> str:
    lines = [
        "# Step time against the member count",
        "",
        ps.generated_by("tools/benchmarks/members.py", result) + f" Load: {result['load_note']}.",
        "",
        "ms per training step of one ensemble (median of interleaved repetitions) at 1x, 2x, 4x its paper-scale "
        "member count; per-member ratio = (ms at k / k) / (ms at 1). 1.0: the step is all per-member work, and "
        "training more members in one program (a baseline beside its model, settings of one shape together) "
        "saves nothing.",
        "",
    ]
    mults = sorted({int(k) for row in result["rows"].values() for k in row["by_multiple"]})
    lines.append("| row | " + " | ".join(f"x{k}: members, ms/step, per-member ratio" for k in mults) + " |")
    lines.append("|---|" + "---|" * len(mults))
    for key, row in result["rows"].items():
        cells = [f"{c['members']}, {c['ms_per_step']:.1f}, {c['per_member_ratio']:.2f}"
                 for c in (row["by_multiple"][str(k)] for k in mults)]
        lines.append(f"| {key}{' (compiled)' if row['compiled'] else ''} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
