"""E6: the companion essay's claims (in-context learning as implicit Bayesian inference and implicit gradient
descent), not the paper's (workflow/rules/essay.smk)."""

from typing import Mapping

from algo_emu.specs import FIGURES, TABLES, ConfigError, Reads, Report, Spec, Target

_BASE = ("d", "k_max", "tau", "sigma")


def _variant(name: str) -> str:
    """The essay's model variants by what they read beyond the base model: ``M<m>`` -> diversity."""
    if name.startswith("M") and name[1:].isdigit():
        return "diversity"
    return name


def check(section: Mapping, config: Mapping) -> None:
    """Cross-field checks of the (schema-validated) ``essay`` section; raise ConfigError naming the key."""
    K = section["k_max"]
    m = section["model"]
    if m["d_model"] % m["heads"]:
        raise ConfigError(f"essay.model.heads: {m['heads']} heads do not divide essay.model.d_model = {m['d_model']}")
    ev = section["eval"]
    for k in ev["order_ks"]:
        if k > K:
            raise ConfigError(f"essay.eval.order_ks: {k} exceeds the trained context essay.k_max = {K}")
    if ev["outlier_k"] > K:
        raise ConfigError(f"essay.eval.outlier_k: {ev['outlier_k']} exceeds the trained context essay.k_max = {K}")
    if ev["fit_k_min"] > K - 2:
        raise ConfigError(f"essay.eval.fit_k_min: {ev['fit_k_min']} leaves fewer than 3 values of k <= essay.k_max = {K}")
    if section["tau"] not in ev["ood_tau"] and ev["ood_tau"]:
        raise ConfigError(f"essay.eval.ood_tau: must include the training prior's tau = {section['tau']} "
                          "(the in-distribution reference)")
    if section["seeds"] is None and config.get("seeds") is None:
        raise ConfigError("essay.seeds: null needs the top-level seeds")


def price(pricer, rule: str, wc: Mapping[str, str]) -> tuple[float, int]:
    """Seconds and steps of one training job: its variant's steps at the benchmark's seconds per step (the shallow
    model's row for the shallow variant, the main model's for the others)."""
    e = pricer.cfg["essay"]
    variant = wc["evariant"]
    what = "shallow" if variant == "shallow" else "main"
    rows = [r for r in pricer.rows("essay") if r["shape"]["setting"]["what"] == what] or pricer.rows("essay")
    steps = {"gaussian": e["train"]["steps"], "shallow": e["train"]["steps"],
             "narrow": e["narrow"]["finetune_steps"], "control": e["narrow"]["finetune_steps"]}.get(
        variant, e["diversity"]["steps"])
    return steps * rows[0]["measured"]["step_seconds"], steps


SPEC = Spec(
    check=check,
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
    price=price,
    report=Report("E6 -- claims of the companion essay (essay_claims.csv)", "algo_emu.experiments.essay_tables",
                  ("essay_claims.csv",)),
)
