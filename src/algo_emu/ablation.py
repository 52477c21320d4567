"""Prompt ablations and weight-blind baselines: does a frozen model read the weights in its prompt?

The paper's claim is that a frozen model computes an algorithm from weights
written into the prompt. A low test MSE alone does not show that: a model that
ignores the weights can score well when the weights barely change the target.
This module is the one mechanism E2, E3 and E4 use to check it.

**Ablations** (:func:`ablate`, :func:`ablated_inputs`): the same frozen model,
the same prompts and the same targets, with the prompt's weights replaced by

* ``other_prompt`` -- the weights of another prompt of the same set (a random
  cyclic derangement, so no prompt keeps its own weights);
* a caller-supplied donor (e.g. ``other_algorithm``: another algorithm's
  weights for the same prompt), passed as ``donors={name: tensor}``;
* ``permuted`` -- the same weights with their coordinates permuted (one random
  permutation per prompt, within each weight block);
* ``random`` -- standard normal draws rescaled to the prompt's own norm (per
  prompt and per weight block), so the scale matches and nothing else does;
* ``zeros`` -- all weights zero;
* an experiment-supplied extra ablation, ``extra={name: fn}`` with
  ``fn(inputs, generator) -> inputs`` (E3: the context's x and y zeroed).

The target is never changed: an ablation asks whether the model's output still
matches the original prompt's target once the information is gone. A model
that reads the weights gets much worse (ablated MSE >> unablated); a model
that ignores them scores the same.

**Weight-blind baseline** (:class:`WeightBlindTask`, :func:`strip_weights`):
the same block trained with the same data, data order and budget (epochs, N,
batch, lr, hidden, heads, p) on inputs with the weight columns removed. Its
test MSE is what a model that cannot see the weights achieves;
``mse_over_blind`` = the model's MSE / the baseline's MSE (1 = no better than
ignoring the weights). :func:`check_budget` refuses a baseline whose budget
differs from the model's, naming the key.

**Where the weights are** is described by a :class:`PromptLayout`: the token
width, the column blocks holding the weights (e.g. ``w`` and an intercept
``b``) and the tokens that carry them (every carrying token holds the same
vector; :func:`ablate` checks this). A layout with no weight blocks describes
a weight-blind model; asking it for an ablation is a ``ValueError``.

Randomness: every draw comes from ``algo_emu.rng.torch_stream(seed, *stream,
"ablation", name)``, so an ablation's numbers depend only on the seed, the
stream names and the ablation's name.

**Tables** (:func:`ablation_rows`, :func:`ablation_table`): tidy per-seed rows
(experiment, mode, setting columns, seed, ablation, mse) and their aggregate
(mean, sample std, 95 % bootstrap CI over seeds via
:func:`algo_emu.tables.summarise`, n_seeds, mse_over_blind = mse_mean divided
by the weight-blind baseline's mse_mean for the same setting).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from algo_emu.rng import torch_stream
from algo_emu.tables import summarise_by

__all__ = [
    "NONE", "BLIND", "ABLATIONS", "BUDGET_KEYS", "ABLATION_COLUMNS",
    "PromptLayout", "WeightBlindTask", "require_weights", "prompt_weights", "ablate", "ablated_inputs", "strip_weights", "replace_weights",
    "cyclic_derangement", "budget", "check_budget", "check_baseline", "check_role", "mse", "ablation_rows", "ablation_table", "over_blind",
]

#: Name of the unablated evaluation.
NONE = "none"
#: Name of the weight-blind baseline's rows.
BLIND = "weight_blind"
#: The built-in ablations, in table order.
ABLATIONS = ("other_prompt", "permuted", "random", "zeros")
#: What must match between a model and its weight-blind baseline.
BUDGET_KEYS = ("epochs", "n_prompts", "batch_size", "lr", "hidden", "heads", "p")
#: Statistic columns of :func:`ablation_table` (after experiment, mode and the setting columns).
ABLATION_COLUMNS = ["ablation", "mse_mean", "mse_std", "mse_ci_low", "mse_ci_high", "n_seeds", "mse_over_blind"]

ExtraFn = Callable[[torch.Tensor, torch.Generator], torch.Tensor]


@dataclass(frozen=True)
class PromptLayout:
    """Where the weights sit in a prompt of shape (N, T, d_in).

    ``weights``: column ranges ``(start, stop)`` of the token holding weights, one per
    block (e.g. ``((d+1, 2d+1), (2d+1, 2d+2))`` for w and an intercept); empty for a
    weight-blind model. ``tokens``: ``(start, stop)`` of the tokens carrying them
    (``None`` = all). ``name`` is used in error messages.
    """

    name: str
    d_in: int
    weights: tuple[tuple[int, int], ...] = ()
    tokens: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        cols: list[int] = []
        for block in self.weights:
            a, b = block
            if not 0 <= a < b <= self.d_in:
                raise ValueError(f"{self.name}: weight block {block} outside the token's {self.d_in} columns")
            cols.extend(range(a, b))
        if len(set(cols)) != len(cols):
            raise ValueError(f"{self.name}: weight blocks {self.weights} overlap")

    @property
    def has_weights(self) -> bool:
        return bool(self.weights)

    @property
    def weight_columns(self) -> list[int]:
        return [c for a, b in self.weights for c in range(a, b)]

    @property
    def n_weights(self) -> int:
        return len(self.weight_columns)

    def blind(self) -> "PromptLayout":
        """The layout of the same prompt with the weight columns removed (the baseline's input)."""
        return PromptLayout(f"{self.name} (weight-blind)", self.d_in - self.n_weights, (), self.tokens)

    def describe(self) -> str:
        if not self.has_weights:
            return f"{self.name}: d_in={self.d_in}, no weights in the prompt"
        return f"{self.name}: d_in={self.d_in}, weights in columns {list(self.weights)}"

    def check(self, inputs: torch.Tensor) -> None:
        """``inputs`` must be (N, T, d_in) with this layout's width."""
        if inputs.dim() != 3 or inputs.shape[-1] != self.d_in:
            raise ValueError(f"inputs of shape {tuple(inputs.shape)} do not match the layout "
                             f"({self.describe()}); expected (N, T, {self.d_in})")


def require_weights(layout: PromptLayout, what: str) -> None:
    """Raise ValueError when ``layout`` has no weights: ``what`` (e.g. an ablation) needs them."""
    if not layout.has_weights:
        raise ValueError(f"{what} asked of a model whose prompt has no weights ({layout.describe()}); "
                         "prompt ablations need a model that was given weights in its input")


def _token_slice(layout: PromptLayout, T: int) -> slice:
    a, b = layout.tokens if layout.tokens is not None else (0, T)
    if not 0 <= a < b <= T:
        raise ValueError(f"{layout.name}: weight-carrying tokens {layout.tokens} outside the prompt's {T} tokens")
    return slice(a, b)


def prompt_weights(inputs: torch.Tensor, layout: PromptLayout) -> torch.Tensor:
    """(N, n_weights): the weights each prompt carries; every carrying token must hold the same vector."""
    layout.check(inputs)
    require_weights(layout, "reading the weights")
    tok = _token_slice(layout, inputs.shape[1])
    cols = layout.weight_columns
    w = inputs[:, tok][..., cols]                                      # (N, t, k)
    if not torch.equal(w, w[:, :1].expand_as(w)):
        raise ValueError(f"{layout.name}: the tokens {tok.start}..{tok.stop - 1} do not all carry the same weights")
    return w[:, 0]


def replace_weights(inputs: torch.Tensor, layout: PromptLayout, new: torch.Tensor) -> torch.Tensor:
    """A copy of ``inputs`` whose weight columns (in every carrying token) hold ``new`` (N, n_weights)."""
    layout.check(inputs)
    require_weights(layout, "replacing the weights")
    N = inputs.shape[0]
    if tuple(new.shape) != (N, layout.n_weights):
        raise ValueError(f"{layout.name}: replacement weights of shape {tuple(new.shape)}, "
                         f"expected ({N}, {layout.n_weights})")
    out = inputs.clone()
    tok = _token_slice(layout, inputs.shape[1])
    cols = torch.tensor(layout.weight_columns)
    sub = out[:, tok]
    sub[..., cols] = new.to(out.dtype)[:, None, :].expand(N, sub.shape[1], -1)
    out[:, tok] = sub
    return out


def strip_weights(inputs: torch.Tensor, layout: PromptLayout) -> torch.Tensor:
    """``inputs`` (..., d_in) without the weight columns: the weight-blind baseline's input."""
    if inputs.shape[-1] != layout.d_in:
        raise ValueError(f"inputs of width {inputs.shape[-1]} do not match the layout ({layout.describe()})")
    require_weights(layout, "a weight-blind baseline")
    drop = set(layout.weight_columns)
    keep = torch.tensor([c for c in range(layout.d_in) if c not in drop], device=inputs.device)
    return inputs.index_select(-1, keep)


def cyclic_derangement(n: int, generator: torch.Generator) -> torch.Tensor:
    """A random permutation made of one n-cycle: ``out[i] != i`` for every i (n >= 2)."""
    if n < 2:
        raise ValueError(f"other_prompt needs at least 2 prompts, got {n}")
    order = torch.randperm(n, generator=generator)
    out = torch.empty(n, dtype=torch.long)
    out[order] = order.roll(-1)
    return out


def _gen(seed: int, stream: Sequence[object], name: str) -> torch.Generator:
    return torch_stream(seed, *stream, "ablation", name)


def ablate(inputs: torch.Tensor, layout: PromptLayout, ablation: str, seed: int, stream: Sequence[object] = (),
           donor: torch.Tensor | None = None) -> torch.Tensor:
    """One built-in ablation of ``inputs`` (N, T, d_in), or ``donor`` weights (N, n_weights) when given."""
    layout.check(inputs)
    require_weights(layout, f"ablation {ablation!r}")
    w = prompt_weights(inputs, layout).to(torch.float64)
    N, k = w.shape
    if donor is not None:
        return replace_weights(inputs, layout, donor.to(torch.float64))
    g = _gen(seed, stream, ablation)
    if ablation == "other_prompt":
        new = w[cyclic_derangement(N, g)]
    elif ablation == "zeros":
        new = torch.zeros_like(w)
    elif ablation in ("permuted", "random"):
        new = torch.empty_like(w)
        start = 0
        for a, b in layout.weights:
            blk = w[:, start:start + b - a]
            if ablation == "permuted":
                idx = torch.argsort(torch.rand(blk.shape, generator=g, dtype=torch.float64), dim=1)
                new[:, start:start + b - a] = blk.gather(1, idx)
            else:
                z = torch.randn(blk.shape, generator=g, dtype=torch.float64)
                scale = blk.norm(dim=1, keepdim=True) / z.norm(dim=1, keepdim=True).clamp_min(1e-300)
                new[:, start:start + b - a] = z * scale
            start += b - a
    else:
        raise ValueError(f"unknown ablation {ablation!r}; built-in: {list(ABLATIONS)} "
                         "(or pass donor weights / an extra ablation)")
    return replace_weights(inputs, layout, new)


def ablated_inputs(inputs: torch.Tensor, layout: PromptLayout, seed: int, stream: Sequence[object] = (),
                   ablations: Iterable[str] = ABLATIONS, donors: Mapping[str, torch.Tensor] | None = None,
                   extra: Mapping[str, ExtraFn] | None = None) -> dict[str, torch.Tensor]:
    """``{name: ablated inputs}`` for the built-in ``ablations``, the ``donors`` and the ``extra`` ablations.

    ``donors``: ``{name: (N, n_weights) weights}`` (another algorithm's weights for the same prompts);
    ``extra``: ``{name: fn(inputs, generator) -> inputs}``, its generator the stream of ``name``.
    Names must be distinct and must not be ``none`` or ``weight_blind``.
    """
    layout.check(inputs)
    require_weights(layout, "prompt ablations")
    donors, extra = dict(donors or {}), dict(extra or {})
    names = list(ablations) + list(donors) + list(extra)
    dup = sorted({x for x in names if names.count(x) > 1} | ({NONE, BLIND} & set(names)))
    if dup:
        raise ValueError(f"ablation names must be distinct and not {NONE!r}/{BLIND!r}: {dup}")
    out = {a: ablate(inputs, layout, a, seed, stream) for a in ablations}
    for name, w in donors.items():
        out[name] = ablate(inputs, layout, name, seed, stream, donor=w)
    for name, fn in extra.items():
        res = fn(inputs.clone(), _gen(seed, stream, name))
        if tuple(res.shape) != tuple(inputs.shape):
            raise ValueError(f"extra ablation {name!r} changed the input shape {tuple(inputs.shape)} -> {tuple(res.shape)}")
        out[name] = res
    return out


def mse(pred: torch.Tensor, target: torch.Tensor) -> float:
    """Mean squared error in float64."""
    if tuple(pred.shape) != tuple(target.shape):
        raise ValueError(f"prediction shape {tuple(pred.shape)} != target shape {tuple(target.shape)}")
    return float((pred.detach().cpu().to(torch.float64) - target.detach().cpu().to(torch.float64)).square().mean())


# --------------------------------------------------------------------------- weight-blind baseline


class WeightBlindTask:
    """An :class:`algo_emu.train.EnsembleTask` whose inputs lose the weight columns.

    Wraps the model's own task: same members, same training examples, same targets (computed by the
    wrapped task from the full prompt), same data order (the engine's shuffle stream depends on the
    member and epoch only), same loss positions. Only the input changes. A task that stores its inputs
    and gathers batches from them offers ``map_inputs(fn)`` (a task whose stored inputs are ``fn`` of
    its own, so its batches are ``fn`` of the original batches, value for value): the weight columns are
    then removed once for the whole job instead of at every step.
    """

    def __init__(self, task, layout: PromptLayout) -> None:
        require_weights(layout, "a weight-blind baseline")
        self.layout = layout
        self.members = task.members
        self.n_train = task.n_train
        self.loss_positions = getattr(task, "loss_positions", None)
        self.d_in = layout.blind().d_in
        mapped = getattr(task, "map_inputs", None)
        self._per_step = mapped is None
        self.task = task if mapped is None else mapped(lambda x: strip_weights(x, layout))

    def batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.task.batch(index)
        return (strip_weights(x, self.layout) if self._per_step else x), y


def budget(params: Mapping, **overrides) -> dict:
    """The training budget (:data:`BUDGET_KEYS`) of a run: from ``params``, with ``overrides`` for keys
    an experiment stores under another name (e.g. ``p`` for a prompt length a step was given apart from its section). A missing key -> ValueError."""
    src = dict(params) | overrides
    missing = [k for k in BUDGET_KEYS if k not in src]
    if missing:
        raise ValueError(f"training budget: missing key(s) {missing}")
    return {k: src[k] for k in BUDGET_KEYS}


def check_budget(model: Mapping, baseline: Mapping) -> None:
    """Raise ValueError naming every key where the baseline's budget differs from the model's."""
    bad = []
    for k in BUDGET_KEYS:
        if k not in model or k not in baseline:
            where = "model" if k not in model else "baseline"
            bad.append(f"{k} (missing from the {where}'s budget)")
        elif model[k] != baseline[k]:
            bad.append(f"{k}: model {model[k]!r}, baseline {baseline[k]!r}")
    if bad:
        raise ValueError("the weight-blind baseline's training budget differs from the model's: " + "; ".join(bad))


def check_baseline(model: Mapping, baseline: Mapping, model_path: object, baseline_path: object,
                   seeds: Iterable[int], inputs_key: str = "inputs", grouped: bool = False) -> None:
    """A weight-blind baseline's sidecar against its model's, before either is evaluated: trained on the same
    inputs for every seed (the per-seed digests under ``inputs_key``) and with the same budget (one per model;
    ``grouped``: one per group of members, keyed alike). ValueError names the seed, the group or the budget key."""
    for s in seeds:
        if baseline.get(inputs_key, {}).get(str(s)) != model[inputs_key][str(s)]:
            raise ValueError(f"seed {s}: the weight-blind baseline {baseline_path} was not trained on the files of "
                             f"{model_path}")
    mine, theirs = model.get("budget", {}), baseline.get("budget", {})
    for group, budget_ in (mine.items() if grouped else [(None, mine)]):
        other = theirs if group is None else theirs.get(group)
        if other is None:
            raise ValueError(f"the weight-blind baseline {baseline_path} has no model of group {group}")
        try:
            check_budget(budget_, other)
        except ValueError as exc:
            raise ValueError(f"{baseline_path} vs {model_path}: {exc}") from None


def check_role(meta: Mapping, blind: bool, path: object) -> None:
    """Refuse a frozen file of the wrong kind: its meta's ``weight_blind`` flag (every trained experiment
    writes it) must say baseline where one is expected and model where the model is."""
    is_blind = bool(meta.get("weight_blind", False))
    if is_blind != blind:
        raise ValueError(f"{path}: " + ("a weight-blind baseline (its prompt has no weights) was given as the model to "
                                        "ablate" if is_blind else "a model with weights in its prompt was given as the "
                                        "weight-blind baseline"))


# --------------------------------------------------------------------------- tables


def ablation_rows(experiment: str, mode: str, setting: Mapping, seed: int, mses: Mapping[str, float]) -> list[dict]:
    """Tidy rows ``experiment, mode, <setting keys>, seed, ablation, mse`` for one model and seed."""
    clash = {"experiment", "mode", "seed", "ablation", "mse"} & set(setting)
    if clash:
        raise ValueError(f"setting keys {sorted(clash)} clash with the row's own columns")
    return [{"experiment": experiment, "mode": mode, **dict(setting), "seed": int(seed), "ablation": a,
             "mse": float(v)} for a, v in mses.items()]


def _order(names: Iterable[str]) -> list[str]:
    first = [NONE, BLIND, *ABLATIONS]
    names = list(dict.fromkeys(names))
    return [n for n in first if n in names] + sorted(n for n in names if n not in first)


def ablation_table(rows: pd.DataFrame | Sequence[dict], setting: Sequence[str]) -> pd.DataFrame:
    """Aggregate tidy rows over seeds: one row per (experiment, mode, setting, ablation).

    Columns: experiment, mode, *setting, ablation, mse_mean, mse_std, mse_ci_low, mse_ci_high,
    n_seeds, mse_over_blind (mse_mean / the ``weight_blind`` rows' mse_mean of the same experiment,
    mode and setting). A setting without weight-blind rows -> ValueError naming it.
    """
    df = pd.DataFrame(rows)
    keys = ["experiment", "mode", *setting]
    missing = [c for c in keys + ["seed", "ablation", "mse"] if c not in df.columns]
    if missing:
        raise ValueError(f"ablation rows: missing column(s) {missing}")
    order, blind_means = [], {}
    for key, grp in df.groupby(keys, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        blind = grp[grp.ablation == BLIND]
        if blind.empty:
            raise ValueError(f"ablation rows: no {BLIND!r} baseline for {dict(zip(keys, key))}")
        blind_means[key] = float(blind.mse.mean())
        order += [(*key, a) for a in _order(grp.ablation)]
    try:
        table = summarise_by(df, [*keys, "ablation"], ["mse"], order)
    except ValueError as exc:
        raise ValueError(f"ablation rows: {exc}") from None
    if table.empty:
        return pd.DataFrame(columns=keys + ABLATION_COLUMNS)
    table["mse_over_blind"] = table.mse_mean / [blind_means[tuple(k)] for k in table[keys].itertuples(index=False)]
    return table[keys + ABLATION_COLUMNS]


def over_blind(table: pd.DataFrame, ablations: pd.DataFrame, on: Sequence[str], column: str = "mse_mean") -> pd.Series:
    """``mse_over_blind`` for a main table: its ``column`` / the baseline's mse_mean, matched on ``on``.

    ``ablations`` is an :func:`ablation_table`; every row of ``table`` must find its baseline.
    """
    blind = ablations[ablations.ablation == BLIND].set_index(list(on))["mse_mean"]
    if blind.index.duplicated().any():
        raise ValueError(f"over_blind: the keys {list(on)} do not identify one baseline per setting")
    keys = [tuple(r) if len(on) > 1 else r[0] for r in table[list(on)].itertuples(index=False, name=None)]
    missing = [k for k in keys if k not in blind.index]
    if missing:
        raise ValueError(f"over_blind: no weight-blind baseline for {list(on)} = {missing[:3]}")
    return pd.Series(table[column].to_numpy(np.float64) / blind.loc[keys].to_numpy(np.float64), index=table.index)
