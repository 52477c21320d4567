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
  python -m algo_emu essay figure --kind {icl,equivalences} --params JSON --curves ... --equivalences ... --out ...

A trained model is a frozen file (algo_emu.frozen: its weights, and a sidecar ``<model>.pt.json`` with the file's
sha256, the parameters' digest and the checkpoint's other fields); ``train --init`` and ``evaluate`` load it
read-only through FrozenFile, and each evaluation record holds every model's proof (``frozen``).
"""

from __future__ import annotations

import logging
import contextlib
import time

import pandas as pd
import torch

from algo_emu import cli
from algo_emu.cli import Step, arg
from algo_emu.runner import Runner
from algo_emu.config import check_essay
from algo_emu.essay.plan import essay_seeds  # noqa: F401  (re-exported)
from algo_emu.frozen import FrozenFile
from algo_emu.experiments.step_keys import params_arg
from algo_emu.io import read_json, save_torch, write_json
from algo_emu.report import captions
from algo_emu.tables import write_table

log = logging.getLogger("algo_emu.essay")


check_section = check_essay  # the check lives in the torch-free config layer (algo_emu.config.check_essay)


def _check(params: dict) -> dict:
    """``--params`` was checked against the step's declared keys (algo_emu.experiments.step_keys) when parsed."""
    return params


def equivalences(params: dict, seeds: list[int], out_csv: str, threads: int = 1) -> None:
    from algo_emu.essay.evaluate import construction_rows

    torch.set_num_threads(int(threads or 1))
    t0 = time.time()
    rows = pd.DataFrame(construction_rows(_check(params), seeds))
    table = (rows.groupby(["check", "param", "value", "measure"], sort=False).result
             .agg(result_max="max", result_mean="mean").reset_index())
    table["n_seeds"] = len(seeds)
    write_table(table, out_csv, captions.ESSAY_EQUIVALENCES, label="tab:essay_equivalences")
    log.info("equivalences: %d rows in %.1f s; worst exact error %.3g", len(rows), time.time() - t0,
             rows[rows.measure == "max_abs_err"].query("check != 'ridge_lsa_vs_posterior_mean'").result.max())


def train(params: dict, variant: str, seed: int, out_model: str, out_metrics: str, init: str | None = None,
          device_spec: str = "auto", threads: int = 1) -> None:
    from algo_emu.essay.train import build_frozen, save_trained, train_variant

    run = Runner(device_spec, int(threads or 1))
    start = {"state_dict": FrozenFile(init, build_frozen).model.state_dict()} if init else None  # checked read
    ckpt, metrics = train_variant(_check(params), variant, seed, run.device, start)
    metrics.update({**run.provenance(params), "environment": run.environment()})
    save_trained(out_model, ckpt)
    write_json(out_metrics, metrics)


def evaluate(params: dict, seed: int, models: list[str], out_raw: str, out_metrics: str, device_spec: str = "auto",
             threads: int = 1) -> None:
    from algo_emu.essay.evaluate import evaluate_seed
    from algo_emu.essay.train import TrainedICL, build_frozen

    run = Runner(device_spec, int(threads or 1))
    params = _check(params)
    files = {}
    for item in models:
        name, _, path = item.partition("=")
        if not path:
            raise SystemExit(f"--models entries are <variant>=<path>, got {item!r}")
        files[name] = FrozenFile(path, build_frozen, run.device)
    if "gaussian" not in files:
        raise SystemExit("--models must include gaussian=<path> (the main model)")
    loaded = {name: TrainedICL.from_frozen(f, run.device) for name, f in files.items()}
    t0 = time.time()
    with contextlib.ExitStack() as frozen:  # every model frozen: digests before and after, no gradients
        for f in files.values():
            frozen.enter_context(f.evaluating())
        summary, raw = evaluate_seed(loaded, params, seed)
    summary.update({"eval_wall_s": time.time() - t0, **run.provenance(params), "environment": run.environment(),
                    "variants": sorted(loaded), "frozen": {name: f.proof() for name, f in files.items()}})
    save_torch(out_raw, raw)
    write_json(out_metrics, summary)
    log.info("evaluate seed %d: %d arrays in %.1f s", seed, len(raw), time.time() - t0)


def claims(params: dict, raw: list[str], summaries: list[str], train_metrics: list[str], equivalences: str,
           out_claims: str, out_curves: str, out_details: str, threads: int = 1) -> None:
    from algo_emu.essay.claims import build

    params = _check(params)
    raws = [torch.load(p, map_location="cpu", weights_only=False) for p in raw]
    summary_records = [read_json(p) for p in summaries]
    train_records = [read_json(p) for p in train_metrics]
    equiv = pd.read_csv(equivalences).rename(columns={"result_max": "result"})
    table, curves, details = build(raws, summary_records, train_records, equiv, params)
    write_table(table, out_claims, captions.ESSAY_CLAIMS, label="tab:essay_claims")
    write_table(curves, out_curves, captions.ESSAY_CURVES, label="tab:essay_curves", extra_formats=())
    details["train"] = [{k: m[k] for k in ("variant", "seed", "steps", "train_wall_s", "final_val_mse", "n_params")}
                        for m in train_records]
    write_json(out_details, details)
    for _, r in table.iterrows():
        log.info("%-14s %s | %s", r.verdict, r.measured, r.claim[:90])


def figure(params: dict, kind: str, out: str, curves: str | None = None, equivalences: str | None = None,
           threads: int = 1) -> None:
    from algo_emu.plots import essay as plots

    if kind == "icl":
        plots.plot_icl(pd.read_csv(curves), _check(params), out)
    else:
        plots.plot_equivalences(pd.read_csv(equivalences), out)


COMMON = [cli.THREADS.to(default=1)]


def _params(step: str):
    return params_arg("essay", step).to(help="the resolved essay config section (or the keys this step reads) as JSON")


STEPS = [
    Step("equivalences", "float64 hand-built attention vs GD / ridge / softmax (no training)", equivalences,
         [_params("equivalences"), *COMMON, cli.SEEDS, arg("--out-csv", required=True)]),
    Step("train", "train one variant for one seed", train,
         [_params("train"), *COMMON, arg("--variant", required=True), cli.SEED, cli.DEVICE,
          arg("--init", default=None, help="checkpoint to start from (narrow/control variants)"),
          arg("--out-model", required=True), arg("--out-metrics", required=True)]),
    Step("evaluate", "all measurements of one seed", evaluate,
         [_params("evaluate"), *COMMON, cli.SEED, cli.DEVICE, arg("--models", nargs="+", required=True, help="<variant>=<checkpoint path> ..."),
          arg("--out-raw", required=True), arg("--out-metrics", required=True)]),
    Step("claims", "the verdict table from every seed's measurements", claims,
         [_params("claims"), *COMMON, arg("--raw", nargs="+", required=True), arg("--summaries", nargs="+", required=True),
          arg("--train-metrics", nargs="+", required=True), arg("--equivalences", required=True),
          arg("--out-claims", required=True), arg("--out-curves", required=True), arg("--out-details", required=True)]),
    Step("figure", "one figure from the tables", figure,
         [_params("figure"), *COMMON, arg("--kind", required=True, choices=["icl", "equivalences"]), arg("--curves", default=None),
          arg("--equivalences", default=None), cli.FIGURE]),
]
add_parser = cli.steps_parser(STEPS)
