"""E2: one softmax head emulating f(w^T x - y) x, Theorem 3.1, and the GD step of Corollary 3.1.2
(workflow/rules/theorem31.smk)."""

import math
from typing import Mapping

from algo_emu.specs import FIGURES, TABLES, ConfigError, Reads, Report, Spec, Target, check_split


def check(section: Mapping, config: Mapping) -> None:
    """Cross-field checks of the ``theorem31`` section (the schema's enum checks ``fs``); raise ConfigError naming the key."""
    if section["hidden"] % section["heads"]:
        raise ConfigError(f"theorem31.heads: {section['heads']} heads do not divide theorem31.hidden = {section['hidden']}")
    for p in section["p_sweep"]:
        if p < section["n_tokens"]:
            raise ConfigError(f"theorem31.p_sweep: p = {p} is smaller than theorem31.n_tokens = {section['n_tokens']}")
    check_split("theorem31", section["n_prompts"], section["test_fraction"])


def price(pricer, rule: str, wc: Mapping[str, str]) -> tuple[float, int]:
    """Seconds and steps of one training job (seeds x functions as members), interpolated in p; the weight-blind
    baseline's scaled by its measured ratio to the model's."""
    from algo_emu.cost import interp

    t = pricer.cfg["theorem31"]
    n_train = t["n_prompts"] - math.ceil(t["n_prompts"] * t["test_fraction"]) if t.get("test_fraction") \
        else t["n_prompts"]
    steps = math.ceil(n_train / t["batch_size"]) * t["epochs"]
    rows = pricer.rows("theorem31")
    ratio = pricer.seeds * len(t["fs"]) / rows[0]["shape"]["members"]  # members: seeds x functions
    n_eval = ratio * (t["n_prompts"] - n_train or t["n_prompts"]) / max(1, rows[0]["shape"]["extra"].get("n_test") or 1)
    sec = interp([(r["shape"]["p"], pricer.rescale(r, steps, ratio, n_eval)) for r in rows], int(wc["p"]))
    return sec * (pricer.blind_ratio("theorem31", lambda r: r["shape"]["p"]) if rule.endswith("blind") else 1), steps


SPEC = Spec(
    check=check,
    section="theorem31", label="E2",
    reads=(
        # the model and its weight-blind baseline read the same keys (the same budget)
        Reads("theorem31", "train", ("n_prompts", "n_tokens", "d", "hidden", "heads", "fs", "x_dist", "x_scale",
                                     "gd_eta", "epochs", "batch_size", "lr", "test_fraction", "eval_chunk",
                                     "checkpoint_every", "compile", "attention", "lr_schedule")),
        Reads("theorem31", "aggregate", ("fs", "p_sweep", "x_dist", "x_scale", "gd_eta", "n_prompts", "test_fraction",
                                         "n_tokens", "d", "hidden", "heads", "epochs", "batch_size", "lr")),
    ),
    targets=(
        Target("theorem31_table", "E2", "Theorem 3.1 emulation and the GD step of Corollary 3.1.2",
               (TABLES + "f_emulation.{csv,md,tex}", TABLES + "f_gd_step.{csv,md,tex}", TABLES + "theorem31_runs.csv"),
               aliases=("f_emulation_table",)),
        Target("theorem31_figure", "E2", "Theorem 3.1 figure (error per f and p)", (FIGURES + "f_emulation.{pdf,png}",),
               aliases=("f_emulation_figure",)),
        Target("theorem31_ablation", "E2", "prompt ablations of the frozen E2 model (w replaced; weight-blind baseline)",
               (TABLES + "f_emulation_ablation.{csv,md,tex}", TABLES + "f_emulation_ablation_runs.csv",
                FIGURES + "f_emulation_ablation.{pdf,png}"),
               aliases=("f_emulation_ablation",)),
    ),
    paper_scale={"n_prompts": 50_000, "epochs": 100},
    reference_scale={"n_prompts": 5_000, "epochs": 30},
    runs=("algo_emu.experiments.theorem31_tables:RUNS", "algo_emu.experiments.theorem31_tables:BLIND_RUNS"),
    training_rules=("theorem31_train", "theorem31_train_blind"),
    price=price,
    report=Report("E2 -- one softmax head emulating f(w^T x - y) x (Theorem 3.1)",
                  "algo_emu.experiments.theorem31_tables", ("f_emulation.csv", "f_gd_step.csv")),
)
