"""E6: the companion essay's claims (in-context learning as implicit Bayesian inference and implicit gradient
descent), not the paper's (workflow/rules/essay.smk)."""

from algo_emu.specs import FIGURES, TABLES, Reads, Spec, Target

_BASE = ("d", "k_max", "tau", "sigma")


def _variant(name: str) -> str:
    """The essay's model variants by what they read beyond the base model: ``M<m>`` -> diversity."""
    if name.startswith("M") and name[1:].isdigit():
        return "diversity"
    return name


SPEC = Spec(
    section="essay", label="E6",
    # variant = the model variant (train) or the figure's kind (figure)
    reads=(
        Reads("essay", "equivalences", ("equivalence", "sigma", "tau")),
        Reads("essay", "train", _BASE + ("model", "train"),
              extra={"shallow": ("shallow_layers",), "diversity": ("diversity",), "narrow": ("narrow",),
                     "control": ("narrow",)}, variant=_variant),
        Reads("essay", "evaluate", _BASE + ("eval", "narrow")),
        Reads("essay", "claims", _BASE + ("eval", "model", "train", "equivalence", "shallow_layers", "diversity",
                                          "narrow")),
        Reads("essay", "figure", (), extra={"icl": _BASE + ("shallow_layers",)}),
    ),
    targets=(
        Target("essay_tables", "E6", "the essay's claims as measured verdicts; its float64 equivalences",
               (TABLES + "essay_claims.{csv,md,tex}", TABLES + "essay_curves.csv",
                TABLES + "essay_equivalences.{csv,md,tex}"),
               aliases=("essay_claims",)),
        Target("essay_figures", "E6", "in-context learning curves; equivalence gaps",
               (FIGURES + "essay_{icl,equivalences}.{pdf,png}",)),
    ),
    training_rules=("essay_train",),
)
