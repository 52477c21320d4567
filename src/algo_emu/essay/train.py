"""Training the E6 transformers, saving them, and using them only where they were trained.

Variants (one model per variant and seed):

* ``gaussian``: the main model, prior w ~ N(0, tau^2 I);
* ``shallow``: the same with ``shallow_layers`` layers (the essay's depth threshold);
* ``M<m>``: prior uniform on m fixed tasks (task diversity);
* ``narrow``: the ``gaussian`` model fine-tuned on the narrow ``sparse`` family;
* ``control``: the ``gaussian`` model fine-tuned as long on its own prior (separates narrowing from
  extra training).

:class:`TrainedICL` refuses a prompt with more examples than the trained context and a prior other than
the training prior unless the caller asks for an out-of-distribution evaluation, which is then reported.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import torch

from algo_emu.essay import tasks
from algo_emu.essay.model import ICLTransformer
from algo_emu.essay.plan import variant_init, variant_names  # noqa: F401  (re-exported: the variant plan is torch-free)
from algo_emu.rng import derive, torch_stream

log = logging.getLogger("algo_emu.essay")


class OutOfDistributionError(ValueError):
    """A prompt or prior the model was not trained on, used without ``allow_ood=True``."""


def variant_spec(params: dict, variant: str) -> dict:
    """What a variant trains: prior, layers, steps, lr, and the variant it starts from (or None)."""
    tau, m = params["tau"], params["model"]
    spec = {"prior": tasks.make_prior("gaussian", tau), "layers": m["layers"], "steps": params["train"]["steps"],
            "lr": params["train"]["lr"], "init_from": None}
    if variant == "gaussian":
        return spec
    if variant == "shallow":
        return {**spec, "layers": params["shallow_layers"]}
    if variant.startswith("M") and variant[1:].isdigit():
        M = int(variant[1:])
        return {**spec, "prior": tasks.make_prior("discrete", tau, M), "steps": params["diversity"]["steps"]}
    if variant in ("narrow", "control"):
        fam = params["narrow"]["family"] if variant == "narrow" else "gaussian"
        return {**spec, "prior": tasks.make_prior(fam, tau), "steps": params["narrow"]["finetune_steps"],
                "lr": params["narrow"]["lr"], "init_from": variant_init(variant)}
    raise ValueError(f"unknown essay variant {variant!r} (known: gaussian, shallow, M<m>, narrow, control)")


def build_model(params: dict, layers: int) -> ICLTransformer:
    m = params["model"]
    return ICLTransformer(params["d"], params["k_max"], m["d_model"], layers, m["heads"], m["ff"])


def train_variant(params: dict, variant: str, seed: int, device: torch.device,
                  init_state: dict | None = None) -> tuple[dict, dict]:
    """Train one variant for one seed; returns (checkpoint dict, metrics dict)."""
    spec = variant_spec(params, variant)
    d, K, sigma = params["d"], params["k_max"], params["sigma"]
    tr = params["train"]
    with torch.random.fork_rng(devices=[]):  # the init's own seed; the caller's global generator is left as it was
        torch.manual_seed(derive(seed, "essay", variant, "init"))
        model = build_model(params, spec["layers"])
    if spec["init_from"]:
        if init_state is None:
            raise ValueError(f"variant {variant!r} starts from {spec['init_from']!r}: pass its checkpoint")
        model.load_state_dict(init_state["state_dict"])
    model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=spec["lr"])
    warm = tr["warmup"] if not spec["init_from"] else 0
    steps = spec["steps"]
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, warm)) * (0.5 * (1 + math.cos(math.pi * min(s, steps) / max(1, steps)))
                                                           if tr["cosine"] else 1.0))
    gen = torch_stream(seed, "essay", variant, "train")
    val = tasks.sample_prompts(spec["prior"], tr["val_prompts"], K + 1, d, sigma,
                               torch_stream(seed, "essay", variant, "val"), seed)
    Xv, yv = val["X"].float().to(device), val["y"].float().to(device)
    history = []
    t0 = time.time()

    def val_loss() -> float:
        model.eval()
        with torch.no_grad():
            out = float(((model(Xv, yv) - yv) ** 2).mean())
        model.train()
        return out

    loss = float("nan")
    for step in range(steps):
        if tr["log_every"] and step % tr["log_every"] == 0:
            history.append({"step": step, "val_mse": val_loss(), "train_mse": loss, "wall_s": time.time() - t0})
        b = tasks.sample_prompts(spec["prior"], tr["batch_size"], K + 1, d, sigma, gen, seed)
        X, y = b["X"].float().to(device), b["y"].float().to(device)
        pred = model(X, y)
        loss_t = ((pred - y) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss_t.backward()
        if tr["grad_clip"]:
            torch.nn.utils.clip_grad_norm_(model.parameters(), tr["grad_clip"])
        opt.step()
        sched.step()
        loss = loss_t.item()
    wall = time.time() - t0
    final_val = val_loss()
    history.append({"step": steps, "val_mse": final_val, "train_mse": loss, "wall_s": wall})
    model.cpu()
    ckpt = {
        "state_dict": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "variant": variant, "seed": seed, "prior": spec["prior"], "prior_key": tasks.prior_key(spec["prior"]),
        "layers": spec["layers"], "d": d, "k_max": K, "sigma": sigma, "model": dict(params["model"]),
        "steps": steps, "init_from": spec["init_from"],
    }
    metrics = {"variant": variant, "seed": seed, "prior": spec["prior"], "prior_key": ckpt["prior_key"],
               "layers": spec["layers"], "steps": steps, "lr": spec["lr"], "train_wall_s": wall,
               "final_val_mse": final_val, "history": history,
               "n_params": sum(p.numel() for p in model.parameters())}
    log.info("essay %s seed %d: %d steps in %.1f s, val MSE %.4f", variant, seed, steps, wall, final_val)
    return ckpt, metrics


@dataclass
class TrainedICL:
    """A trained model with the prior and context it was trained on; predictions refuse what it never saw."""

    model: ICLTransformer
    prior: dict
    k_max: int
    d: int
    variant: str
    device: torch.device

    @classmethod
    def from_frozen(cls, frozen, device: torch.device | str = "cpu") -> "TrainedICL":
        """A model loaded read-only through :class:`algo_emu.frozen.FrozenFile` (file written by
        :func:`save_trained`; the sidecar's meta is the checkpoint without its weights)."""
        meta = frozen.info["meta"]
        return cls(frozen.model, dict(meta["prior"]), int(meta["k_max"]), int(meta["d"]), meta["variant"],
                   torch.device(device))

    @classmethod
    def from_checkpoint(cls, ckpt: dict, device: torch.device | str = "cpu") -> "TrainedICL":
        m = ckpt["model"]
        model = ICLTransformer(ckpt["d"], ckpt["k_max"], m["d_model"], ckpt["layers"], m["heads"], m["ff"])
        model.load_state_dict(ckpt["state_dict"])
        model.eval()
        for p in model.parameters():
            p.requires_grad_(False)
        device = torch.device(device)
        return cls(model.to(device), dict(ckpt["prior"]), int(ckpt["k_max"]), int(ckpt["d"]), ckpt["variant"], device)

    def check(self, k: int, prior: dict, allow_ood: bool = False) -> bool:
        """True if (k, prior) is in distribution; raise if not, unless ``allow_ood`` (then False: report it)."""
        if k > self.k_max:
            raise OutOfDistributionError(
                f"k = {k} examples exceeds the trained context k_max = {self.k_max} of the {self.variant!r} model "
                "(positions beyond it were never trained; refusing to extrapolate)")
        same = tasks.prior_key(prior) == tasks.prior_key(self.prior)
        if not same and not allow_ood:
            raise OutOfDistributionError(
                f"prior {tasks.prior_key(prior)} is not the training prior {tasks.prior_key(self.prior)} of the "
                f"{self.variant!r} model; pass allow_ood=True to evaluate it as out-of-distribution")
        return same

    def predict_all(self, X: torch.Tensor, y: torch.Tensor, prior: dict, allow_ood: bool = False,
                    batch: int = 4096) -> tuple[torch.Tensor, bool]:
        """Predictions at every position (entry i uses examples 0..i-1), float64, and the in-distribution flag."""
        in_dist = self.check(X.shape[1] - 1, prior, allow_ood)
        outs = []
        with torch.no_grad():
            for i in range(0, X.shape[0], batch):
                xb = X[i:i + batch].float().to(self.device)
                yb = y[i:i + batch].float().to(self.device)
                outs.append(self.model(xb, yb).double().cpu())
        return torch.cat(outs), in_dist

    def predict(self, X: torch.Tensor, y: torch.Tensor, Xq: torch.Tensor, prior: dict,
                allow_ood: bool = False) -> tuple[torch.Tensor, bool]:
        """k-shot predictions for one query per prompt: X (B, k, d), y (B, k), Xq (B, d) -> (B,), in-dist flag."""
        Xa = torch.cat([X, Xq[:, None, :]], dim=1)
        ya = torch.cat([y, torch.zeros(y.shape[0], 1, dtype=y.dtype)], dim=1)
        pred, flag = self.predict_all(Xa, ya, prior, allow_ood)
        return pred[:, -1], flag


def build_frozen(meta: dict) -> ICLTransformer:
    """The module a frozen essay model file holds (``meta``: its checkpoint without the weights)."""
    m = meta["model"]
    return ICLTransformer(meta["d"], meta["k_max"], m["d_model"], meta["layers"], m["heads"], m["ff"])


def save_trained(path, ckpt: dict) -> dict:
    """Write a trained model as a frozen file (:func:`algo_emu.frozen.save_frozen`: weights, and a sidecar with the
    file's sha256 and the parameters' digest); the checkpoint's other fields are its meta. Returns the sidecar."""
    from algo_emu.frozen import save_frozen

    return save_frozen(path, TrainedICL.from_checkpoint(ckpt).model, {k: v for k, v in ckpt.items() if k != "state_dict"})

