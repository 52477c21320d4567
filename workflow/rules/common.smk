# Shared set-up for every experiment's rules: config validation, the Python
# that runs the package, the list of final outputs, wildcard constraints.
import json
import shlex
import sys

from snakemake.utils import validate


from algo_emu.config import SECTIONS, check_config  # noqa: E402

validate(config, "../schemas/config.schema.yaml")
# Each experiment's section has its own schema (defaults are filled in by validate).
for _section in SECTIONS:
    config.setdefault(_section, {})
    validate(config[_section], f"../schemas/{_section}.schema.yaml")

check_config(config)  # semantic checks that JSON-schema cannot express

# The interpreter snakemake runs under has the package installed (make venv).
PY = shlex.quote(sys.executable)
SEEDS = list(config["seeds"])
DEVICE = config["device"]

# Final outputs; each experiment's .smk appends its own, `rule all` requests them.
ALL_OUTPUTS = []


def as_json(obj):
    """A config section as one shell-quoted JSON argument (changes trigger reruns via params)."""
    return shlex.quote(json.dumps(obj, sort_keys=True))


wildcard_constraints:
    seed=r"\d+",
    heads=r"\d+",
    p=r"\d+",
