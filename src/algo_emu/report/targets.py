"""The workflow's surface: each paper figure and table, the target that builds it, and its files.

The one place that says what ``snakemake all`` makes: the Snakefile builds ``rule all`` from
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

import itertools
import re
from dataclasses import dataclass


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


TABLES = "results/tables/"
FIGURES = "results/figures/"
CONSTRUCTION_KINDS = "{beta,p,n,d,library,multistep}"

TARGETS: tuple[Target, ...] = (
    # E1: attention emulating an attention head (workflow/rules/heads.smk)
    Target("heads_table", "E1", "heads table (MSE per H; Theorem 4.1 ablation) and the O(1/H) fit",
           (TABLES + "heads_vs_mse.{csv,md,tex}", TABLES + "heads_fit.json", TABLES + "heads_runs.csv")),
    Target("heads_figure", "E1", "heads figure (MSE vs H)", (FIGURES + "heads_vs_mse.{pdf,png}",)),
    Target("prompt_length_table", "E1", "prompt-length sweep (published code; no number in the paper)",
           (TABLES + "prompt_length_vs_mse.{csv,md,tex}",)),
    Target("prompt_length_figure", "E1", "prompt-length figure (MSE vs p)", (FIGURES + "prompt_length_vs_mse.{pdf,png}",)),
    # E2: one softmax head emulating f(w^T x - y) x, Theorem 3.1 (workflow/rules/theorem31.smk)
    Target("theorem31_table", "E2", "Theorem 3.1 emulation and the GD step of Corollary 3.1.2",
           (TABLES + "f_emulation.{csv,md,tex}", TABLES + "f_gd_step.{csv,md,tex}", TABLES + "theorem31_runs.csv"),
           aliases=("f_emulation_table",)),
    Target("theorem31_figure", "E2", "Theorem 3.1 figure (error per f and p)", (FIGURES + "f_emulation.{pdf,png}",),
           aliases=("f_emulation_figure",)),
    Target("theorem31_ablation", "E2", "prompt ablations of the frozen E2 model (w replaced; weight-blind baseline)",
           (TABLES + "f_emulation_ablation.{csv,md,tex}", TABLES + "f_emulation_ablation_runs.csv",
            FIGURES + "f_emulation_ablation.{pdf,png}"),
           aliases=("f_emulation_ablation",)),
    # E3: statistical algorithms from the prompt, Appendix C.1 (workflow/rules/statistical.smk)
    Target("statistical_table", "E3", "Appendix C.1 loss per algorithm and H",
           (TABLES + "statistical_emulation.{csv,md,tex}", TABLES + "statistical_runs.csv")),
    Target("statistical_figure", "E3", "Appendix C.1 figure (loss vs H)", (FIGURES + "statistical_heads.{pdf,png}",)),
    Target("statistical_ablation", "E3", "prompt ablations of the frozen E3 models (weights replaced, context zeroed)",
           (TABLES + "statistical_ablation.{csv,md,tex}", TABLES + "statistical_ablation_runs.csv",
            FIGURES + "statistical_ablation.{pdf,png}")),
    # E4: Ames Housing, Appendix C.2 (workflow/rules/ames.smk)
    Target("ames_table", "E4", "Appendix C.2 Ames Housing table and its prompt ablations",
           (TABLES + "ames.{csv,md,tex}", TABLES + "ames_ablation.{csv,md,tex}", TABLES + "ames_runs.csv")),
    Target("ames_figure", "E4", "Appendix C.2 figures (emulation and ablations)",
           (FIGURES + "ames.{pdf,png}", FIGURES + "ames_ablation.{pdf,png}"), aliases=("ames_plot",)),
    # E5: hand-built frozen attention, Theorems 4.1/4.2 and Corollary 4.2.1 (workflow/rules/constructions.smk)
    Target("construction_tables", "E5", "error studies (beta, p, n, d), the algorithm library, the multi-step run",
           (TABLES + f"construction_{CONSTRUCTION_KINDS}.{{csv,md,tex}}",)),
    Target("construction_figures", "E5", "the same, as figures", (FIGURES + f"construction_{CONSTRUCTION_KINDS}.{{pdf,png}}",)),
    # parts of the two above, each alone
    Target("construction_studies", "E5", "the error studies alone (tables and figures)",
           (TABLES + "construction_{beta,p,n,d}.csv", FIGURES + "construction_{beta,p,n,d}.{pdf,png}")),
    Target("construction_library", "E5", "the algorithm library (Theorem 4.2) table",
           (TABLES + "construction_library.{csv,md,tex}",)),
    Target("construction_library_all", "E5", "the algorithm library table and figure",
           (TABLES + "construction_library.{csv,md,tex}", FIGURES + "construction_library.{pdf,png}")),
    Target("construction_multistep", "E5", "the multi-step run (Corollary 4.2.1) table",
           (TABLES + "construction_multistep.{csv,md,tex}",)),
    Target("construction_multistep_all", "E5", "the multi-step run table and figure",
           (TABLES + "construction_multistep.{csv,md,tex}", FIGURES + "construction_multistep.{pdf,png}")),
    # E6: the companion essay's claims, not the paper (workflow/rules/essay.smk)
    Target("essay_tables", "E6", "the essay's claims as measured verdicts; its float64 equivalences",
           (TABLES + "essay_claims.{csv,md,tex}", TABLES + "essay_curves.csv", TABLES + "essay_equivalences.{csv,md,tex}"),
           aliases=("essay_claims",)),
    Target("essay_figures", "E6", "in-context learning curves; equivalence gaps",
           (FIGURES + "essay_{icl,equivalences}.{pdf,png}",)),
    # Artifact review (workflow/rules/report.smk)
    Target("replication_report", "report", "every number and claim above: paper vs ours, with a verdict",
           ("results/replication.md", TABLES + "replication.csv")),
    Target("manifest", "report", "hashes of every output, commit, config hash, versions, device, timings",
           ("results/manifest.json",)),
)

REPLICATION_OUTPUTS = next(t for t in TARGETS if t.name == "replication_report").files
MANIFEST = "results/manifest.json"
ESSAY_CLAIMS = TABLES + "essay_claims.csv"


def all_outputs() -> list[str]:
    """Every file of ``snakemake all``, once each, in the order of :data:`TARGETS`."""
    return list(dict.fromkeys(f for t in TARGETS for f in t.files))


def target_names() -> list[str]:
    """Every name a user may type, aliases included (each once)."""
    names = [n for t in TARGETS for n in (t.name, *t.aliases)]
    if len(set(names)) != len(names):
        raise ValueError(f"a target name is used twice: {names}")
    return names
