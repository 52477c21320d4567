"""Config loading and the semantic checks that JSON-schema cannot express.

The schemas live in ``workflow/schemas/`` (one file for the top level, one per
experiment section); :func:`load_config` validates a YAML file the same way
the workflow does (``snakemake.utils.validate``: unknown keys are errors,
defaults are filled in), then runs :func:`check_config`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from algo_emu.runtime import REPO_ROOT

SCHEMA_DIR = REPO_ROOT / "workflow" / "schemas"
SECTIONS = ("heads", "ames", "constructions", "theorem31", "statistical")  # each validated by workflow/schemas/<section>.schema.yaml


class ConfigError(ValueError):
    """A config value is wrong; the message names the key."""


def _default_filling_validator():
    """Draft 2020-12 validator that fills in ``default`` values, as snakemake.utils.validate does.

    The package validates with jsonschema directly so that it also runs where
    snakemake is not installed (e.g. the lent GPU machine).
    """
    from jsonschema import Draft202012Validator, validators

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for prop, sub in properties.items():
                if "default" in sub:
                    instance.setdefault(prop, sub["default"])
        yield from Draft202012Validator.VALIDATORS["properties"](validator, properties, instance, schema)

    return validators.extend(Draft202012Validator, {"properties": set_defaults})


def _validate(data: dict, schema_file: Path, where: str) -> None:
    import jsonschema

    schema = yaml.safe_load(schema_file.read_text())
    try:
        _default_filling_validator()(schema).validate(data)
    except jsonschema.ValidationError as exc:
        path = ".".join(str(p) for p in exc.absolute_path)
        key = ".".join(k for k in (where, path) if k) or "config"
        raise ConfigError(f"{key}: {exc.message}") from None


def validate_sections(config: dict) -> dict:
    """Validate the top level and every experiment section in place (defaults filled)."""
    _validate(config, SCHEMA_DIR / "config.schema.yaml", "")
    for section in SECTIONS:
        config.setdefault(section, {})
        _validate(config[section], SCHEMA_DIR / f"{section}.schema.yaml", section)
    check_config(config)
    return config


def load_config(path: str | Path, overrides: dict | None = None) -> dict:
    path = Path(path)
    try:
        config = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    for key, value in (overrides or {}).items():
        config[key] = value
    return validate_sections(config)


def check_config(config: dict[str, Any]) -> None:
    """Cross-field checks; raise :class:`ConfigError` naming the key."""
    from algo_emu.experiments import statistical, theorem31  # their checks live beside each experiment

    theorem31.check_section(config.get("theorem31", {}))
    statistical.check_section(config.get("statistical", {}))
    heads = config.get("heads", {})
    if heads:
        hidden = heads["hidden"]
        for H in list(heads["heads_sweep"]) + [heads["heads_p_sweep"]]:
            if hidden % H:
                key = "heads.heads_sweep" if H in heads["heads_sweep"] else "heads.heads_p_sweep"
                raise ConfigError(f"{key}: {H} heads do not divide heads.hidden = {hidden}")
        n = heads["n_tokens"]
        for p in list(heads["p_sweep"]) + [heads["p_heads_sweep"]]:
            if p < n:
                key = "heads.p_sweep" if p in heads["p_sweep"] else "heads.p_heads_sweep"
                raise ConfigError(f"{key}: p = {p} is smaller than heads.n_tokens = {n}")
        n_test = round(heads["n_prompts"] * heads["test_fraction"])
        if n_test < 1 or n_test >= heads["n_prompts"]:
            raise ConfigError(
                f"heads.test_fraction: {heads['test_fraction']} of heads.n_prompts = {heads['n_prompts']} "
                "leaves an empty train or test split"
            )
    ames = config.get("ames", {})
    if ames and ames.get("hidden", "auto") != "auto" and ames["hidden"] % ames["heads"]:
        raise ConfigError(f"ames.heads: {ames['heads']} heads do not divide ames.hidden = {ames['hidden']}")
