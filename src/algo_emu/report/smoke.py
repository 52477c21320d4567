"""Whether a configuration is a smoke scale, said in one line at the top of its reports.

A run is a smoke scale when any trained experiment gets a smaller budget (prompts N or epochs) than the reference
scale's (``config/reference.yaml``: the smallest budgets at which the trained experiments were measured to learn,
docs/reference-scale.md). Its models barely train, so its report reads *did not learn* on most trained rows, as
expected. Decided from the resolved config (defaults filled in), never from the config file's name.

``workflow/report/workflow.rst`` (the HTML report's opening) says the same from the same numbers (a test renders it
for each committed config and compares).

Standard library only.
"""

from __future__ import annotations

from typing import Any, Mapping

from algo_emu.specs import SPECS

#: config/reference.yaml's budgets per trained experiment (a test checks they match that file).
REFERENCE_SCALE: dict[str, dict[str, int]] = {s.section: dict(s.reference_scale) for s in SPECS if s.reference_scale}
#: The command that runs the reference scale.
REFERENCE_COMMAND = "make run CONFIG=config/reference.yaml"


def shortfalls(config: Mapping[str, Any]) -> list[str]:
    """Every budget of ``config`` below the reference scale's, e.g. ``"heads.n_prompts=2000 < 50000"``."""
    out = []
    for section, ref in REFERENCE_SCALE.items():
        sec = config.get(section) or {}
        for key, minimum in ref.items():
            value = sec.get(key)
            if isinstance(value, (int, float)) and value < minimum:
                out.append(f"{section}.{key}={value} < {minimum}")
    return out


def smoke_line(config: Mapping[str, Any], rst: bool = False) -> str | None:
    """The report's first line for a smoke-scale config (Markdown; reStructuredText with ``rst``), None at the
    reference scale or above."""
    short = shortfalls(config)
    if not short:
        return None
    code = "``" if rst else "`"
    return ("**Smoke scale:** its models train below the smallest budgets at which they learn (" + ", ".join(short)
            + "), so *did not learn* is expected on most trained rows; the reference scale, where they learn: "
            f"{code}{REFERENCE_COMMAND}{code}.")
