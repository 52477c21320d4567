"""Two training jobs on one thread each, or one job on two threads: which trains more on this machine?

On a 2-core machine a paper-scale run has two ways to use both cores: one job at a time with two torch threads (the
configs' ``threads: 2``), or two jobs side by side with one thread each (``--set-threads <rule>=1`` with ``--cores
2``). At E1's shapes (small matrices, a single-threaded attention kernel) a second thread speeds one job up by less
than two, so the second way may train more per hour. This script measures both in one run, on the real step:
``python -m algo_emu heads train`` of E1's first convergence candidate as the checkout's ``config/config.yaml`` gives
it (published protocol, ``--heads`` heads, p = ``heads.p_heads_sweep``, the convergence check's seeds), ``--epochs``
epochs from scratch each time:

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

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))


def setting(checkout: Path, heads: int, epochs: int) -> dict:
    """The job's setting: the train step's params of the config's first convergence candidate (as its rule builds
    them), with ``epochs`` in place of the candidate's."""
    from algo_emu.config import load_config
    from algo_emu.experiments.heads_settings import candidate_train_params, candidates

    h = load_config(checkout / "config" / "config.yaml", gpu_check=False)["heads"]
    params = dict(candidate_train_params(h, candidates(h)[0]["name"]), epochs=epochs)
    return {"H": heads, "p": h["p_heads_sweep"], "seeds": list(h["convergence"]["seeds"]), "params": params}


def _job(out: Path, job: dict) -> str:
    return json.dumps(dict(job, protocol="published", device_spec="auto", data_paths=["data/heads/published/dataset.pt"],
                           out_dir=str(out), checkpoint=str(out / "checkpoint.pt"), variant="benchmark-threads"))


def _start(checkout: Path, out: Path, job: dict, threads: int) -> subprocess.Popen:
    out.mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(checkout / "src"))
    with open(out / "train.log", "w") as log:  # the child keeps its own handle
        return subprocess.Popen([sys.executable, "-m", "algo_emu", "heads", "train", _job(out, job),
                                 "--threads", str(threads)], cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT)


def _wait(procs: list[subprocess.Popen], outs: list[Path]) -> None:
    for proc, out in zip(procs, outs):
        if proc.wait() != 0:
            raise SystemExit(f"{out}: the training job failed; see {out / 'train.log'}")


def _read(out: Path, seeds: list[int]) -> dict:
    recs = [json.loads((out / f"seed{s}" / "metrics.json").read_text()) for s in seeds]
    epochs = recs[0]["timing"]["epoch_seconds"]
    return {"epoch_seconds": epochs, "median_epoch_seconds": statistics.median(epochs[1:]),
            "train_loss": [[h["train_loss"] for h in r["history"]] for r in recs],
            "test_mse": [r["member_mse"] for r in recs]}


def measure(checkout: Path, heads: int, epochs: int) -> dict:
    job = setting(checkout, heads, epochs)
    with tempfile.TemporaryDirectory(prefix="threads-") as tmp:
        tmp = Path(tmp)
        runs = {}
        for name, threads in (("two_threads", 2), ("one_thread", 1)):
            out = tmp / name
            _wait([_start(checkout, out, job, threads)], [out])
            runs[name] = _read(out, job["seeds"])
        outs = [tmp / "side_by_side_a", tmp / "side_by_side_b"]
        _wait([_start(checkout, o, job, 1) for o in outs], outs)
        a, b = (_read(o, job["seeds"]) for o in outs)
    runs["side_by_side"] = {"jobs": [a, b], "median_epoch_seconds": statistics.median(
        a["epoch_seconds"][1:] + b["epoch_seconds"][1:])}
    ref = runs["two_threads"]
    others = {name: run.get("jobs") or [run] for name, run in runs.items() if name != "two_threads"}
    same = {name: all(r["train_loss"] == ref["train_loss"] for r in rs) for name, rs in others.items()}
    mse_diff = {name: max(abs(a - b) / abs(b) for r in rs for got, want in zip(r["test_mse"], ref["test_mse"])
                          for a, b in zip(got.values(), want.values())) for name, rs in others.items()}
    return {"what": __doc__.split("\n\n")[0], "setting": {"heads": heads, "p": job["p"], "seeds": len(job["seeds"]),
                                                          **job["params"]},
            "cpu": _cpu(), "runs": runs, "train_losses_bit_identical_to_two_threads": same,
            "test_mse_max_relative_difference_to_two_threads": mse_diff,
            "throughput_side_by_side_over_two_threads": round(
                2 * ref["median_epoch_seconds"] / runs["side_by_side"]["median_epoch_seconds"], 3),
            "speed_one_thread_over_two_threads": round(
                ref["median_epoch_seconds"] / runs["one_thread"]["median_epoch_seconds"], 3)}


def _cpu() -> dict:
    from algo_emu.runtime import cpu_model_name

    return {"model": cpu_model_name(), "logical_cores": os.cpu_count()}


def markdown(res: dict) -> str:
    r = res["runs"]
    st = res["setting"]
    lines = [f"# {res['what']}", "", f"E1, H = {st['heads']}, p = {st['p']}, {st['seeds']} seeds, {st['epochs']} "
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
