"""Config loading and the semantic checks that JSON-schema cannot express.

The schemas live in ``workflow/schemas/`` (one file for the top level, one per
experiment section); :func:`load_config` validates a YAML file the same way the
workflow does (``workflow/rules/common.smk`` calls :func:`validate_sections`):
numbers written as ``1e-3`` (strings to YAML 1.1) become numbers where the schema
says number, unknown keys are errors, defaults are filled in, every error names
``section.key``, then :func:`check_config` runs the cross-field checks (each experiment's own, ``check`` of its
spec in :mod:`algo_emu.specs`).

This module is a leaf: importing it imports neither torch nor any experiment
module (validating a config, e.g. in every dry run or cluster job, must stay
cheap). Keep it that way; ``tests/test_config.py`` checks it.
"""

from __future__ import annotations

import copy
import functools
import glob
import logging
import os
import re
from pathlib import Path
from typing import Any

import yaml

from algo_emu.runtime import REPO_ROOT
from algo_emu.specs import SPECS, ConfigError  # noqa: F401  (ConfigError: re-exported)

log = logging.getLogger("algo_emu.config")

SCHEMA_DIR = REPO_ROOT / "workflow" / "schemas"
SECTIONS = tuple(s.section for s in SPECS)  # each validated by its schema (schema_file)


def schema_file(section: str) -> Path:
    """The schema of config section ``section``: its spec's ``schema``, else ``workflow/schemas/<section>.schema.yaml``."""
    spec = next((s for s in SPECS if s.section == section), None)
    return Path(spec.schema) if spec and spec.schema else SCHEMA_DIR / f"{section}.schema.yaml"



# ----------------------------------------------------------------------------- numbers written 1e-3

# A number as YAML 1.2 / JSON would read it; YAML 1.1 (PyYAML, snakemake) reads 1e-3 and 5e4 as strings.
_NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")


def _schema_types(schema: dict) -> set[str]:
    types: set[str] = set()
    for node in [schema, *schema.get("anyOf", []), *schema.get("oneOf", [])]:
        t = node.get("type") if isinstance(node, dict) else None
        types.update([t] if isinstance(t, str) else (t or []))
    return types


def coerce_numbers(data: Any, schema: dict) -> Any:
    """``data`` with numeric strings turned into numbers wherever ``schema`` expects a number.

    Only where the schema allows a number or integer and no string; an integer only when the
    value is whole (``5e4`` -> 50000). Recurses through ``properties``, ``additionalProperties``
    and ``items``; dicts and lists are changed in place (and returned).
    """
    if not isinstance(schema, dict):
        return data
    if isinstance(data, str):
        types = _schema_types(schema)
        if "string" in types or not types & {"number", "integer"} or not _NUMBER.match(data.strip()):
            return data
        value = float(data)
        if value.is_integer() and ("integer" in types or "." not in data and "e" not in data.lower()):
            return int(value)
        return value if "number" in types else data
    if isinstance(data, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, value in data.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                data[key] = coerce_numbers(value, sub)
    elif isinstance(data, list) and isinstance(schema.get("items"), dict):
        for i, value in enumerate(data):
            data[i] = coerce_numbers(value, schema["items"])
    return data


# ----------------------------------------------------------------------------- schema validation


def _default_filling_validator():
    """Draft 2020-12 validator that fills in ``default`` values, as snakemake.utils.validate does.

    The package validates with jsonschema directly so that it also runs where
    snakemake is not installed (e.g. a bare GPU machine).
    """
    from jsonschema import Draft202012Validator, validators

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for prop, sub in properties.items():
                if "default" in sub:
                    instance.setdefault(prop, sub["default"])
        yield from Draft202012Validator.VALIDATORS["properties"](validator, properties, instance, schema)

    return validators.extend(Draft202012Validator, {"properties": set_defaults})


def _resolve_refs(node: Any, base: Path) -> Any:
    """``node`` with every ``$ref: "<file>#/<pointer>"`` (a file beside ``base``) replaced by the
    node it names, merged under the keys written beside the ``$ref`` (those win)."""
    if isinstance(node, list):
        return [_resolve_refs(x, base) for x in node]
    if not isinstance(node, dict):
        return node
    node = {k: _resolve_refs(v, base) for k, v in node.items()}
    ref = node.pop("$ref", None)
    if ref is None:
        return node
    file, _, pointer = str(ref).partition("#")
    if not file:
        raise ConfigError(f"{base}: $ref {ref!r}: only references to another schema file are resolved")
    target: Any = _resolve_refs(_schema_file(base.parent / file), base.parent / file)
    for part in [p for p in pointer.split("/") if p]:
        if not isinstance(target, dict) or part not in target:
            raise ConfigError(f"{base}: $ref {ref!r} names nothing in {base.parent / file}")
        target = target[part]
    return {**target, **node}


@functools.lru_cache(maxsize=None)
def _schema_file(path: Path) -> dict:
    try:
        return yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"schema file not found: {path}") from None


@functools.lru_cache(maxsize=None)
def _resolved_schema(path: Path) -> dict:
    return _resolve_refs(_schema_file(path), path)


def load_schema(schema_file: str | Path) -> dict:
    """The schema in ``schema_file`` with its ``$ref``s to other schema files resolved (a fresh copy)."""
    return copy.deepcopy(_resolved_schema(Path(schema_file).resolve()))


def schema_defaults(section: str) -> dict:
    """The defaults of a config section (``workflow/schemas/<section>.schema.yaml``), nested ones filled
    in: the only place a default is written (Python modules read them here). A fresh copy, safe to change."""
    return copy.deepcopy(_section_defaults(section))


@functools.lru_cache(maxsize=None)
def _section_defaults(section: str) -> dict:
    out: dict = {}
    _validate(out, schema_file(section), section)
    return out


def _validate(data: dict, schema_file: Path, where: str) -> None:
    """Coerce numbers, fill defaults and validate ``data`` in place; errors name ``where.key``."""
    import jsonschema

    schema = load_schema(schema_file)
    _renamed_keys(data, schema, where)
    coerce_numbers(data, schema)
    try:
        _default_filling_validator()(schema).validate(data)
    except jsonschema.ValidationError as exc:
        path = ".".join(str(p) for p in exc.absolute_path)
        key = ".".join(k for k in (where, path) if k)
        if exc.validator == "additionalProperties" and isinstance(exc.instance, dict):
            raise ConfigError("\n".join(_unknown_keys(key, exc.instance, exc.schema))) from None
        raise ConfigError(f"{key or 'config'}: {exc.message}") from None


def _renamed_keys(data: dict, schema: dict, where: str) -> None:
    """A key under its former name (``x-formerly: <old name>`` on the new key in the schema) is read as the new one,
    with a warning naming both, so configs and committed sets written before the rename still load; both names at
    once is an error naming them."""
    for new, spec in schema.get("properties", {}).items():
        old = spec.get("x-formerly") if isinstance(spec, dict) else None
        if old is None or old not in data:
            continue
        names = [".".join(k for k in (where, n) if k) for n in (old, new)]
        if new in data:
            raise ConfigError(f"{names[0]}: renamed {names[1]}, which is also given; keep {names[1]} only")
        log.warning("%s is now %s: read as %s", names[0], names[1], names[1])
        data[new] = data.pop(old)


def _unknown_keys(key: str, instance: dict, schema: dict) -> list[str]:
    """``<key>.<name>: unknown key`` for each key of ``instance`` its (``additionalProperties: false``) schema
    does not declare, with the nearest declared name when one is close (a typo)."""
    import difflib

    known = list(schema.get("properties", {}))
    patterns = [re.compile(p) for p in schema.get("patternProperties", {})]
    lines = []
    for name in instance:
        if name in known or any(p.search(str(name)) for p in patterns):
            continue
        near = difflib.get_close_matches(str(name), known, n=1)
        hint = f" (did you mean {'.'.join(k for k in (key, near[0]) if k)}?)" if near else ""
        lines.append(f"{'.'.join(k for k in (key, str(name)) if k)}: unknown key{hint}")
    return lines


def validate_section(section: str, values: dict | None) -> dict:
    """One section as a step receives it (``params`` of its job, or a caller's dict): a copy with the schema's defaults
    filled, validated against ``workflow/schemas/<section>.schema.yaml`` and the section's own cross-field
    checks; :class:`ConfigError` names the key (``ames.heads: ...``)."""
    out = copy.deepcopy(dict(values or {}))
    _validate(out, schema_file(section), section)
    check_config({section: out}, gpu_check=False)
    return out


def validate_sections(config: dict, gpu_check: bool = True) -> dict:
    """Validate the top level and every experiment section in place (defaults filled), then
    :func:`check_config`. ``gpu_check``: also refuse ``device: cuda`` where no GPU is visible."""
    top = {k: v for k, v in config.items() if k not in SECTIONS}  # each section is checked by its own schema below
    _validate(top, SCHEMA_DIR / "config.schema.yaml", "")
    config.update(top)  # with the top level's defaults
    for section in SECTIONS:
        config.setdefault(section, {})
        if not isinstance(config[section], dict):
            raise ConfigError(f"{section}: must be a mapping of keys, got {type(config[section]).__name__}")
        _validate(config[section], schema_file(section), section)
    check_config(config, gpu_check=gpu_check)
    return config


def load_config(path: str | Path, overrides: dict | None = None, gpu_check: bool = True) -> dict:
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
    return validate_sections(config, gpu_check=gpu_check)


# ----------------------------------------------------------------------------- device


def visible_gpus() -> int | None:
    """How many GPUs this process could use, found without importing torch; None when unsure.

    0 when ``CUDA_VISIBLE_DEVICES`` hides every GPU, or when there is no NVIDIA device node
    (``/dev/nvidia<N>``) and no other GPU interface (``/dev/dxg`` of WSL2, ``/dev/kfd`` of
    ROCm, which are reported as None: present, count unknown).
    """
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        ids = [x.strip() for x in cvd.split(",") if x.strip()]
        if not ids or ids[0] == "-1":
            return 0
    nodes = [p for p in glob.glob("/dev/nvidia*") if re.fullmatch(r"/dev/nvidia\d+", p)]
    if not nodes:
        if os.path.exists("/dev/dxg") or os.path.exists("/dev/kfd"):
            return None
        return 0
    return len(ids) if cvd is not None else len(nodes)


def check_device(device: str) -> None:
    """Refuse ``device: cuda`` / ``cuda:N`` where no GPU (or no GPU N) is visible."""
    m = re.fullmatch(r"cuda(?::(\d+))?", str(device))
    if not m:
        return
    n = visible_gpus()
    if n == 0:
        raise ConfigError(
            f"device: {device!r} but no GPU is visible on this machine (CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')!r}, no /dev/nvidia<N>); "
            "use device: auto (CUDA when present, else CPU) or cpu"
        )
    if n is not None and m.group(1) is not None and int(m.group(1)) >= n:
        raise ConfigError(f"device: {device!r} but only {n} GPU(s) are visible (cuda:0 .. cuda:{n - 1})")


# ----------------------------------------------------------------------------- cross-field checks


def check_config(config: dict[str, Any], gpu_check: bool = True) -> None:
    """Cross-field checks (the device; each section's by its spec's ``check``); raise :class:`ConfigError` naming the key.

    ``gpu_check``: refuse ``device: cuda`` where no GPU is visible. The workflow passes
    False while parsing (a cluster's submit host may have no GPU) and checks the device
    before the first job of a local run (``onstart`` in workflow/rules/common.smk).
    """
    if gpu_check:
        check_device(config.get("device", "auto"))
    for spec in SPECS:  # each experiment's own cross-field checks (its spec's ``check``)
        if spec.check and config.get(spec.section):
            spec.check(config[spec.section], config)
