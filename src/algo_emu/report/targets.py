"""The workflow's surface: each paper figure and table, the target that builds it, and its files.

The one list of what ``snakemake all`` makes: each experiment's named targets as its spec declares them
(:mod:`algo_emu.specs`), then the report's two. The Snakefile builds ``rule all`` from
:func:`all_outputs` and one named target rule per :data:`TARGETS` entry (``snakemake <name>``
rebuilds only what that entry needs), the replication report and the manifest take the same list,
and tests/test_workflow.py checks the README's "Named targets" table against it row for row.

Names: ``<experiment>_table(s)`` / ``<experiment>_figure(s)``, the experiment as the rules, the
config section and docs/ name it (heads, theorem31, statistical, ames, construction, essay);
``*_ablation`` targets hold an experiment's ablation table and figure together. An entry's
``aliases`` are earlier names of the same target, kept as rules so that old commands still work.

Torch-free and dependency-free: the workflow imports it at parse time.
"""

from __future__ import annotations

from algo_emu.specs import FIGURES, SPECS, TABLES, Target, expand_braces  # noqa: F401  (re-exported)

TARGETS: tuple[Target, ...] = tuple(t for spec in SPECS for t in spec.targets) + (
    # Artifact review (workflow/rules/report.smk)
    Target("replication_report", "report", "every number and claim above: paper vs ours, with a verdict",
           ("results/replication.md", TABLES + "replication.csv")),
    Target("manifest", "report", "hashes of every output, commit, config hash, versions, device, timings",
           ("results/manifest.json",)),
)

REPLICATION_OUTPUTS = next(t for t in TARGETS if t.name == "replication_report").files
MANIFEST = "results/manifest.json"


def all_outputs() -> list[str]:
    """Every file of ``snakemake all``, once each, in the order of :data:`TARGETS`."""
    return list(dict.fromkeys(f for t in TARGETS for f in t.files))


def target_names() -> list[str]:
    """Every name a user may type, aliases included (each once)."""
    names = [n for t in TARGETS for n in (t.name, *t.aliases)]
    if len(set(names)) != len(names):
        raise ValueError(f"a target name is used twice: {names}")
    return names
