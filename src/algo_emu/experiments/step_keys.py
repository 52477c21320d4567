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

from typing import Any, Mapping

from algo_emu.specs import SPECS, Reads  # noqa: F401  (Reads: the declaration's type, re-exported)


#: Every step's declaration, from each experiment's spec (:mod:`algo_emu.specs`).
_ALL = tuple(r for spec in SPECS for r in spec.reads)

#: Keys a rule passes only when they hold another value than this one (their schema default, which is also the
#: behaviour a step has without them): adding such a key to a step leaves the params of every job that does not use
#: it as they were, so Snakemake (whose params are a job's rerun trigger) does not rerun finished results for it.
#: A step that lacks one takes the schema default (:func:`algo_emu.train.train_config`).
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
