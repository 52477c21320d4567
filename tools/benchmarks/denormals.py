"""What denormal floats cost a training run, and what flushing them changes: same shapes, same data, same
steps, once with denormals flushed to zero (the engine's default) and once without, in one run.

A benchmark row at initialisation (``benchmarks/paper_scale.py``) does not see denormals: they appear once
training sharpens a softmax (probabilities below float32's smallest normal number, 1.2e-38) or multiplies
small inputs by small gradients. Each x86 operation that touches one then runs in microcode. This script
trains a paper-scale shape for ``--steps`` steps from the same initialisation and the same batches, twice,
each in a fresh process (the flush setting must be made before torch starts its worker threads; the child
process says whether every worker flushed), and reports:

* milliseconds per step in windows of ``--window`` steps (the slowdown grows as training goes on);
* how many values of the parameters, gradients and Adam state are denormal at the end (the unflushed run;
  counted from the bits, which flushing does not touch);
* whether the two runs' per-step losses are the same bit for bit, and if not, the first step that
  differs and the largest relative difference of the losses.

Shapes: ``paper_scale.py``'s rows (E1, E2, E3: their own task classes on synthetic data drawn as the
benchmark draws it) and E4 on its real training tokens when ``--ames-dir`` names a workflow directory that
holds ``data/ames/seed<k>/prepared.npz`` and ``results/ames/<mode>/seed<k>/fits.npz`` (synthetic tokens
have no tiny entries and do not show the effect).

    python tools/benchmarks/denormals.py --out tools/benchmarks/denormals.json [--only 'E1 H=1 p=60' ...] [--ames-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "src"))

DEFAULT_ROWS = ("E1 H=1 p=60", "E1 H=12 p=60", "E2 p=60", "E3 reference_code H=6", "E3 fitted H=6",
                "E4 corrected p=100")
SMALLEST_NORMAL_BITS = 0x00800000


def count_denormal(t) -> int:
    """Denormal entries of a float32 tensor, read from its bits (exponent 0, mantissa not 0)."""
    import torch

    if t is None or t.dtype != torch.float32:
        return 0
    b = t.detach().contiguous().view(torch.int32) & 0x7FFFFFFF
    return int(((b > 0) & (b < SMALLEST_NORMAL_BITS)).sum())


def _ames_task(mode: str, ames_dir: Path, device):
    """E4's first hidden-width group of the real training tokens in ``ames_dir`` (prepared + fits), as the job builds it."""
    from algo_emu.experiments.ames import AmesTask, _load_seed, build_group, member_groups, training_examples
    from algo_emu.config import load_config

    cfg = load_config(str(REPO / "config/config.yaml"), gpu_check=False)
    ap = cfg["ames"]
    per, d_ins = {}, {}
    for s in cfg["seeds"]:
        prep = ames_dir / f"data/ames/seed{s}/prepared.npz"
        fit = ames_dir / f"results/ames/{mode}/seed{s}/fits.npz"
        if not (prep.is_file() and fit.is_file()):
            continue
        tokens, targets, _ = training_examples(s, *_load_seed(prep, fit), mode)
        per[s], d_ins[s] = (tokens, targets), tokens.shape[1]
    if not per:
        raise SystemExit(f"--ames-dir {ames_dir}: no seed has both prepared.npz and {mode} fits.npz")
    g = member_groups(d_ins, ap["heads"], ap["hidden"])[0]
    seeds = [s for s, _ in g["members"]]
    task = AmesTask([per[s][0] for s in seeds], [per[s][1] for s in seeds], seeds, mode, g["d_in"], device)
    model = build_group(g, ap["heads"], ap["p"], ap.get("attention", "auto"), mode=mode).to(device)
    return task, model, {"group": g, "data": "real training tokens (" + str(ames_dir) + ")"}


def worker(args) -> dict:
    """One run of one shape (in its own process): flush set first, then threads, then everything else."""
    from algo_emu.runtime import denormals_flushed, flush_denormals

    os.environ["ALGO_EMU_FLUSH_DENORMALS"] = "1" if args.flush else "0"
    flush_denormals()
    import torch

    torch.set_num_threads(args.threads)
    from algo_emu.config import load_config
    from algo_emu.train import TrainConfig, epoch_order, make_step
    from paper_scale import build_rows, make_model, make_task

    device = torch.device("cpu")
    cfg = load_config(str(REPO / "config/config.yaml"), gpu_check=False)
    B = None
    if args.row.startswith("E4"):
        mode = args.row.split()[1]
        task, model, info = _ames_task(mode, Path(args.ames_dir), device)
        B = cfg["ames"]["batch_size"]
    else:
        r = next(x for x in build_rows(cfg) if x.key == args.row)
        B = r.batch
        task, _ = make_task(r, cfg, device, args.steps * B)
        model = make_model(r, device)
        info = {"members": r.members, "data": "synthetic (as benchmarks/paper_scale.py draws it)"}
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    step = make_step(model, task, TrainConfig(epochs=1, batch_size=B), opt)
    order = epoch_order(task.members, task.n_train, 0, "shuffle", device)
    per_epoch = task.n_train // B
    seconds, losses = [], []
    for s in range(args.steps):
        k = s % per_epoch
        if k == 0 and s:
            order = epoch_order(task.members, task.n_train, s // per_epoch, "shuffle", device)
        t0 = time.perf_counter()
        losses.append(step(order[:, k * B:(k + 1) * B]).tolist())
        seconds.append(time.perf_counter() - t0)
    den = {"parameters": 0, "gradients": 0, "adam_state": 0, "values": 0}
    for prm in model.parameters():
        den["values"] += prm.numel()
        den["parameters"] += count_denormal(prm)
        den["gradients"] += count_denormal(prm.grad)
        st = opt.state.get(prm, {})
        den["adam_state"] += count_denormal(st.get("exp_avg")) + count_denormal(st.get("exp_avg_sq"))
    return {"row": args.row, "flush_requested": args.flush, "workers_flush": denormals_flushed(),
            "threads": torch.get_num_threads(), "seconds": seconds, "losses": losses, "denormal": den, **info}


def _child(row: str, flush: bool, a) -> dict:
    cmd = [sys.executable, __file__, "--worker", "--row", row, "--steps", str(a.steps), "--threads", str(a.threads)]
    cmd += ["--flush"] if flush else []
    cmd += ["--ames-dir", a.ames_dir] if a.ames_dir else []
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{row} (flush {flush}) failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(on: dict, off: dict, window: int) -> dict:
    def windows(sec):
        return [round(1e3 * statistics.median(sec[i:i + window]), 2) for i in range(0, len(sec), window)]

    first_diff, max_rel = None, 0.0
    for i, (a, b) in enumerate(zip(on["losses"], off["losses"])):
        if a != b and first_diff is None:
            first_diff = i + 1
        max_rel = max([max_rel] + [abs(x - y) / max(abs(y), 1e-300) for x, y in zip(a, b)])
    w_on, w_off = windows(on["seconds"]), windows(off["seconds"])
    last = max(1, len(on["seconds"]) // 4)  # the last quarter of the steps
    tail_on = statistics.median(on["seconds"][-last:])
    tail_off = statistics.median(off["seconds"][-last:])
    return {"steps": len(on["seconds"]), "window": window, "ms_per_step_flushed": w_on, "ms_per_step_not_flushed": w_off,
            "last_quarter_ms_flushed": round(1e3 * tail_on, 2), "last_quarter_ms_not_flushed": round(1e3 * tail_off, 2),
            "slowdown_not_flushed": round(tail_off / tail_on, 2),
            "denormal_values_not_flushed": off["denormal"], "denormal_values_flushed": on["denormal"],
            "workers_flush": {"flushed_run": on["workers_flush"], "not_flushed_run": off["workers_flush"]},
            "losses_bit_identical": first_diff is None, "first_step_losses_differ": first_diff,
            "max_relative_loss_difference": max_rel, "data": on.get("data"), "members": on.get("members"),
            "group": on.get("group")}


def markdown(res: dict) -> str:
    lines = ["# Denormal floats: flushed (the engine's default) against not flushed", "",
             f"Generated by `tools/benchmarks/denormals.py` ({' '.join(res['argv'])}); {res['hardware']}, "
             f"{res['threads']} torch threads, torch {res['torch']}, commit {res['commit']}. Load: {res['load_note']}.", "",
             "Same shape, initialisation and batches, trained twice from step 0, each in its own process. ms/step: "
             "median over the last quarter of the steps. Denormal values: parameters, gradients and Adam state "
             "at the end of the unflushed run (of all values). Losses: the two runs' per-step losses.", "",
             "| row | steps | ms/step flushed | ms/step not flushed | not flushed / flushed | denormal values (of) "
             "| losses | data |", "|---|---|---|---|---|---|---|---|"]
    for k, r in res["rows"].items():
        d = r["denormal_values_not_flushed"]
        nden = d["parameters"] + d["gradients"] + d["adam_state"]
        same = "bit-identical" if r["losses_bit_identical"] else \
            f"differ from step {r['first_step_losses_differ']} (max rel. {r['max_relative_loss_difference']:.1e})"
        lines.append(f"| {k} | {r['steps']} | {r['last_quarter_ms_flushed']} | {r['last_quarter_ms_not_flushed']} | "
                     f"{r['slowdown_not_flushed']} | {nden} ({d['values'] * 3}) | {same} | {r['data']} |")
    lines += ["", "Per window of steps (ms/step, median):", ""]
    for k, r in res["rows"].items():
        lines.append(f"- {k}, every {r['window']} steps: flushed {r['ms_per_step_flushed']}; "
                     f"not flushed {r['ms_per_step_not_flushed']}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="JSON (and .md beside it)")
    ap.add_argument("--only", nargs="*", default=list(DEFAULT_ROWS))
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--window", type=int, default=250)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ames-dir", help="a workflow directory holding E4's prepared data and fits")
    ap.add_argument("--load-note", default="not stated")
    ap.add_argument("--append", action="store_true",
                    help="keep the rows already in --out (each row records the command and load that made it)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--row", help=argparse.SUPPRESS)
    ap.add_argument("--flush", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(a)))
        return 0
    if not a.out:
        ap.error("--out is required")
    import torch

    from algo_emu.runtime import git_commit, git_dirty, hardware

    hw = hardware("cpu")
    res = {"argv": sys.argv[1:] if argv is None else list(argv), "load_note": a.load_note,
           "hardware": f"{hw.get('cpu_model')}, {hw.get('cpu_count')} logical cores", "threads": a.threads,
           "torch": torch.__version__, "commit": (git_commit() or "?")[:10],
           "git_dirty": git_dirty(), "rows": {}}
    out = Path(a.out)
    if a.append and out.is_file():
        old = json.loads(out.read_text())
        for key in ("hardware", "threads", "torch", "commit", "git_dirty"):
            if old[key] != res[key]:
                raise SystemExit(f"--append: {out} was made with {key} {old[key]!r}, this run has {res[key]!r}")
        for r in old["rows"].values():  # rows of the first run carry its command and load
            r.setdefault("argv", old["argv"])
            r.setdefault("load_note", old["load_note"])
        res["rows"] = old["rows"]
        res["argv"], res["load_note"] = old["argv"], old["load_note"]
    argv = sys.argv[1:] if argv is None else list(argv)
    for row in a.only:
        if row.startswith("E4") and not a.ames_dir:
            print(f"{row}: skipped (no --ames-dir)", flush=True)
            continue
        on, off = _child(row, True, a), _child(row, False, a)
        key = row if a.steps == ap.get_default("steps") else f"{row}, {a.steps} steps"
        res["rows"][key] = compare(on, off, a.window) | {"argv": argv, "load_note": a.load_note}
        r = res["rows"][key]
        print(f"{row:28s} flushed {r['last_quarter_ms_flushed']:7.1f} ms  not {r['last_quarter_ms_not_flushed']:7.1f} ms "
              f"x{r['slowdown_not_flushed']}  identical {r['losses_bit_identical']}", flush=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(res, indent=1) + "\n")
    os.replace(tmp, out)
    md = out.with_suffix(".md")
    md.with_suffix(".tmp").write_text(markdown(res))
    os.replace(md.with_suffix(".tmp"), md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
