"""Where a training step's time goes at the paper's shapes, and what bounds it, in one run.

Per row (a ``paper_scale.py`` row: its own task class and the engine's step as the jobs run it, compiled when the
config says so):

* the step of the whole ensemble and of one seed's members, timed in alternation (median of ``--reps``): a line
  through the two, ``t(E) = fixed + E x per_member``, splits the step into a part every step pays whatever its
  member count (Python dispatch, the compiled region's guards, the optimiser's call, thread wake-ups) and the
  members' own work;
* the useful FLOP rate of the whole step (``paper_scale.flops_step``: forward + backward matmul FLOPs, softmax not
  counted) and of one member's share of it (``per_member``), against the large-matmul rate measured in the same run;
* a profile of the whole step (``torch.profiler``, self CPU time, with the compiled graph's own kernels named:
  inductor's ``cpp.enable_kernel_profile``), summed into classes: matrix products (``bmm``, ``baddbmm``, ``mm``),
  the attention kernel, the compiled graph's elementwise, reduction and layout kernels, copies, batch assembly
  (indexing), the optimiser, and the rest (dispatch and autograd bookkeeping); and the largest single kernel;
* the machine: the large-matmul rate and the copy bandwidth of a block that fits the last-level cache and of one
  that does not.

    python benchmarks/step_profile.py --out benchmarks/step_profile.json [--only 'E2 p=60' ...]

Writes the JSON and a Markdown table beside it (``.md``). Timings on a loaded machine are noisy; what to read are
the shares and ratios inside one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "src"))

import members as mb  # noqa: E402
import paper_scale as ps  # noqa: E402
from algo_emu.config import load_config  # noqa: E402
from algo_emu.runtime import environment, flush_denormals, resolve_device, reuse_freed_memory  # noqa: E402

DEFAULT_ROWS = ("E1 H=1 p=60", "E1 H=12 p=60", "E2 p=60", "E3 fitted H=12", "E3 reference_code H=6",
                "E4 corrected p=100")

#: profile classes: (name, predicate on an event's name), first match wins
CLASSES = (
    ("matrix products", lambda n: n in ("aten::bmm", "aten::baddbmm", "aten::mm", "aten::addmm")),
    ("attention kernel", lambda n: n.startswith("algo_emu::two_set_attention")),
    ("compiled elementwise/layout", lambda n: n.startswith("graph_") and "_cpp_" in n),
    ("copies", lambda n: n in ("aten::copy_", "aten::clone", "aten::_to_copy", "aten::contiguous")),
    ("batch assembly", lambda n: n in ("aten::index", "aten::index_select", "aten::gather", "aten::take")),
    ("optimiser", lambda n: n.startswith(("aten::_fused_adam", "aten::_foreach", "Optimizer."))),
)


def copy_bandwidth(mib: int, seconds: float = 0.3) -> float:
    """GB/s of ``dst.copy_(src)`` (bytes read + written) for a block of ``mib`` MiB."""
    n = mib * 2**20 // 4
    src, dst = torch.randn(n), torch.empty(n)
    dst.copy_(src)
    k, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        dst.copy_(src)
        k += 1
    return 2 * mib * 2**20 * k / (time.perf_counter() - t0) / 1e9


def profile_shares(run, times: int) -> tuple[dict, tuple[str, float]]:
    """Self-CPU shares of the profile classes over ``times`` calls of ``run`` (each runs ``--steps`` steps); the
    largest single event (name, share)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(times):
            run()
    events = [(e.key, e.self_cpu_time_total) for e in prof.key_averages()]
    total = sum(t for _, t in events) or 1.0
    shares = {name: 0.0 for name, _ in CLASSES}
    shares["other (dispatch, autograd, Python)"] = 0.0
    for key, t in events:
        cls = next((name for name, pred in CLASSES if pred(key)), "other (dispatch, autograd, Python)")
        shares[cls] += t / total
    top = max(events, key=lambda kv: kv[1])
    return shares, (top[0], top[1] / total)


MATMULS = ("aten::bmm", "aten::baddbmm", "aten::mm", "aten::addmm")


def matmul_calls(run, steps: int) -> list[dict]:
    """The step's matrix products as (op, operand shapes, calls per step), read from a profile that records shapes
    (one call of ``run``, ``steps`` steps)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        run()
    calls = []
    for e in prof.key_averages(group_by_input_shape=True):
        if e.key in MATMULS:
            shapes = [list(s) for s in e.input_shapes if s]
            a, b = shapes[0:2] if e.key in ("aten::bmm", "aten::mm") else shapes[1:3]
            calls.append({"op": e.key, "a": a, "b": b, "per_step": e.count / steps})
    return calls


def isolated_matmul_ms(calls: list[dict], seconds: float = 0.05) -> tuple[float, float]:
    """(ms per step, GFLOP per step) of the step's matrix products run alone, each shape on contiguous operands
    already in cache, as many times per step as the step calls it: what these products cost at these shapes
    without the rest of the step around them."""
    ms = flops = 0.0
    for c in calls:
        a, b = torch.randn(c["a"]), torch.randn(c["b"])
        f = torch.bmm if len(c["a"]) == 3 else torch.mm
        out = f(a, b)
        k, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            f(a, b, out=out)
            k += 1
        per_call = (time.perf_counter() - t0) / k
        batch = c["a"][0] if len(c["a"]) == 3 else 1
        ms += 1e3 * per_call * c["per_step"]
        flops += 2.0 * batch * c["a"][-2] * c["a"][-1] * c["b"][-1] * c["per_step"]
    return ms, flops / 1e9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "config/config.yaml"))
    ap.add_argument("--out", required=True, help="JSON (the Markdown table beside it, .md)")
    ap.add_argument("--only", nargs="*", default=list(DEFAULT_ROWS), help="paper_scale.py row keys")
    ap.add_argument("--steps", type=int, default=10, help="steps per timed repetition")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--profile-runs", type=int, default=2, help="timed repetitions profiled (--steps steps each)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--load-note", default="not stated", help="what else ran on the machine (recorded)")
    args = ap.parse_args(argv)
    reuse_freed_memory()
    flush_denormals()  # as every training job does, before the first multi-threaded op
    torch.set_num_threads(args.threads)
    import torch._inductor.config as inductor_config

    inductor_config.cpp.enable_kernel_profile = True  # the compiled graph's kernels by name in the profile
    device = resolve_device("cpu")
    cfg = load_config(args.config, gpu_check=False)
    S = len(cfg["seeds"])
    t_start = time.perf_counter()
    machine = {"matmul_gflops": ps.machine_gflops(device), "copy_gbps_4mib": copy_bandwidth(4),
               "copy_gbps_256mib": copy_bandwidth(256)}
    result = {"what": __doc__.split("\n\n")[0], "argv": sys.argv[1:] if argv is None else list(argv),
              "load_note": args.load_note, "loadavg_start": os.getloadavg(), "environment": environment(device),
              "machine": machine, "rows": {}}
    for key in args.only:
        torch._dynamo.reset()  # a fresh job's compile state per row
        r_full, c_full = mb._row(cfg, key, S)
        r_one, c_one = mb._row(cfg, key, 1)
        runs = {"full": mb._stepper(r_full, c_full, device, args.steps), "one": mb._stepper(r_one, c_one, device, args.steps)}
        samples = {k: [] for k in runs}
        for _ in range(args.reps):
            for k, run in runs.items():
                samples[k].append(run())
        ms = {k: 1e3 * statistics.median(v) for k, v in samples.items()}
        E, e1 = r_full.members, r_one.members
        per_member = (ms["full"] - ms["one"]) / (E - e1) if E > e1 else float("nan")
        fixed = ms["one"] - e1 * per_member
        flops, _ = ps.flops_step(r_full)
        shares, top = profile_shares(runs["full"], args.profile_runs)
        calls = matmul_calls(runs["full"], args.steps)
        iso_ms, iso_gflop = isolated_matmul_ms(calls)
        row = {"members": E, "members_one_seed": e1, "compiled": r_full.compile,
               "ms_per_step": ms["full"], "ms_per_step_one_seed": ms["one"],
               "ms_samples": {k: [1e3 * x for x in v] for k, v in samples.items()},
               "fixed_ms_per_step": fixed, "per_member_ms": per_member,
               "fixed_share": fixed / ms["full"],
               "useful_gflops": flops / (ms["full"] / 1e3) / 1e9,
               "useful_gflops_per_member_work": (flops / E) / (per_member / 1e3) / 1e9 if per_member > 0 else None,
               "profile_shares": shares, "largest_event": {"name": top[0], "share": top[1]},
               "matmul_calls": calls, "matmul_in_step_ms": shares["matrix products"] * ms["full"],
               "matmul_isolated_ms": iso_ms, "matmul_gflop_per_step": iso_gflop,
               "matmul_isolated_gflops": iso_gflop / (iso_ms / 1e3) if iso_ms else None}
        result["rows"][key] = row
        print(f"{key:24s} {ms['full']:.1f} ms (one seed {ms['one']:.1f}); fixed {fixed:.2f} ms; "
              f"{row['useful_gflops']:.0f} GFLOP/s; matmul {shares['matrix products']:.0%}; top {top[0][:50]} "
              f"{top[1]:.0%}; products in the step {row['matmul_in_step_ms']:.1f} ms, alone {iso_ms:.1f} ms "
              f"({row['matmul_isolated_gflops'] or 0:.0f} GFLOP/s)", flush=True)
    result["loadavg_end"] = os.getloadavg()
    result["bench_seconds"] = time.perf_counter() - t_start
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for path, text in ((out, json.dumps(result, indent=1, default=str) + "\n"), (out.with_suffix(".md"), markdown(result))):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return 0


def markdown(res: dict) -> str:
    env, m = res["environment"], res["machine"]
    hw = env.get("hardware", {})
    names = [name for name, _ in CLASSES] + ["other (dispatch, autograd, Python)"]
    lines = ["# Where a training step's time goes, and what bounds it", "",
             f"Generated by `benchmarks/step_profile.py` ({' '.join(res['argv'])}); {hw.get('cpu_model', '?')} "
             f"({hw.get('cpu_id', '')}), {hw.get('cpu_count', '?')} logical cores, {env.get('threads')} torch threads, "
             f"torch {env.get('torch')}, commit {str(env.get('git_commit'))[:10]}. Load: {res['load_note']}.", "",
             f"Machine in this run: large matmul {m['matmul_gflops']:.0f} GFLOP/s; copy bandwidth (read + write) "
             f"{m['copy_gbps_4mib']:.0f} GB/s for a 4 MiB block (in cache), {m['copy_gbps_256mib']:.0f} GB/s for "
             "256 MiB (memory).", "",
             "step: ms per training step of the whole ensemble (and of one seed's members); fixed / per member: the line "
             "through the two (what every step pays whatever its member count, and each member's own work); useful "
             "GFLOP/s: the step's forward + backward matmul FLOPs per second (of the whole step, and of the per-member "
             "part alone), against the large-matmul rate above. Profile: share of the step's self CPU time. Products "
             "alone: the step's matrix products (each shape it calls, as often as it calls it) run by themselves on "
             "contiguous operands in cache, against their time inside the step (the profile's share x the step).", "",
             "| row | members | step ms (one seed) | fixed ms (share) | per member ms | useful GFLOP/s (per-member part) | "
             + " | ".join(names) + " | largest single event | products in the step ms | products alone ms (GFLOP/s) |",
             "|---|---:|---|---|---:|---|" + "---:|" * len(names) + "---|---:|---|"]
    for key, r in res["rows"].items():
        pm = r["useful_gflops_per_member_work"]
        pm = f"{pm:.0f}" if pm is not None else "-"
        lines.append(f"| {key} | {r['members']} | {r['ms_per_step']:.1f} ({r['ms_per_step_one_seed']:.1f}) | "
                     f"{r['fixed_ms_per_step']:.2f} ({r['fixed_share']:.0%}) | {r['per_member_ms']:.3f} | "
                     f"{r['useful_gflops']:.0f} ({pm}) | ")
        lines[-1] += " | ".join(f"{r['profile_shares'][n]:.0%}" for n in names)
        lines[-1] += (f" | {r['largest_event']['name'][:60]} ({r['largest_event']['share']:.0%}) | "
                      f"{r['matmul_in_step_ms']:.1f} | {r['matmul_isolated_ms']:.1f} ({r['matmul_isolated_gflops'] or 0:.0f}) |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
