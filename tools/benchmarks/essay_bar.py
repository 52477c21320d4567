"""What the essay's trained model needs to reach its gate: model MSE within 10 % of the Bayes-optimal ridge.

The essay's verdicts on trained models count only when the main (``gaussian``) model's MSE at the longest
trained context, k = k_max, is at most 1.1 x that of ridge with lambda = sigma^2 / tau^2 (the posterior
mean; rule ``essay-learned`` of docs/verdicts.md). This trains that model for one seed at a given budget
(Adam steps, batch, peak lr; everything else as ``config/config.yaml``'s ``essay`` section, through the
pipeline's own :func:`algo_emu.essay.train.train_variant`) and measures the gate's ratio on fresh prompts
of a stream the pipeline never uses, at k = 8, 16 and k_max. One run per call; each appends its row to
``--out`` (JSON), with the environment that made it, so rows of several budgets (and machines) stand
side by side:

    python tools/benchmarks/essay_bar.py --steps 12000 --out tools/benchmarks/essay_bar.json

The training seconds are the machine's own (``environment.hardware``); rows run side by side on one
machine say so (``--load-note``).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))

from algo_emu.config import load_config  # noqa: E402
from algo_emu.essay import baselines as bl  # noqa: E402
from algo_emu.essay import tasks  # noqa: E402
from algo_emu.essay.train import TrainedICL, train_variant  # noqa: E402
from algo_emu.rng import torch_stream  # noqa: E402
from algo_emu.runtime import environment, flush_denormals, reuse_freed_memory  # noqa: E402

#: The gate (docs/verdicts.md, rule essay-learned): model MSE / ridge MSE at k = k_max at most this.
GATE = 1.1


def gate_ratios(model: TrainedICL, params: dict, seed: int, n_prompts: int) -> dict:
    """Model and ridge MSE at k = 8, 16, k_max on ``n_prompts`` fresh prompts of the training prior."""
    d, K, sigma = params["d"], params["k_max"], params["sigma"]
    prior = tasks.make_prior("gaussian", params["tau"])
    te = tasks.sample_prompts(prior, n_prompts, K + 1, d, sigma, torch_stream(seed, "essay", "bar", "test"), seed)
    X, y = te["X"], te["y"]
    pred, _ = model.predict_all(X, y, prior)
    lam = sigma ** 2 / params["tau"] ** 2
    out = {}
    for k in sorted({8, 16, K} & set(range(1, K + 1))):
        ridge = bl.ridge(X[:, :k], y[:, :k], X[:, k:k + 1], lam)[:, 0]
        m, r = float(((pred[:, k] - y[:, k]) ** 2).mean()), float(((ridge - y[:, k]) ** 2).mean())
        out[f"k{k}"] = {"model_mse": m, "ridge_mse": r, "ratio": m / r}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "config/config.yaml"))
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--batch-size", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-prompts", type=int, default=2000)
    ap.add_argument("--out", required=True, help="JSON; the run's row is appended")
    ap.add_argument("--load-note", default="not stated", help="what else ran on the machine meanwhile")
    args = ap.parse_args(argv)
    reuse_freed_memory()  # as every training job does
    flush_denormals()  # as every training job does, before the first multi-threaded op
    torch.set_num_threads(args.threads)
    params = json.loads(json.dumps(load_config(args.config, gpu_check=False)["essay"]))
    tr = params["train"]
    tr["steps"] = args.steps
    tr["batch_size"] = args.batch_size or tr["batch_size"]
    tr["lr"] = args.lr or tr["lr"]
    tr["log_every"] = max(1, args.steps // 10)
    env = environment(torch.device("cpu"))  # the code as the run starts (the checkout may change meanwhile)
    t0 = time.perf_counter()
    ckpt, metrics = train_variant(params, "gaussian", args.seed, torch.device("cpu"))
    row = {"seed": args.seed, "steps": args.steps, "batch_size": tr["batch_size"], "lr": tr["lr"],
           "model": params["model"], "d": params["d"], "k_max": params["k_max"], "sigma": params["sigma"],
           "train_seconds": metrics["train_wall_s"], "seconds": None, "gate": GATE,
           "ratios": gate_ratios(TrainedICL.from_checkpoint(ckpt), params, args.seed, args.eval_prompts),
           "val_history": [{"step": h["step"], "val_mse": h["val_mse"]} for h in metrics["history"]],
           "load_note": args.load_note, "argv": sys.argv[1:] if argv is None else list(argv),
           "environment": env}
    row["seconds"] = time.perf_counter() - t0
    row["passes"] = row["ratios"][f"k{params['k_max']}"]["ratio"] <= GATE
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".lock"), "w") as lock:  # runs side by side append one at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        rows = json.loads(out.read_text())["rows"] if out.is_file() else []
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps({"what": __doc__.split("\n\n")[0], "rows": rows + [row]}, indent=1) + "\n")
        os.replace(tmp, out)
    out.with_suffix(".lock").unlink(missing_ok=True)
    k = row["ratios"][f"k{params['k_max']}"]
    print(f"steps {args.steps} batch {tr['batch_size']} lr {tr['lr']}: model {k['model_mse']:.4f} ridge "
          f"{k['ridge_mse']:.4f} ratio {k['ratio']:.3f} ({'passes' if row['passes'] else 'misses'} the gate) "
          f"in {row['train_seconds']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
