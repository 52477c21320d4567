"""E4: Ames Housing, ridge/lasso/least squares emulated on real data, Appendix C.2 (workflow/rules/ames.smk)."""

from typing import Mapping

from algo_emu.specs import FIGURES, TABLES, ConfigError, Reads, Report, Spec, Target

_REFERENCE_FIT = ("reference_alpha", "cv_folds", "ridge_log10_alpha_min", "ridge_log10_alpha_max", "ridge_n_alphas",
                  "lasso_n_alphas", "lasso_eps", "lasso_max_iter")
_POOL = ("pool_bootstraps", "pool_heldout_bootstraps", "pool_log10_alpha_min", "pool_log10_alpha_max",
         "pool_n_alphas", "pool_coef_scale_min", "pool_coef_scale_max", "pool_perturb_scale", "pool_perturb_rank",
         "pool_pairs_per_row", "pool_eval_pairs_per_row")


def check(section: Mapping, config: Mapping) -> None:
    """Cross-field checks of the ``ames`` section; raise ConfigError naming the key."""
    if section.get("hidden", "auto") != "auto" and section["hidden"] % section["heads"]:
        raise ConfigError(f"ames.heads: {section['heads']} heads do not divide ames.hidden = {section['hidden']}")


def price(pricer, rule: str, wc: Mapping[str, str]) -> tuple[float, int]:
    """Seconds and steps of one training job from the benchmark row of its mode and role (model or blind), its
    steps rescaled to the section's batch size and epochs."""
    a = pricer.cfg["ames"]
    role = "blind" if rule.endswith("blind") else "model"
    rows = [r for r in pricer.rows("ames", role) if r["shape"]["setting"]["mode"] == wc["ames_mode"]] \
        or pricer.rows("ames", role)
    row = rows[0]
    steps = row["shape"]["steps_per_epoch"] * row["shape"]["batch"] / a["batch_size"] * a["epochs"]
    return pricer.rescale(row, steps, pricer.seeds / row["shape"]["seeds"]), round(steps)


SPEC = Spec(
    check=check,
    section="ames", label="E4",
    reads=(
        Reads("ames", "download", ("source", "openml_data_id", "openml_sha256", "openml_timeout_s", "packaged_sha256",
                                   "local_sha256", "na_values")),
        Reads("ames", "prepare", ("na_values", "test_fraction", "drop_id_columns", "fit_statistics_on",
                                  "categories_from")),
        Reads("ames", "fit", _REFERENCE_FIT, extra={"corrected": _POOL}),  # variant: the mode
        Reads("ames", "train", ("heads", "p", "hidden", "epochs", "batch_size", "lr", "checkpoint_every",
                                "compile", "attention", "lr_schedule")),
    ),
    targets=(
        Target("ames_table", "E4", "Appendix C.2 Ames Housing table and its prompt ablations",
               (TABLES + "ames.{csv,md,tex}", TABLES + "ames_ablation.{csv,md,tex}", TABLES + "ames_runs.csv")),
        Target("ames_figure", "E4", "Appendix C.2 figures (emulation and ablations)",
               (FIGURES + "ames.{pdf,png}", FIGURES + "ames_ablation.{pdf,png}"), aliases=("ames_plot",)),
    ),
    paper_scale={"epochs": 300},
    reference_scale={"epochs": 30},
    runs=("algo_emu.experiments.ames_tables:RUNS",),
    training_rules=("ames_train", "ames_train_blind"),
    price=price,
    report=Report("E4 -- Ames Housing (Appendix C.2)",
                  "algo_emu.experiments.ames_tables", ("ames.csv",)),
)
