"""The replication report: one row per number or claim of the paper, ours beside it, and a verdict.

Reads only the final tables under ``results/tables/`` (never the per-seed
records), so it is a pure function of what a reviewer can open. Tables written
by an older version of the pipeline (columns missing) give "not available" rows
with the reason, never a crash; a missing table is an error that names it.

Each experiment builds its own rows (``report_rows`` in the module its spec's :class:`~algo_emu.specs.Report`
names) from the helpers here; this module keeps the shared rules, the row format and the page.

Every rule is stated once, as data (:class:`Rule`: key, verdicts, statement; the shared ones here, each experiment's
own as ``RULES`` in the module that builds its rows; :func:`rule_list`), printed at the top of
``replication.md`` before any number (:func:`rules_markdown`) and in ``docs/verdicts.md`` (:func:`docs_page`); each
row's reason cites the rule that decided it as ``rule [key]``. ``tests/test_verdicts.py`` feeds the report
wrong result sets (negative controls) and checks that every verdict the right set earns flips.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from algo_emu import fit
from algo_emu.io import write_csv, write_text
from algo_emu.report import check_present
from algo_emu.report.smoke import smoke_line
from algo_emu.specs import SPECS, Rule  # noqa: F401  (Rule: the experiments' rules' type, re-exported)

#: "learned": the test error is below this fraction of what a predictor that ignores the prompt scores.
LEARNED_RATIO = 0.5
#: two means agree when they differ by at most Z_AGREE combined standard errors.
Z_AGREE = 2.0
#: a rate read from a fit needs at least this many settings (through two points a + b/H fits exactly: R^2 = 1).
MIN_FIT_POINTS = fit.MIN_POINTS
#: the floor a of MSE = a + b/H is read only where that law describes the per-H means: R^2 at least this.
FLOOR_FIT_R2 = 0.9
#: The scale at which the paper made its numbers (arXiv 2508.17550v2 and its published code); a trained experiment run at a
#: smaller N or fewer epochs is "not comparable" with them, whatever its numbers say.
PAPER_SCALE = {s.section: dict(s.paper_scale) for s in SPECS if s.paper_scale}


def _paper_scale_text() -> str:
    return "; ".join(f"{k}: " + ", ".join(f"{'N' if kk == 'n_prompts' else kk}={vv}" for kk, vv in v.items())
                     for k, v in PAPER_SCALE.items())


def _shared_rules() -> tuple[list[Rule], list[Rule]]:
    """The rules any experiment's rows may cite: (those that apply before the experiments' own, those after)."""
    return [
        Rule("not-run", "not run at this scale", "the setting is not in this configuration's sweep."),
        Rule("not-available", "not available",
             "the results tree lacks the column or table the rule reads (made by an older version), or a check the "
             "verdict depends on could not be made; the reason says which."),
        Rule("not-tested", "not tested",
             "an essay statement this set-up cannot test (the scale column says why); never a made-up number."),
        Rule("too-few", "not testable at this scale",
             f"the run has too few settings for the claim to fail: a rate read from a fit over H needs >= "
             f"{MIN_FIT_POINTS} H values (through two points a + b/H fits exactly, R^2 = 1 by construction, and the "
             "power law's alpha is exact); E5's multi-step bound needs t >= 2."),
        Rule("set-up", "set-up check: holds | fails | inconclusive",
             "a row whose outcome the measurement's set-up fixes is a check of the set-up, never a verdict on a claim: "
             "E5's multi-step bound at t = 1 (eps is the largest one-step error, so err_1 <= eps by definition); the "
             "essay's population-level reordering (0 in expectation: the prompts are exchangeable); the essay's check "
             "that the model learns in context at all (prior-mean MSE / model MSE > 1)."),
        Rule("learned", "did not learn",
             f"a trained model (E1-E4) whose test error is not clearly below a baseline that ignores the prompt: error "
             f">= {LEARNED_RATIO} x the baseline's. Baselines: the variance of the target (the MSE of predicting its "
             "mean; E1 `target_var_mean`, E2 `target_var`, E4's published mode `target_var_mean`) and the "
             "weight-blind model trained with the same budget (`mse_over_blind`, E2-E3): every one the table has must "
             "be beaten (E2's GD-step rows: the emulator's own row too). Such a row gets no verdict: its numbers are "
             "not results. Where neither baseline is in the table, the `learned` column says the check could not be "
             "made. E4's corrected mode is read by rule [E4] instead, which names how far it beats its baseline."),
        Rule("comparable", "not comparable: <why>",
             "the paper's number was made another way or at another scale. A trained experiment is comparable only at "
             f"the paper's N and epochs ({_paper_scale_text()}), and only in the mode made the way the paper made it "
             "(the `comparable` columns)."),
        Rule("paper-number", "consistent | inconsistent (ours lower|higher)",
             f"|ours - paper| <= {Z_AGREE:g} x sqrt(SE_ours^2 + SE_paper^2), SE = std / sqrt(n) (a two-sided test of "
             "equal means at about 5 %): consistent; otherwise inconsistent. Our 95 % bootstrap CI is shown beside it."),
        Rule("rate-exact", "supported | not supported",
             "O(1/H) read as an exact rate, MSE = b/H: supported when the 95 % interval of alpha (MSE ~ H^-alpha, "
             "log-log least squares; the union of the seed bootstrap's interval and the fit's own residual interval, "
             "so that a law that misses the points is not read as precise) contains 1, the law MSE = a + b/H "
             f"describes the per-H means (R^2 >= {FLOOR_FIT_R2:g}) and its floor a's 95 % interval contains 0; "
             "otherwise not supported. The reason lists the exponent and floor with each H left out in turn."),
        Rule("rate-bound", "supported | inconclusive | not supported",
             "O(1/H) read as an upper bound, MSE <= C/H as H grows: not supported when the data show a slower decay "
             "(alpha's 95 % interval, as in [rate-exact], wholly below 1) or a floor (a's 95 % interval wholly above 0, "
             f"read only where MSE = a + b/H describes the means: R^2 >= {FLOOR_FIT_R2:g}), which no C/H admits; "
             "inconclusive when alpha's interval reaches 0 (the data do not show the error falling with H at all); "
             "supported otherwise. Over a finite range of H any MSE is below C/H for a large enough C, so only the "
             "decay can refute the bound."),
    ], [
        Rule("reduced", "<verdict> (at reduced scale)",
             "a claim verdict (supported / partly / not supported) reached below the paper's scale (E2) or below the "
             "essay's full scale (rule [essay] states it) says so."),
    ]


def rule_list() -> list[Rule]:
    """Every verdict rule, in the order they apply: the shared ones, then each experiment's own (``RULES`` of the
    module its spec's :class:`~algo_emu.specs.Report` names, in label order), then [reduced]. A key
    declared twice is an error naming it."""
    head, tail = _shared_rules()
    own = [r for s in SPECS if s.report for r in getattr(importlib.import_module(s.report.module), "RULES", ())]
    out = head + own + tail
    keys = [r.key for r in out]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ValueError(f"verdict rule(s) {', '.join(twice)} declared more than once (experiments' RULES and "
                         "algo_emu.report.replication)")
    return out


def rules() -> dict[str, Rule]:
    """The rules by key."""
    return {r.key: r for r in rule_list()}


def rules_markdown() -> str:
    """The rules as they print at the top of replication.md (and in docs/verdicts.md)."""
    lines = ["**Verdict rules** (stated before any number; applied in this order, the first that applies decides; "
             "each row's reason cites its rule as [key]):", ""]
    for i, r in enumerate(rule_list(), 1):
        lines.append(f"{i}. [{r.key}] **{r.verdicts}** -- {r.statement}")
    return "\n".join(lines) + "\n"


def cite(key: str) -> str:
    """The citation a row's reason carries for the rule that decided it."""
    if key not in rules():
        raise KeyError(f"no verdict rule {key!r}")
    return f"rule [{key}]"


COLUMNS = [
    "experiment", "claim", "setting", "paper", "paper_mean", "paper_std", "paper_n",
    "comparable_mode", "comparable_mean", "comparable_std", "comparable_ci_low", "comparable_ci_high", "comparable_n",
    "corrected_mode", "corrected_mean", "corrected_ci_low", "corrected_ci_high",
    "learned", "verdict", "reason", "scale",
]

NAN = float("nan")


@dataclass
class Row:
    experiment: str
    claim: str
    setting: str = ""
    paper: str = ""
    paper_mean: float = NAN
    paper_std: float = NAN
    paper_n: float = NAN
    comparable_mode: str = ""
    comparable_mean: float = NAN
    comparable_std: float = NAN
    comparable_ci_low: float = NAN
    comparable_ci_high: float = NAN
    comparable_n: float = NAN
    corrected_mode: str = ""
    corrected_mean: float = NAN
    corrected_ci_low: float = NAN
    corrected_ci_high: float = NAN
    learned: str = ""
    verdict: str = ""
    reason: str = ""
    scale: str = ""
    notes: list[str] = field(default_factory=list, repr=False)

    def compare_with(self, rec: Mapping[str, Any]) -> None:
        """Ours in the comparable mode from a table row summarised over seeds (mse_mean, mse_std, CI, n_seeds)."""
        self.comparable_mean, self.comparable_std, self.comparable_n = rec["mse_mean"], rec["mse_std"], rec["n_seeds"]
        self.comparable_ci_low, self.comparable_ci_high = rec["mse_ci_low"], rec["mse_ci_high"]


# ------------------------------------------------------------------------------------------- rules
def to_float(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return NAN
    return v


def finite(x: Any) -> bool:
    return not math.isnan(to_float(x))


def agreement(paper_mean: float, paper_std: float, paper_n: float, mean: float, std: float, n: float) -> str:
    """Rule 5: consistent when the means differ by at most Z_AGREE combined standard errors."""
    se_p = paper_std / math.sqrt(paper_n) if finite(paper_std) and paper_n > 0 else 0.0
    se_o = std / math.sqrt(n) if finite(std) and n > 1 else 0.0
    se = math.sqrt(se_p**2 + se_o**2)
    diff = mean - paper_mean
    if abs(diff) <= Z_AGREE * se:
        return "consistent"
    return f"inconsistent (ours {'lower' if diff < 0 else 'higher'})"


def agreement_one_model(paper_value: float, paper_std_ddof0: float, paper_test_sets: int, mean: float, std: float,
                        n: float) -> tuple[str, float]:
    """Rule [one-model]: (verdict, z) for a paper value made by one trained model, evaluated on ``paper_test_sets``
    test sets (its std over them with ddof = 0), against our mean and sample std over ``n`` independently trained
    models."""
    k = paper_test_sets
    se_test = paper_std_ddof0 * math.sqrt(k / (k - 1)) / math.sqrt(k) if finite(paper_std_ddof0) and k > 1 else 0.0
    between = std**2 * (1.0 + 1.0 / n) if finite(std) and n > 1 else 0.0
    scale = math.sqrt(between + se_test**2)
    diff = mean - paper_value
    z = abs(diff) / scale if scale > 0 else (0.0 if diff == 0 else math.inf)
    if z <= Z_AGREE:
        return "consistent", z
    return f"inconsistent (ours {'lower' if diff < 0 else 'higher'})", z


def learned_from_ratio(ratio: float, what: str) -> tuple[str, str]:
    """('yes'|'no'|'unknown', text) from error / baseline error."""
    if not finite(ratio):
        return "unknown", f"check could not be made: {what} not available"
    if ratio < LEARNED_RATIO:
        return "yes", f"{what} = {ratio:.3g} < {LEARNED_RATIO}"
    return "no", f"{what} = {ratio:.3g} >= {LEARNED_RATIO}"


def learned_from_row(row: Mapping[str, Any] | None, mse_col: str = "mse_mean", var_col: str | None = None) -> tuple[str, str]:
    """Every baseline the row has must be beaten: ``mse_over_blind`` (the weight-blind model) and, where ``var_col``
    is given, MSE / target variance (a model worse than predicting a constant has not learned, however weak its
    weight-blind baseline)."""
    if row is None:
        return "unknown", "check could not be made: no row"
    checks = []
    if "mse_over_blind" in row and finite(row["mse_over_blind"]):
        checks.append(learned_from_ratio(to_float(row["mse_over_blind"]), "MSE / weight-blind baseline's MSE"))
    if var_col and var_col in row and finite(row[var_col]) and to_float(row[var_col]) > 0:
        checks.append(learned_from_ratio(to_float(row[mse_col]) / to_float(row[var_col]), f"MSE / target variance ({var_col})"))
    if not checks:
        missing = "mse_over_blind" + (f" and {var_col}" if var_col else "")
        return "unknown", f"check could not be made: no {missing} column in the table"
    return all_of(checks)


def all_of(checks: list[tuple[str, str]]) -> tuple[str, str]:
    """'no' if any check says no, 'yes' only if all say yes; the reasons joined."""
    verdicts = {v for v, _ in checks}
    learned = "no" if "no" in verdicts else ("yes" if verdicts == {"yes"} else "unknown")
    return learned, "; ".join(text for _, text in checks)


@dataclass
class Scale:
    text: str
    at_paper: bool
    why_not: str = ""


def scale_of(section: str, config: Mapping[str, Any], config_name: str, n_seeds: int | None = None) -> Scale:
    sec = config.get(section, {}) or {}
    seeds = n_seeds if n_seeds is not None else len(config.get("seeds", []))
    N, epochs = sec.get("n_prompts"), sec.get("epochs")
    parts = ([f"N={N}"] if N is not None else []) + [f"{epochs} epochs", f"{seeds} seeds"]
    ref = PAPER_SCALE.get(section, {})
    short = []
    if "n_prompts" in ref and N is not None and int(N) < ref["n_prompts"]:
        short.append(f"N={N} < {ref['n_prompts']}")
    if "epochs" in ref and epochs is not None and int(epochs) < ref["epochs"]:
        short.append(f"{epochs} < {ref['epochs']} epochs")
    if short:
        return Scale(f"{config_name}: {', '.join(parts)} (REDUCED; paper: "
                     f"{', '.join(f'{k}={v}' for k, v in ref.items())})", False, "reduced scale (" + ", ".join(short) + ")")
    return Scale(f"{config_name}: {', '.join(parts)} (paper scale)", True)


def gate(learned: str, scale: Scale) -> str | None:
    """Rules [learned] and [comparable]: the verdict a row gets before any comparison, or None when it may be compared."""
    if learned == "no":
        return "did not learn"
    if not scale.at_paper:
        return f"not comparable: {scale.why_not}"
    return None


def gate_cite(verdict: str) -> str:
    """The rule a :func:`gate` verdict came from."""
    return cite("learned" if verdict == "did not learn" else "comparable")


def claim_verdict(supported: bool | None, partly: bool, scale: Scale) -> str:
    """Rule [reduced]: a claim verdict reached below the scale it is read at says so."""
    word = "supported" if supported else ("partly supported" if partly else "not supported")
    return word if scale.at_paper else f"{word} (at reduced scale)"


def graded(value: float, supported_max: float, partly_max: float, scale: Scale) -> str:
    """supported when ``value <= supported_max``, partly when ``<= partly_max``, else not supported (NaN: not)."""
    v = to_float(value)
    return claim_verdict(v <= supported_max, v <= partly_max, scale)


def setup_check(outcome: str) -> str:
    """Rule [set-up]: 'set-up check: holds|fails|inconclusive' from a claim-style outcome."""
    word = {"supported": "holds", "not supported": "fails"}.get(outcome, outcome)
    return f"set-up check: {word}"


# ------------------------------------------------------------------------------------------- inputs
def first_row(frame: pd.DataFrame) -> dict | None:
    """The first row of ``frame`` as a dict (None when it has none): one setting's row of a table."""
    return None if frame is None or frame.empty else frame.iloc[0].to_dict()


# ------------------------------------------------------------------------------------------- rates of a fit over H
def fit_entry(fit: Mapping, key: str) -> Mapping | None:
    entry = fit.get(key)
    if isinstance(entry, Mapping) and "alpha" in entry:
        return entry
    return None


RATE_READINGS = (  # (rule key, how the claim is read)
    ("rate-exact", "read as an exact rate (MSE = b/H)"),
    ("rate-bound", "read as an upper bound (MSE <= C/H as H grows)"),
)


def rate_verdict(key: str, entry: Mapping) -> tuple[str, str]:
    """Rules [rate-exact] / [rate-bound] on one fit entry: (verdict, the numbers it was read from). Fits made before
    the residual interval existed are read from their seed bootstrap alone (the reason says so)."""
    if "a_ci" not in entry:
        return "not available", "the fit has no interval for the floor a (a_ci)"
    alo, ahi = (to_float(v) for v in entry.get("alpha_ci_total", entry["alpha_ci"]))
    a_lo, a_hi = (to_float(v) for v in entry["a_ci"])
    r2 = to_float(entry.get("r2"))
    holds = r2 >= FLOOR_FIT_R2
    interval = ("seed bootstrap and fit residuals" if "alpha_ci_total" in entry else "seed bootstrap only")
    numbers = (f"alpha = {to_float(entry['alpha']):.3g} [{alo:.3g}, {ahi:.3g}] ({interval}); a + b/H fit: R^2 = {r2:.3g} "
               + (f"(holds), a = {to_float(entry['a']):.3g} [{a_lo:.3g}, {a_hi:.3g}], b = {to_float(entry['b']):.3g}" if holds else
                  f"< {FLOOR_FIT_R2:g}: the law does not describe the means, so no floor is read "
                  f"(a = {to_float(entry['a']):.3g} as fitted)"))
    loo = entry.get("leave_one_out") or []
    if loo:
        numbers += "; each H left out: " + ", ".join(
            f"H={to_float(x['left_out']):g}: alpha {to_float(x['alpha']):.3g}, a {to_float(x['a']):.3g} (R^2 {to_float(x['r2']):.2g})"
            for x in loo)
    if key == "rate-exact":
        ok = alo <= 1.0 <= ahi and holds and a_lo <= 0.0 <= a_hi
    else:
        ok = not (ahi < 1.0 or (holds and a_lo > 0.0))
        if ok and alo <= 0.0:
            return "inconclusive", numbers
    return ("supported" if ok else "not supported"), numbers


def fit_points(entry: Mapping, fallback: Sequence[float]) -> list[float]:
    """The distinct H values a fit was made from (``x``, else ``heads``, else the table's)."""
    xs = entry.get("x") or entry.get("heads")
    return sorted({float(x) for x in (xs if xs else fallback)})



# ------------------------------------------------------------------------------------------- assembly
#: the tables the report reads (each experiment's spec names its own), in label order
REQUIRED = [t for s in SPECS if s.report for t in s.report.tables]


def sections() -> list[tuple[str, str, Callable[[Path, Mapping, str], list[Row]]]]:
    """(label, title, rows) per experiment whose spec has a report section, in label order: ``rows`` is the
    ``report_rows(tables, config, config_name)`` of the module the spec names (imported only when the report runs)."""
    return [(s.label, s.report.title, importlib.import_module(s.report.module).report_rows) for s in SPECS if s.report]


def build(tables_dir: str | Path, config: Mapping, config_name: str) -> pd.DataFrame:
    tables = Path(tables_dir)
    check_present("replication", [tables / f for f in REQUIRED])
    rows: list[Row] = []
    for _, _, fn in sections():
        rows += fn(tables, config, config_name)
    return rows_frame(rows)


def _num(x: Any) -> str:
    v = to_float(x)
    if math.isnan(v):
        return ""
    if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e5):
        return f"{v:.3e}"
    return f"{v:.4g}"


def _ci(lo: Any, hi: Any) -> str:
    return f" [{_num(lo)}, {_num(hi)}]" if finite(lo) and finite(hi) else ""


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(frame: pd.DataFrame, config_name: str, provenance: Mapping[str, Any] | None = None,
                    rows_csv: str = "results/tables/replication.csv", intro: Sequence[str] = (),
                    rules: str | None = None, note: str | None = None) -> str:
    """The report: ``note`` (one line, first: :func:`algo_emu.report.smoke.smoke_line`), the paper, the config,
    ``provenance`` (key: value lines), ``intro`` (Markdown lines), the rules (``rules``: where a page links to them
    instead), the verdict counts, one section per experiment. ``rows_csv``: where the same rows are, as the report
    names it."""
    lines = ["# Replication report", ""] + ([note, ""] if note else [])
    lines += ["Paper: Hu, Liu, Zhang, Liu, \"In-Context Algorithm Emulation in Fixed-Weight Transformers\", "
              "ICLR 2026, arXiv 2508.17550 **v2** (26 Sep 2025). Published code followed: commit 6d39297 (E1-E4).", ""]
    lines += [f"Configuration: `{config_name}`."]
    for k, v in (provenance or {}).items():
        lines.append(f"{k}: `{v}`.")
    lines += ["", *intro] if intro else []
    lines += ["", "Each row: the paper's value; ours in the mode made the way the paper made it (**comparable**); "
              "ours in our corrected mode (**corrected**); a verdict. Numbers are means with 95 % bootstrap "
              f"intervals over seeds in brackets. `{rows_csv}` holds the same rows.", "",
              rules_markdown() if rules is None else rules]
    counts = frame.verdict.str.replace(r" \(.*\)$|:.*$", "", regex=True).value_counts()
    lines += ["**Verdicts in this report:** " + ", ".join(f"{k}: {v}" for k, v in counts.items()), ""]
    label = frame.experiment.str.split(" ", n=1).str[0]  # "E6 (essay)" is E6's
    for key, title in [(s.label, s.report.title) for s in SPECS if s.report]:
        sub = frame[label == key]
        if sub.empty:
            continue
        lines += [f"## {title}", "", *rows_markdown(sub)]
    return "\n".join(lines) + "\n"


def rows_frame(rows: Sequence[Row]) -> pd.DataFrame:
    """Rows as the report's table (its columns, in order)."""
    return pd.DataFrame([{k: v for k, v in asdict(r).items() if k in COLUMNS} for r in rows], columns=COLUMNS)


def rows_markdown(sub: pd.DataFrame) -> list[str]:
    """One experiment's rows as the report prints them: its scale, the table, the modes' meanings."""
    lines = []
    scales = sorted(set(sub.scale) - {""})
    for s in scales:
        lines.append(f"Scale: {s}  ")
    lines.append("")
    lines.append("| claim | setting | paper | comparable | corrected | learned | verdict | why |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for rec in sub.to_dict("records"):
        comp = (_num(rec["comparable_mean"]) + _ci(rec["comparable_ci_low"], rec["comparable_ci_high"])) or "--"
        corr = (_num(rec["corrected_mean"]) + _ci(rec["corrected_ci_low"], rec["corrected_ci_high"])) or "--"
        lines.append("| " + " | ".join(_cell(x) for x in [
            rec["claim"], rec["setting"], rec["paper"], comp, corr, str(rec["learned"]).split(":")[0],
            f"**{rec['verdict']}**", rec["reason"]]) + " |")
    modes = sorted(set(sub.comparable_mode) - {"", "not available"})
    cmodes = sorted(set(sub.corrected_mode) - {"", "not available"})
    lines.append("")
    if modes:
        lines.append("Comparable mode: " + "; ".join(modes) + ".  ")
    if cmodes:
        lines.append("Corrected mode: " + "; ".join(cmodes) + ".")
    lines.append("")
    return lines


def write(tables_dir: str | Path, config: Mapping, config_name: str, out_md: str | Path, out_csv: str | Path,
          provenance: Mapping[str, Any] | None = None) -> pd.DataFrame:
    frame = build(tables_dir, config, config_name)
    write_csv(out_csv, frame)
    write_text(out_md, render_markdown(frame, config_name, provenance, note=smoke_line(config)))
    return frame


def docs_page() -> str:
    """docs/verdicts.md: the rules, exactly as replication.md prints them."""
    return ("# Verdict rules\n\n"
            "Every row of `results/replication.md` and `results/tables/replication.csv` gets its verdict by one of these "
            "rules, stated once (the shared ones in `algo_emu.report.replication`, each experiment's own as `RULES` in the "
            "module that builds its rows) and printed at the top of every report before any number. This page is "
            "generated from them (`python -m algo_emu.report.replication > "
            "docs/verdicts.md`; a test checks it is current). `tests/test_verdicts.py` feeds the report wrong result "
            "sets (the weight-blind model's numbers passed off as the model's, the paper's values x3, a model at "
            "Var(target), constructions that do not compute) and checks that every verdict the right set earns flips.\n\n"
            + rules_markdown())


if __name__ == "__main__":  # pragma: no cover
    print(docs_page(), end="")
