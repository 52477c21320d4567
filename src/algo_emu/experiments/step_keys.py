"""The config keys each experiment step reads: the one declaration behind both the rules and the CLI.

A Snakemake rule passes a step only the keys declared here (``step_params``, called from
``workflow/rules/*.smk``), so a config edit reruns exactly the jobs whose outputs read the edited key:
adding an H to ``heads.heads_sweep`` trains that H alone, changing ``heads.eval_every`` retrains but
regenerates no data set. The step's ``params`` (:func:`algo_emu.cli.bind_job`) is checked against the same declaration:
a declared key missing from ``params`` is an error naming it; keys beyond the declaration (e.g. a
whole config section) are dropped, and the step's function receives a mapping that refuses to read a
key outside the declaration, so a step cannot depend on a key its rule does not pass.

Keys are a section's top-level keys (a nested mapping such as ``essay.eval`` counts as one key).
Some steps read more in one variant (a wildcard of the rule): ``extra`` names those keys per variant,
e.g. only the ``independent`` protocol of ``heads train`` reads ``heads.target``.

Records: where a step writes the parameters it received and their hash (``params`` and ``config_hash``
of the essay's train and evaluate records, of the construction tables' ``<kind>.json``), these are the
keys declared here, no longer the whole section; the trained experiments' records (heads, theorem31,
statistical, ames) hash their own run parameters and are unchanged.

Torch-free: the workflow imports this while parsing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class Reads:
    """The keys of config section ``section`` that step ``step`` reads: ``keys`` always, ``extra[v]`` also
    in variant ``v`` (a value of the rule's wildcard, grouped by ``variant``)."""

    section: str
    step: str
    keys: tuple[str, ...]
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: a variant (wildcard value) -> its key of ``extra`` (default: the value itself)
    variant: Callable[[str], str] | None = None

    def for_variant(self, value: str | None = None) -> tuple[str, ...]:
        """The keys read in variant ``value`` (None: the keys every variant reads)."""
        if value is None:
            return self.keys
        group = self.variant(value) if self.variant else value
        return self.keys + tuple(k for k in self.extra.get(group, ()) if k not in self.keys)

    @property
    def all(self) -> tuple[str, ...]:
        """Every key some variant reads."""
        out = list(self.keys)
        for keys in self.extra.values():
            out += [k for k in keys if k not in out]
        return tuple(out)


def _essay_variant(name: str) -> str:
    """The essay's model variants by what they read beyond the base model: ``M<m>`` -> diversity."""
    if name.startswith("M") and name[1:].isdigit():
        return "diversity"
    return name


_HEADS_DATA = ("n_prompts", "n_tokens", "d", "target_hidden")
_HEADS_TRAIN = _HEADS_DATA + ("hidden", "epochs", "batch_size", "lr", "test_fraction", "eval_every", "eval_batch_size",
                              "checkpoint_every", "compile", "attention", "lr_schedule")
_HEADS_SWEEPS = ("protocols", "heads_sweep", "p_heads_sweep", "p_sweep", "heads_p_sweep", "target")
_T31_TRAIN = ("n_prompts", "n_tokens", "d", "hidden", "heads", "fs", "x_dist", "x_scale", "gd_eta", "epochs",
              "batch_size", "lr", "test_fraction", "eval_chunk", "checkpoint_every", "compile", "attention", "lr_schedule")
_STAT_DATA = ("n_context", "n_query", "d", "algorithms", "data_params")
_AMES_REFERENCE_FIT = ("reference_alpha", "cv_folds", "ridge_log10_alpha_min", "ridge_log10_alpha_max", "ridge_n_alphas",
                       "lasso_n_alphas", "lasso_eps", "lasso_max_iter")
_AMES_POOL = ("pool_bootstraps", "pool_heldout_bootstraps", "pool_log10_alpha_min", "pool_log10_alpha_max",
              "pool_n_alphas", "pool_coef_scale_min", "pool_coef_scale_max", "pool_perturb_scale", "pool_perturb_rank",
              "pool_pairs_per_row", "pool_eval_pairs_per_row")
_CONSTRUCTION_HEAD = ("n", "d", "P", "beta_d2", "key_ratio", "grid_half_width", "instances", "x_scale", "distribution",
                      "target_beta", "table", "end_tol")
_ESSAY_BASE = ("d", "k_max", "tau", "sigma")

_ALL = (
    # E1
    Reads("heads", "data", _HEADS_DATA),
    Reads("heads", "train", _HEADS_TRAIN, extra={"independent": ("target",)}),  # variant: the protocol
    Reads("heads", "aggregate", _HEADS_SWEEPS + ("test_fraction", "eval_batch_size", "n_prompts", "n_tokens", "d",
                                                 "hidden", "epochs", "batch_size", "lr")),
    Reads("heads", "fit", _HEADS_SWEEPS),
    # the variants' table reads each variant's records; the sweep's p places the paper's value (their training jobs
    # read the train keys through algo_emu.experiments.heads_settings.variant_train_params)
    Reads("heads", "variants", ("variants", "p_heads_sweep")),
    # the convergence check's table (its training jobs read the train keys with each candidate's own epochs, lr and
    # schedule: algo_emu.experiments.heads_settings.candidate_train_params), and the converged table, its gate and fit
    Reads("heads", "convergence", ("convergence", "heads_sweep", "p_heads_sweep")),
    Reads("heads", "converged", ("converged", "convergence", "heads_sweep", "p_heads_sweep")),
    # E2: the model and its weight-blind baseline read the same keys (the same budget)
    Reads("theorem31", "train", _T31_TRAIN),
    Reads("theorem31", "aggregate", ("fs", "p_sweep", "x_dist", "x_scale", "gd_eta", "n_prompts", "test_fraction",
                                     "n_tokens", "d", "hidden", "heads", "epochs", "batch_size", "lr")),
    # E3: the training data set does not depend on H, the model or the budget
    Reads("statistical", "data", ("n_prompts",) + _STAT_DATA),
    Reads("statistical", "train", ("n_prompts",) + _STAT_DATA + ("hidden", "p", "epochs", "batch_size", "lr",
                                                                "checkpoint_every", "compile", "attention",
                                                                "lr_schedule", "readout")),
    Reads("statistical", "evaluate", _STAT_DATA + ("eval_prompts", "eval_chunk")),
    Reads("statistical", "aggregate", ("modes", "algorithms", "heads_sweep", "eval_prompts", "n_prompts", "n_context",
                                       "n_query", "d", "hidden", "p", "epochs", "batch_size", "lr")),
    # E4 (its steps fill the schema's defaults for keys left out, so they also run without the workflow)
    Reads("ames", "download", ("source", "openml_data_id", "openml_sha256", "openml_timeout_s", "packaged_sha256",
                               "local_sha256", "na_values")),
    Reads("ames", "prepare", ("na_values", "test_fraction", "drop_id_columns", "fit_statistics_on", "categories_from")),
    Reads("ames", "fit", _AMES_REFERENCE_FIT, extra={"corrected": _AMES_POOL}),  # variant: the mode
    Reads("ames", "train", ("heads", "total_tokens", "hidden", "epochs", "batch_size", "lr", "checkpoint_every",
                            "compile", "attention", "lr_schedule")),
    # E5 (no training; its steps also fill the schema's defaults): variant = the table's kind
    Reads("constructions", "table", ("table", "end_tol"),
          extra={"beta": _CONSTRUCTION_HEAD + ("beta_study",), "p": _CONSTRUCTION_HEAD + ("p_study",),
                 "n": _CONSTRUCTION_HEAD + ("n_study",), "d": _CONSTRUCTION_HEAD + ("d_study",),
                 "library": ("library",), "multistep": ("multistep",)}),
    Reads("constructions", "figure", ()),
    # E6: variant = the model variant (train) or the figure's kind (figure)
    Reads("essay", "equivalences", ("equivalence", "sigma", "tau")),
    Reads("essay", "train", _ESSAY_BASE + ("model", "train"),
          extra={"shallow": ("shallow_layers",), "diversity": ("diversity",), "narrow": ("narrow",),
                 "control": ("narrow",)}, variant=_essay_variant),
    Reads("essay", "evaluate", _ESSAY_BASE + ("eval", "narrow")),
    Reads("essay", "claims", _ESSAY_BASE + ("eval", "model", "train", "equivalence", "shallow_layers", "diversity",
                                            "narrow")),
    Reads("essay", "figure", (), extra={"icl": _ESSAY_BASE + ("shallow_layers",)}),
)

#: Keys a rule passes only when they hold another value than this one (their schema default, which is also the
#: behaviour a step has without them): adding such a key to a step leaves the params of every job that does not use
#: it as they were, so Snakemake (whose params are a job's rerun trigger) does not rerun finished results for it.
#: A step that lacks one takes the schema default (:func:`algo_emu.runner.train_config`).
OMITTED_AT: dict[str, Any] = {"lr_schedule": "constant"}

#: (section, step) -> what it reads.
READS: dict[tuple[str, str], Reads] = {(r.section, r.step): r for r in _ALL}


def reads(section: str, step: str) -> Reads:
    try:
        return READS[(section, step)]
    except KeyError:
        raise KeyError(f"no declaration of the keys {section} {step} reads (algo_emu.experiments.step_keys)") from None


def step_params(config_section: Mapping[str, Any], section: str, step: str, variant: str | None = None) -> dict:
    """The part of a (validated) config section that ``step`` reads in ``variant``: what its rule passes."""
    keys = reads(section, step).for_variant(variant)
    missing = [k for k in keys if k not in config_section and k not in OMITTED_AT]
    if missing:
        raise KeyError(f"{section}: no value for {', '.join(missing)} (read by the {step} step)")
    return {k: config_section[k] for k in keys if k in config_section
            and not (k in OMITTED_AT and config_section[k] == OMITTED_AT[k])}


class StepParams(dict):
    """The keys a step received; reading a key outside its declaration is an error naming it (a plain
    ``dict`` would let ``params.get(key, default)`` silently fall back to a default)."""

    def __init__(self, values: Mapping[str, Any], declared: Reads) -> None:
        super().__init__(values)
        self._declared = declared

    def _check(self, key: object) -> None:
        if key not in self._declared.all:
            r = self._declared
            raise KeyError(f"{r.section} {r.step} reads {r.section}.{key}, which is not among the keys declared for "
                           f"it in algo_emu.experiments.step_keys ({', '.join(r.all) or 'none'}); declare it there "
                           "so that its rule passes it")

    def __getitem__(self, key):
        if not dict.__contains__(self, key):
            self._check(key)
            r = self._declared
            raise KeyError(f"{r.section} {r.step}: params has no {r.section}.{key}")
        return dict.__getitem__(self, key)

    def get(self, key, default=None):
        self._check(key)
        return dict.get(self, key, default)

    def __contains__(self, key) -> bool:
        self._check(key)
        return dict.__contains__(self, key)

    def __reduce__(self):  # pickles (and deep-copies) as the plain dict it holds
        return (dict, (dict(self),))


def parse_params(value: Any, section: str, step: str) -> StepParams:
    """The ``params`` a step received (:func:`algo_emu.cli.bind_job`): a mapping holding at least the keys every
    variant of the step reads; keys beyond the declaration are dropped (a whole config section may be passed).
    Anything else is a ``ValueError`` naming what is missing."""
    if not isinstance(value, Mapping):
        raise ValueError(f"params must be a JSON object (a config section), got {value!r}")
    r = reads(section, step)
    missing = [k for k in r.keys if k not in value and k not in OMITTED_AT]
    if missing:
        raise ValueError(
            f"{section} {step} reads {', '.join(f'{section}.{k}' for k in missing)}, missing from params "
            f"(it needs {', '.join(r.keys)}; pass the resolved config section or these keys)")
    return StepParams({k: v for k, v in value.items() if k in r.all}, r)
