"""Two training jobs on one thread each, or one job on two threads: which trains more on this machine?

On a 2-core machine a paper-scale run has two ways to use both cores: one job at a time with two torch threads (the
configs' ``threads: 2``), or two jobs side by side with one thread each (``--set-threads <rule>=1`` with ``--cores
2``). At E1's shapes (small matrices, a single-threaded attention kernel) a second thread speeds one job up by less
than two, so the second way may train more per hour. This script measures both in one run, on the real step:
``python -m algo_emu heads train`` of the paper config's E1 setting (published protocol, ``--heads`` heads, p = 60,
three seeds, the convergence candidates' cosine schedule), ``--epochs`` epochs from scratch each time:

* ``two_threads``: one job, two threads, alone;
* ``one_thread``: one job, one thread, alone;
* ``side_by_side``: two such one-thread jobs started together.

Reported: the median epoch time of each (the first epoch, which compiles, left out) and the throughput of
``side_by_side`` over ``two_threads`` (epochs per second, both jobs together, over one job's). Whether the thread
count changes what is trained: each run's per-epoch train losses, compared bit for bit with ``two_threads``' (the
attention kernel gives every work item to one thread in a fixed order), and the largest relative difference of its
per-member test MSEs (the evaluation's reductions may split across threads).

Run it on an otherwise idle machine, in a checkout that holds the E1 data set (``data/heads/published/dataset.pt``,
made by ``snakemake data/heads/published/dataset.pt``):

    python tools/benchmarks/threads.py --checkout . --out tools/benchmarks/threads_<machine>.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PARAMS = {"attention": "auto", "batch_size": 32, "checkpoint_every": 1, "compile": True, "d": 24, "eval_batch_size": 32,
          "eval_every": 10, "hidden": 48, "lr": 0.001, "lr_schedule": "cosine", "n_prompts": 50000, "n_tokens": 20,
          "target_hidden": 48, "test_fraction": 0.2}


def _job(out: Path, heads: int, epochs: int) -> str:
    return json.dumps({"H": heads, "p": 60, "protocol": "published", "seeds": [0, 1, 2], "device_spec": "auto",
                       "data_paths": ["data/heads/published/dataset.pt"], "out_dir": str(out),
                       "checkpoint": str(out / "checkpoint.pt"), "variant": "benchmark-threads",
                       "params": dict(PARAMS, epochs=epochs)})


def _start(checkout: Path, out: Path, heads: int, epochs: int, threads: int) -> subprocess.Popen:
    out.mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(checkout / "src"))
    log = open(out / "train.log", "w")
    return subprocess.Popen([sys.executable, "-m", "algo_emu", "heads", "train", _job(out, heads, epochs),
                             "--threads", str(threads)], cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT)


def _wait(procs: list[subprocess.Popen], outs: list[Path]) -> None:
    for proc, out in zip(procs, outs):
        if proc.wait() != 0:
            raise SystemExit(f"{out}: the training job failed; see {out / 'train.log'}")


def _read(out: Path) -> dict:
    recs = [json.loads((out / f"seed{s}" / "metrics.json").read_text()) for s in (0, 1, 2)]
    epochs = recs[0]["timing"]["epoch_seconds"]
    return {"epoch_seconds": epochs, "median_epoch_seconds": statistics.median(epochs[1:]),
            "train_loss": [[h["train_loss"] for h in r["history"]] for r in recs],
            "test_mse": [r["member_mse"] for r in recs]}


def measure(checkout: Path, heads: int, epochs: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="threads-") as tmp:
        tmp = Path(tmp)
        runs = {}
        for name, threads in (("two_threads", 2), ("one_thread", 1)):
            out = tmp / name
            _wait([_start(checkout, out, heads, epochs, threads)], [out])
            runs[name] = _read(out)
        outs = [tmp / "side_by_side_a", tmp / "side_by_side_b"]
        _wait([_start(checkout, o, heads, epochs, 1) for o in outs], outs)
        a, b = (_read(o) for o in outs)
    runs["side_by_side"] = {"jobs": [a, b], "median_epoch_seconds": statistics.median(
        a["epoch_seconds"][1:] + b["epoch_seconds"][1:])}
    ref = runs["two_threads"]
    others = {name: run.get("jobs") or [run] for name, run in runs.items() if name != "two_threads"}
    same = {name: all(r["train_loss"] == ref["train_loss"] for r in rs) for name, rs in others.items()}
    mse_diff = {name: max(abs(a - b) / abs(b) for r in rs for got, want in zip(r["test_mse"], ref["test_mse"])
                          for a, b in zip(got.values(), want.values())) for name, rs in others.items()}
    return {"what": __doc__.split("\n\n")[0], "setting": {"heads": heads, "p": 60, "seeds": 3, "epochs": epochs,
                                                          **PARAMS},
            "cpu": _cpu(), "runs": runs, "train_losses_bit_identical_to_two_threads": same,
            "test_mse_max_relative_difference_to_two_threads": mse_diff,
            "throughput_side_by_side_over_two_threads": round(
                2 * ref["median_epoch_seconds"] / runs["side_by_side"]["median_epoch_seconds"], 3),
            "speed_one_thread_over_two_threads": round(
                ref["median_epoch_seconds"] / runs["one_thread"]["median_epoch_seconds"], 3)}


def _cpu() -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from algo_emu.runtime import cpu_model_name

    return {"model": cpu_model_name(), "logical_cores": os.cpu_count()}


def markdown(res: dict) -> str:
    r = res["runs"]
    lines = [f"# {res['what']}", "", f"E1, H = {res['setting']['heads']}, p = 60, 3 seeds, {res['setting']['epochs']} "
             f"epochs from scratch per run; {res['cpu']['model']}, {res['cpu']['logical_cores']} logical cores "
             "(`tools/benchmarks/threads.py`).", "",
             "| run | median epoch (s) | train losses as two threads give them, bit for bit | test MSE, largest "
             "relative difference to two threads' |", "|---|---|---|---|",
             f"| one job, two threads | {r['two_threads']['median_epoch_seconds']:.2f} | (reference) | (reference) |",
             *[f"| {label} | {r[name]['median_epoch_seconds']:.2f}{' (each)' if name == 'side_by_side' else ''} | "
               f"{res['train_losses_bit_identical_to_two_threads'][name]} | "
               f"{res['test_mse_max_relative_difference_to_two_threads'][name]:.1e} |"
               for name, label in (("one_thread", "one job, one thread"),
                                   ("side_by_side", "two jobs side by side, one thread each"))], "",
             f"Throughput, two one-thread jobs side by side over one two-thread job: "
             f"**{res['throughput_side_by_side_over_two_threads']:.2f}x**; one thread alone runs at "
             f"{res['speed_one_thread_over_two_threads']:.2f} of two threads' speed.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkout", default=".", help="a checkout holding data/heads/published/dataset.pt")
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--out", required=True, help="the JSON to write (and the .md beside it)")
    args = ap.parse_args(argv)
    res = measure(Path(args.checkout).resolve(), args.heads, args.epochs)
    out = Path(args.out)
    out.write_text(json.dumps(res, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
