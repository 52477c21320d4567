"""E1's variants in the paper-scale set (tools.campaign.variants): the import of a finished variants run from a
checkout (tiny records trained here, in a throw-away git checkout of this package), its refusals by name, both
manifests, the page with and without variants, and the two rules on synthetic tables."""

from __future__ import annotations

import json
import math
import shutil
import subprocess

import pandas as pd
import pytest
import yaml

from algo_emu import __version__
from tools.campaign import core as cp
from tools.campaign import variants as cv
from algo_emu.config import load_config
from algo_emu.data import heads as hd
from algo_emu.experiments import heads as ex
from algo_emu.experiments.heads_settings import variant_train_params, variants
from algo_emu.experiments.heads_variants import variants_figure, variants_table
from algo_emu.report import manifest as mf
from algo_emu.runtime import REPO_ROOT, source_digest

CONFIG = "tests/variants.yaml"


def _git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A checkout at one commit (this package's source, the tiny config's variants) whose results/ hold a finished
    variants run: records trained here and labelled with that commit and its code version, table, curves, figure;
    and a campaign set to import it into."""
    root = tmp_path_factory.mktemp("variants")
    co = root / "checkout"
    shutil.copytree(REPO_ROOT / "src", co / "src", ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info"))
    shutil.copytree(REPO_ROOT / "workflow" / "schemas", co / "workflow" / "schemas")
    shutil.copy2(REPO_ROOT / ".gitignore", co / ".gitignore")
    cfg = yaml.safe_load((REPO_ROOT / "tests" / "tiny.yaml").read_text())
    cfg["heads"]["attention"] = "fused"  # no kernel build in a throw-away checkout
    (co / "tests").mkdir()
    (co / CONFIG).write_text(yaml.safe_dump(cfg))
    _git(co, "init", "-q")
    _git(co, "add", "-A")
    _git(co, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "variants test")
    commit = _git(co, "rev-parse", "HEAD")
    code_version = f"algo_emu {__version__} src {source_digest(root=co / 'src' / 'algo_emu')[:16]}"

    heads = load_config(co / CONFIG, gpu_check=False)["heads"]
    data = root / "published.pt"
    hd.write_dataset(data, 0, heads, protocol="published")
    results = co / "results"
    dirs = []
    for v in variants(heads):
        out = results / "heads" / "variants" / v["name"]
        ex.train_setting(variant_train_params(heads, v["name"]), v["heads"], v["p"], v["seeds"], [str(data)], out, None,
                         "cpu", 1, protocol="published", variant=v["name"])
        for rec_path in out.glob("seed*/metrics.json"):  # as the checkout's own commit makes them
            rec = json.loads(rec_path.read_text())
            rec["environment"] |= {"git_commit": commit, "git_dirty": False, "code_version": code_version}
            rec_path.write_text(json.dumps(rec))
        dirs.append(str(out))
    variants_table(heads, dirs, str(results / cv.TABLE), str(results / cv.CURVES), baseline_roots=[])
    variants_figure(str(results / cv.TABLE), str(results / cv.CURVES), str(results / "figures" / "heads_variants"))
    set_dir = root / "set"
    set_dir.mkdir()
    state = {"commit": "c" * 40, "config": CONFIG, "settings": {}, "moves": []}
    cp.save_state(set_dir, state)
    return {"root": root, "checkout": co, "set": set_dir, "commit": commit, "code_version": code_version,
            "state": state}


@pytest.fixture
def run(made, tmp_path):
    """A fresh copy of the checkout and the set, for a test to change."""
    shutil.copytree(made["checkout"], tmp_path / "checkout", symlinks=True)
    shutil.copytree(made["set"], tmp_path / "set")
    return made | {"checkout": tmp_path / "checkout", "set": tmp_path / "set"}


def _page(run, monkeypatch):
    """Build the set's page as ``campaign page`` does, with the tiny config in place of the pinned worktree."""
    cfg = load_config(run["checkout"] / CONFIG, gpu_check=False)
    monkeypatch.setattr(cp, "open_campaign",
                        lambda set_dir, root=REPO_ROOT: (run["set"], run["state"], run["checkout"], cfg))
    cp.build_page(run["set"])
    return (run["set"] / "README.md").read_text()


# ----------------------------------------------------------------------------- import


def test_import_copies_the_run_and_both_manifests_verify(run, monkeypatch):
    from algo_emu.cli import main
    from tools.campaign.__main__ import main as campaign

    assert "Not run yet" in _page(run, monkeypatch)  # the page builds without a variants subset
    assert campaign(["variants", "--dir", str(run["set"]), "--from", str(run["checkout"]), "--config", CONFIG]) == 0
    vdir = run["set"] / cv.SUBDIR
    got = sorted(p.relative_to(vdir).as_posix() for p in vdir.rglob("*") if p.is_file())
    assert got == sorted(["README.md", "manifest.json", *cv.OUTPUTS,
                          "heads/variants/H4_epochs4/seed0/metrics.json", "heads/variants/H4_epochs4/seed1/metrics.json",
                          "heads/variants/H1_cosine/seed0/metrics.json"])
    manifest = json.loads((vdir / "manifest.json").read_text())
    assert manifest["paper_comparable"] is False and manifest["imported"]["from_commit"] == run["commit"]
    assert manifest["imported"]["code_version"] == run["code_version"]
    assert mf.verify(vdir) == [] and mf.verify(run["set"]) == []
    assert main(["manifest", "verify", str(vdir), str(run["set"])]) == 0
    assert not list(run["set"].glob(".variants.*"))

    page = (run["set"] / "README.md").read_text()
    assert len(page.splitlines()) <= 200 and "## Provenance" in page
    assert "E1's diagnostic variants (ours, not paper-comparable; " in page and "](variants/README.md)" in page
    assert "Rule 1" not in page and "H4_epochs4" not in page  # the variants' numbers live on their own page
    readme = (vdir / "README.md").read_text()
    assert "ours, not paper-comparable" in readme and "](figures/heads_variants.png)" in readme
    assert readme.index("**Rule 1") < readme.index("Answer: ") and "**Rule 2" in readme
    assert "Seeds per variant (`H1_cosine`: 0; `H4_epochs4`: 0, 1), not the paper's 10: the diagnosis" in readme
    assert cv.why_seeds({"a": [0, 1, 2], "b": [0, 1, 2]}).startswith("3 seeds per variant (0, 1, 2), not the paper's 10")

    # a rebuilt page leaves the imported files alone, and both manifests still verify
    _page(run, monkeypatch)
    assert mf.verify(vdir) == [] and mf.verify(run["set"]) == []
    # an imported file edited after its import: the page build refuses it by name
    (vdir / cv.TABLE).write_text((vdir / cv.TABLE).read_text().replace("H4_epochs4", "H4_edited", 1))
    with pytest.raises(cp.CampaignError, match=r"(?s)imported files changed since their import.*heads_variants.csv: differs"):
        _page(run, monkeypatch)


def _rec(run, name="H4_epochs4", seed=1):
    return run["checkout"] / "results" / cv.RECORD.format(name=name, seed=seed)


def _edit_env(path, **env):
    rec = json.loads(path.read_text())
    rec["environment"] |= env
    path.write_text(json.dumps(rec))


@pytest.mark.parametrize("case,message", [
    ("missing seed", r"H4_epochs4/seed1/metrics.json: missing: heads.variants\[H4_epochs4\] seed 1 has no record"),
    ("another commit", r"H4_epochs4/seed1/metrics.json: environment.git_commit = '0{40}', not [0-9a-f]{40}"),
    ("dirty record", r"H4_epochs4/seed1/metrics.json: environment.git_dirty = True: made from a working tree"),
    ("other training code", r"H4_epochs4/seed1/metrics.json: environment.code_version = 'algo_emu 0.1.0 src "
                            r"0{16}', not 'algo_emu"),
    ("dirty checkout", r"checkout: tracked files differ from its commit [0-9a-f]{12}: \['tests/variants.yaml'\]"),
    ("other params", r"H4_epochs4/seed1/metrics.json: params differ from heads.variants\[H4_epochs4\].*'lr': \(0.5, 0.001\)"),
    ("stale table", r"heads_variants.csv: final_test_mse of \(H4_epochs4, seed 1, head\) is .* its record's mse 123.0"),
])
def test_a_bad_run_is_refused_by_name_and_the_set_keeps_its_import(run, case, message):
    cv.import_variants(run["set"], run["checkout"], CONFIG)  # an earlier, good import
    vdir = run["set"] / cv.SUBDIR
    before = (vdir / "manifest.json").read_text()
    if case == "missing seed":
        _rec(run).unlink()
    elif case == "another commit":
        _edit_env(_rec(run), git_commit="0" * 40)
    elif case == "dirty record":
        _edit_env(_rec(run), git_dirty=True)
    elif case == "other training code":
        _edit_env(_rec(run), code_version="algo_emu 0.1.0 src " + "0" * 16)
    elif case == "dirty checkout":
        with open(run["checkout"] / CONFIG, "a") as fh:
            fh.write("# edited\n")
    elif case == "other params":
        rec = json.loads(_rec(run).read_text())
        rec["params"]["lr"] = 0.5
        _rec(run).write_text(json.dumps(rec))
    elif case == "stale table":
        rec = json.loads(_rec(run).read_text())
        rec["mse"] = 123.0
        _rec(run).write_text(json.dumps(rec))
    with pytest.raises(cp.CampaignError, match=message):
        cv.import_variants(run["set"], run["checkout"], CONFIG)
    assert (vdir / "manifest.json").read_text() == before and mf.verify(vdir) == []
    assert not list(run["set"].glob(".variants.*"))


# ----------------------------------------------------------------------------- the rules, on synthetic tables

def _table(rows):
    """A variants table's composed-head rows: (variant, heads, lr_schedule, seed, final, min, best_epoch)."""
    out = []
    for name, H, sched, seed, final, low, best in rows:
        comparable = H in (1, 4)
        for member in ("K", "Q", "V", "head"):
            out.append({"variant": name, "source": "variant", "paper_comparable": False, "protocol": "published",
                        "heads": H, "p": 60, "epochs": 50, "lr": 1e-3, "lr_schedule": sched, "seed": seed,
                        "member": member, "final_test_mse": final if member == "head" else 0.1,
                        "min_test_mse": low, "best_epoch": best,
                        "paper_mse": 1.0 if comparable and member == "head" else math.nan})
    return pd.DataFrame(out)


def _curve(values, seed=0, name="v"):
    return pd.DataFrame({"variant": name, "source": "variant", "member": "head", "seed": seed,
                         "epoch": list(range(1, len(values) + 1)), "test_mse": values})


def test_rule1_reads_reachable_at_the_papers_value_and_not_at_9_8():
    from algo_emu.paper_values import paper_heads

    mse, std = paper_heads(4)
    assert cv.reach([mse] * 3, mse, std)["reaches"]
    assert cv.reach([mse + std] * 3, mse, std)["reaches"] and not cv.reach([mse + std + 1e-9] * 3, mse, std)["reaches"]
    assert not cv.reach([9.8, 9.8, 9.8], mse, std)["reaches"]
    table = _table([("H4_at_paper", 4, "constant", s, mse, mse, 40) for s in range(3)]
                   + [("H4_at_9.8", 4, "constant", s, 9.8, 9.0, 30) for s in range(3)])
    res = cv.analyse(table, pd.DataFrame(columns=["variant", "source", "member", "seed", "epoch", "test_mse"]), {})
    rows = {r["run"]: r for r in res["q1"][4]["rows"]}
    assert rows["H4_at_paper"]["reaches"] and not rows["H4_at_9.8"]["reaches"]
    assert rows["H4_at_9.8"]["mean"] == pytest.approx(9.8) and rows["H4_at_9.8"]["bound"] == pytest.approx(mse + std)
    assert cv.q1_answer(4, res["q1"][4]).startswith(f"H = 4, the paper's {mse} ± {std}: reachable by this block and "
                                                    "protocol: `H4_at_paper`")
    none = cv.analyse(table[table.variant == "H4_at_9.8"], pd.DataFrame(columns=["variant", "source", "member"]), {})
    assert "not reached by any of the 1 variant(s); the lowest seed mean is `H4_at_9.8`'s 9.8, above" in \
        cv.q1_answer(4, none["q1"][4])


def test_rule2_tells_a_late_rise_from_a_curve_without_one(tmp_path):
    rising = [3.0, 2.2, 2.0, 2.1] + [2.0 + 0.05 * k for k in range(1, 21)]  # min 2.0 at epoch 3, ends at 3.0
    flat = [3.0, 2.2, 2.0] + [2.05] * 20 + [2.1]  # ends 5 % above its minimum
    up, down = cv.late_rise(_curve(rising)), cv.late_rise(_curve(flat))
    assert (up["min"], up["min_epoch"], up["final"], up["rise"]) == (2.0, 3, pytest.approx(3.0), True)
    assert not down["rise"] and down["excess"] == pytest.approx(0.05)
    assert not cv.late_rise(_curve([1.0, 1.1]))["rise"] and cv.late_rise(_curve([1.0, 1.1001]))["rise"]  # > 10 %
    # seed means, at the epochs every seed was evaluated
    two = pd.concat([_curve([1.0, math.nan, 2.0, 1.5]), _curve([3.0, 1.0, 2.0, 1.5], seed=1)])
    assert list(cv.mean_curve(two).index) == [1, 3, 4] and cv.late_rise(two)["min"] == 1.5
    assert cv.rise_verdict(up, down).startswith("the late rise is the constant lr")
    assert cv.rise_verdict(up, up).startswith("not the constant lr alone")
    assert cv.rise_verdict(down, down).startswith("no late rise to explain")
    assert cv.rise_verdict(None, down).startswith("not decided")

    # end to end: the protocol's records (campaign set, seeds of the variant) against the cosine variant's curves
    recs = []
    for seed in (0, 1):
        history = [{"epoch": e, "train_loss": {"K": 1.0, "Q": 1.0, "V": 1.0},
                    **({"test_mse": rising[e - 1]} if e % 2 == 0 and e < len(rising) else {})}
                   for e in range(1, len(rising) + 1)]
        rec = {"protocol": "published", "setting": {"heads": 1, "p": 60}, "seed": seed, "mse": rising[-1],
               "member_mse": {"K": 0.1, "Q": 0.1, "V": 0.1}, "history": history,
               "params": {"epochs": len(rising), "lr": 1e-3}}
        path = tmp_path / f"seed{seed}" / "metrics.json"
        path.parent.mkdir()
        path.write_text(json.dumps(rec))
        recs.append(path)
    table = _table([("H1_cosine", 1, "cosine", s, flat[-1], 2.0, 3) for s in (0, 1)])
    curves = pd.concat([_curve(flat, s, "H1_cosine") for s in (0, 1)])
    res = cv.analyse(table, curves, {"heads/published/H1_p60": recs})
    (q2,) = res["q2"]
    assert q2["protocol_rise"]["evaluated"] == list(range(2, 24, 2)) + [24]
    assert q2["protocol_rise"]["rise"] and not q2["variant"]["rise"]
    assert q2["verdict"].startswith("the late rise is the constant lr")
    assert cv.analyse(table, curves, {})["q2"][0]["verdict"].startswith("not decided")
