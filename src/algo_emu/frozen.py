"""Frozen models: save trained weights once, load them read-only, prove evaluation never touched them.

A frozen model is written by :func:`save_frozen` as a torch file (CPU state dict
plus a JSON-able ``meta``) with a JSON sidecar ``<path>.json`` holding the file's
sha256 and a digest of every parameter and buffer. :func:`load_frozen` checks the
file against its sidecar, rebuilds the module, loads the weights (strict), turns
off ``requires_grad`` and switches to eval mode. :func:`frozen` wraps an
evaluation: it digests the parameters before and after and raises if a single
bit changed, so an evaluation that finishes proves the model was not modified.

:class:`FrozenFile` is the whole protocol for a saved model, the one every
experiment that evaluates a frozen file uses: hash the file, load it read-only
(:func:`load_frozen`), evaluate inside :meth:`FrozenFile.evaluating`
(:func:`frozen`), then :meth:`FrozenFile.proof` hashes the file again and returns
the one record schema (:data:`RECORD_KEYS`), raising if anything changed.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable, Iterator

import torch

from algo_emu.io import current_names, read_json, save_torch, sha256_file, tensor_digest, write_json
from algo_emu.io import sidecar  # noqa: F401  (one definition, in io; re-exported)

FORMAT_VERSION = 1


class FrozenModelError(RuntimeError):
    """A frozen model file does not match its sidecar, or an evaluation changed it."""


def parameter_digest(module: torch.nn.Module) -> str:
    """sha256 over the names, dtypes, shapes and raw bytes of every parameter and buffer
    (:func:`algo_emu.io.tensor_digest` of the named tensors)."""
    return tensor_digest(list(module.named_parameters()) + list(module.named_buffers()))


def save_frozen(path: str | Path, model: torch.nn.Module, meta: dict, extra: dict | None = None) -> dict:
    """Write ``model``'s weights and ``meta`` (what is needed to rebuild it) and a sidecar.

    ``extra`` goes into the sidecar only (training history, timing, ...). Returns the sidecar.
    """
    path = Path(path)
    state = {k: v.detach().to("cpu").clone() for k, v in model.state_dict().items()}
    save_torch(path, {"format_version": FORMAT_VERSION, "meta": meta, "state_dict": state})
    info = {"format_version": FORMAT_VERSION, "meta": meta, "sha256": sha256_file(path),
            "param_digest": parameter_digest(model), **(extra or {})}
    write_json(sidecar(path), info)
    return info


def load_frozen(path: str | Path, build: Callable[[dict], torch.nn.Module],
                device: torch.device | str = "cpu") -> tuple[torch.nn.Module, dict]:
    """Load a frozen model read-only: verified checksum, strict state dict, no gradients, eval mode.

    ``build(meta)`` returns a module of the right shapes (its initial values are overwritten).
    Returns (model, sidecar).
    """
    path = Path(path)
    info = read_json(sidecar(path))
    digest = sha256_file(path)
    if digest != info.get("sha256"):
        raise FrozenModelError(f"{path}: sha256 {digest[:12]}... does not match its sidecar "
                               f"({str(info.get('sha256'))[:12]}...); retrain it")
    with open(path, "rb") as fh:  # opened read-only
        blob = torch.load(fh, map_location="cpu", weights_only=True)
    model = build(current_names(blob["meta"]))
    model.load_state_dict(blob["state_dict"], strict=True)
    model.requires_grad_(False)
    model.eval()
    model = model.to(device)
    if parameter_digest(model) != info["param_digest"]:
        raise FrozenModelError(f"{path}: the loaded parameters do not match the digest recorded at save time")
    return model, info


@contextlib.contextmanager
def frozen(model: torch.nn.Module, record: dict | None = None) -> Iterator[torch.nn.Module]:
    """Evaluate ``model`` without gradients and check afterwards that no parameter changed.

    ``record`` (optional) receives ``param_digest_before``, ``param_digest_after`` and
    ``bit_identical``. Raises :class:`FrozenModelError` when the digests differ.
    """
    was_training = model.training
    flags = [p.requires_grad for p in model.parameters()]
    model.requires_grad_(False)
    model.eval()
    before = parameter_digest(model)
    try:
        with torch.inference_mode():
            yield model
    finally:
        after = parameter_digest(model)
        for p, flag in zip(model.parameters(), flags):
            p.requires_grad_(flag)
        model.train(was_training)
        if record is not None:
            record.update({"param_digest_before": before, "param_digest_after": after,
                           "bit_identical": before == after})
    if before != after:
        raise FrozenModelError("the evaluation changed the frozen model's parameters")


#: The record of a frozen-file evaluation (:meth:`FrozenFile.proof`), in every experiment's metrics.json.
RECORD_KEYS: tuple[str, ...] = (
    "file", "sha256", "file_sha256_before", "file_sha256_after", "file_unchanged",
    "param_digest_at_save", "param_digest_before", "param_digest_after", "bit_identical", "matches_saved",
)  # fmt: skip


class FrozenFile:
    """One saved frozen model through the evaluation protocol: save once (:func:`save_frozen`),
    then here: hash the file, load it read-only, evaluate inside :meth:`evaluating` (digests
    before and after), hash the file again in :meth:`proof`.

    ``model`` and ``info`` (the sidecar) are available after construction, so callers can check
    the sidecar's meta before evaluating.
    """

    def __init__(self, path: str | Path, build: Callable[[dict], torch.nn.Module],
                 device: torch.device | str = "cpu"):
        self.path = Path(path)
        self.file_sha256_before = sha256_file(self.path)
        self.model, self.info = load_frozen(self.path, build, device)
        self._record: dict = {}

    @classmethod
    def saved(cls, path: str | Path, model: torch.nn.Module, meta: dict, build: Callable[[dict], torch.nn.Module],
              device: torch.device | str = "cpu", extra: dict | None = None) -> "FrozenFile":
        """Save ``model`` once (:func:`save_frozen`) and open the file read-only: a job that evaluates the model it
        has just trained evaluates it from its file."""
        save_frozen(path, model, meta, extra)
        return cls(path, build, device)

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[torch.nn.Module]:
        """:func:`frozen` on the loaded model (no gradients, digests before and after)."""
        with frozen(self.model, self._record) as model:
            yield model

    def proof(self) -> dict:
        """The record (:data:`RECORD_KEYS`) after :meth:`evaluating`; raises :class:`FrozenModelError`
        when the file changed, a parameter changed, or the parameters differ from those saved."""
        if "param_digest_before" not in self._record:
            raise FrozenModelError(f"{self.path}: proof() before any evaluation inside evaluating()")
        after = sha256_file(self.path)
        rec = {"file": str(self.path), "sha256": self.info["sha256"],
               "file_sha256_before": self.file_sha256_before, "file_sha256_after": after,
               "file_unchanged": self.file_sha256_before == after,
               "param_digest_at_save": self.info["param_digest"], **self._record,
               "matches_saved": self._record["param_digest_before"] == self.info["param_digest"]}
        rec = {k: rec[k] for k in RECORD_KEYS}
        if not (rec["bit_identical"] and rec["file_unchanged"] and rec["matches_saved"]):
            raise FrozenModelError(f"{self.path}: the frozen model changed during evaluation: {rec}")
        return rec
