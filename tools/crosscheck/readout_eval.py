"""E3 with the published read-out (``config/e3_readout.yaml``): evaluate its frozen model the way this pipeline
evaluates E3 (fresh prompts per algorithm, the package's ``evaluate_model``; no weight-blind baseline: the question is
the read-out's effect on the loss, not whether the model reads w) and keep a small record for ``table.py``.

    snakemake results/statistical/models/reference_code_H6.pt --configfile config/e3_readout.yaml   # in a clean checkout
    python tools/crosscheck/readout_eval.py --checkout <that checkout>

More members: the same commit's checkout with a copy of that config naming other seeds (and its own ``workdir``), then
``--config <its name> --out <records>/e3_readout_H6_seeds<...>.json``; ``table.py`` pools the records of one commit
and refuses records of several.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkout", type=Path, required=True, help="the checkout whose run folder (the config's workdir) holds the trained model")
    ap.add_argument("--records", type=Path, default=HERE / "records")
    ap.add_argument("--config", default="config/e3_readout.yaml", help="the checkout's config (relative to it)")
    ap.add_argument("--out", type=Path, help="the record (default: <records>/e3_readout_H6.json)")
    args = ap.parse_args(argv)
    from algo_emu.config import load_config
    from algo_emu.experiments import statistical as e3
    from algo_emu.frozen import frozen, load_frozen

    cfg = load_config(args.checkout / args.config, gpu_check=False)
    params, seeds = cfg["statistical"], cfg["seeds"]
    path = args.checkout / cfg.get("workdir", ".") / "results/statistical/models/reference_code_H6.pt"
    model, info = load_frozen(path, e3.build_model)
    sidecar = json.loads(path.with_name(path.name + ".json").read_text())
    record: dict = {}
    with frozen(model, record):
        res = e3.evaluate_model(params, model, "reference_code", seeds)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=args.checkout, capture_output=True, text=True).stdout.strip()
    # uncommitted changes to tracked files, but for the committed result sets under results/ (data the training
    # neither reads nor writes); the training sources themselves are also named by the sidecar's code_version
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=args.checkout,
                            capture_output=True, text=True).stdout.splitlines()
    dirty = any(not line[3:].startswith("results/") for line in status if line.strip())
    out = {"experiment": "E3", "variant": "published read-out (config/e3_readout.yaml)", "heads": 6, "seeds": seeds,
           "readout_hidden": info["meta"].get("readout_hidden"), "epochs": params["epochs"],
           "commit": commit, "commit_dirty": dirty, "config": args.config,
           "code_version": sidecar.get("environment", {}).get("code_version"),
           "test_mse_vs_noisy_y": {str(s): {a: res["errors"][s][a]["prediction"] for a in res["errors"][s]} for s in seeds},
           "train_loss_per_epoch": sidecar["history"], "bit_identical": record.get("bit_identical"),
           "train_seconds": sum(sidecar.get("timing", {}).get("epoch_seconds", []) or [0.0])}
    target = args.out or args.records / "e3_readout_H6.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    print(json.dumps({k: out[k] for k in ("test_mse_vs_noisy_y", "commit", "bit_identical")}, indent=2))


if __name__ == "__main__":
    main()
