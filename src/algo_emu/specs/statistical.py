"""E3: statistical algorithms (lasso, ridge, least squares, GD) from the prompt, Appendix C.1
(workflow/rules/statistical.smk)."""

from algo_emu.specs import FIGURES, TABLES, Reads, Report, Spec, Target

_DATA = ("n_context", "n_query", "d", "algorithms", "data_params")

SPEC = Spec(
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
    training_rules=("statistical_train", "statistical_train_blind"),
    report=Report("E3 -- statistical algorithms from the prompt (Appendix C.1)",
                  "algo_emu.experiments.statistical_tables", ("statistical_emulation.csv",)),
)
