"""Bad config is an error that names the key; good config gets the schema defaults."""

import json

import pytest
import yaml

from algo_emu.config import ConfigError, load_config
from algo_emu.runtime import REPO_ROOT


def _write(tmp_path, cfg):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_shipped_configs_are_valid_and_get_defaults():
    for name in ("config/config.yaml", "config/quick.yaml", "config/reference.yaml", "tests/tiny.yaml"):
        cfg = load_config(REPO_ROOT / name)
        assert cfg["heads"]["eval_batch_size"] == 32 and cfg["heads"]["target"] in ("paper", "reference_code")
    paper = load_config(REPO_ROOT / "config/config.yaml")
    assert paper["seeds"] == list(range(10)) and paper["heads"]["n_prompts"] == 50000
    assert paper["heads"]["heads_sweep"] == [1, 2, 4, 6, 8, 12] and paper["heads"]["epochs"] == 50


def test_empty_config_takes_paper_defaults(tmp_path):
    cfg = load_config(_write(tmp_path, {}))
    assert cfg["device"] == "auto" and cfg["heads"]["p_sweep"] == list(range(20, 111, 10))


@pytest.mark.parametrize(
    "cfg,match",
    [
        ({"heads": {"epochs": -1}}, r"heads.epochs: -1 is less than the minimum of 1"),
        ({"heads": {"epoch": 3}}, r"^heads.epoch: unknown key \(did you mean heads.epochs\?\)$"),
        ({"heads": {"hiden_width": 3}}, r"^heads.hiden_width: unknown key$"),
        ({"seedz": [1]}, r"^seedz: unknown key \(did you mean seeds\?\)$"),
        ({"ames": {"total_tokens": 100, "p": 100}},
         r"^ames.total_tokens: renamed ames.p, which is also given; keep ames.p only$"),
        ({"heads": {"heads_sweep": [1, 5]}}, r"heads.heads_sweep: 5 heads do not divide heads.hidden = 48"),
        ({"heads": {"p_sweep": [10, 30]}}, r"heads.p_sweep: p = 10 is smaller than heads.n_tokens = 20"),
        ({"heads": {"target": "rows"}}, r"heads.target: 'rows' is not one of"),
        ({"device": "tpu"}, r"^device: 'tpu' does not match"),
        ({"heads": {"n_prompts": 3, "test_fraction": 0.1}}, r"heads.test_fraction"),
    ],
)
def test_bad_config_names_the_key(tmp_path, cfg, match):
    with pytest.raises(ConfigError, match=match):
        load_config(_write(tmp_path, cfg))


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("heads: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


# ----------------------------------------------------------------------------- bad configs name the key


def test_config_layer_imports_no_torch():
    import subprocess
    import sys

    code = ("import sys, algo_emu.config, algo_emu.runtime; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('algo_emu.experiments')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_single_value_heads_sweep_is_refused_before_any_job(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, {"heads": {"heads_sweep": [3], "hidden": 48}}))
    assert str(info.value) == ("heads.heads_sweep: [3] has one H value; the O(1/H) fit (heads_fit: MSE = a + b/H "
                               "and MSE ~ H^-alpha) needs at least two H values")


@pytest.mark.parametrize("section", ["heads", "theorem31", "statistical", "ames"])
def test_schema_errors_name_the_section(tmp_path, section):
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, {section: {"epochs": 0}}))
    assert str(info.value) == f"{section}.epochs: 0 is less than the minimum of 1"


def test_numbers_written_with_an_exponent_are_numbers(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("heads:\n  lr: 1e-3\n  n_prompts: 5e2\nstatistical:\n  lr: 2E-4\n"
                    "  data_params: {fitted: {lasso_tol: 1e-6}}\nconstructions:\n  beta_study: {beta_d2: [1e-1, 5e-1]}\n")
    assert yaml.safe_load(path.read_text())["heads"]["lr"] == "1e-3"  # what YAML 1.1 makes of it
    cfg = load_config(path)
    assert cfg["heads"]["lr"] == 0.001 and isinstance(cfg["heads"]["lr"], float)
    assert cfg["heads"]["n_prompts"] == 500 and isinstance(cfg["heads"]["n_prompts"], int)
    assert cfg["statistical"]["lr"] == 2e-4 and cfg["statistical"]["data_params"]["fitted"]["lasso_tol"] == 1e-6
    assert cfg["constructions"]["beta_study"]["beta_d2"] == [0.1, 0.5]
    # only where the schema says number: a string key keeps its text, a non-whole integer is still refused
    path.write_text("ames:\n  source: 1e3.csv\nheads:\n  n_prompts: 5.05e1\n")
    with pytest.raises(ConfigError, match=r"^heads.n_prompts: '5.05e1' is not of type 'integer'"):
        load_config(path)


def test_cuda_without_a_visible_gpu_is_refused_naming_device(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    for device in ("cuda", "cuda:1"):
        with pytest.raises(ConfigError) as info:
            load_config(_write(tmp_path, {"device": device}))
        assert str(info.value).startswith(f"device: '{device}' but no GPU is visible on this machine")
    assert load_config(_write(tmp_path, {"device": "auto"}))["device"] == "auto"
    assert load_config(_write(tmp_path, {"device": "cuda"}), gpu_check=False)["device"] == "cuda"


def test_statistical_checks_without_the_data_layer(tmp_path):
    from algo_emu.specs.statistical import ALIASES as STATISTICAL_ALIASES
    from algo_emu.data import statistical as st
    from algo_emu.data import theorem31 as t31

    assert STATISTICAL_ALIASES == st.ALIASES
    schema = yaml.safe_load((REPO_ROOT / "workflow/schemas/theorem31.schema.yaml").read_text())
    assert sorted(schema["properties"]["fs"]["items"]["enum"]) == sorted(t31.F_REGISTRY)
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, {"statistical": {"algorithms": {"fitted": ["ols", "linear"]}}}))
    assert str(info.value) == "statistical.algorithms.fitted: algorithm 'linear' listed twice (as 'ols', with 'ols')"


def _snakemake(workdir, config_text, *args, env=None):
    import os
    import subprocess
    import sys

    cfg = workdir / "c.yaml"
    cfg.write_text(config_text)
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(REPO_ROOT / "Snakefile"), "--directory", str(workdir),
         "--configfile", str(cfg), "--cores", "1", *args],
        capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})},
    )


def test_config_errors_through_snakemake(tmp_path):
    """What a snakemake user sees: the section named, 1e-3 accepted, cuda refused before any job."""
    target = "data/heads/seed0/dataset.pt"  # the config is validated while parsing, whatever the target
    bad = _snakemake(tmp_path, "theorem31:\n  epochs: 0\n", target, "-n")
    assert bad.returncode != 0 and "theorem31.epochs: 0 is less than the minimum of 1" in bad.stderr + bad.stdout
    ok = _snakemake(tmp_path, "heads:\n  lr: 1e-3\n", target, "-n")
    assert ok.returncode == 0, ok.stderr[-2000:]
    one = _snakemake(tmp_path, "heads:\n  heads_sweep: [3]\n  hidden: 48\n", target, "-n")
    assert one.returncode != 0 and "heads.heads_sweep: [3] has one H value" in one.stderr + one.stdout
    cuda = _snakemake(tmp_path, "device: cuda\nseeds: [0]\n", target,
                      env={"CUDA_VISIBLE_DEVICES": ""})
    assert cuda.returncode != 0 and "device: 'cuda' but no GPU is visible" in cuda.stderr + cuda.stdout
    assert not (tmp_path / "data").exists()  # refused before the first job


# ----------------------------------------------------------------------------- defaults only in the schemas


TRAINED_SECTIONS = ("heads", "theorem31", "statistical", "ames")
TRAINING_KEYS = ("epochs", "batch_size", "lr", "checkpoint_every", "compile", "attention", "lr_schedule")


def test_training_keys_come_from_one_shared_schema():
    from algo_emu.config import SCHEMA_DIR, load_schema

    shared = yaml.safe_load((SCHEMA_DIR / "training.schema.yaml").read_text())["$defs"]
    assert tuple(shared) == TRAINING_KEYS
    for section in TRAINED_SECTIONS:
        raw = yaml.safe_load((SCHEMA_DIR / f"{section}.schema.yaml").read_text())["properties"]
        resolved = load_schema(SCHEMA_DIR / f"{section}.schema.yaml")["properties"]
        for key in TRAINING_KEYS:
            assert raw[key]["$ref"] == f"training.schema.yaml#/$defs/{key}", (section, key)
            # only a default or a description may be stated beside the $ref; the constraints are shared
            assert set(raw[key]) <= {"$ref", "default", "description"}, (section, key)
            assert {k: v for k, v in resolved[key].items() if k not in ("default", "description")} == \
                {k: v for k, v in shared[key].items() if k not in ("default", "description")}, (section, key)
        assert resolved["attention"]["enum"] == ["auto", "matmul", "sdpa", "fused", "kernel"]   # ames had lost fused


@pytest.mark.parametrize("section", TRAINED_SECTIONS)
def test_shared_training_keys_are_checked_coerced_and_defaulted_per_section(tmp_path, section):
    for key, bad in (("epochs", 0), ("batch_size", 1.5), ("lr", 0), ("checkpoint_every", 0), ("compile", "yes"),
                     ("attention", "flash"), ("lr_schedule", "linear")):
        with pytest.raises(ConfigError) as info:
            load_config(_write(tmp_path, {section: {key: bad}}), gpu_check=False)
        assert str(info.value).startswith(f"{section}.{key}: "), str(info.value)
    got = load_config(_write(tmp_path, {section: {"lr": "1e-2"}}), gpu_check=False)[section]
    assert got["lr"] == 0.01   # a $ref'd number written 1e-2 is still a number
    # the defaults stated in training.schema.yaml are filled in, and a section's own default wins
    assert (got["batch_size"], got["compile"], got["attention"], got["lr_schedule"]) == (32, False, "auto", "constant")
    assert (got["epochs"], got["checkpoint_every"]) == {
        "heads": (50, 1), "theorem31": (100, 1), "statistical": (300, 1), "ames": (300, 10)}[section]


def test_steps_that_read_their_section_take_it_whole_without_defaults():
    """A default is written once, in the schema, and filled once, when the config is loaded: every step that reads
    its section (a ``PARAMS_OF`` entry) requires ``params``, so no module can fill a default of its own again."""
    import importlib
    import inspect

    from algo_emu.cli import EXPERIMENTS

    checked = []
    for section, module in EXPERIMENTS.items():
        mod = importlib.import_module(module)
        for step in getattr(mod, "PARAMS_OF", {}):
            param = inspect.signature(mod.STEPS[step]).parameters["params"]
            assert param.default is inspect.Parameter.empty, f"{section} {step}: params has a default"
            checked.append(f"{section} {step}")
    assert {"ames download", "ames prepare", "ames fit", "ames train", "heads train", "theorem31 train"} <= set(checked)


def test_schema_defaults_are_fresh_copies_of_the_filled_section():
    from algo_emu.config import schema_defaults

    first = schema_defaults("constructions")
    assert first["beta_study"]["beta_d2"][0] == 0.01 and first["library"]["P"] == 321   # nested defaults filled
    first["library"]["P"] = -1
    assert schema_defaults("constructions")["library"]["P"] == 321
    from algo_emu.constructions.interpreter import DEFAULT_END_TOL

    assert first["end_tol"] == DEFAULT_END_TOL   # the interpreter's own fallback, used without a config


def test_a_renamed_key_is_read_under_its_new_name_with_a_warning(caplog):
    """Configs written before ames.total_tokens was renamed ames.p (the committed sets' among them) still load: the
    old key is read as the new one, and the log says so."""
    from algo_emu.config import validate_section

    with caplog.at_level("WARNING", logger="algo_emu.config"):
        got = validate_section("ames", {"total_tokens": 7})
    assert got["p"] == 7 and "total_tokens" not in got
    assert "ames.total_tokens is now ames.p: read as ames.p" in caplog.text
    assert validate_section("ames", {})["p"] == 100  # the schema's default, as before
