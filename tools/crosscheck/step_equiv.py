"""E3's trainer, step for step: the published training step and ours from the same parameters on the same batches.

The published E3 script's model (``att_sim_statistical.OneLayerAttention``, H = 6) and ours with its read-out
(``EnsembleEmulator(readout_hidden=48)``: the same parameters, one to one) start from the same numbers: the published
model's, copied into ours. Then both take K optimiser steps on the same batches: the published script's own step
(``nn.MSELoss``, ``optim.Adam(lr=1e-3)`` with torch's defaults, its model's forward) and our engine's
(``algo_emu.train.make_step``: our forward, attention implementation as named, per-member MSE, our fused Adam), each
batch 32 prompts drawn from prompts the published ``SimStatsDataset`` draws. Recorded per run: the largest relative
difference between the two sides' losses over the K steps.

Runs: from the published model's initialisation and from a published model at the end of its 300 epochs (where the
softmax is sharp and, per ``algo_emu.runtime.flush_denormals``, denormal numbers appear), in float64 and float32,
with each attention implementation of ours, and with our side flushing denormals (as every job of ours does) while
the published side does not. And a control that must be told apart: our side with the learning rate 1 % higher.
``table.py`` reads the record by its rule [step] (``STEP_RULE``, stated there before the numbers).

The second record (``--with-rounding --data-seed 1``: fresh prompts and batch order) adds rounding controls: the
published step against itself, its second copy started one float32 unit in the last place away, from each start;
``table.py`` reads it by rule [step-rounding] (``STEP_ROUNDING_RULE``), which reads each float32 run against them.

    python tools/crosscheck/step_equiv.py --authors <checkout at 6d39297> --trained <published.py e3's model .pth>
    python tools/crosscheck/step_equiv.py --authors <checkout> --trained <the same .pth> --with-rounding --data-seed 1
"""

from __future__ import annotations

import argparse
import copy
import math
import random
import subprocess
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RECORD = HERE / "records" / "e3_step_equiv_H6.json"
SHAPES = {"input_dim": 24, "hidden_dim": 48, "prompt_dim": 24, "seq_len": 20, "number_of_heads": 6, "p": 60}
#: (name, start, dtype, our attention, our lr / the published lr, our side flushes denormals, our side): our side is
#: our engine, or, for a rounding control, the published step itself on a copy of the published model moved one unit
#: in the last place (``published+1ulp``): how far rounding-sized differences alone carry the losses apart.
RUNS = (
    ("init_f64_matmul", "init", "float64", "matmul", 1.0, False, "engine"),
    ("init_f64_kernel", "init", "float64", "kernel", 1.0, False, "engine"),
    ("init_f32_matmul", "init", "float32", "matmul", 1.0, True, "engine"),
    ("init_f32_kernel", "init", "float32", "kernel", 1.0, True, "engine"),
    ("trained_f64_kernel", "trained", "float64", "kernel", 1.0, False, "engine"),
    ("trained_f32_kernel", "trained", "float32", "kernel", 1.0, True, "engine"),
    ("control_init_f32_kernel_lr+1%", "init", "float32", "kernel", 1.01, True, "engine"),
)
#: What the second record adds (``--with-rounding``): the rounding controls and our side without flushing denormals.
ROUNDING_RUNS = (
    ("rounding_init_f32", "init", "float32", "-", 1.0, False, "published+1ulp"),
    ("rounding_trained_f32", "trained", "float32", "-", 1.0, False, "published+1ulp"),
    ("trained_f32_kernel_no_flush", "trained", "float32", "kernel", 1.0, False, "engine"),
)


def _copy(pub: torch.nn.Module, ours: torch.nn.Module) -> None:
    """The published model's parameters copied into ``ours`` (member 0), each into its place in our layout."""
    m, a = pub.attnm.mapping_A, pub.attnm.attn1
    qkv = (a.q_proj, a.k_proj, a.v_proj)
    mapped = {"w_in": m.token_proj.weight.T, "b_in": m.token_proj.bias, "gain": m.modulation, "ext": m.interp_tokens,
              "w_qkv": torch.cat([l.weight.T for l in qkv], 1), "b_qkv": torch.cat([l.bias for l in qkv]),
              "w_o": a.out_proj.weight.T, "b_o": a.out_proj.bias, "w_r": pub.linear.weight.T, "b_r": pub.linear.bias}
    with torch.no_grad():
        for name, value in mapped.items():
            getattr(ours, name)[0].copy_(value)


def run(mod, start: str, dtype: str, attention: str, lr_ratio: float, flush: bool, side: str, steps: int,
        trained: Path | None, data_seed: int = 0) -> dict:
    from algo_emu.models.emulator import EnsembleEmulator
    from algo_emu.train import TrainConfig, make_optimizer, make_step

    dt = getattr(torch, dtype)
    torch.manual_seed(data_seed)
    random.seed(data_seed)
    pub = mod.OneLayerAttention(input_dim=SHAPES["input_dim"], hidden_dim=SHAPES["hidden_dim"],
                                prompt_dim=SHAPES["prompt_dim"], seq_len=SHAPES["seq_len"],
                                number_of_heads=SHAPES["number_of_heads"], p=SHAPES["p"])
    if start == "trained":
        pub.load_state_dict(torch.load(trained, map_location="cpu"))
    pub = pub.to(dt)
    ds = mod.SimStatsDataset(2000, SHAPES["seq_len"], SHAPES["input_dim"], SHAPES["prompt_dim"], "mixed", 0.05)
    x, y, w = (torch.stack([s[i] for s in ds]).to(dt) for i in range(3))
    t = torch.cat([x, w.unsqueeze(1).expand(-1, x.shape[1], -1)], dim=-1)  # our tokens [x_i; w]
    if side == "engine":
        ours = EnsembleEmulator([torch.Generator().manual_seed(0)], d_in=t.shape[-1], d_out=1,
                                n_tokens=SHAPES["seq_len"], hidden=SHAPES["hidden_dim"],
                                heads=SHAPES["number_of_heads"], p=SHAPES["p"], dtype=dt, attention=attention,
                                readout_hidden=SHAPES["hidden_dim"])
        _copy(pub, ours)

        class Batches:  # the engine's task: the rows an index names
            n_train = len(t)

            def batch(self, index):
                return t[index], y[index]

        cfg = TrainConfig(epochs=1, batch_size=32, lr=1e-3 * lr_ratio)
        engine_step = make_step(ours, Batches(), cfg, make_optimizer(ours, cfg))
        step_ours = lambda idx: float(engine_step(idx[None])[0])  # noqa: E731
    else:  # the rounding control: the published step on a copy one unit in the last place away
        twin = copy.deepcopy(pub)
        with torch.no_grad():
            for q in twin.parameters():
                q.copy_(torch.nextafter(q, torch.full_like(q, math.inf)))
        opt_twin = torch.optim.Adam(twin.parameters(), lr=1e-3 * lr_ratio)

        def step_ours(idx):
            opt_twin.zero_grad()
            loss = torch.nn.functional.mse_loss(twin(x[idx], w[idx]), y[idx])
            loss.backward()
            opt_twin.step()
            return loss.item()
    opt_pub, mse = torch.optim.Adam(pub.parameters(), lr=1e-3), torch.nn.MSELoss()
    order = torch.Generator().manual_seed(data_seed + 1)
    worst, last, t0 = 0.0, None, time.perf_counter()
    for k in range(steps):
        idx = torch.randint(0, len(t), (32,), generator=order)
        torch.set_flush_denormal(False)
        opt_pub.zero_grad()
        loss_pub = mse(pub(x[idx], w[idx]), y[idx])
        loss_pub.backward()
        opt_pub.step()
        torch.set_flush_denormal(flush)
        loss_ours = step_ours(idx)
        rel = abs(loss_ours - loss_pub.item()) / abs(loss_pub.item())
        worst = max(worst, rel)
        last = (loss_pub.item(), loss_ours)
    torch.set_flush_denormal(False)
    with torch.no_grad():
        subnormal = sum(int(((p != 0) & (p.abs() < torch.finfo(dt).tiny)).sum()) for p in pub.parameters())
        subnormal += sum(int(((v != 0) & (v.abs() < torch.finfo(dt).tiny)).sum())
                         for st in opt_pub.state.values() for v in st.values() if v.dim())
    return {"start": start, "dtype": dtype, "side": side, "attention": attention, "lr_ratio": lr_ratio,
            "ours_flush_denormals": flush,
            "steps": steps, "worst_rel_loss_diff": worst, "last_losses": {"published": last[0], "ours": last[1]},
            "published_subnormals_at_end": subnormal, "seconds": round(time.perf_counter() - t0, 1)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--authors", type=Path, required=True, help="a checkout of MAGICS-LAB/algo_emu at 6d39297")
    ap.add_argument("--trained", type=Path, default=HERE / "work" / "e3_H6_data0.pth",
                    help="a published E3 model at the end of training (published.py e3 writes it)")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--only", nargs="*", help="run only these runs (names of RUNS)")
    ap.add_argument("--data-seed", type=int, default=0, help="seeds the prompts and the batch order")
    ap.add_argument("--with-rounding", action="store_true", help="also the rounding controls (ROUNDING_RUNS)")
    ap.add_argument("--out", type=Path, help="default: records/e3_step_equiv_H6.json, or ..._data<seed>.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)  # one thread: the flush-denormals setting is the calling thread's
    sys.path.insert(0, str(args.authors))
    import importlib

    mod = importlib.import_module("att_sim_statistical")
    sys.path.insert(0, str(HERE))
    from published import _write  # noqa: PLC0415  (temporary file, fsync, rename)

    runs = {}
    for name, *spec in RUNS + (ROUNDING_RUNS if args.with_rounding else ()):
        if args.only and name not in args.only:
            continue
        runs[name] = run(mod, *spec, steps=args.steps, trained=args.trained, data_seed=args.data_seed)
        print(name, runs[name], flush=True)
    git = lambda *a: subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()  # noqa: E731
    out = args.out or (RECORD if args.data_seed == 0 else RECORD.with_name(f"{RECORD.stem}_data{args.data_seed}.json"))
    _write(out, {"experiment": "E3", "heads": SHAPES["number_of_heads"], "published_commit": "6d39297",
                      "commit": git("rev-parse", "HEAD"), "commit_dirty": bool(git("status", "--porcelain", "src")),
                      "trained_start": args.trained.name, "data_seed": args.data_seed, "torch": torch.__version__, "runs": runs})


if __name__ == "__main__":
    main()
