"""What each experiment declares once, torch-free: its config section, the keys each of its steps reads, its named
targets and their files, the scale at which the paper made its numbers and the reference scale at which ours learn,
the training rules its benchmark prices, and its section of the replication report. One module per experiment in this package (``SPEC``); the registries
that used to list experiments one by one read :data:`SPECS` instead (:mod:`algo_emu.experiments.step_keys`,
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
from typing import Callable, Mapping

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
    #: its per-seed records' layouts (``module:NAME`` of each :class:`algo_emu.records.RunSpec`: where the records
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
