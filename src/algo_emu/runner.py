"""The one experiment runner: what every trained experiment shares.

A trained experiment supplies a task (``batch``, ``members``, ``n_train``), a model and an
evaluation; :class:`Runner` owns the rest:

* threads and device (``--threads``, ``--device``: :func:`algo_emu.runtime.resolve_device`);
* the :class:`~algo_emu.train.TrainConfig` from the experiment's config section (schema defaults
  for the keys a section leaves out: :func:`algo_emu.config.schema_defaults`);
* the fingerprint of a training run (its parameters and seeds; a checkpoint is resumed only by the
  same fingerprint and the same package source, :func:`algo_emu.train.train_ensemble`), checkpoint
  and resume;
* timing (the job's wall clock from the runner's start) and the environment record;
* the provenance block of every per-seed record and writing ``<out_dir>/seed<k>/metrics.json``.

Records are read back by :mod:`algo_emu.records`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from algo_emu.config import schema_defaults
from algo_emu.io import seed_metrics_path, write_json
from algo_emu.runtime import config_hash, environment, resolve_device
from algo_emu.experiments.step_keys import OMITTED_AT
from algo_emu.train import StackedTask, TrainConfig, TrainResult, timing_record, train_ensemble

#: Keys of a config section that make a :class:`TrainConfig`.
TRAIN_CONFIG_KEYS = ("epochs", "batch_size", "lr", "checkpoint_every", "compile", "lr_schedule")


def schedule_params(cfg: TrainConfig) -> dict:
    """``{"lr_schedule": ...}`` when ``cfg`` schedules its learning rate, else ``{}``: what a run's fingerprint and
    record parameters gain from the schedule. Empty for ``constant`` (the default), so the fingerprints, hashes and
    records of constant-rate runs are the ones they were before the key existed."""
    return {} if cfg.lr_schedule == OMITTED_AT["lr_schedule"] else {"lr_schedule": cfg.lr_schedule}


def train_config(section: str, params: Mapping[str, Any], stream: str | None = None) -> TrainConfig:
    """The :class:`TrainConfig` of config section ``section`` (``params``: its resolved values; a key it
    lacks takes the schema's default). ``stream``: the data-order stream (default ``shuffle``); a model
    and its weight-blind baseline name the same one, so they see the same batches in the same order."""
    defaults = schema_defaults(section)
    values = {}
    for key in TRAIN_CONFIG_KEYS:
        if key in params:
            values[key] = params[key]
        elif key in defaults:
            values[key] = defaults[key]
        else:
            raise ValueError(f"{section}: no value for {key!r} (not in the section and no schema default)")
    return TrainConfig(**values, **({"stream": stream} if stream else {}))


@dataclass
class Job:
    """One setting's training, as :meth:`Runner.train` takes it; :meth:`Runner.train_group` trains several
    jobs of one shape as one ensemble."""

    model: torch.nn.Module
    task: Any
    cfg: TrainConfig
    run_params: Mapping[str, Any]
    seeds: Sequence[int] | None = None
    fingerprint_extra: Mapping[str, Any] | None = None
    on_epoch: Callable[[int, torch.nn.Module], dict] | None = None


class Runner:
    """One training or evaluation job: threads and device set, the clock started, at construction.

    ``threads``: torch intra-op threads (``None`` or 0: leave torch's default). ``tf32``: on CUDA, matmuls in
    TF32 on tensor cores (a run's params then say ``tf32: true``; no effect on the CPU)."""

    def __init__(self, device_spec: str = "auto", threads: int | None = None, tf32: bool = False) -> None:
        if threads:
            torch.set_num_threads(threads)
        self.device = resolve_device(device_spec)
        self.t0 = time.perf_counter()
        self._environment: dict | None = None
        self.tf32 = bool(tf32) and self.device.type == "cuda"
        if self.tf32:
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        self._schedule: dict = {"tf32": True} if self.tf32 else {}  # part of the records' params

    def restarted(self) -> "Runner":
        """The same job's device and environment with the clock restarted (a second model trained in the
        same job, e.g. a weight-blind baseline, records its own wall time)."""
        other = object.__new__(Runner)
        other.__dict__.update(self.__dict__)
        other.t0 = time.perf_counter()
        return other

    def seconds(self) -> float:
        """Wall seconds since the runner started (the job's wall clock)."""
        return time.perf_counter() - self.t0

    def environment(self) -> dict:
        """:func:`algo_emu.runtime.environment` of this job's device (computed once)."""
        if self._environment is None:
            self._environment = environment(self.device)
        return self._environment

    def train(self, model: torch.nn.Module, task, cfg: TrainConfig, run_params: Mapping[str, Any],
              checkpoint: str | Path | None, seeds: Sequence[int] | None = None,
              fingerprint_extra: Mapping[str, Any] | None = None,
              on_epoch: Callable[[int, torch.nn.Module], dict] | None = None) -> TrainResult:
        """Train ``model`` on ``task`` (:func:`algo_emu.train.train_ensemble`), resuming ``checkpoint`` when
        its fingerprint matches: the config hash of ``run_params`` with ``seeds``, ``fingerprint_extra`` and the
        learning-rate schedule (:func:`schedule_params`; a checkpoint of another schedule is never resumed)."""
        fp = self._fingerprint(Job(model, task, cfg, run_params, seeds, fingerprint_extra))
        return train_ensemble(model, task, cfg, checkpoint=checkpoint, fingerprint=config_hash(fp), on_epoch=on_epoch)

    def _fingerprint(self, job: Job) -> dict:
        self._schedule = schedule_params(job.cfg) | ({"tf32": True} if self.tf32 else {})
        fp = dict(job.run_params) | self._schedule
        if job.seeds is not None:
            fp["seeds"] = list(job.seeds)
        return fp | dict(job.fingerprint_extra or {})

    def train_jobs(self, jobs: Sequence[Job], checkpoint: str | Path | None, steps_per_call: int = 1) -> list[TrainResult]:
        """One job: :meth:`train` (the per-setting job, as ever); several: :meth:`train_group`."""
        if len(jobs) == 1:
            job = jobs[0]
            return [self.train(job.model, job.task, job.cfg, job.run_params, checkpoint, job.seeds,
                               job.fingerprint_extra, job.on_epoch)]
        return self.train_group(jobs, checkpoint, steps_per_call)

    def train_group(self, jobs: Sequence[Job], checkpoint: str | Path | None, steps_per_call: int = 1) -> list[TrainResult]:
        """Train ``jobs`` (settings of one shape: the same block, training-set size and training config) as one
        ensemble (:meth:`~algo_emu.models.emulator.EnsembleEmulator.stacked`, :class:`~algo_emu.train.StackedTask`)
        and return each job's :class:`TrainResult`, as :meth:`train` would have returned it: its members' train
        losses, its ``on_epoch`` metrics, the group's times; each job's model holds its trained members after.
        ``steps_per_call``: optimiser steps per call, captured as one CUDA graph on CUDA
        (:func:`~algo_emu.train.make_steps`). The group's checkpoint is resumed only by the same jobs in the same order."""
        from algo_emu.models.emulator import EnsembleEmulator

        cfg = jobs[0].cfg
        for job in jobs[1:]:
            if job.cfg != cfg:
                raise ValueError(f"train_group: settings with different training configs ({job.cfg} vs {cfg})")
        # captured on CUDA, and there without torch.compile: the graph already removes the launches compile's fusion
        # would save, and a compiled step inside a captured graph is untried (the GPU probe times this same path)
        cuda = self.device.type == "cuda"
        cfg = replace(cfg, steps_per_call=steps_per_call, capture=cuda, compile=cfg.compile and not cuda)
        models = [job.model for job in jobs]
        group = EnsembleEmulator.stacked(models)
        task = StackedTask([job.task for job in jobs], group.d_in, group.d_out)
        fingerprint = config_hash({"group": [self._fingerprint(job) for job in jobs]})

        def on_epoch(epoch: int, trained: torch.nn.Module) -> dict:
            if not any(job.on_epoch for job in jobs):
                return {}
            trained.unstack(models)
            return {"settings": [job.on_epoch(epoch, job.model) if job.on_epoch else {} for job in jobs]}

        result = train_ensemble(group, task, cfg, checkpoint=checkpoint, fingerprint=fingerprint, on_epoch=on_epoch)
        group.unstack(models)
        out, e0 = [], 0
        for i, job in enumerate(jobs):
            e1 = e0 + len(job.task.members)
            history = [{k: v for k, v in h.items() if k != "settings"} | {"train_loss": h["train_loss"][e0:e1]}
                       | (h["settings"][i] if "settings" in h else {}) for h in result.history]
            out.append(TrainResult(history, result.epochs_run, result.resumed_from, result.seconds))
            e0 = e1
        return out

    def timing(self, result: TrainResult, **extra) -> dict:
        """The ``timing`` block of a record: the job's wall clock so far and the training call's times."""
        return timing_record(result, self.seconds(), **extra)

    def provenance(self, run_params: Mapping[str, Any]) -> dict:
        """The parameters a record was made with and their hash (the part of the provenance block that
        does not depend on the clock); after :meth:`train`, with its learning-rate schedule (:func:`schedule_params`)."""
        params = dict(run_params) | self._schedule
        return {"params": params, "config_hash": config_hash(params)}

    def write_records(self, out_dir: str | Path, records: Mapping[int, dict]) -> dict[int, dict]:
        """Write each seed's record to ``<out_dir>/seed<k>/metrics.json`` (atomic); returns them."""
        for seed, record in records.items():
            write_json(seed_metrics_path(out_dir, seed), record)
        return dict(records)
