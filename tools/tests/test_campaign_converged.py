"""E1 at convergence in the paper-scale set (tools.campaign.converged): a clone of this repository at its commit runs
both targets on a cut tiny config through its own workflow; the import takes the convergence check alone, then with
the converged table; its refusals by name; both manifests and the pages."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from tools.campaign import core as cp
from tools.campaign import converged as cc
from algo_emu.report import manifest as mf
from algo_emu.runtime import REPO_ROOT

CONFIG = "converge.yaml"  # untracked in the clone: its tracked files stay its commit's


def _snakemake(co, *targets):
    proc = subprocess.run([sys.executable, "-m", "snakemake", *targets, "--cores", "2", "--configfile", CONFIG],
                          cwd=co, capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, PYTHONPATH=str(co / "src")))
    assert proc.returncode == 0, proc.stderr[-4000:]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The clone after `heads_converged` (``both``), a copy of it as `heads_convergence` alone leaves it (``check``:
    the converged records, tables and figure removed), and a set."""
    root = tmp_path_factory.mktemp("converged")
    both = root / "both"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{REPO_ROOT}", str(both)], check=True)
    cfg = yaml.safe_load((REPO_ROOT / "tests" / "tiny.yaml").read_text())
    cfg["heads"] |= {"heads_sweep": [1, 2], "attention": "fused", "compile": False,  # no builds in a throw-away clone
                     "convergence": {"candidates": [{"name": "e1_cos", "epochs": 1, "lr_schedule": "cosine"}],
                                     "seeds": [0], "tolerance": 100.0},
                     "converged": {"protocol": "e1_cos", "protocols": ["published"]}}
    (both / CONFIG).write_text(yaml.safe_dump(cfg))
    _snakemake(both, "heads_converged")
    co = root / "check"
    shutil.copytree(both, co, symlinks=True)
    results = co / cfg["workdir"] / "results"
    shutil.rmtree(results / "heads" / "converged")
    for rel in cc.CONVERGED:
        (results / rel).unlink()
    set_dir = root / "set"
    set_dir.mkdir()
    cp.save_state(set_dir, {"commit": "c" * 40, "config": CONFIG, "settings": {}, "moves": []})
    return {"check": co, "both": both, "set": set_dir}


@pytest.fixture
def run(made, tmp_path):
    """A copy of each for a test to change, its files hard links (a test replaces a file, never writes into one)."""
    for k in ("check", "both", "set"):
        shutil.copytree(made[k], tmp_path / k, symlinks=True, copy_function=os.link)
    return {k: tmp_path / k for k in ("check", "both", "set")}


def _files(d):
    return sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file())


def test_the_check_then_the_table_import_and_verify(run, monkeypatch):
    from tools.campaign.__main__ import main as campaign

    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=run["check"], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert "Not run yet" in cc.line(run["set"])
    imported = cc.import_converged(run["set"], run["check"], CONFIG)
    cdir = run["set"] / cc.SUBDIR
    check = [f"heads/convergence/e1_cos/{b}/H{H}_p8/seed0/metrics.json" for b in ("x1", "x2") for H in (1, 2)]
    assert _files(cdir) == sorted(["manifest.json", cc.CONFIG_COPY, *check, *cc.CHECK])
    # the config it read travels with it (untracked in the clone: its commit does not hold it)
    assert (cdir / cc.CONFIG_COPY).read_bytes() == (run["check"] / CONFIG).read_bytes()
    assert (imported["from_commit"], imported["converged"]) == (commit, False) and mf.verify(cdir) == []
    cc.build(run["set"], "p" * 12)
    page = (cdir / "README.md").read_text()
    assert page.index("Convergence criterion") < page.index("| candidate") < page.index("Selected protocol: e1_cos")
    assert "Not trained yet" in page and f"`{commit[:12]}`" in page and mf.verify(cdir) == []
    assert f"copied here as [`{cc.CONFIG_COPY}`]({cc.CONFIG_COPY})" in page
    assert "[its own page](converged/README.md)" in cc.line(run["set"])

    # the same clone after heads_converged: the table, its records, fit and figure join; the command line does it
    monkeypatch.setattr(cp, "build_page", lambda set_dir: None)  # the set's page needs a campaign's worktree
    assert campaign(["converged", "--dir", str(run["set"]), "--from", str(run["both"]), "--config", CONFIG]) == 0
    runs = [f"heads/converged/e1_cos/published/runs/H{H}_p8/seed{s}/metrics.json" for H in (1, 2) for s in (0, 1)]
    assert _files(cdir) == sorted(["manifest.json", cc.CONFIG_COPY, *check, *cc.CHECK, *runs, *cc.CONVERGED])
    cc.build(run["set"], "p" * 12)
    page = (cdir / "README.md").read_text()
    assert "Not trained yet" not in page and page.index("Selected protocol") < page.index("[falls-with-H]")
    assert "](figures/heads_converged.png)" in page and mf.verify(cdir) == []
    # an imported file edited after its import: the page build refuses it by name
    (cdir / cc.CHECK[0]).write_text((cdir / cc.CHECK[0]).read_text().replace("e1_cos", "edited", 1))
    with pytest.raises(cp.CampaignError, match=r"(?s)changed since their import.*heads_convergence.csv: differs"):
        cc.build(run["set"], "p" * 12)


def _edit(path, **keys):
    rec = json.loads(path.read_text())
    for k, v in keys.items():
        if k in ("git_commit", "git_dirty"):
            rec["environment"][k] = v
        elif k == "lr":
            rec["params"]["lr"] = v
        else:
            rec[k] = v
    path.unlink()  # a new file: the original is a hard link to the module's run
    path.write_text(json.dumps(rec))


@pytest.mark.parametrize("case, message", [
    ("missing", r"x2/H2_p8/seed0/metrics.json: missing: heads.convergence.candidates\[e1_cos\] at x2"),
    ("another commit", r"x2/H2_p8/seed0/metrics.json: environment.git_commit = '0{40}', not [0-9a-f]{40}"),
    ("dirty", r"x2/H2_p8/seed0/metrics.json: environment.git_dirty = True"),
    ("other lr", r"x2/H2_p8/seed0/metrics.json: params differ from heads.convergence.candidates\[e1_cos\] at x2.*'lr'"),
    ("stale check", r"heads_convergence.csv: not the convergence check of these records"),
    ("stale table", r"heads_converged_runs.csv: \(published, H = 2, seed 1\) is \[.*\], its record's mse 123.0"),
])
def test_a_bad_run_is_refused_by_name_and_the_set_keeps_its_import(run, case, message):
    cc.import_converged(run["set"], run["both"], CONFIG)  # an earlier, good import
    before = (run["set"] / cc.SUBDIR / "manifest.json").read_text()
    res = run["both"] / "runs" / "tiny" / "results" / "heads"  # the tiny config's workdir
    rec = res / "convergence" / "e1_cos" / "x2" / "H2_p8" / "seed0" / "metrics.json"
    if case == "missing":
        rec.unlink()
    elif case == "another commit":
        _edit(rec, git_commit="0" * 40)
    elif case == "dirty":
        _edit(rec, git_dirty=True)
    elif case == "other lr":
        _edit(rec, lr=0.5)
    elif case == "stale check":
        _edit(rec, mse=123.0)
    else:
        _edit(res / "converged" / "e1_cos" / "published" / "runs" / "H2_p8" / "seed1" / "metrics.json", mse=123.0)
    with pytest.raises(cp.CampaignError, match=message):
        cc.import_converged(run["set"], run["both"], CONFIG)
    assert (run["set"] / cc.SUBDIR / "manifest.json").read_text() == before
    assert mf.verify(run["set"] / cc.SUBDIR) == [] and not list(run["set"].glob(".converged.*"))


def test_a_check_that_selects_nothing_says_the_table_is_refused_not_pending(run):
    co = run["check"]
    cfg = yaml.safe_load((co / CONFIG).read_text())
    cfg["heads"]["convergence"]["tolerance"] = 1e-12  # no two budgets agree that closely: nothing converges
    (co / CONFIG).unlink()  # a new file: the original is a hard link to the module's run
    (co / CONFIG).write_text(yaml.safe_dump(cfg))
    _snakemake(co, "heads_convergence")  # the check table alone is rebuilt; the records stay
    assert cc.import_converged(run["set"], co, CONFIG)["converged"] is False
    cc.build(run["set"], "p" * 12)
    page = (run["set"] / cc.SUBDIR / "README.md").read_text()
    assert "No candidate converges at every H" in page and "Selected protocol" not in page
    assert "Not trained: no candidate converges at every H" in page and "Not trained yet" not in page
