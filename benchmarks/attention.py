"""The narrow-head attention kernel against the PyTorch attention it replaces, in one run.

For each narrow-head shape of the paper-scale config (head width h/H < 16: E1 at H = 4, 6, 8, 12 and
p = 60, E1 H = 12 at the longest p of the sweep, E3 fitted and reference_code at H = 12, E4 at its p),
times, interleaved repetition by repetition (median of ``--reps``):

* ``attention``: the attention alone (forward + backward) on random inputs of the shape;
* ``step``: one eager training step of the ensemble (forward, backward, Adam) on random inputs,
  the same model with ``attention`` set to ``kernel`` and to ``fused``.

Each is timed as CPU seconds of this process (``time.process_time``) with one thread, so the ratio
holds on a machine that other jobs load (wall seconds on an idle machine are close to these), and the
same implementation pair is run back to back. Writes ``--out`` (JSON) with per-row milliseconds and the
kernel/fused ratios (docs/speed.md links to it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from algo_emu.config import load_config  # noqa: E402
from algo_emu.models import kernel  # noqa: E402
from algo_emu.models.emulator import EnsembleEmulator, TwoSetAttention, _fused_chunk  # noqa: E402
from algo_emu.runtime import environment  # noqa: E402
from algo_emu.train import member_losses  # noqa: E402


def shapes(cfg: dict) -> list[dict]:
    S = len(cfg["seeds"])
    hp, sp, ap = cfg["heads"], cfg["statistical"], cfg["ames"]
    rows = []
    for H in hp["heads_sweep"]:
        if hp["hidden"] // H < 16:
            rows.append(dict(key=f"E1 H={H} p={hp['p_heads_sweep']}", E=3 * S, d_in=hp["d"], d_out=hp["target_hidden"],
                             n=hp["n_tokens"], h=hp["hidden"], H=H, p=hp["p_heads_sweep"], B=hp["batch_size"], keep=None))
    Hm, pm = max(hp["heads_sweep"]), max(hp["p_sweep"])
    if hp["hidden"] // Hm < 16 and pm != hp["p_heads_sweep"]:
        rows.append(dict(key=f"E1 H={Hm} p={pm}", E=3 * S, d_in=hp["d"], d_out=hp["target_hidden"], n=hp["n_tokens"],
                         h=hp["hidden"], H=Hm, p=pm, B=hp["batch_size"], keep=None))
    H3 = max(sp["heads_sweep"])
    for mode in sp["modes"]:
        fitted = mode == "fitted"
        n = sp["n_context"] + (sp["n_query"] if fitted else 0)
        if sp["hidden"] // H3 < 16:
            rows.append(dict(key=f"E3 {mode} H={H3}", E=S, d_in=2 * sp["d"] + (2 if fitted else 0), d_out=1, n=n,
                             h=sp["hidden"], H=H3, p=sp["p"], B=sp["batch_size"],
                             keep=[sp["n_context"], n] if fitted else None))
    # E4: one token per prompt, hidden width from the data (the packaged Ames copy: 552 / 550 features)
    h4 = int(math.ceil(552 / ap["heads"]) * ap["heads"])
    if h4 // ap["heads"] < 16:
        rows.append(dict(key=f"E4 corrected p={ap['p']}", E=S, d_in=552, d_out=1, n=1, h=h4, H=ap["heads"],
                         p=ap["p"], B=ap["batch_size"], keep=None))
    return rows


def _cpu(fn, k: int) -> float:
    t0 = time.process_time()
    for _ in range(k):
        fn()
    return (time.process_time() - t0) / k


def bench_row(r: dict, reps: int, steps: int) -> dict:
    E, H, B, n, h, p = r["E"], r["H"], r["B"], r["n"], r["h"], r["p"]
    dh, m = h // H, p - n
    nq = (r["keep"][1] - r["keep"][0]) if r["keep"] else n
    g = torch.Generator().manual_seed(0)
    # each in its own input layout: heads split out (E, H, B, tokens, dh) for fused, heads side by side
    # (E, B, tokens, h) as the projections give them for the kernel
    ins = [torch.randn(s, generator=g).requires_grad_() for s in
           [(E, H, B, nq, dh), (E, H, B, n, dh), (E, H, B, n, dh), (E, H, m, dh), (E, H, m, dh)]]
    packed = [torch.randn(s, generator=g).requires_grad_() for s in [(E, B, nq, h), (E, B, n, 2 * h), (E, m, 2 * h)]]
    w = torch.randn(E, H, B, nq, dh, generator=g)
    wp = torch.randn(E, B, nq, h, generator=g)
    chunk = _fused_chunk(E, H, B, nq, n + m)
    attn = {"kernel": lambda: (kernel.two_set_attention(*packed, H, dh ** -0.5) * wp).sum().backward(),
            "fused": lambda: (TwoSetAttention.apply(*ins, chunk) * w).sum().backward()}
    model = EnsembleEmulator([torch.Generator().manual_seed(e) for e in range(E)], r["d_in"], r["d_out"], n, h, H, p,
                             attention="kernel")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    x = torch.randn(E, B, n, r["d_in"], generator=g)
    y = torch.randn(E, B, nq, r["d_out"], generator=g)
    keep = slice(*r["keep"]) if r["keep"] else None

    def step(impl):
        model.attention = impl
        losses = member_losses(model(x, keep=keep) if keep else model(x), y, model.out_mask)
        opt.zero_grad(set_to_none=True)
        losses.sum().backward()
        opt.step()
    for f in attn.values():
        f()
    for impl in ("kernel", "fused"):
        step(impl)
    t: dict[str, list[float]] = {}
    for _ in range(reps):
        for impl in ("kernel", "fused"):
            t.setdefault(f"attention_{impl}", []).append(_cpu(attn[impl], steps))
            t.setdefault(f"step_{impl}", []).append(_cpu(lambda: step(impl), steps))
    ms = {k: 1e3 * statistics.median(v) for k, v in t.items()}
    return {**r, "head_width": dh, "ms": {k: round(v, 2) for k, v in ms.items()},
            "attention_speedup": round(ms["attention_fused"] / ms["attention_kernel"], 2),
            "step_speedup": round(ms["step_fused"] / ms["step_kernel"], 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "config/config.yaml"))
    ap.add_argument("--out", default=str(REPO / "benchmarks/attention.json"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--only", nargs="*", help="rows whose key starts with one of these")
    args = ap.parse_args(argv)
    ok, why = kernel.available()
    if not ok:
        raise SystemExit(f"the kernel is not available here: {why}")
    torch.set_num_threads(1)
    cfg = load_config(args.config)
    rows = [r for r in shapes(cfg) if not args.only or r["key"].startswith(tuple(args.only))]
    out = {"what": "CPU milliseconds per call (1 thread, process CPU time, median of interleaved repetitions): "
                   "attention forward+backward, and one eager training step (forward, backward, Adam), "
                   "with the C kernel and with the PyTorch fused attention",
           "command": "python benchmarks/attention.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "environment": environment(torch.device("cpu")), "load_average_1min_at_start": os.getloadavg()[0],
           "rows": []}
    for r in rows:
        res = bench_row(r, args.reps, args.steps)
        out["rows"].append(res)
        print(f"{r['key']:<26} attention {res['ms']['attention_fused']:8.1f} -> {res['ms']['attention_kernel']:7.1f} ms "
              f"({res['attention_speedup']}x); step {res['ms']['step_fused']:8.1f} -> {res['ms']['step_kernel']:7.1f} ms "
              f"({res['step_speedup']}x)", flush=True)
    out["load_average_1min_at_end"] = os.getloadavg()[0]
    tmp = Path(args.out).with_suffix(".json.tmp")
    tmp.write_text(json.dumps(out, indent=1) + "\n")
    tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
