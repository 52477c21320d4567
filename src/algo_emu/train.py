"""The one training engine: a batched ensemble of independent members.

Every trained experiment is a configuration of this engine. An ensemble is E
members (e.g. 10 seeds x the K/Q/V emulators) with identical shapes; the model
holds their parameters with a leading member axis (see
:class:`algo_emu.models.emulator.EnsembleEmulator`) and one optimiser step
updates all of them. What makes this equal to training the members one at a
time (a test proves it):

* each member's loss is its own mean squared error and the total loss is
  their sum, so a member's gradient is the gradient of its own loss;
* Adam is element-wise, so one Adam over the stacked parameters is E
  independent Adams;
* each member's initialisation and data order come from its own named random
  streams ``(seed, "shuffle", name, epoch)``; nothing depends on the other
  members.

The learning rate is ``lr`` throughout (``lr_schedule: constant``) or set at the start of each epoch by
:func:`epoch_lr` (``cosine``); either way it is a function of the epoch alone.

Checkpoints (model, optimiser, epoch, history) are written atomically every
``checkpoint_every`` epochs; a killed run restarted with the same arguments
resumes from the last checkpoint and ends with the same numbers as an
uninterrupted run, because the data order of epoch t is a function of
(seed, member, t) alone.

A checkpoint is resumed only by the run that wrote it: its fingerprint is the
caller's (config) fingerprint plus :func:`algo_emu.runtime.code_version` (package
version and a digest of the source defining the model, the data, the tasks and
the loss), and on the CPU whether denormals are flushed to zero
(:func:`algo_emu.runtime.flush_denormals`), so a checkpoint written before a code change, or under the
other arithmetic, is ignored. The last
checkpoint of a run is marked ``final`` and is never resumed either: rerunning a
finished setting (``--forcerun``, or after any change) trains it again from
scratch instead of loading the old weights and training 0 epochs.

The runner (:class:`Runner`, below) is what every trained experiment's job shares around this engine. A trained
experiment supplies a task (``batch``, ``members``, ``n_train``), a model and an evaluation; the runner owns the rest:
threads and device (:func:`algo_emu.runtime.resolve_device`); the :class:`TrainConfig` from the experiment's config
section (:func:`train_config`: schema defaults for the keys a section leaves out); the fingerprint of a training run
(its parameters and seeds) handed to :func:`train_ensemble`; timing (the job's wall clock from the runner's start)
and the environment record; the provenance block of every per-seed record and writing
``<out_dir>/seed<k>/metrics.json`` (read back by :mod:`algo_emu.tables`).
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

import torch

from algo_emu.guard import claim_setting
from algo_emu.io import CorruptFileError, load_torch, save_torch, seed_metrics_path, write_json
from algo_emu.rng import torch_stream
from algo_emu.runtime import code_version, config_hash, denormals_flushed, environment, resolve_device

log = logging.getLogger(__name__)

FAIL_ENV = "ALGO_EMU_FAIL_SEED"


@dataclass(frozen=True)
class Member:
    """One independent run inside an ensemble: its seed and its role (e.g. ``"K"``)."""

    seed: int
    name: str


class EnsembleTask(Protocol):
    """What the engine needs from an experiment."""

    members: Sequence[Member]
    n_train: int  # training examples per member (the same for all)
    # Optional: ``loss_positions`` (a LongTensor of token indices, on the model's device).
    # When a task defines it, the loss sees only the model's outputs at those positions
    # (e.g. the query tokens of an in-context prompt) and ``batch`` returns targets
    # (E, B, len(loss_positions), d_out) for them. Absent or None: every output position.

    def batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``index``: (E, B) training-example indices, one row per member ->
        (inputs (E, B, ...), targets (E, B, ..., d_out)), on the model's device."""
        ...


@dataclass
class TrainConfig:
    epochs: int
    batch_size: int = 32
    lr: float = 1e-3
    checkpoint_every: int = 1
    compile: bool = False
    stream: str = "shuffle"  # name of the data-order stream
    lr_schedule: str = "constant"  # LR_SCHEDULES: the learning rate of each epoch (epoch_lr)
    #: optimiser steps per call of the step function (make_steps); the same numbers for every value
    steps_per_call: int = 1
    #: on CUDA, replay each call's steps as one captured CUDA graph (make_steps); ignored on the CPU
    capture: bool = False


#: The learning-rate schedules of :func:`epoch_lr` (config key ``lr_schedule``, workflow/schemas/training.schema.yaml).
LR_SCHEDULES = ("constant", "cosine")


def epoch_lr(cfg: TrainConfig, epoch: int) -> float:
    """The learning rate of (0-based) ``epoch``: ``constant``: ``cfg.lr``; ``cosine``: ``cfg.lr * 0.5 * (1 + cos(pi *
    epoch / cfg.epochs))``, from ``cfg.lr`` at epoch 0 down towards 0 at the last epoch. A function of the epoch alone,
    set at the start of each epoch, so a resumed run equals an uninterrupted one."""
    if cfg.lr_schedule == "constant":
        return cfg.lr
    if cfg.lr_schedule == "cosine":
        return cfg.lr * 0.5 * (1.0 + math.cos(math.pi * epoch / cfg.epochs))
    raise ValueError(f"lr_schedule: unknown schedule {cfg.lr_schedule!r} (expected one of {LR_SCHEDULES})")


@dataclass
class TrainResult:
    history: list[dict] = field(default_factory=list)  # one entry per epoch
    epochs_run: int = 0  # epochs trained in this call (0 when fully resumed)
    resumed_from: int = 0
    seconds: float = 0.0


def timing_record(result: TrainResult, wall_seconds_job: float, **extra) -> dict:
    """The ``timing`` block every experiment's metrics.json carries."""
    return {
        "wall_seconds_job": wall_seconds_job, "train_seconds_this_call": result.seconds, **extra,
        "epochs_run_this_call": result.epochs_run, "resumed_from_epoch": result.resumed_from,
        "epoch_seconds": [h["seconds"] for h in result.history],
    }


def member_losses(pred: torch.Tensor, target: torch.Tensor, out_mask: torch.Tensor) -> torch.Tensor:
    """Per-member MSE over the member's own output columns: (E,) tensor.

    ``pred``/``target``: (E, B, ..., d_out) (padded to the widest member);
    ``out_mask``: (E, d_out) with ones on each member's real columns.
    """
    E = pred.shape[0]
    sq = (pred - target).square().mul(out_mask.view(E, *([1] * (pred.dim() - 2)), -1))
    counts = out_mask.sum(1) * (pred[..., 0].numel() // E)
    return sq.reshape(E, -1).sum(1) / counts


def epoch_order(members: Sequence[Member], n_train: int, epoch: int, stream: str, device) -> torch.Tensor:
    """(E, n_train) permutation per member for ``epoch`` (a function of seed, name, epoch only)."""
    perms = [torch.randperm(n_train, generator=torch_stream(m.seed, stream, m.name, epoch)) for m in members]
    return torch.stack(perms).to(device)


class StackedTask:
    """Several tasks of one shape as one ensemble (a shape group): their members in order, each batch made by
    each task from its own rows of the index, inputs and targets zero-padded to the group's widths (``d_in``,
    ``d_out``: the stacked model's, :meth:`algo_emu.models.emulator.EnsembleEmulator.stacked`). A member's
    batches, loss and data order are the ones it has alone, so the group trains every member as its own task
    would. The tasks must agree on ``n_train`` and ``loss_positions``."""

    def __init__(self, tasks: Sequence[EnsembleTask], d_in: int, d_out: int) -> None:
        self.tasks = list(tasks)
        self.members = [m for t in self.tasks for m in t.members]
        sizes = {t.n_train for t in self.tasks}
        if len(sizes) != 1:
            raise ValueError(f"stacked tasks: training sets of different sizes {sorted(sizes)}")
        self.n_train = sizes.pop()
        positions = [getattr(t, "loss_positions", None) for t in self.tasks]
        if any((p is None) != (positions[0] is None) or (p is not None and not torch.equal(p, positions[0]))
               for p in positions):
            raise ValueError("stacked tasks: different loss positions")
        self.loss_positions = positions[0]
        self.d_in, self.d_out = d_in, d_out
        ends = torch.tensor([len(t.members) for t in self.tasks]).cumsum(0).tolist()
        self._rows = list(zip([0] + ends[:-1], ends))

    @staticmethod
    def _pad(x: torch.Tensor, width: int) -> torch.Tensor:
        return x if x.shape[-1] == width else torch.nn.functional.pad(x, (0, width - x.shape[-1]))

    def batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        xs, ys = [], []
        for task, (a, b) in zip(self.tasks, self._rows):
            x, y = task.batch(index[a:b])
            xs.append(self._pad(x, self.d_in))
            ys.append(self._pad(y, self.d_out))
        return torch.cat(xs), torch.cat(ys)


def kept_slice(positions: torch.Tensor | None) -> slice | torch.Tensor | None:
    """A task's ``loss_positions`` as a slice when they are consecutive (the model then computes the
    queries of those tokens only, :meth:`~algo_emu.models.emulator.EnsembleEmulator.forward`), else as given."""
    if positions is None:
        return None
    idx = positions.detach().cpu().tolist()
    if idx and idx == list(range(idx[0], idx[0] + len(idx))):
        return slice(idx[0], idx[0] + len(idx))
    return positions


def make_step(model: torch.nn.Module, task: EnsembleTask, cfg: TrainConfig,
              opt: torch.optim.Optimizer) -> Callable[[torch.Tensor], torch.Tensor]:
    """The engine's training step: ``step(index)`` with ``index`` (E, B) assembles the batch, computes
    every member's loss (compiled when ``cfg.compile``), back-propagates their sum, steps ``opt`` and
    returns the members' losses (E,) as float64. :func:`train_ensemble` and ``benchmarks/engine.py``
    both run this one function."""
    out_mask = model.out_mask
    keep = kept_slice(getattr(task, "loss_positions", None))
    takes_keep = isinstance(keep, slice) and hasattr(model, "resolved_attention")  # an EnsembleEmulator

    def loss_fn(inputs, targets):
        if takes_keep:
            pred = model(inputs, keep=keep)
        else:
            pred = model(inputs)
            if keep is not None:
                pred = pred[:, :, keep]
        return member_losses(pred, targets, out_mask)

    step_fn = torch.compile(loss_fn) if cfg.compile else loss_fn

    def step(index: torch.Tensor) -> torch.Tensor:
        inputs, targets = task.batch(index)
        losses = step_fn(inputs, targets)
        opt.zero_grad(set_to_none=True)
        losses.sum().backward()
        opt.step()
        return losses.detach().to(torch.float64)

    return step


def make_steps(model: torch.nn.Module, task: EnsembleTask, cfg: TrainConfig, opt: torch.optim.Optimizer,
               running: torch.Tensor) -> Callable[[torch.Tensor], None]:
    """``steps(index)`` with ``index`` (k, E, B): k optimiser steps of :func:`make_step`, one per row, each
    step's float64 losses added to ``running`` (E,) in order, so an epoch's sum is the one a per-step loop
    makes, bit for bit. Nothing is read back to the host.

    With ``cfg.capture`` on CUDA a call of ``cfg.steps_per_call`` rows is one CUDA graph replay: the index is
    copied into a buffer the graph reads, and the batch gather, forward, backward and Adam (which must then be
    ``capturable``) of all its steps run without the host. The first such call runs its steps eagerly on a side
    stream (real steps, which also create Adam's state and the libraries' workspaces) and captures the graph;
    later calls replay it. A call of another length (an epoch's last steps) runs eagerly. On the CPU every call
    runs eagerly."""
    step = make_step(model, task, cfg, opt)

    def eager(index: torch.Tensor) -> None:
        for k in range(index.shape[0]):
            running.add_(step(index[k]))

    if not (cfg.capture and running.device.type == "cuda"):
        return eager
    buffer: torch.Tensor | None = None
    graph: torch.cuda.CUDAGraph | None = None

    def captured(index: torch.Tensor) -> None:
        nonlocal buffer, graph
        if index.shape[0] != cfg.steps_per_call:
            eager(index)
            return
        if graph is None:
            buffer = index.clone()
            side = torch.cuda.Stream(running.device)
            side.wait_stream(torch.cuda.current_stream(running.device))
            with torch.cuda.stream(side):
                eager(buffer)
            torch.cuda.current_stream(running.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                eager(buffer)
            return
        buffer.copy_(index)
        graph.replay()

    return captured


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """The engine's Adam: fused (one kernel for all parameters, still E independent Adams, since Adam is
    element-wise); for captured steps on CUDA also ``capturable`` with the learning rate a tensor on the device,
    so a graph reads the rate :func:`epoch_lr` sets each epoch."""
    device = next(model.parameters()).device
    if cfg.capture and device.type == "cuda":
        return torch.optim.Adam(model.parameters(), lr=torch.tensor(cfg.lr, device=device), fused=True, capturable=True)
    return torch.optim.Adam(model.parameters(), lr=cfg.lr, fused=True)


def _set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    for group in opt.param_groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


def _check_injected_failure(members: Sequence[Member], epoch: int) -> None:
    """Testing hook: ``ALGO_EMU_FAIL_SEED=k[,k2]`` fails a run holding seed k after its first epoch."""
    spec = os.environ.get(FAIL_ENV)
    if not spec:
        return
    bad = {int(s) for s in spec.split(",") if s.strip()}
    hit = sorted(bad & {m.seed for m in members})
    if hit:
        raise RuntimeError(f"injected failure ({FAIL_ENV}={spec}) for seed(s) {hit} after epoch {epoch}")


def checkpoint_fingerprint(fingerprint: str, device: torch.device) -> str:
    """What a checkpoint must match to be resumed: the caller's fingerprint, the code version and, on the CPU,
    whether denormals are flushed (flushing changes the arithmetic below float32's smallest normal number)."""
    flushed = device.type == "cpu" and denormals_flushed()
    return f"{fingerprint}|{code_version()}" + ("|denormals flushed" if flushed else "")


def read_checkpoint(ckpt: Path | None, device: torch.device) -> dict | None:
    """The state in checkpoint ``ckpt``; None when there is none, or when it is damaged (it fails its CRC-32
    check or does not load: refused by name in the log, and the run trains from scratch to the same numbers)."""
    if ckpt is None or not ckpt.exists():
        return None
    try:
        return load_torch(ckpt, map_location=device, weights_only=False)
    except CorruptFileError as exc:
        log.warning("not resuming %s: %s; training from scratch", ckpt, exc)
        return None


def train_ensemble(
    model: torch.nn.Module,
    task: EnsembleTask,
    cfg: TrainConfig,
    checkpoint: str | os.PathLike | None = None,
    fingerprint: str = "",
    on_epoch: Callable[[int, torch.nn.Module], dict] | None = None,
) -> TrainResult:
    """Train all members of ``model`` on ``task`` with Adam; return the per-epoch history.

    ``fingerprint`` identifies the run (config hash); the engine appends the code
    version (:func:`algo_emu.runtime.code_version`). A checkpoint with another
    fingerprint, other members, or marked ``final`` (a finished run) is ignored
    (logged) and training starts from epoch 0: only an unfinished run of the same
    config and code is resumed. ``on_epoch(epoch, model)`` may return extra
    per-epoch metrics (e.g. a test loss).
    """
    if cfg.epochs < 0:
        raise ValueError(f"epochs must be >= 0, got {cfg.epochs}")
    if cfg.batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {cfg.batch_size}")
    if cfg.lr_schedule not in LR_SCHEDULES:
        raise ValueError(f"lr_schedule: unknown schedule {cfg.lr_schedule!r} (expected one of {LR_SCHEDULES})")
    members = list(task.members)
    device = next(model.parameters()).device
    if cfg.steps_per_call < 1:
        raise ValueError(f"steps_per_call must be >= 1, got {cfg.steps_per_call}")
    opt = make_optimizer(model, cfg)
    result = TrainResult()
    start_epoch = 0
    ckpt = Path(checkpoint) if checkpoint else None
    fingerprint = checkpoint_fingerprint(fingerprint, device)
    claim_setting(ckpt)  # one writer per setting: a second process training it is refused, naming the first
    state = read_checkpoint(ckpt, device)
    if state is not None:
        if state.get("final"):
            log.warning("not resuming %s: it is the checkpoint of a finished run; training from scratch", ckpt)
        elif state.get("fingerprint") == fingerprint and state.get("members") == [(m.seed, m.name) for m in members]:
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            start_epoch = int(state["epoch"])
            result.history = list(state["history"])
            result.resumed_from = start_epoch
            log.info("resumed from %s at epoch %d", ckpt, start_epoch)
        else:
            log.warning("ignoring checkpoint %s: it belongs to another configuration or code version "
                        "(%s, this run: %s)", ckpt, state.get("fingerprint"), fingerprint)

    B, K = cfg.batch_size, cfg.steps_per_call
    n_steps = math.ceil(task.n_train / B)
    full = task.n_train // B  # steps of a whole batch; the last one may be partial
    running = torch.zeros(len(members), dtype=torch.float64, device=device)
    if K == 1:
        step = make_step(model, task, cfg, opt)
    else:
        steps = make_steps(model, task, cfg, opt, running)
    t_start = time.perf_counter()
    for epoch in range(start_epoch, cfg.epochs):
        t0 = time.perf_counter()
        if cfg.lr_schedule != "constant":  # constant: the optimiser's lr is never touched (today's numbers, bit for bit)
            _set_lr(opt, epoch_lr(cfg, epoch))
        order = epoch_order(members, task.n_train, epoch, cfg.stream, device)
        running.zero_()
        for s in range(0, n_steps, K):
            k = min(K, n_steps - s)
            if K == 1:  # the per-step loop (the per-setting jobs')
                running += step(order[:, s * B:(s + 1) * B])
            elif s + k <= full:  # k whole batches: (k, E, B)
                steps(order[:, s * B:(s + k) * B].view(len(members), k, B).transpose(0, 1))
            else:  # the partial last batch (and the whole ones before it) one at a time
                for t in range(s, s + k):
                    steps(order[None, :, t * B:(t + 1) * B])
        entry = {"epoch": epoch + 1, "train_loss": (running / n_steps).tolist(), "seconds": time.perf_counter() - t0}
        if cfg.lr_schedule != "constant":
            entry["lr"] = epoch_lr(cfg, epoch)
        if on_epoch is not None:
            entry.update(on_epoch(epoch + 1, model))
        result.history.append(entry)
        result.epochs_run += 1
        log.info("epoch %d/%d  %.2fs  mean train loss %.4g", epoch + 1, cfg.epochs, entry["seconds"],
                 float(running.mean() / n_steps))
        if ckpt is not None and ((epoch + 1) % cfg.checkpoint_every == 0 or epoch + 1 == cfg.epochs):
            save_torch(ckpt, {
                "fingerprint": fingerprint, "members": [(m.seed, m.name) for m in members], "epoch": epoch + 1,
                "model": model.state_dict(), "optimizer": opt.state_dict(), "history": result.history,
                "final": epoch + 1 == cfg.epochs,
            })
        _check_injected_failure(members, epoch + 1)
    result.seconds = time.perf_counter() - t_start
    return result


# ------------------------------------------------------------------ the runner: what every trained experiment's job shares
#: Keys of a config section that make a :class:`TrainConfig`.
TRAIN_CONFIG_KEYS = ("epochs", "batch_size", "lr", "checkpoint_every", "compile", "lr_schedule")


def schedule_params(cfg: TrainConfig) -> dict:
    """``{"lr_schedule": ...}`` when ``cfg`` schedules its learning rate, else ``{}``: what a run's fingerprint and
    record parameters gain from the schedule. Empty for ``constant`` (the default), so the fingerprints, hashes and
    records of constant-rate runs are the ones they were before the key existed."""
    from algo_emu.specs import OMITTED_AT  # (reads the specs: not at import)

    return {} if cfg.lr_schedule == OMITTED_AT["lr_schedule"] else {"lr_schedule": cfg.lr_schedule}


def train_config(section: str, params: Mapping[str, Any], stream: str | None = None) -> TrainConfig:
    """The :class:`TrainConfig` of config section ``section`` (``params``: its resolved values; a key it
    lacks takes the schema's default). ``stream``: the data-order stream (default ``shuffle``); a model
    and its weight-blind baseline name the same one, so they see the same batches in the same order."""
    from algo_emu.config import schema_defaults  # (reads the specs: not at import)

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
