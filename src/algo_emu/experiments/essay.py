"""E6: the companion essay's claims (ICL as implicit Bayes and implicit GD) as measured verdicts.

Steps (the rules in workflow/rules/essay.smk call these; ``--params`` is the resolved ``essay`` section):

  python -m algo_emu essay equivalences --params JSON --seeds 0 1 --out-csv results/tables/essay_equivalences.csv
  python -m algo_emu essay train --params JSON --variant gaussian --seed 0 --device auto \
      --out-model results/essay/models/gaussian/seed0.pt --out-metrics results/essay/models/gaussian/seed0.json \
      [--init results/essay/models/gaussian/seed0.pt]       (narrow/control start from the gaussian model)
  python -m algo_emu essay evaluate --params JSON --seed 0 --models <variant>=<path> ... \
      --out-raw results/essay/eval/seed0.pt --out-metrics results/essay/eval/seed0/metrics.json
  python -m algo_emu essay claims --params JSON --raw ... --summaries ... --train-metrics ... \
      --equivalences results/tables/essay_equivalences.csv --out-claims results/tables/essay_claims.csv \
      --out-curves results/tables/essay_curves.csv --out-details results/essay/claims_details.json
  python -m algo_emu essay figure --kind {icl,equivalences} --params JSON --curves ... --equivalences ... --out-stem ...
"""

from __future__ import annotations

import argparse
import logging
import time

import pandas as pd
import torch

from algo_emu.cli import json_arg
from algo_emu.config import check_essay
from algo_emu.essay.plan import essay_seeds  # noqa: F401  (re-exported)
from algo_emu.io import read_json, save_torch, write_json
from algo_emu.tables import write_table

log = logging.getLogger("algo_emu.essay")


check_section = check_essay  # the check lives in the torch-free config layer (algo_emu.config.check_essay)


def _params(args) -> dict:
    if not isinstance(args.params, dict) or "k_max" not in args.params:
        raise SystemExit("--params must be the resolved essay config section as a JSON object (with k_max, d, ...)")
    return args.params


def _threads(args) -> None:
    torch.set_num_threads(int(args.threads or 1))


def cmd_equivalences(args) -> int:
    from algo_emu.essay.evaluate import construction_rows

    _threads(args)
    t0 = time.time()
    rows = pd.DataFrame(construction_rows(_params(args), args.seeds))
    table = (rows.groupby(["check", "param", "value", "measure"], sort=False).result
             .agg(result_max="max", result_mean="mean").reset_index())
    table["n_seeds"] = len(args.seeds)
    write_table(table, args.out_csv, "E6: hand-built attention vs in-context least squares in float64 (no training). "
                "max_abs_err: prediction error against the exact algorithm; rel_rms_dev: softmax vs linear layer; "
                "rms_shift: prediction shift caused by one outlier example.", label="tab:essay_equivalences")
    log.info("equivalences: %d rows in %.1f s; worst exact error %.3g", len(rows), time.time() - t0,
             rows[rows.measure == "max_abs_err"].query("check != 'ridge_lsa_vs_posterior_mean'").result.max())
    return 0


def cmd_train(args) -> int:
    from algo_emu.essay.train import train_variant
    from algo_emu.runtime import config_hash, environment, resolve_device

    _threads(args)
    params = _params(args)
    device = resolve_device(args.device)
    init = torch.load(args.init, map_location="cpu", weights_only=False) if args.init else None
    ckpt, metrics = train_variant(params, args.variant, args.seed, device, init)
    metrics.update({"params": params, "config_hash": config_hash(params), "environment": environment(device)})
    save_torch(args.out_model, ckpt)
    write_json(args.out_metrics, metrics)
    return 0


def cmd_evaluate(args) -> int:
    from algo_emu.essay.evaluate import evaluate_seed
    from algo_emu.essay.train import TrainedICL
    from algo_emu.runtime import config_hash, environment, resolve_device

    _threads(args)
    params = _params(args)
    device = resolve_device(args.device)
    models = {}
    for item in args.models:
        name, _, path = item.partition("=")
        if not path:
            raise SystemExit(f"--models entries are <variant>=<path>, got {item!r}")
        models[name] = TrainedICL.from_checkpoint(torch.load(path, map_location="cpu", weights_only=False), device)
    if "gaussian" not in models:
        raise SystemExit("--models must include gaussian=<path> (the main model)")
    t0 = time.time()
    summary, raw = evaluate_seed(models, params, args.seed)
    summary.update({"eval_wall_s": time.time() - t0, "params": params, "config_hash": config_hash(params),
                    "environment": environment(device), "variants": sorted(models)})
    save_torch(args.out_raw, raw)
    write_json(args.out_metrics, summary)
    log.info("evaluate seed %d: %d arrays in %.1f s", args.seed, len(raw), time.time() - t0)
    return 0


def cmd_claims(args) -> int:
    from algo_emu.essay.claims import build

    params = _params(args)
    raws = [torch.load(p, map_location="cpu", weights_only=False) for p in args.raw]
    summaries = [read_json(p) for p in args.summaries]
    train_metrics = [read_json(p) for p in args.train_metrics]
    equiv_rows = pd.read_csv(args.equivalences)
    equiv = equiv_rows.rename(columns={"result_max": "result"})
    claims, curves, details = build(raws, summaries, train_metrics, equiv, params)
    write_table(claims, args.out_claims, "E6: the companion essay's testable claims, measured. CI: 95 % bootstrap over "
                "seeds and prompts; verdict rules in docs/essay.md.", label="tab:essay_claims")
    write_table(curves, args.out_curves, "E6: in-context MSE against k for the trained models and the baselines; "
                "dist_to_model: mean squared distance between the model's and the estimator's predictions.",
                label="tab:essay_curves", extra_formats=())
    details["train"] = [{k: m[k] for k in ("variant", "seed", "steps", "train_wall_s", "final_val_mse", "n_params")}
                        for m in train_metrics]
    write_json(args.out_details, details)
    for _, r in claims.iterrows():
        log.info("%-14s %s | %s", r.verdict, r.measured, r.claim[:90])
    return 0


def cmd_figure(args) -> int:
    from algo_emu.plots import essay as plots

    if args.kind == "icl":
        plots.plot_icl(pd.read_csv(args.curves), _params(args), args.out_stem)
    else:
        plots.plot_equivalences(pd.read_csv(args.equivalences), args.out_stem)
    return 0


def add_parser(parser: argparse.ArgumentParser) -> None:
    steps = parser.add_subparsers(dest="step", required=True)

    def common(p):
        p.add_argument("--params", type=json_arg, required=True, help="the resolved essay config section as JSON")
        p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")

    p = steps.add_parser("equivalences", help="float64 hand-built attention vs GD / ridge / softmax (no training)")
    common(p)
    p.add_argument("--seeds", type=int, nargs="+", required=True)
    p.add_argument("--out-csv", required=True)
    p.set_defaults(func=cmd_equivalences)

    p = steps.add_parser("train", help="train one variant for one seed")
    common(p)
    p.add_argument("--variant", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--device", default="auto")
    p.add_argument("--init", default=None, help="checkpoint to start from (narrow/control variants)")
    p.add_argument("--out-model", required=True)
    p.add_argument("--out-metrics", required=True)
    p.set_defaults(func=cmd_train)

    p = steps.add_parser("evaluate", help="all measurements of one seed")
    common(p)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--device", default="auto")
    p.add_argument("--models", nargs="+", required=True, help="<variant>=<checkpoint path> ...")
    p.add_argument("--out-raw", required=True)
    p.add_argument("--out-metrics", required=True)
    p.set_defaults(func=cmd_evaluate)

    p = steps.add_parser("claims", help="the verdict table from every seed's measurements")
    common(p)
    p.add_argument("--raw", nargs="+", required=True)
    p.add_argument("--summaries", nargs="+", required=True)
    p.add_argument("--train-metrics", nargs="+", required=True)
    p.add_argument("--equivalences", required=True)
    p.add_argument("--out-claims", required=True)
    p.add_argument("--out-curves", required=True)
    p.add_argument("--out-details", required=True)
    p.set_defaults(func=cmd_claims)

    p = steps.add_parser("figure", help="one figure from the tables")
    common(p)
    p.add_argument("--kind", required=True, choices=["icl", "equivalences"])
    p.add_argument("--curves", default=None)
    p.add_argument("--equivalences", default=None)
    p.add_argument("--out-stem", required=True)
    p.set_defaults(func=cmd_figure)
