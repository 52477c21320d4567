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
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from algo_emu.config import schema_defaults
from algo_emu.io import seed_metrics_path, write_json
from algo_emu.runtime import config_hash, environment, resolve_device
from algo_emu.experiments.step_keys import OMITTED_AT
from algo_emu.train import TrainConfig, TrainResult, timing_record, train_ensemble

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


class Runner:
    """One training or evaluation job: threads and device set, the clock started, at construction.

    ``threads``: torch intra-op threads (``None`` or 0: leave torch's default)."""

    def __init__(self, device_spec: str = "auto", threads: int | None = None) -> None:
        if threads:
            torch.set_num_threads(threads)
        self.device = resolve_device(device_spec)
        self.t0 = time.perf_counter()
        self._environment: dict | None = None
        self._schedule: dict = {}  # schedule_params of the last training call: part of the records' params

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
        self._schedule = schedule_params(cfg)
        fp = dict(run_params) | self._schedule
        if seeds is not None:
            fp["seeds"] = list(seeds)
        fp |= dict(fingerprint_extra or {})
        return train_ensemble(model, task, cfg, checkpoint=checkpoint, fingerprint=config_hash(fp), on_epoch=on_epoch)

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
