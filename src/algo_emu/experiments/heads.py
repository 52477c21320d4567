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
from collections import defaultdict
from pathlib import Path

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
    check=_not_a_variant,
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


def caption(params: dict, runs: pd.DataFrame, what: str, missing: list[str] | None = None) -> str:
    devices = ", ".join(sorted(runs.device.unique()))
    hashes = sorted(runs.sweep_config_hash.unique())
    text = (f"{what}. Test MSE of the composed head on the held-out {params['test_fraction']:.0%} "
            f"(mean, sample std and 95% bootstrap CI over seeds). Protocol `published` (the published code's: one data "
            f"set and target head for all seeds, softmax over queries = target `reference_code`, metric = mean of "
            f"per-batch means of batch {params['eval_batch_size']}): the paper's values stand beside its "
            f"`reference_code` rows only. Protocol `independent` (ours: a data set and head per seed, exact mean; "
            f"headline target `{params['target']}`). Target `paper` = softmax over keys (the paper's definition). "
            f"target_var_mean = variance of the target output Y (a model that predicts a constant scores about this). "
            f"N={params['n_prompts']}, n={params['n_tokens']}, d={params['d']}, h={params['hidden']}, "
            f"{params['epochs']} epochs, batch {params['batch_size']}, Adam lr {params['lr']}. Device: {devices}. "
            f"Paper values: {paper_values.HEADS_TABLE['source']}.")
    if missing:
        text += f" PARTIAL: {len(missing)} rows missing ({'; '.join(missing)})."
    if len(hashes) > 1:
        text += f" MIXED: records of {len(hashes)} different configurations ({', '.join(hashes)})."
    return text


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
    write_table(table, heads_csv, caption(params, runs, f"Heads sweep at p = {params['p_heads_sweep']}", missing_h),
                label="tab:heads")
    write_table(ptable, p_csv, caption(params, runs, f"Prompt-length sweep at H = {params['heads_p_sweep']}", missing_p),
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


def reference_report(ref_dir: str | Path, config_path: str | Path, title: str, metrics: list[str] | None = None,
                     preamble: list[str] | None = None, rebuild: str | None = None,
                     sections: list[str] | None = None) -> dict:
    """Tables, fit, figures and a Markdown report of a committed reference set (``<ref_dir>/heads/<protocol>/runs/``).

    Builds from whatever settings are there and names the missing ones; records of different configurations
    are reported as MIXED, never silently averaged together. ``metrics``: only these records (a campaign
    passes the settings its pinned commit made or adopted; the others count as missing); ``preamble``:
    Markdown lines after the title; ``rebuild``: the command that rebuilds the page; ``sections``: Markdown
    lines after E1's (other experiments of the same set), before the verdict rules."""
    from algo_emu.config import load_config
    from algo_emu.io import write_text
    from algo_emu.report import replication as rep

    ref = Path(ref_dir)
    config = load_config(config_path)
    params = dict(config["heads"])
    if metrics is None:
        metrics = sorted(str(m) for m in ref.glob("heads/*/runs/H*_p*/seed*/metrics.json"))
    metrics = sorted(str(m) for m in metrics)
    if not metrics:
        raise ValueError(f"{ref}: no per-seed records under heads/<protocol>/runs/")
    runs = load_runs(metrics)
    params["protocols"] = [pr for pr in params["protocols"] if pr in set(runs.protocol)]
    tables, figures = ref / "tables", ref / "figures"
    info = aggregate(params, metrics, str(tables / "heads_runs.csv"), str(tables / "heads_vs_mse.csv"),
                     str(tables / "prompt_length_vs_mse.csv"), allow_partial=True)
    fits = fit(params, str(tables / "heads_runs.csv"), str(tables / "heads_fit.json"))
    from algo_emu.plots import heads as ph

    ph.heads_figure(str(tables / "heads_vs_mse.csv"), str(tables / "heads_fit.json"), str(tables / "heads_runs.csv"),
                    str(figures / "heads_vs_mse"))
    ptable = pd.read_csv(tables / "prompt_length_vs_mse.csv")
    if ptable.p.nunique() >= 2:
        ph.prompt_length_figure(str(tables / "prompt_length_vs_mse.csv"), str(tables / "heads_runs.csv"),
                                str(figures / "prompt_length_vs_mse"))
    rows = rep.e1_rows(tables, config, f"{Path(config_path).name} (the paper's scale)")
    done_heads = sorted(int(h) for h in runs[runs.p == params["p_heads_sweep"]].heads.unique())
    for r in rows:  # a setting of the configured sweep that is absent here is missing, not "not in the sweep"
        if r.verdict == "not run at this scale" and r.setting.startswith("H="):
            r.verdict = "missing from this reference set"
            r.reason = "in the configured sweep but not yet committed (`make campaign` runs it)"
        if r.claim.startswith("O(1/H): our heads sweep") and done_heads != sorted(params["heads_sweep"]):
            r.verdict = "incomplete: no verdict yet"
            r.reason = (f"fit from H = {done_heads} only (of {sorted(params['heads_sweep'])}); a rate read from a "
                        f"partial sweep is not a result. {r.reason}")
    frame = rep.rows_frame(rows)
    settings_done = sorted({(r.protocol, int(r.heads), int(r.p)) for r in runs.itertuples()})
    wanted = settings(params)
    missing = [st for st in wanted if st not in settings_done]
    seeds = runs.groupby(["protocol", "heads", "p"]).seed.nunique()
    records = {path: read_json(path) for path in metrics}  # read once: provenance, wall times, learning curves
    first = records[metrics[0]]
    walls = {}
    for m in records.values():
        walls.setdefault((m["protocol"], m["setting"]["heads"], m["setting"]["p"]), m["timing"])
    rebuild = rebuild or f"python -m algo_emu heads reference --dir {ref} --config {config_path}"
    lines = [f"# {title}", "", *(preamble or []),
             "E1 (attention emulating an attention head) at the paper's scale, made on this project's machines and "
             f"committed as per-seed records; rebuild this page with `{rebuild}`.", "",
             f"- config: `{config_path}` heads section, sweep config hash(es) {', '.join(info['config_hashes'])}",
             f"- N = {params['n_prompts']}, n = {params['n_tokens']}, d = {params['d']}, h = {params['hidden']}, "
             f"{params['epochs']} epochs, batch {params['batch_size']}, Adam lr {params['lr']}",
             f"- device: {', '.join(sorted(runs.device.unique()))}; torch {first['environment'].get('torch')}; "
             f"commit(s) {', '.join(sorted({str(m['environment'].get('git_commit')) for m in records.values()}))}",
             f"- settings present ({len(settings_done)}): " + ", ".join(
                 f"{pr} H={h} p={p} ({seeds[(pr, h, p)]} seeds)" for pr, h, p in settings_done),
             f"- settings MISSING ({len(missing)}): " + (", ".join(f"{pr} H={h} p={p}" for pr, h, p in missing) or "none"),
             "", "Wall time per setting (all seeds as one ensemble; 2-core CPU shared with other work unless stated):", ""]
    for (pr, h, p), t in sorted(walls.items()):
        lines.append(f"- {pr} H={h} p={p}: {t.get('wall_seconds_job', float('nan')) / 60:.1f} min "
                     f"({t.get('epochs_run_this_call', '?')} epochs this call, resumed from epoch "
                     f"{t.get('resumed_from_epoch', 0)})")
    table_md = (tables / "heads_vs_mse.md").read_text()
    curves = ["", "## Learning curves", "",
              "Mean over seeds of the composed head's test MSE (the protocol's headline quantity) at the evaluation "
              "epochs (`heads.eval_every`), and of the K/Q/V emulators' mean train loss:", ""]
    for (pr, h, p), _ in sorted(walls.items()):
        recs = [m for path, m in records.items() if f"/{pr}/runs/H{h}_p{p}/" in path]
        by_epoch: dict[int, list[float]] = defaultdict(list)
        loss: dict[int, list[float]] = defaultdict(list)
        for m in recs:
            for entry in m["history"]:
                if "test_mse" in entry:
                    by_epoch[entry["epoch"]].append(entry["test_mse"])
                loss[entry["epoch"]].append(sum(entry["train_loss"].values()) / 3)
        final = float(pd.Series([m["mse"] for m in recs]).mean())
        pts = ", ".join(f"epoch {e}: {sum(v) / len(v):.3g}" for e, v in sorted(by_epoch.items()))  # epochs are 1-based
        ls = ", ".join(f"{e}: {sum(v) / len(v):.3g}" for e, v in sorted(loss.items()) if e % 10 == 0 or e == 1)
        curves.append(f"- {pr} H={h} p={p}: test MSE {pts}; final (epoch {params['epochs']}): {final:.3g}. "
                      f"K/Q/V train loss at epoch {ls}.")
    lines += ["", "## Did the emulators learn?", "",
              "MSE of the composed head against Var(Y), the MSE of a constant predictor (`target_var_mean`):", ""]
    for rec in pd.read_csv(tables / "heads_vs_mse.csv").to_dict("records"):
        lines.append(f"- {rec['protocol']} H={rec['heads']} target={rec['target']}: MSE {rec['mse_mean']:.4g} vs "
                     f"Var(Y) {rec['target_var_mean']:.4g} (ratio {rec['mse_mean'] / rec['target_var_mean']:.3g})")
    lines += ["", "## The paper's numbers beside ours (verdict rules below)", "",
              "\n".join(["", *rep.rows_markdown(frame)]) + "\n", "",
              "## Fits", ""]
    for key in ("published", "independent", "paper"):
        f = fits.get(key)
        if not f:
            continue
        if "a" in f:
            ci = lambda c: f"[{c[0]:.3g}, {c[1]:.3g}]"  # noqa: E731
            part = f" (from H = {f['heads']} only: not a result)" if f.get("heads") and f["heads"] != sorted(
                params["heads_sweep"]) else ""
            lines.append(f"- {key}{part}: MSE(H) = a + b/H with a = {f['a']:.4g} {ci(f['a_ci'])}, b = {f['b']:.4g} "
                         f"{ci(f['b_ci'])}, R^2 = {f['r2']:.3f}; power law alpha = {f['alpha']:.3g} {ci(f['alpha_ci'])}")
        else:
            lines.append(f"- {key}: {f.get('status')}")
    lines += curves
    lines += ["", "## Table", "", table_md, "", "## Figures", "", "![heads vs MSE](figures/heads_vs_mse.png)", ""]
    if (figures / "prompt_length_vs_mse.png").exists():
        lines += ["![prompt length vs MSE](figures/prompt_length_vs_mse.png)", ""]
    lines += [*(sections or []), "## Verdict rules", "", rep.RULES]
    write_text(ref / "README.md", "\n".join(lines) + "\n")
    return {"missing": missing, "present": settings_done}


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
    Step("reference", "tables, fit, figures and README.md of a committed reference set (partial sets named)",
         reference_report,
         [arg("--dir", "ref_dir", required=True, help="e.g. results/reference/paper-scale"),
          arg("--config", "config_path", default="config/config.yaml"),
          arg("--title", default="E1 at the paper's scale: committed reference set")]),
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
