"""E1: attention emulating an attention head (heads sweep, prompt-length sweep, O(1/H) fit).

Steps (each a Snakemake rule): ``data`` (one seed's data set, or the published
protocol's one shared data set), ``train`` (one setting (protocol, H, p), all
seeds x K/Q/V as one ensemble), ``aggregate`` (tables), ``fit`` (rate fits),
``figure`` (figures).

Two protocols (``heads.protocols``), each with its own headline quantity:

* ``published``: the published code's protocol -- one data set and target head
  shared by every seed (seeds vary init, split and data order), the code's
  softmax axis (``reference_code``) and the mean of per-batch means. The
  paper's numbers are comparable with these rows only. Runs the heads sweep
  and the prompt-length sweep.
* ``independent``: ours -- each seed draws its own data set and head, the
  ``heads.target`` definition, the exact mean over test prompts. Runs the
  heads sweep.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from algo_emu import paper_values
from algo_emu import cli
from algo_emu.config import schema_defaults
from algo_emu.cli import Step, arg
from algo_emu.data import heads as hd
from algo_emu.experiments.step_keys import params_arg
from algo_emu.experiments.heads_variants import variants_figure, variants_table
from algo_emu.experiments.heads_settings import METRICS, headline, p_sweep_protocol, setting_name, settings  # noqa: F401
from algo_emu.fit import fit_rates, fit_rates_summary
from algo_emu.frozen import FrozenFile
from algo_emu.io import read_json, write_json
from algo_emu.models.emulator import EnsembleEmulator
from algo_emu.report import captions
from algo_emu.rng import torch_stream
from algo_emu.runtime import config_hash
from algo_emu import records
from algo_emu.records import KEY, Get, RunSpec
from algo_emu.tables import require_columns, summarise_by, write_table
from algo_emu.runner import Runner, schedule_params, train_config
from algo_emu.train import Member

log = logging.getLogger("algo_emu.heads")
DEFAULTS = schema_defaults("heads")

ROLES = ("K", "Q", "V")
TRAIN_KEYS = ("n_prompts", "n_tokens", "d", "target_hidden", "hidden", "epochs", "batch_size", "lr", "test_fraction")
_SUMMARY = ["mse_mean", "mse_std", "mse_ci_low", "mse_ci_high", "n_seeds", "target_var_mean"]
HEADS_COLUMNS = ["protocol", "target", "metric", "heads", "p", *_SUMMARY, "paper_mse", "paper_std"]
P_COLUMNS = ["protocol", "target", "metric", "p", "heads", *_SUMMARY]


# --------------------------------------------------------------------------- training


class HeadsTask:
    """K/Q/V regression of every seed's target head; member (seed, role)."""

    def __init__(self, datasets: dict[int, dict], params: dict, device: torch.device,
                 roles: tuple[str, ...] = ROLES, dtype: torch.dtype = torch.float32) -> None:
        self.seeds = sorted(datasets)
        self.roles = tuple(roles)
        self.members = [Member(s, r) for s in self.seeds for r in self.roles]
        d, ht = params["d"], params["target_hidden"]
        self.d_outs = [ht if r in "KQ" else d for _ in self.seeds for r in self.roles]
        d_pad = max(self.d_outs)
        xs_train, xs_test, self.test_index = [], [], {}
        weights = []
        for s in self.seeds:
            data = datasets[s]
            tr, te = hd.split(s, params["n_prompts"], params["test_fraction"])
            xs_train.append(data["X"][tr].to(dtype))
            xs_test.append(data["X"][te])
            for r in self.roles:
                W = data[f"W_{r}"].T.to(dtype)  # (d, d_out)
                weights.append(torch.nn.functional.pad(W, (0, d_pad - W.shape[1])))
        self.X_train = torch.stack(xs_train).to(device)             # (S, n_train, n, d)
        self.X_test = torch.stack(xs_test).to(device)               # (S, n_test, n, d)
        self.W = torch.stack(weights).to(device)                    # (E, d, d_pad)
        self.member_seed = torch.tensor([self.seeds.index(m.seed) for m in self.members], device=device)
        self.heads_w = {s: {r: datasets[s][f"W_{r}"] for r in ROLES} for s in self.seeds}
        self.n_train = self.X_train.shape[1]

    def batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.X_train[self.member_seed[:, None], index]          # (E, B, n, d)
        E, B, n, d = x.shape
        return x, torch.bmm(x.reshape(E, B * n, d), self.W).view(E, B, n, -1)

    @torch.no_grad()
    def predict_test(self, model: torch.nn.Module, chunk: int = 512) -> torch.Tensor:
        """Every member's prediction on its seed's test prompts: (E, n_test, n, d_pad)."""
        model.eval()
        x_all = self.X_test[self.member_seed].to(self.W.dtype)      # (E, n_test, n, d)
        outs = [model(x_all[:, i:i + chunk]) for i in range(0, x_all.shape[1], chunk)]
        model.train()
        return torch.cat(outs, dim=1)

    def evaluate(self, model: torch.nn.Module, eval_batch_size: int) -> dict[int, dict]:
        """Per seed: MSE of the composed head Y' = A(K', Q')^T V' against Y, for both target definitions."""
        if self.roles != ROLES:
            raise ValueError("evaluate needs the K, Q and V members of every seed")
        pred = self.predict_test(model)  # model dtype; float64 one seed at a time keeps the peak memory low
        out = {}
        for si, s in enumerate(self.seeds):
            e = 3 * si
            X = self.X_test[si].to("cpu", torch.float64)
            K, Q, V = hd.projections(X, self.heads_w[s]["K"], self.heads_w[s]["Q"], self.heads_w[s]["V"])
            Kp, Qp, Vp = (pred[e + j, ..., : self.d_outs[e + j]].to("cpu", torch.float64) for j in range(3))
            res = {"member_mse": {r: float((p - t).square().mean()) for r, p, t in zip(ROLES, (Kp, Qp, Vp), (K, Q, V))}}
            res["mse_by_target"], res["mse_batchmean_by_target"], res["target_var_by_target"] = {}, {}, {}
            for target in hd.TARGETS:
                Y = hd.head_output(K, Q, V, target)
                res["target_var_by_target"][target] = float(Y.var())  # what predicting one constant would score
                err = (hd.head_output(Kp, Qp, Vp, target) - Y).square().mean(dim=(1, 2))
                res["mse_by_target"][target] = float(err.mean())
                batches = err.split(eval_batch_size)
                res["mse_batchmean_by_target"][target] = float(sum(b.mean() for b in batches) / len(batches))
            out[s] = res
        return out


def train_setting(params: dict, H: int, p: int, seeds: list[int], data_paths: list[str], out_dir: str | Path,
                  checkpoint: str | Path | None, device_spec: str = "auto", threads: int | None = None,
                  protocol: str = "independent", variant: str | None = None) -> dict[int, dict]:
    """Train one (protocol, H, p) setting for all ``seeds`` as one ensemble; write ``out_dir/seed<k>/metrics.json``.

    ``data_paths``: one data set per seed (independent) or the one shared data set (published). ``variant``: the
    name of a ``heads.variants`` entry (ours): its records say ``variant`` and ``paper_comparable: false`` (the heads
    tables refuse them), and each evaluation of the learning curve also holds every K/Q/V emulator's test MSE."""
    run = Runner(device_spec, threads)
    target, metric = headline(protocol, params)
    if protocol == "published":
        if len(data_paths) != 1:
            raise ValueError(f"the published protocol shares one data set across seeds, got {len(data_paths)} data files")
        meta = read_json(hd.sidecar(data_paths[0]))
        if meta.get("protocol") != "published":
            raise ValueError(f"{data_paths[0]}: not the published protocol's data set (protocol={meta.get('protocol')!r})")
        data_paths = data_paths * len(seeds)
    elif len(seeds) != len(data_paths):
        raise ValueError(f"{len(seeds)} seeds but {len(data_paths)} data files")
    device = run.device
    loaded: dict[str, dict] = {}
    for path in dict.fromkeys(data_paths):
        loaded[path] = hd.load_dataset(path, params)
    datasets = {s: loaded[path] for s, path in zip(seeds, data_paths)}
    task = HeadsTask(datasets, params, device)

    def build(meta: dict | None = None) -> EnsembleEmulator:
        return EnsembleEmulator(
            [torch_stream(m.seed, "heads", "init", m.name) for m in task.members],
            d_in=params["d"], d_out=task.d_outs, n_tokens=params["n_tokens"], hidden=params["hidden"], heads=H,
            total_tokens=p, attention=params.get("attention", DEFAULTS["attention"]),
        )

    model = build().to(device)
    cfg = train_config("heads", params)
    run_params = {k: params[k] for k in TRAIN_KEYS} | {"heads": H, "p": p, "attention": model.resolved_attention(device),
                                                       "protocol": protocol}

    def on_epoch(epoch: int, m: torch.nn.Module) -> dict:
        every = params.get("eval_every", DEFAULTS["eval_every"])
        if every and epoch % every == 0 and epoch < cfg.epochs:
            ev = task.evaluate(m, params["eval_batch_size"])
            key = "mse_by_target" if metric == "exact" else "mse_batchmean_by_target"
            out = {"test_mse": {str(s): ev[s][key][target] for s in task.seeds}}
            if variant is not None:
                out["test_member_mse"] = {str(s): ev[s]["member_mse"] for s in task.seeds}
            return out
        return {}

    log.info("setting %s H=%d p=%d%s: %d seeds x K/Q/V = %d members on %s", protocol, H, p,
             f" (variant {variant}, lr {cfg.lr}, {cfg.lr_schedule}, {cfg.epochs} epochs)" if variant else "", len(seeds),
             len(task.members), device)
    result = run.train(model, task, cfg, run_params, checkpoint, seeds=seeds, on_epoch=on_epoch)
    # Saved once, evaluated from the file read-only (FrozenFile: digests before and after, the file hashed twice).
    model_file = FrozenFile.saved(Path(out_dir) / "model.pt", model, {"experiment": "heads", "protocol": protocol,
                                  "heads": H, "p": p, "seeds": list(seeds)}, build, device)
    with model_file.evaluating() as frozen_model:
        evaluation = task.evaluate(frozen_model, params["eval_batch_size"])
    frozen_record = model_file.proof()
    timing, provenance = run.timing(result), run.provenance(run_params)
    out = {}
    for si, s in enumerate(seeds):
        ev = evaluation[s]
        idx = [3 * si + j for j in range(3)]
        history = [{"epoch": h["epoch"], "train_loss": {r: h["train_loss"][i] for r, i in zip(ROLES, idx)},
                    **({"test_mse": h["test_mse"][str(s)]} if "test_mse" in h else {}),
                    **({"test_member_mse": h["test_member_mse"][str(s)]} if "test_member_mse" in h else {}),
                    **({"lr": h["lr"]} if "lr" in h and variant is not None else {})} for h in result.history]
        metrics = {
            "experiment": "heads", "protocol": protocol, "setting": {"heads": H, "p": p}, "seed": s,
            "target": target, "metric": metric,
            "mse": ev["mse_by_target" if metric == "exact" else "mse_batchmean_by_target"][target],
            "mse_by_target": ev["mse_by_target"], "mse_batchmean_by_target": ev["mse_batchmean_by_target"],
            "target_var_by_target": ev["target_var_by_target"],
            "member_mse": ev["member_mse"], "history": history,
            "n_train": task.n_train, "n_test": int(task.X_test.shape[1]),
            **provenance,
            # the keys every setting of the sweep shares: records with different values must not be mixed
            "sweep_config_hash": config_hash({k: params[k] for k in TRAIN_KEYS} | schedule_params(cfg)), "data_sha256": read_json(hd.sidecar(data_paths[si]))["sha256"],
            "ensemble": {"members": len(task.members), "seeds": seeds},
            "frozen": frozen_record, "timing": timing, "environment": run.environment(),
        }
        if variant is not None:  # ours, never beside the paper's numbers
            metrics |= {"variant": variant, "paper_comparable": False}
        out[s] = metrics
    return run.write_records(out_dir, out)


# --------------------------------------------------------------------------- tables, fit, figures


def _not_a_variant(record: dict, path: str) -> None:
    """A variant's record (``heads.variants``, ours) is refused: the heads tables and fits hold the protocols'
    sweeps only."""
    if "variant" in record or record.get("paper_comparable") is False:
        raise ValueError(f"{path}: a record of the variant {record.get('variant')!r} (heads.variants, ours; "
                         "paper_comparable: false), not of a sweep setting; the heads tables never take variants "
                         "(their table is heads_variants.csv)")


def _curves(r: dict) -> list[tuple]:
    """The K/Q/V emulators' mean train loss per epoch, the composed head's test MSE at the evaluated epochs and
    its final one (the final evaluation is not in the history)."""
    setting, out = f"{r.get('protocol', '?')} H={r['setting']['heads']} p={r['setting']['p']}", []
    for h in r.get("history", []):
        if isinstance(h.get("train_loss"), dict):
            out.append((setting, "model", h["epoch"], "train loss (mean of K/Q/V)",
                        float(np.mean(list(h["train_loss"].values())))))
        if h.get("test_mse") is not None:
            out.append((setting, "model", h["epoch"], "test MSE (composed head)", h["test_mse"]))
    if r.get("mse") is not None and r.get("history"):
        out.append((setting, "model", int(r["params"]["epochs"]), "test MSE (composed head)", r["mse"]))
    return out


#: What a heads record holds, as rows: one per (protocol, setting, seed, target); variants' records refused.
RUNS = RunSpec(
    experiment="heads", rows="mse_by_target",
    columns={
        "protocol": Get("protocol", "independent"), "heads": "setting.heads", "p": "setting.p", "seed": "seed",
        "target": KEY, "mse": "@", "mse_batchmean": "mse_batchmean_by_target.{key}",
        "target_var": Get("target_var_by_target.{key}", math.nan),
        "mse_K": "member_mse.K", "mse_Q": "member_mse.Q", "mse_V": "member_mse.V",
        "epochs": "params.epochs", "n_prompts": "params.n_prompts", "device": "environment.device",
        "config_hash": "config_hash",
        "sweep_config_hash": lambda m, key, item: m.get("sweep_config_hash", m["config_hash"]),
    },
    setting=("protocol", "heads", "p", "target"),
    metrics=("mse", "mse_batchmean", "target_var", "mse_K", "mse_Q", "mse_V"),
    check=_not_a_variant, records="heads/*/runs/*/seed*/metrics.json", curves=_curves,
)


def load_runs(paths: list[str]) -> pd.DataFrame:
    """One row per (protocol, setting, seed, target) from metrics.json files (:data:`RUNS`; a variant's record is
    refused)."""
    return records.load_runs(paths, RUNS)


def _target_order(primary: str) -> list[str]:
    return [primary] + [t for t in hd.TARGETS if t != primary]


def _missing(what: str, missing: list, allow_partial: bool) -> None:
    if missing and not allow_partial:
        raise ValueError(f"no runs for {what}: " + ", ".join(map(str, missing)))


def _summary_rows(runs: pd.DataFrame, params: dict, protocol: str, key: str, values: list[int],
                  fixed: dict, missing: list, with_paper: bool) -> list[dict]:
    target0, metric = headline(protocol, params)
    order = [(target, v, *fixed.values()) for target in _target_order(target0) for v in values]
    lost: list[tuple] = []
    table = summarise_by(runs[runs.protocol == protocol], ["target", key, *fixed], {METRICS[metric]: "mse"}, order,
                         means=["target_var"], missing=lost)
    missing += [f"{protocol} {key}={v} " + " ".join(f"{k}={x}" for k, x in zip(fixed, rest)) + f" target={target}"
                for target, v, *rest in lost]
    rows = []
    for row in table.to_dict("records"):
        row = {"protocol": protocol, "target": row["target"], "metric": metric, key: row[key],
               **{k: row[k] for k in fixed}, **{k: row[k] for k in _SUMMARY}}
        if with_paper:
            comparable = protocol == "published" and row["target"] == "reference_code"
            pm, ps = paper_values.paper_heads(row[key]) if comparable else (math.nan, math.nan)
            row |= {"paper_mse": pm, "paper_std": ps}
        rows.append(row)
    return rows


def heads_table(runs: pd.DataFrame, params: dict, allow_partial: bool = False) -> tuple[pd.DataFrame, list[str]]:
    """Heads sweep per protocol and target; the paper's values only beside published/reference_code rows."""
    rows, missing = [], []
    for protocol in params["protocols"]:
        rows += _summary_rows(runs, params, protocol, "heads", params["heads_sweep"], {"p": params["p_heads_sweep"]},
                              missing, with_paper=True)
    _missing("the heads sweep", missing, allow_partial)
    return pd.DataFrame(rows, columns=HEADS_COLUMNS), missing


def prompt_length_table(runs: pd.DataFrame, params: dict, allow_partial: bool = False) -> tuple[pd.DataFrame, list[str]]:
    missing: list[str] = []
    rows = _summary_rows(runs, params, p_sweep_protocol(params), "p", params["p_sweep"], {"heads": params["heads_p_sweep"]},
                         missing, with_paper=False)
    _missing("the prompt-length sweep", missing, allow_partial)
    return pd.DataFrame(rows, columns=P_COLUMNS), missing


def aggregate(params: dict, metrics: list[str], runs_csv: str, heads_csv: str, p_csv: str,
              allow_partial: bool = False) -> dict:
    """Tables from per-seed records. ``allow_partial``: build from whatever settings exist and say which are missing
    (a committed reference set); otherwise a missing setting is an error."""
    runs = load_runs(metrics)
    hashes = sorted(runs.sweep_config_hash.unique())
    if len(hashes) > 1 and not allow_partial:
        raise ValueError(f"records of {len(hashes)} different configurations ({', '.join(hashes)}) would be mixed; "
                         "rerun the stale settings or aggregate them separately")
    table, missing_h = heads_table(runs, params, allow_partial)  # every check before the first write
    ptable, missing_p = prompt_length_table(runs, params, allow_partial)
    from algo_emu.io import write_csv

    write_csv(runs_csv, runs.sort_values(["protocol", "heads", "p", "target", "seed"]))
    write_table(table, heads_csv, captions.heads(params, runs, f"Heads sweep at p = {params['p_heads_sweep']}", missing_h),
                label="tab:heads")
    write_table(ptable, p_csv, captions.heads(params, runs, f"Prompt-length sweep at H = {params['heads_p_sweep']}", missing_p),
                label="tab:prompt-length")
    return {"missing": missing_h + missing_p, "config_hashes": hashes}


def fit(params: dict, runs_csv: str, out_json: str, n_boot: int = 2000) -> dict:
    """Rate fits per protocol (its headline target and metric; both targets under ``by_target``) and of the paper."""
    runs = pd.read_csv(runs_csv)
    require_columns(runs, ["protocol", "heads", "p", "seed", "target", "mse", "mse_batchmean"], runs_csv)
    result = {"model": "MSE(H) = a + b/H (least squares on per-H means) and MSE ~ H^-alpha (log-log least squares)"}
    for protocol in params["protocols"]:
        target0, metric = headline(protocol, params)
        entry = {"headline_target": target0, "metric": metric, "by_target": {}}
        for target in _target_order(target0):
            sel = runs[(runs.protocol == protocol) & (runs.p == params["p_heads_sweep"]) & (runs.target == target)
                       & runs.heads.isin(params["heads_sweep"])]
            per_seed = {int(H): g.sort_values("seed")[METRICS[metric]].tolist() for H, g in sel.groupby("heads")}
            if len(per_seed) < 2:
                entry["by_target"][target] = {"status": f"not enough settings: H = {sorted(per_seed)} (a fit needs two)"}
            else:
                entry["by_target"][target] = fit_rates(per_seed, n_boot=n_boot) | {"heads": sorted(per_seed)}
        entry.update(entry["by_target"][target0])
        result[protocol] = entry
    pv = paper_values.HEADS_TABLE
    result["paper"] = fit_rates_summary(pv["heads"], pv["mse"], pv["std"], pv["n_seeds"], n_boot=n_boot) | {"source": pv["source"]}
    write_json(out_json, result)
    return result


def figure(kind: str, table: str, runs_csv: str, out: str, fit_json: str | None = None) -> None:
    from algo_emu.plots import heads as ph

    if kind == "heads":
        ph.heads_figure(table, fit_json, runs_csv, out)
    else:
        ph.prompt_length_figure(table, runs_csv, out)


PROTOCOL = arg("--protocol", choices=hd.PROTOCOLS, default="independent")
STEPS = [
    Step("data", "generate one seed's data set and target head", hd.write_dataset,
         [params_arg("heads", "data"), cli.SEED, PROTOCOL, arg("--out", "path", required=True)]),
    Step("train", "train one (H, p) setting, all seeds as one ensemble", train_setting,
         [params_arg("heads", "train"), arg("--heads", "H", type=int, required=True), arg("--p", type=int, required=True), cli.SEEDS,
          arg("--data", "data_paths", nargs="+", required=True), cli.OUT_DIR, cli.CHECKPOINT, *cli.RUNTIME, PROTOCOL,
          arg("--variant", help="name of the heads.variants entry this run is (ours: its records say so)")]),
    Step("aggregate", "tables from per-seed metrics", aggregate,
         [params_arg("heads", "aggregate"), cli.METRICS, cli.RUNS, arg("--heads-table", "heads_csv", required=True),
          arg("--p-table", "p_csv", required=True),
          arg("--allow-partial", action="store_true",
              help="build from the settings present and name the missing ones (committed reference sets)")]),
    Step("fit", "MSE(H) = a + b/H and power-law fits with bootstrap intervals", fit,
         [params_arg("heads", "fit"), cli.RUNS, arg("--out", "out_json", required=True)]),
    Step("variants-table", "the variants' table and learning curves (heads.variants: ours, never paper-comparable)",
         variants_table,
         [params_arg("heads", "variants"), arg("--variant-dirs", nargs="*", default=[], help="results/heads/variants/<name>"),
          arg("--baseline-roots", nargs="*", default=[],
              help="where the protocol's own records are looked for (<root>/<protocol>/runs/H<H>_p<p>/seed<k>/)"),
          cli.TABLE, arg("--curves", "curves_csv", required=True)]),
    Step("variants-figure", "per-member learning curves of each variant", variants_figure,
         [cli.TABLE, arg("--curves", "curves_csv", required=True), cli.FIGURE]),
    Step("figure", "heads or prompt-length figure from the tables", figure,
         [arg("--kind", choices=["heads", "prompt_length"], required=True), cli.TABLE, arg("--fit", "fit_json"), cli.RUNS,
          cli.FIGURE]),
]
add_parser = cli.steps_parser(STEPS)
