"""E3: statistical algorithms (lasso, ridge, least squares, GD) from the prompt, Appendix C.1
(workflow/rules/statistical.smk)."""

import math
from typing import Mapping

from algo_emu.specs import FIGURES, TABLES, ConfigError, Reads, Report, Spec, Target

_DATA = ("n_context", "n_query", "d", "algorithms", "data_params")


#: Fitted-mode alternative algorithm names (algo_emu.data.statistical.ALIASES; a test keeps them equal).
ALIASES: dict[str, dict[str, str]] = {"reference_code": {}, "fitted": {"linear": "ols"}}


def check(section: Mapping, config: Mapping) -> None:
    """Cross-field checks of the ``statistical`` section (the schema checks names and data params)."""
    for H in section["heads_sweep"]:
        if section["hidden"] % H:
            raise ConfigError(f"statistical.heads_sweep: {H} heads do not divide statistical.hidden = {section['hidden']}")
    for mode in section["modes"]:
        n = section["n_context"] + (section["n_query"] if mode == "fitted" else 0)
        if section["p"] < n:
            raise ConfigError(f"statistical.p: p = {section['p']} is smaller than the {n} tokens of a {mode} prompt")
        seen: dict[str, str] = {}
        for name in section.get("algorithms", {}).get(mode, []):
            canon = ALIASES.get(mode, {}).get(name, name)
            if canon in seen:
                raise ConfigError(f"statistical.algorithms.{mode}: algorithm {name!r} listed twice "
                                  f"(as {canon!r}, with {seen[canon]!r})")
            seen[canon] = name


def price(pricer, rule: str, wc: Mapping[str, str]) -> tuple[float, int]:
    """Seconds and steps of one training job from the benchmark row of its mode at the nearest H; the weight-blind
    baseline's scaled by its measured ratio to the model's."""
    s = pricer.cfg["statistical"]
    mode, H = wc["stat_mode"], int(wc["heads"])
    rows = [r for r in pricer.rows("statistical") if r["shape"]["setting"]["mode"] == mode] \
        or pricer.rows("statistical")
    row = min(rows, key=lambda r: (abs(r["shape"]["heads"] - H), r["shape"]["heads"]))
    steps = math.ceil(s["n_prompts"] / s["batch_size"]) * s["epochs"]
    ratio = pricer.seeds / row["shape"]["seeds"]
    n_eval = ratio * s["eval_prompts"] / max(1, row["shape"]["extra"].get("eval_prompts") or 1)
    sec = pricer.rescale(row, steps, ratio, n_eval)
    key = (lambda r: (r["shape"]["setting"]["mode"], r["shape"]["heads"]))
    return sec * (pricer.blind_ratio("statistical", key) if rule.endswith("blind") else 1), steps


SPEC = Spec(
    check=check,
    section="statistical", label="E3",
    reads=(
        # the training data set does not depend on H, the model or the budget
        Reads("statistical", "data", ("n_prompts",) + _DATA),
        Reads("statistical", "train", ("n_prompts",) + _DATA + ("hidden", "p", "epochs", "batch_size", "lr",
                                                               "checkpoint_every", "compile", "attention",
                                                               "lr_schedule", "readout")),
        Reads("statistical", "evaluate", _DATA + ("eval_prompts", "eval_chunk")),
        Reads("statistical", "aggregate", ("modes", "algorithms", "heads_sweep", "eval_prompts", "n_prompts",
                                           "n_context", "n_query", "d", "hidden", "p", "epochs", "batch_size", "lr")),
    ),
    targets=(
        Target("statistical_table", "E3", "Appendix C.1 loss per algorithm and H",
               (TABLES + "statistical_emulation.{csv,md,tex}", TABLES + "statistical_runs.csv")),
        Target("statistical_figure", "E3", "Appendix C.1 figure (loss vs H)", (FIGURES + "statistical_heads.{pdf,png}",)),
        Target("statistical_ablation", "E3", "prompt ablations of the frozen E3 models (weights replaced, context zeroed)",
               (TABLES + "statistical_ablation.{csv,md,tex}", TABLES + "statistical_ablation_runs.csv",
                FIGURES + "statistical_ablation.{pdf,png}")),
    ),
    paper_scale={"n_prompts": 50_000, "epochs": 300},
    reference_scale={"n_prompts": 5_000, "epochs": 20},
    runs=("algo_emu.experiments.statistical_tables:RUNS",),
    training_rules=("statistical_train", "statistical_train_blind"),
    price=price,
    report=Report("E3 -- statistical algorithms from the prompt (Appendix C.1)",
                  "algo_emu.experiments.statistical_tables", ("statistical_emulation.csv",)),
)
