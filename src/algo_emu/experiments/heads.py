"""E1: attention emulating an attention head (heads sweep, prompt-length sweep, O(1/H) fit).

Steps (each a Snakemake rule): ``data`` (one seed's data set, or the published
protocol's one shared data set), ``train`` (one setting (protocol, H, p), all
seeds x K/Q/V as one ensemble), ``train-group`` (the protocols' settings of one
(H, p), one shape group, as one ensemble: the GPU's job), ``aggregate`` (tables,
:mod:`algo_emu.experiments.heads_tables`), ``fit`` (rate fits), ``figure`` (figures).

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
from pathlib import Path

import torch

from algo_emu.data import heads as hd
from algo_emu.experiments.heads_variants import variants_figure, variants_table
from algo_emu.experiments.heads_converged import (converged_figure, converged_table, convergence_table,
                                                  require_converged)
from algo_emu.experiments.heads_settings import METRICS, headline, p_sweep_protocol, setting_name, settings  # noqa: F401
from algo_emu.experiments.heads_tables import (HEADS_COLUMNS, P_COLUMNS, RUNS, aggregate, figure, fit,  # noqa: F401
                                               heads_table, load_runs, prompt_length_table)
from algo_emu.frozen import FrozenFile
from algo_emu.io import read_json
from algo_emu.models.emulator import EnsembleEmulator
from algo_emu.rng import torch_stream
from algo_emu.runtime import config_hash
from algo_emu.train import Job, Member, Runner, schedule_params, train_config

log = logging.getLogger("algo_emu.heads")

ROLES = ("K", "Q", "V")
TRAIN_KEYS = ("n_prompts", "n_tokens", "d", "target_hidden", "hidden", "epochs", "batch_size", "lr", "test_fraction")


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
        for si, s in enumerate(self.seeds):  # on the training device
            e = 3 * si
            X = self.X_test[si].to(torch.float64)
            K, Q, V = hd.projections(X, *(self.heads_w[s][r].to(X.device) for r in ROLES))
            Kp, Qp, Vp = (pred[e + j, ..., : self.d_outs[e + j]].to(torch.float64) for j in range(3))
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
                  checkpoint: str | Path | None = None, device_spec: str = "auto", threads: int | None = None,
                  protocol: str = "independent", variant: str | None = None) -> dict[int, dict]:
    """Train one (protocol, H, p) setting for all ``seeds`` as one ensemble; write ``out_dir/seed<k>/metrics.json``.

    ``data_paths``: one data set per seed (independent) or the one shared data set (published). ``variant``: the
    name of a ``heads.variants`` entry (ours): its records say ``variant`` and ``paper_comparable: false`` (the heads
    tables refuse them), and each evaluation of the learning curve also holds every K/Q/V emulator's test MSE."""
    run = Runner(device_spec, threads)
    setting = _Setting(params, H, p, seeds, data_paths, run.device, protocol, variant)
    result = run.train(setting.job.model, setting.job.task, setting.job.cfg, setting.job.run_params, checkpoint,
                       seeds=seeds, on_epoch=setting.job.on_epoch)
    return setting.write(run, result, out_dir)


def train_group(params: dict, H: int, p: int, seeds: list[int], protocols: list[str], data_paths: list[str],
                out_root: str | Path, checkpoint: str | Path | None = None, device_spec: str = "auto",
                threads: int | None = None, steps_per_call: int = 1, tf32: bool = False) -> dict[str, dict[int, dict]]:
    """Train the protocols' settings of one (H, p) as one ensemble (one shape group); write each setting's records.

    The settings (protocol, H, p) of ``protocols`` are one shape group (every protocol's block has the same shapes);
    this writes each setting's records, the ones :func:`train_setting` writes, to
    ``<out_root>/<protocol>/runs/H<H>_p<p>/``. ``data_paths``: the protocols' data sets in order (published:
    one, independent: one per seed). ``steps_per_call``, ``tf32``: :meth:`algo_emu.train.Runner.train_group`,
    :class:`~algo_emu.train.Runner`."""
    run = Runner(device_spec, threads, tf32)
    settings, rest = [], list(data_paths)
    for protocol in protocols:
        n = 1 if protocol == "published" else len(seeds)
        settings.append(_Setting(params, H, p, seeds, rest[:n], run.device, protocol))
        rest = rest[n:]
    if rest:
        raise ValueError(f"{len(data_paths)} data files for the protocols {protocols} and {len(seeds)} seeds "
                         f"({len(rest)} left over)")
    results = run.train_group([s.job for s in settings], checkpoint, steps_per_call)
    return {s.protocol: s.write(run, r, Path(out_root) / s.protocol / "runs" / setting_name(H, p))
            for s, r in zip(settings, results)}


class _Setting:
    """One (protocol, H, p) setting: its data, task, model and training job, and its records."""

    def __init__(self, params: dict, H: int, p: int, seeds: list[int], data_paths: list[str], device: torch.device,
                 protocol: str, variant: str | None = None) -> None:
        self.params, self.H, self.p, self.seeds, self.protocol, self.variant = params, H, p, list(seeds), protocol, variant
        self.target, self.metric = headline(protocol, params)
        if protocol == "published":
            if len(data_paths) != 1:
                raise ValueError(f"the published protocol shares one data set across seeds, got {len(data_paths)} data files")
            meta = read_json(hd.sidecar(data_paths[0]))
            if meta.get("protocol") != "published":
                raise ValueError(f"{data_paths[0]}: not the published protocol's data set (protocol={meta.get('protocol')!r})")
            data_paths = data_paths * len(seeds)
        elif len(seeds) != len(data_paths):
            raise ValueError(f"{len(seeds)} seeds but {len(data_paths)} data files")
        self.data_paths = list(data_paths)
        loaded: dict[str, dict] = {}
        for path in dict.fromkeys(data_paths):
            loaded[path] = hd.load_dataset(path, params)
        self.task = task = HeadsTask({s: loaded[path] for s, path in zip(seeds, data_paths)}, params, device)
        model = self.build().to(device)
        cfg = train_config("heads", params)
        self.run_params = {k: params[k] for k in TRAIN_KEYS} | {"heads": H, "p": p, "attention": model.resolved_attention(device),
                                                                 "protocol": protocol}

        def on_epoch(epoch: int, m: torch.nn.Module) -> dict:
            every = params["eval_every"]
            if every and epoch % every == 0 and epoch < cfg.epochs:
                ev = task.evaluate(m, params["eval_batch_size"])
                key = "mse_by_target" if self.metric == "exact" else "mse_batchmean_by_target"
                out = {"test_mse": {str(s): ev[s][key][self.target] for s in task.seeds}}
                if variant is not None:
                    out["test_member_mse"] = {str(s): ev[s]["member_mse"] for s in task.seeds}
                return out
            return {}

        self.job = Job(model, task, cfg, self.run_params, seeds, on_epoch=on_epoch)
        log.info("setting %s H=%d p=%d%s: %d seeds x K/Q/V = %d members on %s", protocol, H, p,
                 f" (variant {variant}, lr {cfg.lr}, {cfg.lr_schedule}, {cfg.epochs} epochs)" if variant else "",
                 len(seeds), len(task.members), device)

    def build(self, meta: dict | None = None) -> EnsembleEmulator:
        params, task = self.params, self.task
        return EnsembleEmulator(
            [torch_stream(m.seed, "heads", "init", m.name) for m in task.members],
            d_in=params["d"], d_out=task.d_outs, n_tokens=params["n_tokens"], hidden=params["hidden"], heads=self.H,
            p=self.p, attention=params["attention"],
        )

    def write(self, run: Runner, result, out_dir: str | Path) -> dict[int, dict]:
        """Save the trained model frozen, evaluate it from the file and write every seed's record."""
        params, task, H, p, seeds, protocol, variant = (self.params, self.task, self.H, self.p, self.seeds,
                                                        self.protocol, self.variant)
        target, metric, run_params = self.target, self.metric, self.run_params
        # Saved once, evaluated from the file read-only (FrozenFile: digests before and after, the file hashed twice).
        model_file = FrozenFile.saved(Path(out_dir) / "model.pt", self.job.model, {"experiment": "heads", "protocol": protocol,
                                      "heads": H, "p": p, "seeds": list(seeds)}, self.build, run.device)
        with model_file.evaluating() as frozen_model:
            evaluation = task.evaluate(frozen_model, params["eval_batch_size"])
        frozen_record = model_file.proof()
        timing, provenance = run.timing(result), run.provenance(run_params)
        cfg = self.job.cfg
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
                "sweep_config_hash": config_hash({k: params[k] for k in TRAIN_KEYS} | schedule_params(cfg)), "data_sha256": read_json(hd.sidecar(self.data_paths[si]))["sha256"],
                "ensemble": {"members": len(task.members), "seeds": seeds},
                "frozen": frozen_record, "timing": timing, "environment": run.environment(),
            }
            if variant is not None:  # ours, never beside the paper's numbers
                metrics |= {"variant": variant, "paper_comparable": False}
            out[s] = metrics
        return run.write_records(out_dir, out)


#: The steps (``python -m algo_emu heads <step> JOB``, :mod:`algo_emu.cli`).
STEPS = {
    "data": hd.write_dataset,
    "train": train_setting,
    "train-group": train_group,
    "aggregate": aggregate,
    "fit": fit,
    "variants-table": variants_table,
    "variants-figure": variants_figure,
    "convergence-table": convergence_table,
    "converged-check": require_converged,
    "converged-table": converged_table,
    "converged-figure": converged_figure,
    "figure": figure,
}
#: The steps whose ``params`` are checked against their declaration (:mod:`algo_emu.specs`).
PARAMS_OF = {"data": "data", "train": "train", "train-group": "train", "aggregate": "aggregate", "fit": "fit",
             "variants-table": "variants", "convergence-table": "convergence", "converged-check": "converged",
             "converged-table": "converged"}
