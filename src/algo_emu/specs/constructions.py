"""E5: hand-built frozen attention, Theorems 4.1/4.2 and Corollary 4.2.1; no training
(workflow/rules/constructions.smk)."""

from algo_emu.specs import FIGURES, TABLES, Reads, Report, Spec, Target

_HEAD = ("n", "d", "P", "beta_d2", "key_ratio", "grid_half_width", "instances", "x_scale", "distribution",
         "target_beta", "table", "end_tol")
_KINDS = "{beta,p,n,d,library,multistep}"

SPEC = Spec(
    section="constructions", label="E5",
    # variant = the table's kind
    reads=(
        Reads("constructions", "table", ("table", "end_tol"),
              extra={"beta": _HEAD + ("beta_study",), "p": _HEAD + ("p_study",), "n": _HEAD + ("n_study",),
                     "d": _HEAD + ("d_study",), "library": ("library",), "multistep": ("multistep",)}),
        Reads("constructions", "figure", ()),
    ),
    targets=(
        Target("construction_tables", "E5", "error studies (beta, p, n, d), the algorithm library, the multi-step run",
               (TABLES + f"construction_{_KINDS}.{{csv,md,tex}}",)),
        Target("construction_figures", "E5", "the same, as figures", (FIGURES + f"construction_{_KINDS}.{{pdf,png}}",)),
        # parts of the two above, each alone
        Target("construction_studies", "E5", "the error studies alone (tables and figures)",
               (TABLES + "construction_{beta,p,n,d}.csv", FIGURES + "construction_{beta,p,n,d}.{pdf,png}")),
        Target("construction_library", "E5", "the algorithm library (Theorem 4.2) table",
               (TABLES + "construction_library.{csv,md,tex}",)),
        Target("construction_library_all", "E5", "the algorithm library table and figure",
               (TABLES + "construction_library.{csv,md,tex}", FIGURES + "construction_library.{pdf,png}")),
        Target("construction_multistep", "E5", "the multi-step run (Corollary 4.2.1) table",
               (TABLES + "construction_multistep.{csv,md,tex}",)),
        Target("construction_multistep_all", "E5", "the multi-step run table and figure",
               (TABLES + "construction_multistep.{csv,md,tex}", FIGURES + "construction_multistep.{pdf,png}")),
    ),
    report=Report("E5 -- hand-built frozen attention (Theorems 4.1/4.2, Corollary 4.2.1)",
                  "algo_emu.experiments.constructions",
                  ("construction_library.csv", "construction_beta.csv", "construction_p.csv",
                   "construction_multistep.csv")),
)
