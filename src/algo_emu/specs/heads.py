"""E1: attention emulating an attention head, the heads table (Theorem 4.1 ablation; workflow/rules/heads.smk)."""

import math
from typing import Mapping

from algo_emu.specs import FIGURES, TABLES, ConfigError, Reads, Report, Spec, Target, check_split

_DATA = ("n_prompts", "n_tokens", "d", "target_hidden")
_TRAIN = _DATA + ("hidden", "epochs", "batch_size", "lr", "test_fraction", "eval_every", "eval_batch_size",
                  "checkpoint_every", "compile", "attention", "lr_schedule")
_SWEEPS = ("protocols", "heads_sweep", "p_heads_sweep", "p_sweep", "heads_p_sweep", "target")


def check(heads: Mapping, config: Mapping) -> None:
    """Cross-field checks of the (schema-validated) ``heads`` section; raise ConfigError naming the key."""
    hidden = heads["hidden"]
    for H in list(heads["heads_sweep"]) + [heads["heads_p_sweep"]]:
        if hidden % H:
            key = "heads.heads_sweep" if H in heads["heads_sweep"] else "heads.heads_p_sweep"
            raise ConfigError(f"{key}: {H} heads do not divide heads.hidden = {hidden}")
    if len(set(heads["heads_sweep"])) < 2:
        raise ConfigError(
            f"heads.heads_sweep: {list(heads['heads_sweep'])} has one H value; the O(1/H) fit "
            "(heads_fit: MSE = a + b/H and MSE ~ H^-alpha) needs at least two H values"
        )
    n = heads["n_tokens"]
    for p in list(heads["p_sweep"]) + [heads["p_heads_sweep"]]:
        if p < n:
            key = "heads.p_sweep" if p in heads["p_sweep"] else "heads.p_heads_sweep"
            raise ConfigError(f"{key}: p = {p} is smaller than heads.n_tokens = {n}")
    check_split("heads", heads["n_prompts"], heads["test_fraction"])
    names: set[str] = set()
    for v in heads.get("variants") or []:
        where = f"heads.variants[{v['name']}]"
        if v["name"] in names:
            raise ConfigError(f"{where}.name: the name {v['name']!r} is used by two variants")
        names.add(v["name"])
        if hidden % v["heads"]:
            raise ConfigError(f"{where}.heads: {v['heads']} heads do not divide heads.hidden = {hidden}")
        if v["p"] < n:
            raise ConfigError(f"{where}.p: p = {v['p']} is smaller than heads.n_tokens = {n}")
    convergence = heads.get("convergence") or {}
    names = set()
    for c in convergence.get("candidates") or []:
        if c["name"] in names:
            raise ConfigError(f"heads.convergence.candidates[{c['name']}].name: the name {c['name']!r} is used by two "
                              "candidates")
        names.add(c["name"])
    converged = heads.get("converged") or {}
    if convergence and converged and converged["protocol"] not in names:
        raise ConfigError(f"heads.converged.protocol: {converged['protocol']!r} is not a candidate of "
                          f"heads.convergence.candidates (configured: {sorted(names)})")


def _setting(pricer, rule: str, wc: Mapping[str, str]) -> tuple[Mapping, int, int, int]:
    """(train params, H, p, seeds) of a training job: the sweep's, a variant's, or a convergence candidate's (its
    epochs, lr and schedule in place of the section's; the selection's seeds)."""
    from algo_emu.experiments import heads_settings as hs  # (torch-free)

    h = pricer.cfg["heads"]
    if rule == "heads_variant_train":
        v = hs.variant(h, wc["variant"])
        return hs.variant_train_params(h, v["name"]), int(v["heads"]), int(v["p"]), len(v["seeds"])
    if rule == "heads_convergence_train":
        prm = hs.candidate_train_params(h, wc["candidate"], wc["budget"], "published")
        return prm, int(wc["heads"]), int(wc["p"]), len(h["convergence"]["seeds"])
    if rule == "heads_converged_train":
        prm = hs.candidate_train_params(h, wc["candidate"], "x1", wc["protocol"])
        return prm, int(wc["heads"]), int(wc["p"]), pricer.seeds
    return h, int(wc["heads"]), int(wc["p"]), pricer.seeds


def price(pricer, rule: str, wc: Mapping[str, str]) -> tuple[float, int]:
    """Seconds and steps of one training job: its seeds as members at H heads and prompt length p, trained as its
    params say; the benchmark's rows at the same H (else the nearest H), interpolated in p."""
    from algo_emu.cost import interp

    h, H, p, seeds = _setting(pricer, rule, wc)
    rows = pricer.rows("heads")
    same_h = [r for r in rows if r["shape"]["heads"] == H]
    if not same_h:
        H = min({r["shape"]["heads"] for r in rows}, key=lambda x: (abs(x - H), x))
        same_h = [r for r in rows if r["shape"]["heads"] == H]
    n_train = h["n_prompts"] - math.ceil(h["n_prompts"] * h["test_fraction"])
    steps = math.ceil(n_train / h["batch_size"]) * h["epochs"]
    ratio = seeds / same_h[0]["shape"]["seeds"]
    row = same_h[0]["shape"]

    def evals(epochs, every):  # evaluations of the held-out set per job (every `every` epochs, and the last)
        return math.ceil(epochs / every) if every else 1
    n_eval = (ratio * (h["n_prompts"] - n_train) / max(1, row["extra"].get("n_test") or 1)
              * evals(h["epochs"], h.get("eval_every")) / evals(row["epochs"], row["extra"].get("eval_every")))
    return interp([(r["shape"]["p"], pricer.rescale(r, steps, ratio, n_eval)) for r in same_h], p), steps


SPEC = Spec(
    check=check,
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
    runs=("algo_emu.experiments.heads_tables:RUNS",),
    training_rules=("heads_train", "heads_variant_train", "heads_convergence_train", "heads_converged_train"),
    price=price,
    rule_files=("heads.smk", "heads_converged.smk"),
    report=Report("E1 -- attention emulating an attention head (Theorem 4.1 ablation; the headline table)",
                  "algo_emu.experiments.heads_tables",
                  ("heads_vs_mse.csv", "prompt_length_vs_mse.csv", "heads_fit.json")),
)
