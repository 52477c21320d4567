"""Bad config is an error that names the key; good config gets the schema defaults."""

import pytest
import yaml

from algo_emu.config import ConfigError, load_config
from algo_emu.runtime import REPO_ROOT


def _write(tmp_path, cfg):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_shipped_configs_are_valid_and_get_defaults():
    for name in ("config/config.yaml", "config/quick.yaml", "tests/tiny.yaml"):
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
        ({"heads": {"epoch": 3}}, r"^heads: .*'epoch' was unexpected"),
        ({"seedz": [1]}, r"^config: .*'seedz' was unexpected"),
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
