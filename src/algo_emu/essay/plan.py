"""E6's plan -- which variants and seeds a configuration trains -- importable without torch (the workflow parses it)."""

from __future__ import annotations


def variant_names(params: dict) -> list[str]:
    names = ["gaussian"]
    if params["shallow_layers"]:
        names.append("shallow")
    names += [f"M{m}" for m in params["diversity"]["M"]]
    if params["narrow"]["finetune_steps"] > 0:
        names += ["narrow", "control"]
    return names


def variant_init(variant: str) -> str | None:
    """The variant a variant is fine-tuned from (narrow and control start from the trained gaussian model), or None."""
    return "gaussian" if variant in ("narrow", "control") else None


def essay_seeds(config: dict) -> list[int]:
    """E6's seeds: ``essay.seeds``, or the top-level ``seeds`` when it is null."""
    s = config["essay"].get("seeds")
    return list(config["seeds"] if s is None else s)
