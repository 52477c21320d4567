"""E3's factor of two, swapped: each side's frozen models on the other side's test prompts.

The published E3 code's models (``published.py e3``) and ours (``reference_code``, H = 6, the paper's budget) are
each evaluated on both test sets: the published script's own (its five evaluation seeds 42..46, 1,000 prompts per
algorithm, drawn by its own ``SimStatsDataset`` in the order its evaluation loop draws them, scored its way: the mean
of per-batch MSEs over batches of 64) and ours (``eval_batches``, this pipeline's test prompts, scored the same
per-batch way). The published models' numbers on their own sets must equal their records' (it proves the sets are
the ones the published script drew), and ours on our sets must equal the paper-scale set's records of the same seeds
(it proves the models are the set's: an ensemble member trains the same alone or beside others).

Our models: the set's E3 run (``reference_code``, H = 6) for three of its seeds, trained at the set's commit from its
data files with the parameters its job ran with (the job's command, ``--heads 6 --seeds 0 1 2``, ``--model`` below):

    python -m algo_emu statistical train --params "$(cat <params.json>)" --mode reference_code --heads 6 \
        --seeds 0 1 2 --data <seed0 .. seed2 dataset.pt> --model <ours.pt> --device cpu --threads 2
    python tools/crosscheck/swap_eval.py --authors <checkout at 6d39297> --model <ours.pt> --data <the same dataset.pt>

Then which half of "the models" carries the gap, the trainer or the training set: our trainer on the published
script's training set (redrawn and written as our data set of each seed; the same inits and data orders as ours):

    python tools/crosscheck/swap_eval.py --authors <checkout> --write-published-data <folder> --data-seed 0
    python -m algo_emu statistical train ... --seeds 0 1 2 --data <folder>/data/statistical/reference_code/seed<s>/dataset.pt \
        --model <ours_on_published.pt>
    python tools/crosscheck/swap_eval.py --authors <checkout> --model <ours.pt> --data <...> \
        --on-published-data <ours_on_published.pt> --data-seed 0

With ``--data``, each model's MSE on its own training set (its final parameters) is recorded beside its last epoch's
mean training loss (the running mean over that epoch's steps, which the training logs print).

``table.py`` reads the record by its rule [swap] (``SWAP_RULE``, stated there before the numbers).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RECORD = HERE / "records" / "e3_swap_H6.json"
EVAL_SEEDS = (42, 43, 44, 45, 46)
TASKS = ("lasso", "linear", "ridge")
#: The published script's shapes (att_sim_statistical.main()).
SHAPES = {"input_dim": 24, "hidden_dim": 48, "prompt_dim": 24, "seq_len": 20, "num_head": 6, "p": 60}


def _write(path: Path, rec: dict) -> None:
    sys.path.insert(0, str(HERE))
    from published import _write as write  # noqa: PLC0415  (tools/crosscheck/published.py: temporary file, fsync, rename)

    write(path, rec)


def tokens(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Our token layout [x_i; w] (w tiled onto every token) of prompts x (N, n, d) and weights w (N, d)."""
    return torch.cat([x, w.unsqueeze(1).expand(-1, x.shape[1], -1)], dim=-1)


def member(model: torch.nn.Module, n_members: int, e: int):
    """``predict(x, w)``: member ``e`` of our ensemble ``model`` on prompts (x, w), every member given the same tokens."""
    def predict(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        t = tokens(x, w)
        return model(t.unsqueeze(0).expand(n_members, *t.shape))[e, ..., 0]
    return predict


def _train_entry(final_params_mse: float, history: list[float]) -> dict:
    return {"final_params_mse": final_params_mse, "last_epoch_running_mean": history[-1],
            "last_10_epochs_mean": float(np.mean(history[-10:]))}


def _import_published(authors: Path):
    sys.path.insert(0, str(authors))
    import importlib

    return importlib.import_module("att_sim_statistical")


def published_sets(mod) -> list[dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]]:
    """The published evaluation's test sets, drawn as its loop draws them: per seed, the three RNGs seeded, a model
    built (its initialisation consumes torch draws before the data), then lasso, linear, ridge in that order, each
    read through the script's loader."""
    sets = []
    for seed in EVAL_SEEDS:
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        mod.OneLayerAttention(input_dim=SHAPES["input_dim"], hidden_dim=SHAPES["hidden_dim"],
                              prompt_dim=SHAPES["prompt_dim"], seq_len=SHAPES["seq_len"],
                              number_of_heads=SHAPES["num_head"], p=SHAPES["p"])
        one = {}
        for task in TASKS:
            ds = mod.SimStatsDataset(num_samples=1000, seq_len=SHAPES["seq_len"], input_dim=SHAPES["input_dim"],
                                     prompt_dim=SHAPES["prompt_dim"], algorithm=task, noise_std=0.05)
            # through the script's own loader: starting its iterator draws from torch's global generator, which
            # the next algorithm's set then starts from
            x, y, w = (torch.cat(t) for t in zip(*mod.DataLoader(ds, batch_size=64, shuffle=False)))
            one[task] = (x, y[..., 0], w)
        sets.append(one)
    return sets


def our_sets(params: dict, seeds: list[int]) -> list[dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]]:
    """This pipeline's test prompts (per seed and algorithm) as (x, y, w)."""
    from algo_emu.experiments import statistical as e3

    batches = e3.eval_batches(params, "reference_code", seeds)
    d = params["d"]
    out = []
    for e, _s in enumerate(seeds):
        one = {}
        for task in TASKS:
            b = batches[task][e]
            one[task] = (b["inputs"][..., :d].float(), b["target"].float(), b["inputs"][:, 0, d:].float())
        out.append(one)
    return out


def published_train_set(mod, data_seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The published model's own training set, redrawn as ``published.py e3`` draws it (both seeds set, then the
    script's first draw: 50,000 mixed prompts)."""
    torch.manual_seed(data_seed)
    random.seed(data_seed)
    ds = mod.SimStatsDataset(num_samples=50_000, seq_len=SHAPES["seq_len"], input_dim=SHAPES["input_dim"],
                             prompt_dim=SHAPES["prompt_dim"], algorithm="mixed", noise_std=0.05)
    x, y, w = (torch.stack(t) for t in zip(*ds.sample))
    return x, y[..., 0], w


def write_published_train_set(mod, data_seed: int, params: dict, folder: Path, seeds: list[int]) -> list[Path]:
    """The published model's training set (:func:`published_train_set`'s draw, each prompt's algorithm recorded as
    the script draws it) written as this pipeline's data set of each of ``seeds`` (the same prompts under each),
    so that our trainer can train on it: each member's init and data order are our seed's, only the 50,000
    prompts differ. Returns the files, in ``seeds``' order."""
    from algo_emu.data import statistical as st
    from algo_emu.data.statistical_sets import _data_expect

    drawn: list[str] = []
    choice = mod.random.choice

    def recording_choice(seq):
        drawn.append(choice(seq))  # the same draw from the same generator; only remembered
        return drawn[-1]

    mod.random.choice = recording_choice
    try:
        x, y, w = published_train_set(mod, data_seed)
    finally:
        mod.random.choice = choice
    names = list(params["algorithms"]["reference_code"])
    data = {"inputs": tokens(x, w), "target": y,
            "algorithm": torch.tensor([names.index(a) for a in drawn])}
    paths = []
    for seed in seeds:
        paths.append(folder / f"data/statistical/reference_code/seed{seed}/dataset.pt")
        st.write_dataset(paths[-1], data, _data_expect(params, "reference_code", seed) | {
            "source": f"the published script's training set, data seed {data_seed} (tools/crosscheck/swap_eval.py)"})
    return paths


def whole_mse(predict, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, chunk: int = 2000) -> float:
    """MSE over a whole set (every prompt and token), predicted in chunks."""
    with torch.no_grad():
        pred = torch.cat([predict(x[i:i + chunk], w[i:i + chunk]) for i in range(0, len(x), chunk)])
    return float((pred.double() - y.double()).square().mean())


def per_batch_mse(pred: torch.Tensor, y: torch.Tensor, batch: int = 64) -> float:
    """The published score: the mean over consecutive batches of ``batch`` prompts of each batch's MSE."""
    pred, y = pred.double(), y.double()
    losses = [float((pred[i:i + batch] - y[i:i + batch]).square().mean()) for i in range(0, len(y), batch)]
    return sum(losses) / len(losses)


def score(predict, sets) -> dict[str, list[float]]:
    with torch.no_grad():
        return {t: [per_batch_mse(predict(*s[t][::2]), s[t][1]) for s in sets] for t in TASKS}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--authors", type=Path, required=True, help="a checkout of MAGICS-LAB/algo_emu at 6d39297")
    ap.add_argument("--published", type=Path, nargs="+",
                    default=[HERE / "work" / "e3_H6_data0.pth", HERE / "work" / "e3_H6_data1.pth"],
                    help="the published code's trained models (published.py e3 writes them)")
    ap.add_argument("--model", type=Path, default=HERE / "work" / "ours_reference_code_H6.pt",
                    help="our frozen E3 model (reference_code, H = 6), any members")
    ap.add_argument("--data", type=Path, nargs="*", default=[],
                    help="our models' training sets (dataset.pt of each member's seed, in member order): the final "
                         "parameters' MSE on them, beside each published model's on its own (redrawn)")
    ap.add_argument("--on-published-data", type=Path, metavar="MODEL",
                    help="our trainer's models trained on the published training set of --data-seed (the data "
                         "--write-published-data writes; the same seeds as --model): evaluated the same way")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--config", type=Path, default=ROOT / "config" / "config.yaml")
    ap.add_argument("--write-published-data", type=Path, metavar="FOLDER",
                    help="only write the published training set of --data-seed as our data set of each of --as-seeds "
                         "(FOLDER/data/statistical/reference_code/seed<s>/dataset.pt), and stop")
    ap.add_argument("--data-seed", type=int, default=0)
    ap.add_argument("--as-seeds", type=int, nargs="+", default=[0, 1, 2])
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from algo_emu.config import load_config
    from algo_emu.experiments import statistical as e3
    from algo_emu.frozen import frozen, load_frozen

    cfg = load_config(args.config, gpu_check=False)
    params = cfg["statistical"]
    if args.write_published_data:
        mod = _import_published(args.authors)
        print("\n".join(map(str, write_published_train_set(mod, args.data_seed, params, args.write_published_data,
                                                            args.as_seeds))))
        return
    ours, info = load_frozen(args.model, e3.build_model)
    members = [int(m[0]) for m in info["meta"]["members"]]
    mod = _import_published(args.authors)
    sets = {"published": published_sets(mod), "ours": our_sets(params, members)}

    res: dict = {"published_models": {}, "our_models": {}}
    extra: dict = {}
    train: dict = {}  # each model's MSE on its own training set (final parameters) beside its last epoch's mean loss
    published_records = {path.name: json.loads((HERE / "records" / (path.stem + ".json")).read_text())
                         for path in args.published}
    for path in args.published:
        m = mod.load_frozen_model(str(path), SHAPES["input_dim"], SHAPES["hidden_dim"], SHAPES["prompt_dim"],
                                  SHAPES["seq_len"], SHAPES["num_head"], SHAPES["p"])
        res["published_models"][path.name] = {k: score(lambda x, w: m(x, w)[..., 0], s) for k, s in sets.items()}
        seed = int(path.stem.rsplit("data", 1)[1])
        train[path.name] = _train_entry(whole_mse(lambda x, w: m(x, w)[..., 0], *published_train_set(mod, seed)),
                                        published_records[path.name]["train_loss_per_epoch"])
    record: dict = {}
    ours_members = [member(ours, len(members), e) for e in range(len(members))]
    with frozen(ours, record):
        for predict, s in zip(ours_members, members):
            res["our_models"][f"seed{s}"] = {k: score(predict, st) for k, st in sets.items()}
        if args.data:
            from algo_emu.data.statistical_sets import load_data

            data = load_data(params, "reference_code", members, args.data)
            d = params["d"]
            for predict, s in zip(ours_members, members):
                x, w = data[s]["inputs"][..., :d].float(), data[s]["inputs"][:, 0, d:].float()
                train[f"seed{s}"] = _train_entry(whole_mse(predict, x, data[s]["target"].float(), w),
                                                 info["history"][str(s)])
            del data
    if args.on_published_data:  # our trainer, the published training set: which of the two carries the gap
        other, other_info = load_frozen(args.on_published_data, e3.build_model)
        res["our_models_on_published_data"] = {}
        x, y, w = published_train_set(mod, args.data_seed)
        with frozen(other, record):
            other_seeds = [int(m[0]) for m in other_info["meta"]["members"]]
            for e, s in enumerate(other_seeds):
                predict = member(other, len(other_seeds), e)
                res["our_models_on_published_data"][f"seed{s}"] = {k: score(predict, st) for k, st in sets.items()}
                train[f"seed{s} on the published data"] = _train_entry(whole_mse(predict, x, y, w),
                                                                       other_info["history"][str(s)])
        del x, y, w
        extra = {"on_published_data": {"data_seed": args.data_seed, "model_sha256": other_info.get("sha256"),
                                       "trained_at": other_info["environment"].get("git_commit"),
                                       "data_sha256": other_info.get("data_sha256")}}
    # The checks: each published model on its own sets reproduces its record (printed to 4 decimals), and each of
    # our members on its own seed's set (scored over the whole set, as the pipeline scores) reproduces the set's.
    checks: dict = {"published_vs_record_max_abs": {}, "ours_vs_set_records_max_abs": None}
    for path in args.published:
        rec = published_records[path.name]["test_loss_per_eval_seed"]
        got = res["published_models"][path.name]["published"]
        checks["published_vs_record_max_abs"][path.name] = max(abs(a - b) for t in TASKS for a, b in zip(got[t], rec[t]))
    diffs = []
    with frozen(ours, record):
        for e, (predict, s) in enumerate(zip(ours_members, members)):
            runs = ROOT / "results/reference/paper-scale/statistical/runs/reference_code_H6" / f"seed{s}" / "metrics.json"
            rec = json.loads(runs.read_text())["errors"]
            for t in TASKS:
                x, y, w = sets["ours"][e][t]
                diffs.append(abs(whole_mse(predict, x, y, w) - rec[t]["prediction"]))
    checks["ours_vs_set_records_max_abs"] = max(diffs)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "tools", "src",
                                 ":(exclude)tools/crosscheck/records"],  # the record it writes is not its code
                                cwd=ROOT, capture_output=True, text=True).stdout.strip())
    out = {"experiment": "E3", "question": "does the gap between the published code's models and ours follow the "
           "models or the test prompts?", "heads": 6, "epochs": params["epochs"],
           "our_seeds": members, "our_model_sha256": info.get("sha256"), "commit": commit, "commit_dirty": dirty,
           "our_model_trained_at": info["environment"].get("git_commit"),
           "our_model_data_sha256": info.get("data_sha256"), "our_model_train_seconds": info["timing"].get("train_seconds_this_call"),
           "bit_identical": record.get("bit_identical"), "published_eval_seeds": list(EVAL_SEEDS),
           "our_eval_sets": f"eval_batches of seeds {members}", "score": "mean of per-batch (64 prompts) MSE vs noisy y",
           "mse": res, "train_set": train, "checks": checks, "torch": torch.__version__, **extra}
    _write(RECORD, out)
    print(json.dumps(checks))
    print(json.dumps(train, indent=1))
    for who, models in res.items():
        for name, r in models.items():
            print(who, name, {k: {t: round(float(np.mean(v)), 4) for t, v in r[k].items()} for k in r})


if __name__ == "__main__":
    main()
