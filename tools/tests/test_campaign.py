"""The paper-scale campaign (tools.campaign) and manifest verification, on a tiny config.

One end-to-end test runs the campaign in a throw-away clone of this repository: pinned to a commit of
the clone, E1 settings trained through that commit's own Snakemake rules, a setting killed after its
first epoch and resumed on a "fresh machine" (the worktree deleted) from the resume state the set
carries, the resumed records shown bit-identical to an uninterrupted run by a replay, and the bad
inputs the campaign must refuse or flag by name.
"""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict

import pytest
import yaml

from tools.campaign import core as cp
from algo_emu.report import manifest as mf
from algo_emu.runtime import REPO_ROOT


def _git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _commit_all(repo, message):
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


# ---------------------------------------------------------------------------------------------------------
# manifest verify (no training)
# ---------------------------------------------------------------------------------------------------------

def _campaign_tree(tmp_path):
    d = tmp_path / "set"
    (d / "heads/published/runs/H1_p8/seed0").mkdir(parents=True)
    (d / "heads/published/runs/H1_p8/seed0/metrics.json").write_text('{"mse": 1.0}\n')
    (d / "tables").mkdir()
    (d / "tables/heads_vs_mse.csv").write_text("heads,mse\n1,1.0\n")
    (d / "campaign/resume/x").mkdir(parents=True)
    (d / "campaign/resume/x/ck.pt").write_bytes(b"transient")
    state = {"commit": "c" * 40, "config": "config/config.yaml", "settings": {}, "moves": []}
    return d, cp.write_manifest(d, state)


def test_manifest_verify_names_each_changed_missing_or_unlisted_file(tmp_path):
    d, manifest = _campaign_tree(tmp_path)
    assert sorted(manifest["files"]) == ["heads/published/runs/H1_p8/seed0/metrics.json", "tables/heads_vs_mse.csv"]
    assert mf.verify(d) == []  # resume state is transient: never listed, never flagged
    (d / "tables/heads_vs_mse.csv").write_text("heads,mse\n1,0.5\n")
    (d / "heads/published/runs/H1_p8/seed0/metrics.json").unlink()
    (d / "tables/extra.csv").write_text("x\n")
    problems = mf.verify(d)
    assert len(problems) == 3, problems
    assert any("heads_vs_mse.csv: differs" in p for p in problems)
    assert any("seed0/metrics.json: missing" in p for p in problems)
    assert any("extra.csv: not in the manifest" in p for p in problems)


def test_manifest_verify_reads_a_run_manifest_and_its_collected_copy(tmp_path):
    results = tmp_path / "results"
    (results / "tables").mkdir(parents=True)
    (results / "heads/published/runs/H1_p8/seed0").mkdir(parents=True)
    (results / "tables/t.csv").write_text("a\n1\n")
    rec = results / "heads/published/runs/H1_p8/seed0/metrics.json"
    rec.write_text("{}\n")
    listed = {"results/tables/t.csv": {"sha256": mf.sha256_file(results / "tables/t.csv"), "bytes": 4}}
    records = {"results/heads/published/runs/H1_p8/seed0/metrics.json": {"sha256": mf.sha256_file(rec), "bytes": 3}}
    (results / "manifest.json").write_text(json.dumps({"outputs": listed, "records": records}))
    assert mf.verify(results) == []
    assert mf.run_records(results) == [rec.as_posix()]
    new = results / "heads/published/runs/H1_p8/seed1/metrics.json"
    new.parent.mkdir()
    new.write_text("{}\n")
    assert mf.verify(results) == [f"{new.as_posix()}: a record not in the manifest (added after it was written)"]
    assert mf.verify(tmp_path / "nowhere") == [f"{tmp_path / 'nowhere' / 'manifest.json'}: no manifest"]


def test_seal_lists_a_reference_set_whole_and_names_what_was_rebuilt_after_the_run(tmp_path):
    d = tmp_path / "set"
    (d / "tables").mkdir(parents=True)
    (d / "tables/replication.csv").write_text("v\nold\n")
    (d / "tables/t.csv").write_text("a\n1\n")
    listed = {f"results/tables/{n}": {"sha256": mf.sha256_file(d / "tables" / n), "bytes": 1}
              for n in ("replication.csv", "t.csv")}
    (d / "manifest.json").write_text(json.dumps({"outputs": listed, "git": {"commit": "abc"}}))
    (d / "tables/replication.csv").write_text("v\nrebuilt\n")  # a report rebuilt later from the tables
    (d / "README.md").write_text("# set\n")
    before = mf.verify(d)
    assert len(before) == 1 and "tables/replication.csv: differs from the manifest" in before[0]
    m = mf.seal(d, note="report rebuilt")
    assert m["sealed"]["rebuilt_after_the_run"] == ["results/tables/replication.csv"]
    assert m["sealed"]["added_after_the_run"] == ["README.md"]
    assert m["git"] == {"commit": "abc"} and m["outputs"] == listed  # the run's own record is kept as written
    assert mf.verify(d) == []
    assert "earlier" not in m["sealed"]
    # sealed again (a later rebuild): the first seal's note stays on record, oldest first
    assert mf.seal(d, note="page rebuilt")["sealed"]["earlier"] == [m["sealed"]]
    third = mf.seal(d, note="again")["sealed"]
    assert [s["note"] for s in third["earlier"]] == ["report rebuilt", "page rebuilt"] and third["note"] == "again"
    (d / "README.md").write_text("# edited\n")
    assert [p.rsplit("/", 1)[1].split(":")[0] for p in mf.verify(d)] == ["README.md"]
    with pytest.raises(ValueError, match="not a run's manifest"):
        _campaign_tree(tmp_path / "c")
        mf.seal(tmp_path / "c" / "set")


def test_manifest_verify_command_exits_nonzero_and_names_the_file(tmp_path, capsys):
    from algo_emu.cli import main

    d, _ = _campaign_tree(tmp_path)
    assert main(["manifest", "verify", str(d)]) == 0
    (d / "tables/heads_vs_mse.csv").write_text("edited\n")
    with pytest.raises(SystemExit) as exc:
        main(["manifest", "verify", str(d)])
    assert exc.value.code == 1
    out = capsys.readouterr().out
    assert "DIFFERS" in out and "heads_vs_mse.csv" in out and "1 problem(s)" in out


def test_resume_state_round_trip_never_overwrites_a_newer_checkpoint(tmp_path):
    s = cp.heads_setting("published", 12, 60, [0, 1])
    wt, set_dir = tmp_path / "wt", tmp_path / "set"
    ck = wt / s.checkpoints[0]
    ck.parent.mkdir(parents=True)
    ck.write_bytes(b"epoch 3")
    assert [p.name for p in cp.save_resume(set_dir, wt, s)] == ["published_H12_p60.pt"]
    assert cp.save_resume(set_dir, wt, s) == []  # unchanged: not copied again
    shutil.rmtree(wt)  # a fresh machine
    assert [p.read_bytes() for p in cp.restore_resume(set_dir, wt, s)] == [b"epoch 3"]
    ck.write_bytes(b"epoch 4")  # the worktree's own checkpoint is newer: kept
    assert cp.restore_resume(set_dir, wt, s) == [] and ck.read_bytes() == b"epoch 4"
    cp.drop_resume(set_dir, s)
    assert not (set_dir / cp.RESUME_DIR).joinpath(cp._resume_name(s)).exists()
    # a checkpoint folder (E4): its checkpoints travel, the writers' locks beside them do not
    a = cp.ames_setting("fitted", [0])
    folder = wt / a.checkpoints[0]
    folder.mkdir(parents=True)
    (folder / "h8.pt").write_bytes(b"epoch 1")
    (folder / "h8.pt.lock").write_text("123 host\n")
    assert [p.name for p in cp.save_resume(set_dir, wt, a)] == ["h8.pt"]


def test_a_finished_jobs_checkpoint_is_restored_unmarked_and_resumed_with_no_epoch_left(tmp_path):
    """A job finished on one machine, its outputs not carried: restored on another, its checkpoint (marked final)
    is unmarked, the call's record names it, and the engine resumes it at its last epoch, trains no epoch and
    writes the same numbers as the run that finished; left marked, the engine would train it again from scratch."""
    import torch

    from algo_emu.config import load_config
    from algo_emu.data import heads as hd
    from algo_emu.experiments.heads import train_setting

    params = dict(load_config(REPO_ROOT / "tests/tiny.yaml")["heads"], compile=False, eval_every=0)
    data = tmp_path / "seed0.pt"
    hd.write_dataset(data, 0, params)
    s = cp.heads_setting("published", 1, 8, [0])
    set_dir, machine_a, machine_b, machine_c = (tmp_path / n for n in ("set", "a", "b", "c"))

    def train(wt):
        return train_setting(params, 1, 8, [0], [str(data)], wt / "out", wt / s.checkpoints[0], "cpu", 1)[0]

    done = train(machine_a)
    finished = torch.load(machine_a / s.checkpoints[0], weights_only=False)
    assert finished["final"] and finished["epoch"] == params["epochs"]
    cp.save_resume(set_dir, machine_a, s)  # the checkpoint travels, the outputs do not

    reopened = cp.reopen_finished(cp.restore_resume(set_dir, machine_b, s))
    assert reopened == [machine_b / s.checkpoints[0]]
    state = torch.load(reopened[0], weights_only=False)
    assert state["final"] is False
    assert {k: v for k, v in state.items() if k not in ("final", "model", "optimizer")} == \
        {k: v for k, v in finished.items() if k not in ("final", "model", "optimizer")}
    assert all(torch.equal(state["model"][k], v) for k, v in finished["model"].items())
    call = cp.start_call(set_dir, machine_b, s, reopened)[-1]
    assert call["restored_final_cleared"] == [s.checkpoints[0]]
    assert call["resumed_from"] == {s.checkpoints[0]: params["epochs"]}
    assert cp.reopen_finished(cp.restore_resume(set_dir, machine_b, s)) == []  # restored once: not again
    resumed = train(machine_b)
    assert resumed["timing"]["resumed_from_epoch"] == params["epochs"]
    assert resumed["timing"]["epochs_run_this_call"] == 0
    assert resumed["mse_by_target"] == done["mse_by_target"] and resumed["history"] == done["history"]

    # control: the same checkpoint restored as it is (marked final) is not resumed
    assert cp.restore_resume(set_dir, machine_c, s) == [machine_c / s.checkpoints[0]]
    again = train(machine_c)
    assert again["timing"]["resumed_from_epoch"] == 0 and again["timing"]["epochs_run_this_call"] == params["epochs"]


def _write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def test_training_seconds_counts_each_training_job_once_whatever_its_record_shape(tmp_path):
    """Each job's epochs once: E2's model and baseline folders; E3's two blocks inside one record; E4's two
    sidecars (its records repeat the emulator's timing, which must not count twice nor hide the baseline's)."""
    wt = tmp_path
    e2 = cp.theorem31_setting(60, [0, 1])
    for i, r in enumerate(e2.records):  # model seeds share a job (same seconds), baseline seeds another
        _write(wt / r, {"timing": {"epoch_seconds": [1.0, 2.0] if "runs/" in r else [4.0, 4.0]}})
    assert cp.training_seconds(wt, e2) == 3.0 + 8.0
    e3 = cp.statistical_setting("fitted", 6, [0, 1])
    for r in e3.records:
        _write(wt / r, {"timing": {"train": {"epoch_seconds": [1.0, 1.0, 1.0]}, "eval_seconds": 99.0},
                        "blind": {"train_timing": {"epoch_seconds": [0.5, 0.5]}}})
    assert cp.training_seconds(wt, e3) == 3.0 + 1.0
    e4 = cp.ames_setting("corrected", [0, 1])
    groups = {"544": {"epoch_seconds": [2.0, 2.0]}, "96": {"epoch_seconds": [1.0]}}
    for r in e4.records:
        _write(wt / r, {"timing": {"train": {"groups": groups}}})
    _write(wt / "results/ames/corrected/emulator.pt.json", {"timing": {"groups": groups}})
    _write(wt / "results/ames/corrected/blind.pt.json", {"timing": {"groups": {"544": {"epoch_seconds": [3.0]}}}})
    assert cp.training_seconds(wt, e4) == 5.0 + 3.0


def test_prediction_prices_every_campaign_setting():
    """benchmarks/cost.py (the product's cost prediction) names every setting the campaign runs, as the campaign
    names it: the page and status price each setting from it."""
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    import cost
    import paper_scale as ps
    from algo_emu.config import load_config

    cfg = load_config(REPO_ROOT / "config/config.yaml", gpu_check=False)
    rows = ps.build_rows(cfg)
    bench = {"rows": {r.key: {"shape": asdict(r), "measured": {"job_seconds": 60.0, "step_seconds": 0.01}}
                      for r in rows}}
    out = cost.predict_hours(bench, cfg)
    assert set(out["settings"]) == {s.name for s in cp.settings(cfg)}
    keys = set(bench["rows"])
    for H in cfg["heads"]["heads_sweep"]:
        assert f"E1 H={H} p={cfg['heads']['p_heads_sweep']}" in keys
    for p in cfg["theorem31"]["p_sweep"]:
        assert f"E2 p={p}" in keys
    for mode in cfg["statistical"]["modes"]:
        for H in cfg["statistical"]["heads_sweep"]:
            assert f"E3 {mode} H={H}" in keys
    assert out["hours"] > 0 and all(e["jobs"] for e in out["experiments"].values())
    # every priced job carries its steps (a per-step estimate on other hardware prices them): the config's
    h = cfg["heads"]
    e1_steps = -(-(h["n_prompts"] - -(-h["n_prompts"] * h["test_fraction"] // 1)) // h["batch_size"]) * h["epochs"]
    assert out["settings"]["heads/published/H4_p60"]["steps"] == e1_steps == 62500
    assert out["steps"] == sum(e["steps"] for e in out["experiments"].values()) == sum(
        s["steps"] for s in out["settings"].values())
    # priced as the run's cost block prices them: each job its steps x the row's seconds per step (rows at the
    # config's seeds, no evaluation or data time, blind rows as fast as their models)
    assert abs(out["hours"] - out["steps"] * 0.01 / 3600) < 1e-9


def test_settings_priority_puts_the_e1_heads_sweep_first_and_h12_before_it():
    from algo_emu.config import load_config

    names = [s.name for s in cp.settings(load_config(REPO_ROOT / "config/config.yaml"))]
    assert names[0] == "heads/published/H12_p60"
    assert names[:6] == [f"heads/published/H{h}_p60" for h in (12, 8, 6, 4, 2, 1)]
    # then the cheapest experiment first (the benchmark): the essay, E4's two modes (reference_code first), E3 at H = 6
    assert names[6:11] == ["essay", "ames/reference_code", "ames/corrected", "statistical/fitted_H6",
                           "statistical/reference_code_H6"]
    assert names.index("statistical/reference_code_H6") < names.index("theorem31/p60") < \
        names.index("heads/published/H1_p20")
    assert names.index("heads/published/H1_p110") < names.index("heads/independent/H1_p60") < \
        names.index("statistical/reference_code_H1")
    # the rest of E3: the published script's mode at every H (the Appendix C.1 figure) before the fitted mode
    rest = [n for n in names if n.startswith("statistical/") and not n.endswith("_H6")]
    assert rest == [f"statistical/{m}_H{h}" for m in ("reference_code", "fitted") for h in (1, 2, 4, 8, 12)]
    assert len(names) == len(set(names)) == 6 + 1 + 10 - 1 + 6 + 12 + 2 + 5


# ---------------------------------------------------------------------------------------------------------
# The campaign end to end, in a throw-away clone
# ---------------------------------------------------------------------------------------------------------

@pytest.fixture
def clone(tmp_path):
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "--quiet", str(REPO_ROOT), str(repo)], check=True)
    # The campaign code under test is this checkout's; the pinned commit only has to hold the config and
    # the workflow it runs: E1 only matters here, uncompiled and small.
    for rel in ("src", "tools", "workflow", "Snakefile", "config", "tests/tiny.yaml"):
        src, dst = REPO_ROOT / rel, repo / rel
        if src.is_dir():
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dst)
    cfg = yaml.safe_load((REPO_ROOT / "tests/tiny.yaml").read_text())
    cfg["heads"] |= {"compile": False, "heads_sweep": [1, 2], "p_sweep": [8], "eval_every": 1}
    (repo / "tests/campaign.yaml").write_text(yaml.safe_dump(cfg))
    commit = _commit_all(repo, "campaign test config")
    return repo, commit


def test_campaign_end_to_end_one_commit_resume_replay_and_bad_input(clone, monkeypatch):
    repo, commit = clone
    set_dir = repo / "results/reference/campaign"
    with pytest.raises(cp.CampaignError, match="--reason is required"):
        cp.pin(str(set_dir), commit, "tests/campaign.yaml", "", root=repo)
    state = cp.pin(str(set_dir), commit, "tests/campaign.yaml", "test", root=repo)
    assert state["commit"] == commit and state["code_version"].startswith("algo_emu ")
    with pytest.raises(cp.CampaignError, match="unknown setting"):
        cp.run(str(set_dir), only=["heads/published/H3_p8"], root=repo)

    # 1. a setting killed after its first epoch; its resume state is in the set
    monkeypatch.setenv("ALGO_EMU_FAIL_SEED", "0")
    with pytest.raises(cp.CampaignError, match="heads/published/H2_p8 failed"):
        cp.run(str(set_dir), only=["heads/published/H2_p8"], root=repo, save_every=0.2)
    monkeypatch.delenv("ALGO_EMU_FAIL_SEED")
    resume = set_dir / cp.RESUME_DIR / "heads__published__H2_p8"
    assert [p.name for p in resume.rglob("*.pt")] == ["published_H2_p8.pt"]
    assert cp.setting_status(set_dir, cp.load_state(set_dir), cp.heads_setting("published", 2, 8, [0, 1])) == "running"
    # one `campaign run` per worktree; a Snakemake lock left by a killed run is removed by the next one
    wt = next(p for p in (repo / cp.WORKTREES).iterdir() if p.is_dir() and p.name != "logs")
    locks = wt / ".snakemake" / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    (locks / "0.input.lock").write_text("left by a killed run")
    held = cp._hold_run_lock(wt)
    assert not locks.is_dir() or not any(locks.iterdir())
    with pytest.raises(cp.CampaignError, match=rf"another `campaign run` \(process {os.getpid()} on .*\) is using the worktree"):
        cp._hold_run_lock(wt)
    held.close()

    # 2. a fresh machine: the worktree is gone; the same command resumes from epoch 1 and finishes
    shutil.rmtree(repo / cp.WORKTREES)
    _git(repo, "worktree", "prune")
    assert cp.run(str(set_dir), only=["heads/published/H2_p8", "heads/published/H1_p8"], root=repo) == \
        ["heads/published/H2_p8", "heads/published/H1_p8"]
    assert not resume.exists()
    rec = json.loads((set_dir / "heads/published/runs/H2_p8/seed0/metrics.json").read_text())
    assert rec["environment"]["git_commit"] == commit
    assert rec["timing"]["resumed_from_epoch"] == 1
    state = cp.load_state(set_dir)
    assert {state["settings"][n]["status"] for n in ("heads/published/H2_p8", "heads/published/H1_p8")} == {"done"}
    # a call that stopped after copying its records but before saving its state: the next run finishes it
    entry = state["settings"].pop("heads/published/H1_p8")
    cp.save_state(set_dir, state)
    (set_dir / cp.RESUME_DIR / "heads__published__H1_p8").mkdir(parents=True)
    (set_dir / cp.RESUME_DIR / "heads__published__H1_p8" / cp.CALLS).write_text(json.dumps(entry["calls"]))
    assert cp.run(str(set_dir), only=["heads/published/H1_p8"], root=repo) == ["heads/published/H1_p8"]
    state = cp.load_state(set_dir)
    again = state["settings"]["heads/published/H1_p8"]
    assert again["status"] == "done" and again["wall_seconds"] == entry["wall_seconds"] and again["calls"] == entry["calls"]
    assert again["wall_seconds_this_call"] is None and not (set_dir / cp.RESUME_DIR / "heads__published__H1_p8").exists()
    assert mf.verify(set_dir) == []
    page = (set_dir / "README.md").read_text()
    assert page.startswith("# Replication report") and "## E1 -- " in page and "## Provenance" in page
    assert "`heads/published/H2_p8`" in page and f"pinned commit `{commit}`" in page
    # each call that trained it is recorded: its machine and the epoch its checkpoint resumed from
    calls = state["settings"]["heads/published/H2_p8"]["calls"]
    assert [c["resumed_from"] for c in calls] == [{}, {"results/heads/checkpoints/published_H2_p8.pt": 1}]
    made = page.split("Settings made (", 1)[1].split("\n\n", 2)[1]  # its table: made at | CPU | settings
    assert all(c["hardware"]["cpu_count"] >= 1 for c in calls) and ", then " not in made and "`heads/published/H2_p8`" in made
    # and what shared the machine with it, measured while it ran (the failed call's too): Snakemake and the
    # training job used CPU; that stays in the state and the manifest, off the page
    assert all(c["load"]["sampled_s"] > 0 and c["load"]["job_cpu_s"] > 0 and c["load"]["cores"] >= 1 for c in calls)
    assert "the call from" not in page and "stalled" not in page
    # as if killed on another machine (its CPU's identity differs; a name alone would not tell two machines apart)
    calls[0]["hardware"] = dict(calls[0]["hardware"], cpu_model="another CPU", cpu_id="GenuineIntel family 6 model 143")
    cp.save_state(set_dir, state)
    cp.build_page(set_dir, repo)
    moved_page = (set_dir / "README.md").read_text()
    made = moved_page.split("Settings made (", 1)[1].split("\n\n", 2)[1]
    assert "| another CPU (GenuineIntel family 6 model 143), then " in made  # the CPU of each call, in order

    # 3. resumed == uninterrupted: a replay trains both epochs from scratch and matches bit for bit
    out = cp.replay(set_dir, "heads/published/H2_p8", epochs=2, root=repo)
    assert out["match"] and out["compared"] == 2 * 2 * 3  # seeds x epochs x K/Q/V

    # 4. bad input, each refused or flagged by name
    # 4a. a tree edited after its manifest; a record that the pinned commit does not reproduce is retired
    h1 = set_dir / "heads/published/runs/H1_p8/seed1/metrics.json"
    r = json.loads(h1.read_text())
    r["history"][0]["train_loss"]["Q"] *= 1 + 1e-12
    h1.write_text(json.dumps(r))
    assert any("seed1/metrics.json: differs" in p for p in mf.verify(set_dir))
    bad = cp.replay(set_dir, "heads/published/H1_p8", root=repo)
    assert not bad["match"] and bad["n_mismatches"] == 1 and bad["mismatches"][0].startswith("seed1 Q epoch 1")
    assert not h1.exists() and (set_dir / cp.PRE / "heads/published/runs/H1_p8/seed1/metrics.json").is_file()
    s1, s2 = cp.heads_setting("published", 1, 8, [0, 1]), cp.heads_setting("published", 2, 8, [0, 1])
    assert cp.setting_status(set_dir, cp.load_state(set_dir), s1) == "todo"  # trained again by the next run
    # 4b. a record of another commit, then a missing seed
    h2 = set_dir / "heads/published/runs/H2_p8/seed0/metrics.json"
    good = h2.read_text()
    h2.write_text(good.replace(commit, "0" * 40))
    assert cp.setting_status(set_dir, cp.load_state(set_dir), s2) == "legacy"
    cp.build_page(set_dir, repo)
    page = (set_dir / "README.md").read_text()
    left_out = page.split("do NOT enter the tables:", 1)[1].split("\n\nTables:", 1)[0]
    assert "`heads/published/H2_p8`: made by another commit" in left_out and "000000000000" in left_out
    assert "No setting is made yet." in page and not (set_dir / "tables/heads_vs_mse.csv").exists()
    assert not (set_dir / "tables/replication.csv").exists()
    assert "(pre-campaign/README.md)" in page  # the retired records' own page
    missing = page.split("\nMissing (", 1)[1].split("\n\n", 2)[1].splitlines()
    assert next(x for x in missing if x.startswith("- E1: ")).startswith("- E1: published/H2_p8, published/H1_p8")
    pre_page = (set_dir / cp.PRE / "README.md").read_text()
    assert "Before the campaign" in pre_page and "published H=1 p=8 (2 seeds)" in pre_page
    seed1 = set_dir / "heads/published/runs/H2_p8/seed1/metrics.json"
    kept = seed1.read_text()
    seed1.unlink()
    assert cp.setting_status(set_dir, cp.load_state(set_dir), s2) == "partial"
    cp.build_page(set_dir, repo)
    assert "`heads/published/H2_p8`: some seeds missing" in (set_dir / "README.md").read_text()
    assert mf.verify(set_dir) == []  # the page rebuild wrote the manifest anew

    # 5. moving the campaign: refused while an experiment would mix two commits; explicit with --mixed-ok
    h2.write_text(good)
    seed1.write_text(kept)
    assert cp.setting_status(set_dir, cp.load_state(set_dir), s2) == "done"
    (repo / "NEWFILE").write_text("x\n")
    new = _commit_all(repo, "new code")
    with pytest.raises(cp.CampaignError, match="would be made at"):
        cp.pin(str(set_dir), new, reason="move", root=repo)
    moved = cp.pin(str(set_dir), new, reason="move", mixed_ok=True, root=repo)
    assert moved["commit"] == new and moved["moves"][-1]["mixed_experiments"] == ["heads"]
    # the setting made before the move still counts, at its own commit
    assert cp.setting_status(set_dir, moved, s2) == "done"


# ---------------------------------------------------------------------------------------------------------
# The page's other experiments: E4 and the essay from their done settings (records of the reference set)
# ---------------------------------------------------------------------------------------------------------

def test_page_rows_table_each_experiment_from_its_done_settings_and_gate_the_essay(tmp_path):
    import pandas as pd

    from tools.campaign import page as page
    from algo_emu.config import load_config

    ref = REPO_ROOT / "results/reference/reference-scale"
    cfg = load_config(REPO_ROOT / "config/reference.yaml")
    seeds = cfg["seeds"]
    d = tmp_path / "set"
    shutil.copytree(ref / "ames/reference_code", d / "ames/reference_code")
    (d / "tables").mkdir()
    for name in ("essay_claims.csv", "essay_curves.csv", "essay_equivalences.csv"):
        shutil.copy2(ref / "tables" / name, d / "tables" / name)
    ames = cp.ames_setting("reference_code", seeds)
    essay = cp.essay_setting(cfg)
    from algo_emu.essay.plan import essay_seeds

    assert set(essay.records) >= {f"results/essay/eval/seed{s}/metrics.json" for s in essay_seeds(cfg)}
    assert "results/tables/essay_claims.csv" in essay.targets + essay.extras
    rows = [(ames, "done", {}), (cp.ames_setting("corrected", seeds), "todo", {}), (essay, "done", {})]

    verdicts = page.experiment_rows(d, rows, cfg, "reference.yaml")
    page.write_verdicts(d, verdicts)
    # the report's rows, the table the page and the README count: the done experiments' only
    table = pd.read_csv(d / page.VERDICTS)
    assert set(table.experiment) == {"E4", "E6 (essay)"} and len(table) == len(verdicts)
    e4 = [r for r in verdicts if r.experiment == "E4"]
    # E4: the workflow's own aggregation of the done mode only, its figures, and the report's E4 rows, each naming
    # the mode it lacks
    assert len(e4) == 3 and all("corrected not done yet" in r.reason for r in e4)
    ames_table = pd.read_csv(d / "tables/ames.csv")
    assert set(ames_table["mode"]) == {"reference_code"} and set(ames_table.algorithm) == {"linear", "ridge", "lasso"}
    assert (d / "figures/ames.png").is_file() and (d / "figures/ames_ablation.png").is_file()
    # the essay: the reference set's model is far from Bayes-optimal, so every trained claim reads 'did not learn'
    trained = [r for r in verdicts if r.experiment == "E6 (essay)" and r.verdict == "did not learn"]
    assert len(trained) >= 10 and (d / "figures/essay_icl.png").is_file()

    # the gate can say yes: the same table with the model at the ridge's MSE lets the claims count
    curves = pd.read_csv(d / "tables/essay_curves.csv")
    g = curves.variant == "gaussian"
    for k in curves[g].k.unique():
        ridge = curves[g & (curves.estimator == "ridge") & (curves.k == k)].mse_mean.iloc[0]
        curves.loc[g & (curves.estimator == "model") & (curves.k == k), "mse_mean"] = ridge
    curves.to_csv(d / "tables/essay_curves.csv", index=False)
    assert not [r for r in page.essay_rows(d, cfg, "reference.yaml") if r.verdict == "did not learn"]

    # E3 and E2: the done settings only; a (mode, H) waits until its H is done in every done mode
    for exp in ("statistical", "theorem31"):
        shutil.copytree(ref / exp, d / exp)
    done3 = [cp.statistical_setting(m, H, seeds) for m, H in (("fitted", 6), ("reference_code", 6), ("fitted", 1))]
    t31 = cp.theorem31_setting(60, seeds)
    more = page.experiment_rows(d, [(s, "done", {}) for s in (*done3, t31)], cfg, "reference.yaml")
    assert set(pd.read_csv(d / "tables/statistical_emulation.csv").heads) == {6}
    assert set(pd.read_csv(d / "tables/f_emulation.csv").p) == {60}
    e3 = {r.setting: r for r in more if r.experiment == "E3"}
    assert e3["lasso, H=1"].verdict == page.MISSING and e3["lasso, H=6"].verdict != page.MISSING
    assert "(1 of this experiment's not done yet)" in e3["lasso, H=6"].reason  # fitted_H1: made, not tabled yet
    assert (d / "figures/statistical_heads.png").is_file() and (d / "figures/f_emulation.png").is_file()

    # an experiment with no done setting left keeps no derived table or figure
    assert page.experiment_rows(d, [(ames, "partial", {}), (essay, "todo", {})], cfg, "x") == []
    page.write_verdicts(d, [])
    assert not (d / page.VERDICTS).exists()
    assert not list(d.glob("tables/ames*")) and not list(d.glob("figures/ames*")) and not list(d.glob("figures/essay*"))
    assert not list(d.glob("tables/statistical*")) and not list(d.glob("tables/f_*")) and not list(d.glob("figures/f_*"))


def test_training_vs_paper_says_when_our_curve_never_reaches_the_papers_level(tmp_path):
    """Where the paper's E3 values sit on our training curves: a curve that never reaches their level says so, with
    its figure; no published-protocol setting, no section."""
    from tools.campaign.page import training_vs_paper_lines

    def record(name, mode):
        rec = {"mode": mode, "setting": {"mode": mode, "heads": 6}, "seed": 0, "train_history": [1.0] * 5,
               "mse": {"lasso": 1, "ridge": 1, "linear": 1}, "algorithm_counts": {"lasso": 10, "ridge": 10, "linear": 10}}
        (tmp_path / name).write_text(json.dumps(rec))
        return str(tmp_path / name)

    (tmp_path / "figures").mkdir()
    text = "\n".join(training_vs_paper_lines(tmp_path, [record("a.json", "reference_code")]))
    assert "never reaches it in 5 epochs" in text and (tmp_path / "figures/statistical_training.png").is_file()
    assert training_vs_paper_lines(tmp_path, [record("b.json", "fitted")]) == []


def test_page_names_other_code_only_for_changes_outside_results():
    from tools.campaign.page import built_by

    sha = "0123456789abcdef"
    own = ["results/reference/paper-scale/README.md", "results/reference/paper-scale/campaign/resume/x/calls.json"]
    assert built_by({"commit": sha, "dirty": True, "dirty_files": own}) == "0123456789ab"
    assert built_by({"commit": sha, "dirty": True, "dirty_files": own + ["src/algo_emu/tables.py"]}) == \
        "0123456789ab with uncommitted changes"
    assert built_by({"commit": sha, "dirty": None, "dirty_files": None}) == "0123456789ab"
    assert built_by({"commit": None, "dirty": True, "dirty_files": None}) == "? with uncommitted changes"


def test_page_says_a_running_settings_resume_state_is_committed_only_when_git_tracks_it(tmp_path, monkeypatch):
    import subprocess

    from tools.campaign.page import STATUS_WORDS, running_words

    resume = tmp_path / "set/campaign/resume/ames__corrected"
    (resume / "ck").mkdir(parents=True)
    (resume / "ck/h544.pt").write_bytes(b"x" * 3 * 2 ** 20)
    (resume / "calls.json").write_text("[]")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    words = running_words(resume, tmp_path)
    assert words != STATUS_WORDS["running"] and "(3 MB of checkpoints) is not committed" in words
    subprocess.run([*git, "add", "set/campaign/resume/ames__corrected/calls.json"], cwd=tmp_path, check=True)
    assert "is not committed" in running_words(resume, tmp_path)  # a part tracked is not the state committed
    subprocess.run([*git, "add", "-A"], cwd=tmp_path, check=True)
    assert running_words(resume, tmp_path) == STATUS_WORDS["running"]
    monkeypatch.chdir(tmp_path)  # the set's folder given relative, as `campaign page` gets it
    assert running_words(resume.relative_to(tmp_path), tmp_path) == STATUS_WORDS["running"]
    # how far it is: each engine checkpoint's epoch (a finished job's says so); a file that is not one is skipped
    import torch

    torch.save({"epoch": 28, "final": False}, resume / "ck/p60.pt")
    torch.save({"epoch": 100, "final": True}, resume / "ck/a.pt")
    subprocess.run([*git, "add", "-A"], cwd=tmp_path, check=True)
    assert running_words(resume, tmp_path) == (STATUS_WORDS["running"] + "; checkpoints: `a.pt` at epoch 100 "
                                               "(finished), `p60.pt` at epoch 28")


def _wait(cond, timeout: float, what: str):
    import time

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        value = cond()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def test_fault_two_campaign_calls_at_once_the_second_is_refused(clone):
    """The first call is held just after it took its lock (so the test does not hang on its speed); the second,
    `python -m tools.campaign run`, is refused naming it."""
    repo, commit = clone
    set_dir = repo / "results/reference/campaign"
    set_dir.mkdir(parents=True)
    (set_dir / "campaign.json").write_text(json.dumps({"commit": commit, "config": "tests/campaign.yaml", "settings": {},
                                                       "moves": []}))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(repo), str(repo / "src")]))  # the clone's code
    cmd = [sys.executable, "-m", "tools.campaign", "run", "--dir", str(set_dir)]
    lock = repo / ".campaign" / f"{commit[:7]}.run.lock"
    first = subprocess.Popen([sys.executable, "-c",
                              "import sys, time; from tools.campaign import core as cp; from pathlib import Path; "
                              "cp.open_campaign = lambda *a, **k: time.sleep(120); "
                              "cp.run(sys.argv[1], root=Path(sys.argv[2]))", str(set_dir), str(repo)],
                             env=env, cwd=repo)
    try:
        _wait(lambda: lock.exists() and lock.read_text().startswith(f"{first.pid} "), 120, "the first call's lock")
        second = subprocess.run(cmd, env=env, cwd=repo, capture_output=True, text=True, timeout=300)
        assert second.returncode != 0
        assert (f"another `campaign run` (process {first.pid} on {os.uname().nodename}) is using the worktree "
                f"{repo / '.campaign' / commit[:7]}; this call is refused") in second.stderr
        assert not (repo / ".campaign" / commit[:7]).exists()  # refused before making the worktree
    finally:
        first.kill()
        first.wait()


def test_a_tool_step_is_called_with_its_options_and_a_step_declared_twice_is_refused():
    import argparse

    from tools.commands import Step, arg, steps_parser

    calls = []
    parser = argparse.ArgumentParser()
    steps_parser([Step("go", "help", lambda set_dir, n: calls.append((set_dir, n)),
                       [arg("--dir", "set_dir", required=True), arg("--n", type=int, default=1)])])(parser)
    args = parser.parse_args(["go", "--dir", "x", "--n", "3"])
    assert args.func(args) == 0 and calls == [("x", 3)]
    with pytest.raises(ValueError, match="steps declared twice"):
        steps_parser([Step("go", "", print, []), Step("go", "", print, [])])
