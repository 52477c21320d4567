"""What each experiment declares once, torch-free: its config section, the keys each of its steps reads, its named
targets and their files, the scale at which the paper made its numbers and the reference scale at which ours learn,
the training rules its benchmark prices, and its section of the replication report; and, from those declarations,
the part of the config each step is handed (:func:`step_params`, called by the rules) and accepts
(:func:`parse_params`, called by the command line). One module per experiment in this package (``SPEC``); the
registries that used to list experiments one by one read :data:`SPECS` instead (the step keys below,
:mod:`algo_emu.report.targets`, :mod:`algo_emu.report.smoke`, :mod:`algo_emu.report.replication`,
:mod:`algo_emu.cost`, :mod:`algo_emu.config`, :mod:`algo_emu.cli`, :mod:`algo_emu.report.manifest`). A new
experiment adds its module here; no list elsewhere names it.

Standard library only: the workflow imports it while parsing.
"""

from __future__ import annotations

import importlib
import itertools
import os
import pkgutil
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

TABLES = "results/tables/"
FIGURES = "results/figures/"


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


@dataclass(frozen=True)
class Target:
    name: str  # the rule a user types: `snakemake <name>`
    experiment: str  # E1..E6, or "report"
    paper: str  # which figure, table or claim of the paper (or the essay) it holds
    patterns: tuple[str, ...]  # its files, in the README's brace notation: results/tables/x.{csv,md,tex}
    aliases: tuple[str, ...] = ()  # earlier names of this target, still accepted

    @property
    def files(self) -> list[str]:
        return [f for p in self.patterns for f in expand_braces(p)]


def expand_braces(pattern: str) -> list[str]:
    """``a.{csv,md}`` -> ``["a.csv", "a.md"]``; several groups expand as their product, left to right."""
    parts = re.split(r"\{([^{}]*)\}", pattern)
    literals, groups = parts[0::2], [g.split(",") for g in parts[1::2]]
    return ["".join(lit + alt for lit, alt in itertools.zip_longest(literals, combo, fillvalue=""))
            for combo in itertools.product(*groups)]


@dataclass(frozen=True)
class Report:
    """An experiment's section of the replication report: its title, the module whose
    ``report_rows(tables, config, config_name)`` builds its rows, and the tables (under results/tables/) it reads."""

    title: str
    module: str
    tables: tuple[str, ...]


class ConfigError(ValueError):
    """A config value is wrong; the message names the key (re-exported by :mod:`algo_emu.config`)."""


def check_split(where: str, n_prompts: int, test_fraction: float) -> None:
    """A train/test split of ``where.n_prompts`` prompts that leaves neither side empty."""
    n_test = round(n_prompts * test_fraction)
    if n_test < 1 or n_test >= n_prompts:
        raise ConfigError(f"{where}.test_fraction: {test_fraction} of {where}.n_prompts = {n_prompts} "
                          "leaves an empty train or test split")


@dataclass(frozen=True)
class Rule:
    """One verdict rule: its key (each row's reason cites it as ``[key]``), the verdicts it gives, and the rule. An
    experiment's own are ``RULES`` in the module that builds its rows (:func:`algo_emu.report.replication.rule_list`)."""

    key: str
    verdicts: str
    statement: str


@dataclass(frozen=True)
class Spec:
    """One experiment: ``section`` names its config section, its module (``algo_emu.experiments.<section>``
    unless ``module`` names another), its schema (``workflow/schemas/<section>.schema.yaml`` unless ``schema``
    names another file), its rules' file (``workflow/rules/<section>.smk``, unless ``rule_files`` names others,
    relative to workflow/rules/ or absolute; the Snakefile includes them) and its records' folder
    (``results/<section>/``)."""

    section: str
    label: str  # E1..E6: the order of the report, the targets and the cost block
    reads: tuple[Reads, ...]  # the config keys each step reads (the rerun scope)
    targets: tuple[Target, ...]  # its named targets, in the README's order
    paper_scale: Mapping[str, int] = field(default_factory=dict)  # the budgets the paper's numbers were made at
    reference_scale: Mapping[str, int] = field(default_factory=dict)  # config/reference.yaml's budgets
    training_rules: tuple[str, ...] = ()  # priced by algo_emu.cost; one GPU each under the GPU profiles
    #: price(pricer, rule, wildcards) -> (seconds, optimiser steps per member) of one job of a training rule, from
    #: the benchmark's rows (:class:`algo_emu.cost.Pricer`: pricer.cfg is the run's config)
    price: Callable[..., tuple[float, int]] | None = None
    rule_files: tuple[str, ...] = ()  # its files under workflow/rules/ (default: <section>.smk)
    report: Report | None = None  # its section of the replication report
    #: its per-seed records' layouts (``module:NAME`` of each :class:`algo_emu.tables.RunSpec`: where the records
    #: sit, their rows and learning curves), read through :func:`run_specs`
    runs: tuple[str, ...] = ()
    module: str = ""  # its steps' module (STEPS), default algo_emu.experiments.<section>
    schema: str = ""  # its config section's schema file, default workflow/schemas/<section>.schema.yaml
    #: its section's cross-field checks, after the schema: check(section, config) raises ConfigError naming the key
    check: Callable[[Mapping, Mapping], None] | None = None

    def __post_init__(self) -> None:
        if not self.rule_files:
            object.__setattr__(self, "rule_files", (f"{self.section}.smk",))
        if not self.module:
            object.__setattr__(self, "module", f"algo_emu.experiments.{self.section}")


#: Which experiments the package runs: a comma-separated list of ``all`` (every module of this package) and modules
#: defining a ``SPEC`` of their own (an experiment outside the package, on the Python path). Unset: ``all``.
SPECS_ENV = "ALGO_EMU_SPECS"


def _discover() -> tuple[Spec, ...]:
    names = [n.strip() for n in os.environ.get(SPECS_ENV, "all").split(",") if n.strip()]
    modules = [f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__)] if "all" in names else []
    modules += [n for n in names if n != "all"]
    specs = []
    for name in modules:
        try:
            specs.append(importlib.import_module(name).SPEC)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"{SPECS_ENV}: {name!r} is not a module defining SPEC ({exc})") from None
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"two experiments share a label: {sorted(labels)}")
    return tuple(sorted(specs, key=lambda s: int(s.label[1:])))


#: Every experiment, in label order (E1 first).
SPECS: tuple[Spec, ...] = _discover()


def training_rules() -> list[str]:
    """Every experiment's training rules (:attr:`Spec.training_rules`), in label order: the GPU profiles give each one
    GPU."""
    return [rule for spec in SPECS for rule in spec.training_rules]


def run_specs() -> list[tuple[str, object]]:
    """(label, RunSpec) of every experiment's per-seed records (:attr:`Spec.runs`), in label order. Imports the
    modules that define them (and so torch)."""
    out = []
    for spec in SPECS:
        for name in spec.runs:
            module, _, attr = name.partition(":")
            out.append((spec.label, getattr(importlib.import_module(module), attr)))
    return out


# ---------------------------------------------------------------------------------------------------------
# The config keys each experiment step reads: the one declaration behind both the rules and the CLI.
#
# A Snakemake rule passes a step only the keys declared in the specs (:func:`step_params`, called from
# ``workflow/rules/*.smk``), so a config edit reruns exactly the jobs whose outputs read the edited key:
# adding an H to ``heads.heads_sweep`` trains that H alone, changing ``heads.eval_every`` retrains but
# regenerates no data set. The step's ``params`` (:func:`algo_emu.cli.bind_job`) is checked against the same declaration:
# a declared key missing from ``params`` is an error naming it; keys beyond the declaration (e.g. a
# whole config section) are dropped, and the step's function receives a mapping that refuses to read a
# key outside the declaration, so a step cannot depend on a key its rule does not pass.
#
# Keys are a section's top-level keys (a nested mapping such as ``essay.eval`` counts as one key).
# Some steps read more in one variant (a wildcard of the rule): ``extra`` names those keys per variant,
# e.g. only the ``independent`` protocol of ``heads train`` reads ``heads.target``.
#
# Records: where a step writes the parameters it received and their hash (``params`` and ``config_hash``
# of the essay's train and evaluate records, of the construction tables' ``<kind>.json``), these are the
# keys declared in the specs, no longer the whole section; the trained experiments' records (heads, theorem31,
# statistical, ames) hash their own run parameters and are unchanged.
# ---------------------------------------------------------------------------------------------------------

#: Keys a rule passes only when they hold another value than this one (their schema default, which is also the
#: behaviour a step has without them): adding such a key to a step leaves the params of every job that does not use
#: it as they were, so Snakemake (whose params are a job's rerun trigger) does not rerun finished results for it.
#: A step that lacks one takes the schema default (:func:`algo_emu.train.train_config`).
OMITTED_AT: dict[str, Any] = {"lr_schedule": "constant"}

#: (section, step) -> what it reads: every step's declaration, from each experiment's spec (:attr:`Spec.reads`).
READS: dict[tuple[str, str], Reads] = {(r.section, r.step): r for spec in SPECS for r in spec.reads}


def reads(section: str, step: str) -> Reads:
    try:
        return READS[(section, step)]
    except KeyError:
        raise KeyError(f"no declaration of the keys {section} {step} reads (the reads of algo_emu.specs.{section})") from None


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
                           f"it in its spec, algo_emu.specs.{r.section} ({', '.join(r.all) or 'none'}); declare it there "
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
