"""A smoke-scale run says so in the first line of its reports; the reference and the paper's scale do not.

Decided from the resolved config (budgets below the reference scale's), never from the config file's name: the
replication report (results/replication.md), the HTML report's opening (workflow/report/workflow.rst) and the
replication caption (workflow/report/replication.rst) agree for every committed config.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import jinja2
import pytest
import yaml

from algo_emu.config import load_config
from algo_emu.report import replication as rep
from algo_emu.report.smoke import REFERENCE_COMMAND, REFERENCE_SCALE, smoke_line
from algo_emu.runtime import REPO_ROOT
from test_verdicts import result_set

CONFIGS = {"config/quick.yaml": True, "tests/tiny.yaml": True, "config/reference.yaml": False,
           "config/config.yaml": False}


def _cfg(name: str) -> dict:
    return load_config(REPO_ROOT / name, gpu_check=False)


def _render(rst: str, **snakemake) -> str:
    """A caption rendered as `snakemake --report` renders it (its Jinja settings)."""
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string((REPO_ROOT / "workflow" / "report" / rst).read_text()).render(
        snakemake=SimpleNamespace(**snakemake))


def test_reference_scale_budgets_are_config_reference_yaml():
    ref = yaml.safe_load((REPO_ROOT / "config" / "reference.yaml").read_text())
    assert REFERENCE_SCALE == {s: {k: ref[s][k] for k in keys} for s, keys in REFERENCE_SCALE.items()}
    assert f"{REFERENCE_COMMAND}" in (REPO_ROOT / "config" / "reference.yaml").read_text()


@pytest.mark.parametrize("name", CONFIGS)
def test_smoke_line_from_the_config_not_its_name(name):
    cfg = _cfg(name)
    line = smoke_line(cfg)
    assert (line is not None) == CONFIGS[name], line
    first = _render("workflow.rst", config=cfg).lstrip().splitlines()[0]
    if CONFIGS[name]:
        assert line.startswith("**Smoke scale:**") and "*did not learn* is expected" in line
        assert f"`{REFERENCE_COMMAND}`" in line
        assert first == smoke_line(cfg, rst=True)  # the HTML report opens with the same line
    else:
        assert "Smoke scale" not in _render("workflow.rst", config=cfg)
    caption = _render("replication.rst", config=cfg, params=SimpleNamespace(smoke=smoke_line(cfg, rst=True) or "",
                                                                            name=name), rule="replication")
    assert (caption.lstrip().splitlines()[0] == smoke_line(cfg, rst=True)) == CONFIGS[name]
    assert ("Smoke scale" in caption) == CONFIGS[name]


def test_a_reference_config_cut_below_its_budgets_is_a_smoke_scale():
    cfg = _cfg("config/reference.yaml")
    cut = copy.deepcopy(cfg)
    cut["theorem31"]["epochs"] = 29
    assert smoke_line(cfg) is None
    assert "theorem31.epochs=29 < 30" in smoke_line(cut)
    assert _render("workflow.rst", config=cut).lstrip().startswith("**Smoke scale:** ")


@pytest.mark.parametrize("name", ["config/quick.yaml", "config/config.yaml"])
def test_replication_md_opens_with_the_line_only_at_a_smoke_scale(tmp_path, name):
    d = result_set(tmp_path / "tables")
    cfg = _cfg(name)
    rep.write(d, cfg, name, tmp_path / "replication.md", tmp_path / "replication.csv")
    lines = (tmp_path / "replication.md").read_text().splitlines()
    assert lines[0] == "# Replication report"
    if CONFIGS[name]:
        assert lines[2] == smoke_line(cfg) and lines[3] == ""
    assert sum("Smoke scale" in x for x in lines) == int(CONFIGS[name])
