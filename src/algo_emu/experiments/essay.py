"""E6: the companion essay's claims (ICL as implicit Bayes and implicit GD) as measured verdicts.

Steps (the rules in workflow/rules/essay.smk call these, ``python -m algo_emu essay <step> JOB [--threads N]``;
``JOB`` is one JSON object of the step function's keyword arguments, ``params`` the keys of the ``essay`` section the
step reads, algo_emu.specs):

  python -m algo_emu essay equivalences '{"params": {...}, "seeds": [0, 1],
      "out_csv": "results/tables/essay_equivalences.csv"}' --threads 1
  python -m algo_emu essay train '{"params": {...}, "variant": "narrow", "seed": 0, "device_spec": "auto",
      "init": "results/essay/models/gaussian/seed0.pt", "out_model": "results/essay/models/narrow/seed0.pt",
      "out_metrics": "results/essay/models/narrow/seed0.json"}' --threads 1
      (init only for narrow/control: they start from the trained gaussian model)
  python -m algo_emu essay evaluate '{"params": {...}, "seed": 0, "device_spec": "auto",
      "models": ["gaussian=results/essay/models/gaussian/seed0.pt", ...],
      "out_raw": "results/essay/eval/seed0.pt", "out_metrics": "results/essay/eval/seed0/metrics.json"}' --threads 1
  python -m algo_emu essay claims '{"params": {...}, "raw": [...], "summaries": [...], "train_metrics": [...],
      "equivalences": "results/tables/essay_equivalences.csv", "out_claims": "results/tables/essay_claims.csv",
      "out_curves": "results/tables/essay_curves.csv", "out_details": "results/essay/claims_details.json"}'
  python -m algo_emu essay figure '{"params": {...}, "kind": "icl", "curves": "results/tables/essay_curves.csv",
      "out": "results/figures/essay_icl"}'        (kind "equivalences": "equivalences" names the table instead)

A trained model is a frozen file (algo_emu.frozen: its weights, and a sidecar ``<model>.pt.json`` with the file's
sha256, the parameters' digest and the checkpoint's other fields); ``train`` (``init``) and ``evaluate`` load it
read-only through FrozenFile, and each evaluation record holds every model's proof (``frozen``).
"""

from __future__ import annotations

import logging
import contextlib
import time

import pandas as pd
import torch

from algo_emu.train import Runner
from algo_emu.essay.plan import essay_seeds  # noqa: F401  (re-exported)
from algo_emu.frozen import FrozenFile
from algo_emu.io import read_json, save_torch, write_json
from algo_emu.tables import write_table

log = logging.getLogger("algo_emu.essay")




# --- captions: the text above this experiment's tables (.md) and in their .tex

ESSAY_EQUIVALENCES = ("E6: hand-built attention vs in-context least squares in float64 (no training). "
                      "max_abs_err: prediction error against the exact algorithm; rel_rms_dev: softmax vs linear layer; "
                      "rms_shift: prediction shift caused by one outlier example.")
ESSAY_CLAIMS = ("E6: the companion essay's testable claims, measured. CI: 95 % bootstrap over "
                "seeds and prompts; verdict rules in docs/essay.md.")
ESSAY_CURVES = ("E6: in-context MSE against k for the trained models and the baselines; "
                "dist_to_model: mean squared distance between the model's and the estimator's predictions.")


def _check(params: dict) -> dict:
    """``params`` was checked against the step's declared keys (algo_emu.specs) when the job was
    bound (algo_emu.cli.bind_job)."""
    return params


def equivalences(params: dict, seeds: list[int], out_csv: str, threads: int = 1) -> None:
    """Float64 hand-built attention vs GD / ridge / softmax (no training): the table ``out_csv`` over ``seeds``."""
    from algo_emu.essay.evaluate import construction_rows

    torch.set_num_threads(int(threads or 1))
    t0 = time.time()
    rows = pd.DataFrame(construction_rows(_check(params), seeds))
    table = (rows.groupby(["check", "param", "value", "measure"], sort=False).result
             .agg(result_max="max", result_mean="mean").reset_index())
    table["n_seeds"] = len(seeds)
    write_table(table, out_csv, ESSAY_EQUIVALENCES, label="tab:essay_equivalences")
    log.info("equivalences: %d rows in %.1f s; worst exact error %.3g", len(rows), time.time() - t0,
             rows[rows.measure == "max_abs_err"].query("check != 'ridge_lsa_vs_posterior_mean'").result.max())


def train(params: dict, variant: str, seed: int, out_model: str, out_metrics: str, init: str | None = None,
          device_spec: str = "auto", threads: int = 1) -> None:
    """Train one variant for one seed (``init``: the frozen model to start from, for the narrow/control variants)."""
    from algo_emu.essay.train import build_frozen, save_trained, train_variant

    run = Runner(device_spec, int(threads or 1))
    start = {"state_dict": FrozenFile(init, build_frozen).model.state_dict()} if init else None  # checked read
    ckpt, metrics = train_variant(_check(params), variant, seed, run.device, start)
    metrics.update({**run.provenance(params), "environment": run.environment()})
    save_trained(out_model, ckpt)
    write_json(out_metrics, metrics)


def evaluate(params: dict, seed: int, models: list[str], out_raw: str, out_metrics: str, device_spec: str = "auto",
             threads: int = 1) -> None:
    """All measurements of one seed; ``models`` holds ``<variant>=<checkpoint path>`` strings (gaussian among them)."""
    from algo_emu.essay.evaluate import evaluate_seed
    from algo_emu.essay.train import TrainedICL, build_frozen

    run = Runner(device_spec, int(threads or 1))
    params = _check(params)
    files = {}
    for item in models:
        name, _, path = item.partition("=")
        if not path:
            raise SystemExit(f"models entries are <variant>=<path>, got {item!r}")
        files[name] = FrozenFile(path, build_frozen, run.device)
    if "gaussian" not in files:
        raise SystemExit("models must include gaussian=<path> (the main model)")
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
    """The verdict table from every seed's measurements (and the curves table, the details JSON)."""
    from algo_emu.essay.claims import build

    params = _check(params)
    raws = [torch.load(p, map_location="cpu", weights_only=False) for p in raw]
    summary_records = [read_json(p) for p in summaries]
    train_records = [read_json(p) for p in train_metrics]
    equiv = pd.read_csv(equivalences).rename(columns={"result_max": "result"})
    table, curves, details = build(raws, summary_records, train_records, equiv, params)
    write_table(table, out_claims, ESSAY_CLAIMS, label="tab:essay_claims")
    write_table(curves, out_curves, ESSAY_CURVES, label="tab:essay_curves", extra_formats=())
    details["train"] = [{k: m[k] for k in ("variant", "seed", "steps", "train_wall_s", "final_val_mse", "n_params")}
                        for m in train_records]
    write_json(out_details, details)
    for _, r in table.iterrows():
        log.info("%-14s %s | %s", r.verdict, r.measured, r.claim[:90])


def figure(params: dict, kind: str, out: str, curves: str | None = None, equivalences: str | None = None,
           threads: int = 1) -> None:
    """One figure from the tables: ``kind`` icl (from ``curves``) or equivalences (from ``equivalences``)."""
    from algo_emu.plots import essay as plots

    if kind not in ("icl", "equivalences"):
        raise ValueError(f"figure: kind must be icl or equivalences, got {kind!r}")
    if kind == "icl":
        plots.plot_icl(pd.read_csv(curves), _check(params), out)
    else:
        plots.plot_equivalences(pd.read_csv(equivalences), out)


#: The steps (``python -m algo_emu essay <step> JOB``, :mod:`algo_emu.cli`).
STEPS = {"equivalences": equivalences, "train": train, "evaluate": evaluate, "claims": claims, "figure": figure}
#: Every step's ``params`` is checked against its declaration (:mod:`algo_emu.specs`).
PARAMS_OF = {"equivalences": "equivalences", "train": "train", "evaluate": "evaluate", "claims": "claims",
             "figure": "figure"}
