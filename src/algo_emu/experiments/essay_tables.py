"""E6's rows of the replication report: the essay's claims table (``essay_claims.csv``, written by ``essay claims``)
read with its own rules, [essay-learned] and [essay], and [reduced] below the essay's full scale."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from algo_emu.essay import claims as essay
from algo_emu.report.replication import Row, Rule, Scale, cite, to_float

#: The essay states no scale; its claims count as read at full scale at the scale this project recommends
#: (config/config.yaml's essay section): main-model training steps, width, depth and the number of seeds.
ESSAY_FULL_SCALE = {"train.steps": 6000, "model.d_model": 64, "model.layers": 4, "seeds": 3}
COLUMNS = ["claim", "essay_prediction", "measured", "ci_low", "ci_high", "verdict", "scale"]
CLAIM_WORDS = ("supported", "partly supported", "not supported", "inconclusive")

RULES = (
    Rule("essay-learned", "did not learn",
         f"an essay row measured on the trained models counts only when the main model is within "
         f"{essay.BAYES_TOL:.0%} of the Bayes-optimal predictor (ridge with lambda = sigma^2/tau^2, the posterior "
         f"mean) on the same prompts at the longest trained context: model MSE / ridge MSE at k = k_max <= "
         f"{1 + essay.BAYES_TOL:g}. Otherwise every such row reads `did not learn`, with both numbers."),
    Rule("essay", "supported | inconclusive | not supported",
         f"the essay's claims. {essay.BAND_RULE} {essay.SIGN_RULE} A float64 construction: an equality is "
         f"supported when its largest error is below {essay.EXACT_TOL:g}, a comparison when the threshold its row "
         "states holds (e.g. shift ratio < 0.9). The essay's full scale, below which a claim verdict says so "
         "([reduced]): " + ", ".join(f"{k}={v}" for k, v in ESSAY_FULL_SCALE.items()) + "."),
)


def _dig(mapping: Mapping, dotted: str) -> Any:
    for part in dotted.split("."):
        mapping = mapping.get(part, {}) if isinstance(mapping, Mapping) else {}
    return None if mapping == {} else mapping


def essay_scale(config: Mapping) -> Scale:
    """Rule [reduced] for the essay: below ESSAY_FULL_SCALE (config/config.yaml's essay section) in any of its keys."""
    sec = config.get("essay", {}) or {}
    have = {k: _dig(sec, k) for k in ESSAY_FULL_SCALE if k != "seeds"}
    seeds = sec.get("seeds") if sec.get("seeds") is not None else config.get("seeds")
    have["seeds"] = len(seeds) if seeds is not None else None
    short = [f"{k}={have[k]} < {v}" for k, v in ESSAY_FULL_SCALE.items() if have[k] is not None and int(have[k]) < v]
    if short:
        return Scale("reduced", False, "reduced scale (" + ", ".join(short) + ")")
    return Scale("full", True)


def report_rows(tables: Path, config: Mapping | None = None, config_name: str = "") -> list[Row]:
    """The essay's table, with rules [set-up] and [essay-learned] applied from its tables alone (``essay_claims.csv``
    and ``essay_curves.csv`` under ``tables``), and [reduced]."""
    path = Path(tables) / "essay_claims.csv"
    ess = pd.read_csv(path)
    missing = [c for c in COLUMNS if c not in ess.columns]
    if missing:
        return [Row("E6 (essay)", "companion-essay claims", verdict="not available",
                    reason=f"{path.name} lacks column(s) {missing}; {cite('not-available')}")]
    curves_path = path.parent / "essay_curves.csv"
    check = (essay.learning_check(pd.read_csv(curves_path)) if curves_path.is_file() else
             {"learned": "unknown", "text": f"no {curves_path.name} beside {path.name}: the learning check could not be made"})
    ess = essay.gate(ess, check)
    scale = essay_scale(config or {})
    out = []
    for rec in ess.to_dict("records"):
        verdict, reason, kind = str(rec["verdict"]), str(rec["reason"]), rec["kind"]
        if kind == "set-up check":
            key = "set-up"
        elif kind == "not tested":
            key = "not-tested"
        elif verdict == "did not learn":
            key = "essay-learned"
        elif verdict == "not available":
            key = "not-available"
        else:
            key = "essay"
            if kind == "trained" and verdict in CLAIM_WORDS and not scale.at_paper:
                verdict = f"{verdict} (at reduced scale)"
                reason = f"{reason}; {scale.why_not}"
        out.append(Row("E6 (essay)", str(rec["claim"]), paper=str(rec["essay_prediction"]),
                       comparable_mode="measured", comparable_mean=to_float(rec["measured"]),
                       comparable_ci_low=to_float(rec["ci_low"]), comparable_ci_high=to_float(rec["ci_high"]),
                       verdict=verdict, reason="; ".join(x for x in (reason, cite(key)) if x),
                       learned=str(rec["learned"]), scale=str(rec["scale"])))
    return out
