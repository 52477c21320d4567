"""E1: attention emulating an attention head, the heads table (Theorem 4.1 ablation; workflow/rules/heads.smk)."""

from algo_emu.specs import FIGURES, TABLES, Reads, Report, Spec, Target

_DATA = ("n_prompts", "n_tokens", "d", "target_hidden")
_TRAIN = _DATA + ("hidden", "epochs", "batch_size", "lr", "test_fraction", "eval_every", "eval_batch_size",
                  "checkpoint_every", "compile", "attention", "lr_schedule")
_SWEEPS = ("protocols", "heads_sweep", "p_heads_sweep", "p_sweep", "heads_p_sweep", "target")

SPEC = Spec(
    section="heads", label="E1",
    reads=(
        Reads("heads", "data", _DATA),
        Reads("heads", "train", _TRAIN, extra={"independent": ("target",)}),  # variant: the protocol
        Reads("heads", "aggregate", _SWEEPS + ("test_fraction", "eval_batch_size", "n_prompts", "n_tokens", "d",
                                               "hidden", "epochs", "batch_size", "lr")),
        Reads("heads", "fit", _SWEEPS),
        # the variants' table reads each variant's records; the sweep's p places the paper's value (their training
        # jobs read the train keys through algo_emu.experiments.heads_settings.variant_train_params)
        Reads("heads", "variants", ("variants", "p_heads_sweep")),
        # the convergence check's table (its training jobs read the train keys with each candidate's own epochs, lr
        # and schedule: algo_emu.experiments.heads_settings.candidate_train_params), and the converged table, its
        # gate and fit
        Reads("heads", "convergence", ("convergence", "heads_sweep", "p_heads_sweep")),
        Reads("heads", "converged", ("converged", "convergence", "heads_sweep", "p_heads_sweep")),
    ),
    targets=(
        Target("heads_table", "E1", "heads table (MSE per H; Theorem 4.1 ablation) and the O(1/H) fit",
               (TABLES + "heads_vs_mse.{csv,md,tex}", TABLES + "heads_fit.json", TABLES + "heads_runs.csv")),
        Target("heads_figure", "E1", "heads figure (MSE vs H)", (FIGURES + "heads_vs_mse.{pdf,png}",)),
        Target("prompt_length_table", "E1", "prompt-length sweep (published code; no number in the paper)",
               (TABLES + "prompt_length_vs_mse.{csv,md,tex}",)),
        Target("prompt_length_figure", "E1", "prompt-length figure (MSE vs p)",
               (FIGURES + "prompt_length_vs_mse.{pdf,png}",)),
    ),
    paper_scale={"n_prompts": 50_000, "epochs": 50},
    reference_scale={"n_prompts": 50_000, "epochs": 10},
    training_rules=("heads_train",),
    rule_files=("heads.smk", "heads_converged.smk"),
    report=Report("E1 -- attention emulating an attention head (Theorem 4.1 ablation; the headline table)",
                  "algo_emu.experiments.heads_tables",
                  ("heads_vs_mse.csv", "prompt_length_vs_mse.csv", "heads_fit.json")),
)
