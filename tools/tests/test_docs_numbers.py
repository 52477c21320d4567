"""No hand-typed result numbers in README.md and docs/: the docs link to the tables and pages where the numbers
are made, and the README's few sit in its one ``<!-- generated: readme -->`` block, filled by
:mod:`tools.docs_numbers` from the committed sets and benchmarks. These tests fail when the block is stale, when a
doc grows a generated block again, and when prose carries a number that looks like a result and is not on the
allow-list of non-result numbers (configuration values, rule thresholds, test tolerances, the essay's own
predictions).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools import docs_numbers as dn
from algo_emu.runtime import REPO_ROOT

BLOCK = re.compile(r"<!-- generated: [\w-]+ -->\n.*?<!-- /generated -->", re.S)
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE = re.compile(r"`[^`\n]*`")
# References that contain digits but are not numbers: paper ids and versions, theorem/section numbers, versions.
REFS = re.compile(
    r"(arXiv:? ?\d{4}\.\d{4,5}(v\d)?|\d{4}\.\d{4,5}(v\d)?"
    r"|(Theorems?|Corollar(y|ies)|Definition|Remark|Section|Appendix|Lemma|Proposition) [A-Z]?\d[\d.]*"
    r"((, |/| and )\d[\d.]*)*"
    r"|[Pp]ython \d\.\d+|YAML \d\.\d|\b\d+\.\d+\.\d+\b|\b[A-Z]\.\d\b)")
# What reads as a result: a decimal, a number in scientific notation, a percentage, a ratio "Nx", a duration.
NUM = re.compile(r"(?<![\w.])(\d+(\.\d+)?e[-+]?\d+|\d+\.\d+\s?(%|x\b)?|\d+\s?(%|x\b))"
                 r"|(?<![\w.])\d+(\.\d+)?\s?(h|min|s|hours?|minutes?|days?|weeks?)\b")

#: Numbers that are not results, in any file: the CI level, the split, test tolerances, the learning rate.
ALLOWED = {"95 %", "95%", "20 %", "80 %", "1e-12", "1e-3"}
#: Per file, with why.
ALLOWED_IN = {
    # the essay's own predictions (bands it states), the verdict bands read from them, the theory's slope test
    "docs/essay.md": {"5 %", "3 %", "10 %", "50 %", "2.5", "0.9", "1.1", "0.25", "0.5", "10x", "100x"},
    # a sigmoid/step target's part that ignores w: MSE / Var(target) 0.5 by construction (a derivation)
    "docs/experiments.md": {"0.5"},
    # the remote runner's limit per command, and the script's BUDGET and RESERVE defaults
    "docs/gpu.md": {"10 minutes", "540 s", "60 s"},
    # data defaults (noise, masking probability, lasso alpha, GD step), solver and test tolerances, and the
    # residual's std at the paper's scale, sqrt(d * 25/3) (a derivation)
    "docs/statistical_and_theorem31_data.md": {"0.5", "0.05", "0.1", "0.02", "1e-8", "1e-4", "1e-7", "14.2"},
    # one ulp of 1e6 (a derivation) and the fast-vs-dense forward's test tolerance
    "docs/constructions.md": {"1e-10", "1e-14"},
    # a version (MariaDB 10.11)
    "docs/cluster.md": {"10.11"},
    # the label noise's std and its variance (the reference_code algorithm's own error by construction), and
    # the frozen-file test's weight change
    "docs/statistical.md": {"0.05", "0.0025", "1e-7"},
    # the default test fraction and two test tolerances (a CV fast path, the padded-ensemble rounding)
    "docs/ames.md": {"0.2", "1e-9", "1e-8"},
}
#: Files checked in full (no result number outside a generated block).
STRICT = ("README.md", "docs/reference-scale.md", "docs/essay.md", "docs/speed.md", "docs/experiments.md",
          "docs/reproduce.md", "docs/architecture.md", "docs/gpu.md",
          "docs/statistical_and_theorem31_data.md", "docs/constructions.md",
          "docs/cluster.md", "docs/theorem31.md",
          "docs/statistical.md", "docs/ames.md", "docs/reliability.md")
#: Not scanned: every number there is a verdict rule's parameter, stated before any result (its own owners
#: keep it; the rules are tested in tests/test_verdicts.py).
NOT_SCANNED = ("docs/verdicts.md",)
def result_like_numbers(text: str, allowed: set[str] = frozenset()) -> list[str]:
    """The result-like numbers of ``text`` outside generated blocks, code and references, not allowed."""
    for pattern in (BLOCK, FENCE, INLINE, REFS):
        text = pattern.sub(" ", text)
    found = [m.group(0).strip() for m in NUM.finditer(text)]
    return [n for n in found if n not in ALLOWED and n not in allowed]


def _docs() -> list[str]:
    return ["README.md", *sorted(f"docs/{p.name}" for p in (REPO_ROOT / "docs").glob("*.md"))]


def test_every_generated_block_matches_the_committed_files():
    problems = dn.run(write=False)
    assert not problems, "\n".join(problems) + "\nrun: python -m tools.docs_numbers --write"


def test_the_readme_holds_the_one_generated_block_and_the_docs_none():
    found = {rel: re.findall(r"<!-- generated: ([\w-]+) -->", (REPO_ROOT / rel).read_text()) for rel in _docs()}
    assert found.pop("README.md") == ["readme"] == list(dn.GENERATORS)
    assert not {rel: names for rel, names in found.items() if names}, "docs link to the tables instead"


def test_a_stale_block_is_reported_and_rewritten(tmp_path: Path):
    text = "before\n<!-- generated: readme -->\nE1 took 1.0 min\n<!-- /generated -->\nafter\n"
    new, stale, unknown = dn.fill(text, REPO_ROOT, {})
    assert stale == ["readme"] and not unknown
    assert "E1 took 1.0 min" not in new and new.startswith("before\n") and new.endswith("after\n")
    again, stale2, _ = dn.fill(new, REPO_ROOT, {})
    assert again == new and not stale2
    assert dn.fill("<!-- generated: no-such -->\nx\n<!-- /generated -->", REPO_ROOT, {})[2] == ["no-such"]


@pytest.mark.parametrize("rel", STRICT)
def test_no_hand_typed_result_number(rel: str):
    found = result_like_numbers((REPO_ROOT / rel).read_text(), ALLOWED_IN.get(rel, set()))
    assert not found, f"{rel}: result-like numbers outside generated blocks: {found}"


def test_every_page_is_strict_or_named():
    pages = set(_docs())
    assert pages <= set(STRICT) | set(NOT_SCANNED), pages - set(STRICT) - set(NOT_SCANNED)


def test_the_scanner_sees_results_and_skips_references():
    assert result_like_numbers("MSE 3.64 against 3.469, 6-8x faster, 74 min, 18 %") == \
        ["3.64", "3.469", "8x", "74 min", "18 %"]
    assert result_like_numbers("arXiv 2508.17550v2, Theorem 3.1, Corollary 4.2.1, torch 2.13.0, `lr 0.1`") == []
    assert result_like_numbers("<!-- generated: x -->\n0.77\n<!-- /generated -->") == []


def test_verdicts_are_counted_per_experiment_without_the_rows_that_wait(tmp_path: Path):
    import pandas as pd

    rows = [("E1", "consistent"), ("E1", "inconsistent (ours higher)"), ("E1", "consistent"),
            ("E2", "not comparable: below the paper's N"), ("E2", dn.MISSING), ("E3", dn.MISSING)]
    pd.DataFrame(rows, columns=["experiment", "verdict"]).to_csv(tmp_path / "r.csv", index=False)
    assert dn.verdict_counts(tmp_path / "r.csv") == {"E1": "consistent 2, inconsistent (ours higher) 1",
                                                     "E2": "not comparable 1"}


def test_the_heads_table_reads_the_sets_rows_and_names_what_is_not_made(tmp_path: Path):
    import pandas as pd

    from algo_emu import paper_values

    t = tmp_path / dn.PAPER / dn.VERDICTS
    t.parent.mkdir(parents=True)
    pd.DataFrame([{"experiment": "E1", "claim": "heads table: test MSE", "setting": "H=2, p=60", "comparable_mean": 2.5,
                   "comparable_ci_low": 2.25, "comparable_ci_high": 2.75, "verdict": "consistent"},
                  {"experiment": "E1", "claim": "heads table: test MSE", "setting": "H=4, p=60", "comparable_mean": None,
                   "comparable_ci_low": None, "comparable_ci_high": None, "verdict": dn.MISSING}]).to_csv(t, index=False)
    lines = dn.heads_table(tmp_path)
    assert len(lines) == 2 + len(paper_values.HEADS_TABLE["heads"])
    assert lines[3] == f"| 2 | {paper_values.HEADS_TABLE['mse'][1]} ± {paper_values.HEADS_TABLE['std'][1]} | " \
                       "2.5 [2.25, 2.75] | consistent |"
    assert lines[2].endswith("| not made yet | -- |") and lines[4].endswith("| not made yet | -- |")


def test_readme_and_the_paper_scale_page_fit_one_screen_and_name_real_make_targets():
    readme = (REPO_ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 120
    assert len((REPO_ROOT / dn.PAPER / "README.md").read_text().splitlines()) <= 200
    targets = set(re.findall(r"^([\w-]+):", (REPO_ROOT / "Makefile").read_text(), re.M))
    used = set(re.findall(r"`make ([\w-]+)", readme))
    assert used and used <= targets, used - targets
