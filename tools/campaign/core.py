"""The paper-scale campaign: every paper-scale setting from one pinned commit, one setting per job,
resumable after an interruption and on a fresh machine with the same command.

    make campaign                                      # = python -m tools.campaign run
    python -m tools.campaign status                    # done / running / left, with predicted hours
    python -m tools.campaign replay --setting heads/published/H4_p60   # adopt records made elsewhere
    python -m tools.campaign save                      # copy an unfinished setting's resume state in
    python -m tools.campaign pin --commit <sha> --reason "..."         # moving to new code: explicit
    python -m tools.campaign page                      # rebuild the set's report, tables, figures, manifest
    python -m tools.campaign variants --from <checkout>                # E1's variants (ours) into <dir>/variants/
    python -m tools.campaign converged --from <checkout>               # E1 at convergence (ours) into <dir>/converged/

How it works. The campaign's state lives in the committed set, ``<dir>/campaign.json`` (default
``results/reference/paper-scale``): the pinned commit, the config file, and per setting its status,
the commit that made it, its wall time. ``run`` checks out the pinned commit into a git worktree
(``.campaign/<commit>/``, git-ignored) so this checkout's code can keep changing, and runs each
setting still to do, in :data:`PRIORITY` order, through that commit's own workflow: Snakemake
targeted at the setting's per-seed records, i.e. exactly the jobs ``make run`` would run for it.
When a setting finishes, its per-seed records are copied into the set, the set's tables, figures and
page are rebuilt and its manifest (``manifest.json``: commit, code digest, config hash, hardware,
wall time per setting, sha256 of every file) is written anew.

Surviving an interruption. While a setting trains, its checkpoint (weights, optimiser state, epoch,
history: a few MB for E1-E3) is copied into ``<dir>/campaign/resume/`` every few minutes; committing
the set then carries the unfinished setting over. E4's (tens of MB per hidden-width group) are too large to
commit: they carry a setting over only on the machine that trains it, and the page says which it is
(:func:`tools.campaign.page.running_words`). On the next ``run`` (any machine) the checkpoint is put
back where the pinned commit's rule looks for it, and training resumes from its epoch (the engine
resumes only a checkpoint of the same config and code). The resume file is deleted when its
setting finishes. Each call that trains a setting is recorded beside the resume state (``calls.json``):
its machine, the epochs it resumed from, and what shared the machine with it while it ran
(:class:`tools.campaign.load.LoadMonitor`: the job's CPU, everyone else's, the stretches it was paused or starved),
so a slow call can be told from a slow machine.

Provenance. Every setting records the commit that made it; a setting whose records were made by
another commit counts only after :func:`replay` has retrained its first epoch at the pinned commit
and found every member's recorded train loss bit for bit ("adopted"); otherwise it is trained again.
``pin`` moves the campaign to a new commit and is refused while an experiment has settings at the
old commit and settings still to do (they would be mixed); the move is recorded with its reason.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from tools import commands
from tools.commands import Step, arg
from algo_emu.guard import LockHeld, hold_lock
from algo_emu.io import read_json, sha256_file, utc_now, write_json
from tools.campaign.load import LoadMonitor
from algo_emu.runtime import REPO_ROOT, hardware
from algo_emu.tables import record_commits

DEFAULT_DIR = "results/reference/paper-scale"
DEFAULT_CONFIG = "config/config.yaml"
STATE = "campaign.json"
RESUME_DIR = "campaign/resume"
WORKTREES = ".campaign"
SAVE_EVERY_S = 300.0


class CampaignError(RuntimeError):
    """A campaign that cannot go on as asked; the message names the setting, file or commit."""


# ---------------------------------------------------------------------------------------------------------
# Settings: what one job of the campaign makes
# ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Setting:
    """One paper-scale setting: the Snakemake targets that make it (paths under the worktree's
    ``results/``), the record files the set keeps, the checkpoints that carry it over an interruption."""

    name: str  # e.g. "heads/published/H12_p60": also the records' folder inside the set
    experiment: str  # heads | statistical | ames | theorem31
    targets: tuple[str, ...]
    records: tuple[str, ...]  # worktree paths of the per-seed records (copied to the set, same relative path)
    checkpoints: tuple[str, ...]
    why: str = ""
    #: worktree files the set keeps beside the records (an experiment's tables, sidecars, predictions): copied
    #: with them and hashed by the manifest; the records alone carry the commit that is checked
    extras: tuple[str, ...] = ()

    def set_path(self, record: str) -> str:
        """Where a record lies inside the set: its path below the worktree's ``results/``."""
        return record.split("results/", 1)[1]


def heads_setting(protocol: str, H: int, p: int, seeds: list[int], why: str = "") -> Setting:
    recs = tuple(f"results/heads/{protocol}/runs/H{H}_p{p}/seed{s}/metrics.json" for s in seeds)
    return Setting(f"heads/{protocol}/H{H}_p{p}", "heads", recs, recs,
                   (f"results/heads/checkpoints/{protocol}_H{H}_p{p}.pt",), why)


def statistical_setting(mode: str, H: int, seeds: list[int], why: str = "") -> Setting:
    recs = tuple(f"results/statistical/runs/{mode}_H{H}/seed{s}/metrics.json" for s in seeds)
    return Setting(f"statistical/{mode}_H{H}", "statistical", recs, recs,
                   (f"results/statistical/checkpoints/{mode}_H{H}.pt",
                    f"results/statistical/checkpoints/{mode}_H{H}_blind.pt"), why)


def ames_setting(mode: str, seeds: list[int], why: str = "") -> Setting:
    recs = tuple(f"results/ames/{mode}/seed{s}/metrics.json" for s in seeds)
    extras = (f"results/ames/{mode}/emulator.pt.json", f"results/ames/{mode}/blind.pt.json",
              f"results/ames/{mode}/predictions.csv", *(f"results/ames/{mode}/seed{s}/fits.json" for s in seeds))
    return Setting(f"ames/{mode}", "ames", recs, recs, (f"results/ames/{mode}/checkpoints",), why, extras)


def essay_setting(config: dict, why: str = "") -> Setting:
    """E6 whole: every variant's model and every seed's evaluation (the essay's seeds), then its claims table.
    Its jobs train from scratch (minutes each, no mid-job checkpoint); the models finished so far are its resume
    state, so an interrupted setting retrains only the jobs that had not finished."""
    from algo_emu.essay.plan import essay_seeds, variant_names

    seeds, variants = essay_seeds(config), variant_names(config["essay"])
    recs = tuple([f"results/essay/eval/seed{s}/metrics.json" for s in seeds]
                 + [f"results/essay/models/{v}/seed{s}.json" for v in variants for s in seeds])
    tables = ("results/tables/essay_claims.csv", "results/tables/essay_equivalences.csv")
    extras = (*tables, "results/tables/essay_claims.md", "results/tables/essay_curves.csv",
              "results/tables/essay_equivalences.md", "results/essay/claims_details.json")
    return Setting("essay", "essay", tables, recs, ("results/essay/models",), why, extras)


def theorem31_setting(p: int, seeds: list[int], why: str = "") -> Setting:
    recs = tuple(f"results/theorem31/runs/p{p}/seed{s}/metrics.json" for s in seeds)
    blind = tuple(f"results/theorem31/blind/p{p}/seed{s}/metrics.json" for s in seeds)
    return Setting(f"theorem31/p{p}", "theorem31", recs + blind, recs + blind,
                   (f"results/theorem31/checkpoints/p{p}.pt", f"results/theorem31/checkpoints/blind_p{p}.pt"), why)


#: The order settings run in, and why. E1 first: its heads sweep (H = 12 missing) completes the paper's
#: headline table and the O(1/H) verdict. Then one setting per other trained experiment at the paper's own
#: values, the cheapest experiment first by the benchmark's predicted hours (benchmarks/paper_scale.md), so
#: that the hours spent complete an experiment sooner: the essay (E6, the cheapest of all: a few hours' share of
#: one experiment's), E4 (its reference_code mode, a quarter of corrected's steps, first), E3 at H = 6 (the
#: published script's setting), E2 at p = 60 and 100; then the E1 sweeps the paper reports no number for, then
#: the rest of E3 (the most expensive: 300 epochs per (mode, H)).
PRIORITY_WHY = {
    "heads_sweep": "E1 heads sweep: the paper's headline table and the O(1/H) verdict",
    "statistical_h6": "E3 at H = 6, both modes with their weight-blind baselines (Appendix C.1's setting)",
    "essay": "E6, the essay's claims at config/config.yaml's scale (counted only where its model is within 10 % "
             "of the Bayes-optimal ridge)",
    "ames": "E4, both modes at the paper's p and epochs (Appendix C.2)",
    "theorem31": "E2 at p = 60 and 100 with the weight-blind baselines (Theorem 3.1)",
    "p_sweep": "E1 prompt-length sweep at H = 1 (published code; no number in the paper)",
    "independent": "E1 heads sweep under independent seeds (our corrected protocol)",
    "statistical_rest": "E3's remaining (mode, H) settings, reference_code's first (the Appendix C.1 figure at every H)",
}


def settings(config: dict) -> list[Setting]:
    """Every campaign setting of ``config``, in priority order (no duplicates)."""
    from algo_emu.experiments.heads_settings import settings as heads_settings

    seeds = list(config["seeds"])
    hp = config["heads"]
    out: list[Setting] = []
    published = [(pr, H, p) for pr, H, p in heads_settings(hp) if pr == "published"]
    heads_sweep = [s for s in published if s[2] == hp["p_heads_sweep"] and s[1] in hp["heads_sweep"]]
    # H = 12 first: the one setting of the heads table no record exists for
    for pr, H, p in sorted(heads_sweep, key=lambda s: -s[1]):
        out.append(heads_setting(pr, H, p, seeds, PRIORITY_WHY["heads_sweep"]))
    if config.get("essay"):
        out.append(essay_setting(config, PRIORITY_WHY["essay"]))
    # E4 before E3: cheaper (the benchmark), its reference_code mode (a quarter of corrected's steps) first
    for mode in sorted(config.get("ames", {}).get("modes", []), key=lambda m: m != "reference_code"):
        out.append(ames_setting(mode, seeds, PRIORITY_WHY["ames"]))
    st = config.get("statistical", {})
    for mode in st.get("modes", []):
        if 6 in st.get("heads_sweep", []):
            out.append(statistical_setting(mode, 6, seeds, PRIORITY_WHY["statistical_h6"]))
    t31 = config.get("theorem31", {})
    for p in sorted(t31.get("p_sweep", []), key=lambda p: (p not in (60, 100), p)):
        if p in (60, 100):
            out.append(theorem31_setting(p, seeds, PRIORITY_WHY["theorem31"]))
    for pr, H, p in published:
        if (pr, H, p) not in heads_sweep:
            out.append(heads_setting(pr, H, p, seeds, PRIORITY_WHY["p_sweep"]))
    for pr, H, p in heads_settings(hp):
        if pr == "independent":
            out.append(heads_setting(pr, H, p, seeds, PRIORITY_WHY["independent"]))
    # reference_code (the published script's mode, which the Appendix C.1 figure needs at every H) before fitted
    for mode in sorted(st.get("modes", []), key=lambda m: m != "reference_code"):
        for H in st.get("heads_sweep", []):
            if H != 6:
                out.append(statistical_setting(mode, H, seeds, PRIORITY_WHY["statistical_rest"]))
    for p in t31.get("p_sweep", []):
        if p not in (60, 100):
            out.append(theorem31_setting(p, seeds, "E2's remaining prompt lengths"))
    names = [s.name for s in out]
    assert len(set(names)) == len(names), names
    return out


# ---------------------------------------------------------------------------------------------------------
# State
# ---------------------------------------------------------------------------------------------------------

def _git(*args: str, cwd: Path = REPO_ROOT, check: bool = True) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if check and out.returncode != 0:
        raise CampaignError(f"git {' '.join(args)} failed in {cwd}: {out.stderr.strip()}")
    return out.stdout.strip()


def load_state(set_dir: Path) -> dict:
    path = set_dir / STATE
    if not path.is_file():
        raise CampaignError(f"{path}: no campaign here; start one with "
                            "`python -m tools.campaign pin --commit <sha> --reason ...`")
    state = read_json(path)
    for key in ("commit", "config", "settings", "moves"):
        if key not in state:
            raise CampaignError(f"{path}: key {key!r} missing")
    return state


def save_state(set_dir: Path, state: dict) -> None:
    write_json(set_dir / STATE, state)


def worktree_path(root: Path, commit: str) -> Path:
    """Where the pinned commit's worktree lives: ``.campaign/<commit[:7]>``."""
    return Path(root) / WORKTREES / commit[:7]


def worktree(root: Path, commit: str) -> Path:
    """The pinned commit checked out (detached) at :func:`worktree_path`; created when absent."""
    wt = worktree_path(root, commit)
    if (wt / ".git").exists():
        head = _git("rev-parse", "HEAD", cwd=wt)
        if head != commit:
            raise CampaignError(f"{wt}: worktree is at {head}, the campaign is pinned to {commit}; "
                                "remove it (git worktree remove --force) and run again")
        if _git("status", "--porcelain", "--untracked-files=no", cwd=wt):
            raise CampaignError(f"{wt}: tracked files changed in the campaign's worktree; the evidence must "
                                "be made by the pinned commit as committed")
        return wt
    _git("cat-file", "-e", f"{commit}^{{commit}}", cwd=root)
    _git("worktree", "prune", cwd=root, check=False)
    wt.parent.mkdir(parents=True, exist_ok=True)
    _git("worktree", "add", "--detach", str(wt), commit, cwd=root)
    return wt


def pinned_env(wt: Path) -> dict[str, str]:
    """The environment of a job at the pinned commit: its package source first on the path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(wt / "src") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def pinned_config(wt: Path, config: str) -> dict:
    """The config as the pinned commit validates it (its own schema defaults)."""
    code = ("import json,sys; from algo_emu.config import load_config; "
            "print(json.dumps(load_config(sys.argv[1]), sort_keys=True))")
    out = subprocess.run([sys.executable, "-c", code, config], cwd=wt, env=pinned_env(wt), capture_output=True,
                         text=True, check=False)
    if out.returncode != 0:
        raise CampaignError(f"{config} at {wt.name}: the pinned commit refuses it:\n{out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout)


def pinned_code_version(wt: Path) -> str:
    out = subprocess.run([sys.executable, "-c", "from algo_emu.runtime import code_version; print(code_version())"],
                         cwd=wt, env=pinned_env(wt), capture_output=True, text=True, check=True)
    return out.stdout.strip()


def open_campaign(set_dir: str | Path, root: Path = REPO_ROOT) -> tuple[Path, dict, Path, dict]:
    """(set folder, state, the pinned commit's worktree, the config as that commit resolves it)."""
    set_dir = Path(set_dir)
    state = load_state(set_dir)
    wt = worktree(Path(root), state["commit"])
    return set_dir, state, wt, pinned_config(wt, state["config"])


def _records_in_set(set_dir: Path, s: Setting) -> list[Path]:
    return [set_dir / s.set_path(r) for r in s.records]


def setting_status(set_dir: Path, state: dict, s: Setting) -> str:
    """done | adopted | legacy (records by another commit, not replayed) | partial | running | todo."""
    entry = state["settings"].get(s.name, {})
    present = [p.is_file() for p in _records_in_set(set_dir, s)]
    if all(present):
        commits = {c for p in _records_in_set(set_dir, s) for c in record_commits(read_json(p))}
        if commits == {state["commit"]}:
            return "done"
        earlier = {m["to"] for m in state["moves"]}  # made by this campaign before an explicit move
        if len(commits) == 1 and entry.get("status") == "done" and entry.get("commit") in commits & earlier:
            return "done"
        rp = entry.get("replay", {})
        if rp.get("match") and rp.get("commit") == state["commit"] and rp.get("records_sha256") == {
                p.relative_to(set_dir).as_posix(): sha256_file(p) for p in _records_in_set(set_dir, s)}:
            return "adopted"  # the very files the replay reproduced
        return "legacy"
    if any(present):
        return "partial"
    if (set_dir / RESUME_DIR / _resume_name(s)).exists():
        return "running"
    return "todo"


def _resume_name(s: Setting) -> str:
    return s.name.replace("/", "__")


# ---------------------------------------------------------------------------------------------------------
# Resume state: copied into the set while a setting trains, put back on the next run
# ---------------------------------------------------------------------------------------------------------

def save_resume(set_dir: Path, wt: Path, s: Setting) -> list[Path]:
    """Copy the setting's checkpoints (files, or every file of a checkpoint folder but the writers' locks beside
    them, :func:`algo_emu.guard.claim_setting`) into the set."""
    dest = set_dir / RESUME_DIR / _resume_name(s)
    saved = []
    for ck in s.checkpoints:
        src = wt / ck
        files = sorted(p for p in src.rglob("*") if p.is_file() and p.suffix != ".lock") if src.is_dir() \
            else [src] if src.is_file() else []
        for f in files:
            rel = f.relative_to(wt)
            target = dest / rel
            if target.is_file() and target.stat().st_size == f.stat().st_size and sha256_file(target) == sha256_file(f):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".tmp")
            shutil.copy2(f, tmp)
            os.replace(tmp, target)
            saved.append(target)
    return saved


def restore_resume(set_dir: Path, wt: Path, s: Setting) -> list[Path]:
    """Put a saved resume state back where the pinned rule looks for it (never over a newer file)."""
    src = set_dir / RESUME_DIR / _resume_name(s)
    restored = []
    if not src.is_dir():
        return restored
    for f in sorted(p for p in src.rglob("*") if p.is_file() and p.name != CALLS):
        target = wt / f.relative_to(src)
        if target.is_file() and target.stat().st_mtime >= f.stat().st_mtime:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target)
        restored.append(target)
    return restored


def reopen_finished(files: Iterable[Path]) -> list[Path]:
    """Of ``files`` (checkpoints just restored), those marked ``final`` rewritten with ``final = False``, nothing
    else changed; returns them. A job that finished on another machine left its checkpoint marked final, but its
    outputs (records, model) were not saved with it; the engine does not resume a checkpoint marked final (it
    retrains from scratch, by design against resuming a finished run of other code), so unmarked, the pinned
    commit's own job resumes it at its last epoch with no epoch left and writes its outputs from those weights.
    The engine still resumes it only for the same config and code (its fingerprint)."""
    import torch

    from algo_emu.io import save_torch

    reopened = []
    for f in files:
        got = checkpoint_progress(f) if f.suffix == ".pt" else None
        if got is None or not got[1]:
            continue
        ck = torch.load(f, map_location="cpu", weights_only=False)
        ck["final"] = False
        save_torch(f, ck)
        reopened.append(f)
    return reopened


def drop_resume(set_dir: Path, s: Setting) -> None:
    shutil.rmtree(set_dir / RESUME_DIR / _resume_name(s), ignore_errors=True)


#: Beside a setting's resume state: one entry per call that trained it (machine, start, epochs it resumed
#: from), so a setting carried over between machines says which CPU made which epochs.
CALLS = "calls.json"


def checkpoint_progress(f: Path) -> tuple[int, bool] | None:
    """(epoch, whether its job finished) of an engine checkpoint file; None when it holds no epoch (being written,
    or another format)."""
    import torch

    try:
        ck = torch.load(f, map_location="cpu", weights_only=False)
        return int(ck["epoch"]), bool(ck.get("final"))
    except Exception:  # noqa: BLE001  (a checkpoint being written, or another format: not an epoch)
        return None


def checkpoint_epochs(wt: Path, s: Setting) -> dict[str, int]:
    """The epoch each of the setting's checkpoints in the worktree holds (worktree-relative path -> epoch)."""
    out = {}
    for ck in s.checkpoints:
        src = wt / ck
        for f in sorted(src.rglob("*.pt")) if src.is_dir() else [src] if src.is_file() else []:
            got = checkpoint_progress(f)
            if got is not None:
                out[f.relative_to(wt).as_posix()] = got[0]
    return out


def _calls_path(set_dir: Path, s: Setting) -> Path:
    return set_dir / RESUME_DIR / _resume_name(s) / CALLS


def start_call(set_dir: Path, wt: Path, s: Setting, reopened: Iterable[Path] = ()) -> list[dict]:
    """Append this call (hardware, start, the epochs its checkpoints resume from, the finished jobs' checkpoints
    :func:`reopen_finished` unmarked) to the setting's calls; returns them all. Written into the resume state, so
    it is committed and carried with it."""
    path = _calls_path(set_dir, s)
    calls = read_json(path) if path.is_file() else []
    call = {"started": utc_now(), "hardware": hardware(), "resumed_from": checkpoint_epochs(wt, s)}
    if reopened:
        call["restored_final_cleared"] = sorted(Path(f).relative_to(wt).as_posix() for f in reopened)
    calls.append(call)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, calls)
    return calls


# ---------------------------------------------------------------------------------------------------------
# Hardware and the manifest of a committed set
# ---------------------------------------------------------------------------------------------------------

def write_manifest(set_dir: Path, state: dict) -> dict:
    from algo_emu.report.manifest import file_hashes

    files = file_hashes(set_dir)
    manifest = {
        "kind": "campaign set",
        "files_root": ".",
        "created": utc_now(),
        "commit": state["commit"],
        "code_version": state.get("code_version"),
        "config": state["config"],
        "config_hash": state.get("config_hash"),
        "settings": {name: {k: v for k, v in e.items() if k in ("status", "commit", "code_version", "wall_seconds",
                                                                  "finished", "hardware", "calls", "replay")}
                     for name, e in sorted(state["settings"].items())},
        "moves": state["moves"],
        "files": files,
        "n_files": len(files),
    }
    write_json(set_dir / "manifest.json", manifest)
    return manifest


# ---------------------------------------------------------------------------------------------------------
# Replay: are records made by another commit what the pinned commit makes?
# ---------------------------------------------------------------------------------------------------------

def replay(set_dir: Path, setting: str, epochs: int = 1, root: Path = REPO_ROOT) -> dict:
    """Train the first ``epochs`` epochs of an E1 setting at the pinned commit, with the thread count its
    records name, and compare every member's recorded train loss bit for bit. The outcome is stored in
    ``campaign.json``; a match makes the setting "adopted"."""
    set_dir, state, wt, cfg = open_campaign(set_dir, root)
    config = state["config"]
    s = {x.name: x for x in settings(cfg)}.get(setting)
    if s is None or s.experiment != "heads":
        raise CampaignError(f"replay: {setting!r} is not an E1 setting of {config} (replay covers E1 records)")
    in_set = _records_in_set(set_dir, s)
    paths = in_set if any(p.is_file() for p in in_set) else [set_dir / PRE / s.set_path(r) for r in s.records]
    recs = {p: read_json(p) for p in paths if p.is_file()}
    if len(recs) != len(s.records):
        raise CampaignError(f"replay {setting}: {len(s.records) - len(recs)} of {len(s.records)} records missing "
                            f"under {set_dir}")
    first = next(iter(recs.values()))
    threads = {r["environment"].get("threads") for r in recs.values()}
    if len(threads) != 1:
        raise CampaignError(f"replay {setting}: records name different thread counts {sorted(threads)}")
    params = dict(cfg["heads"])
    differs = {k: (v, params.get(k)) for k, v in first["params"].items()
               if k in params and k not in ("epochs", "attention") and params.get(k) != v}
    if differs:
        raise CampaignError(f"replay {setting}: the records' config differs from {config} at the pinned commit: "
                            f"{differs}")
    params["epochs"] = epochs
    params["eval_every"] = 0
    protocol, H, p = first["protocol"], first["setting"]["heads"], first["setting"]["p"]
    seeds = sorted(r["seed"] for r in recs.values())
    data = ["data/heads/published/dataset.pt"] if protocol == "published" else \
        [f"data/heads/seed{k}/dataset.pt" for k in seeds]
    missing = [d for d in data if not (wt / d).is_file()]
    if missing:
        _snakemake(wt, config, missing)
    scratch = wt / "results" / "replay" / s.name.replace("/", "_")
    shutil.rmtree(scratch, ignore_errors=True)
    # the pinned commit's command line (pinned_env runs its code): one JSON job, or flags before that form
    if "def bind_job(" in (wt / "src" / "algo_emu" / "cli.py").read_text():
        job = {"params": params, "protocol": protocol, "H": H, "p": p, "seeds": seeds, "data_paths": data,
               "out_dir": str(scratch), "device_spec": "cpu"}
        cmd = [sys.executable, "-m", "algo_emu", "heads", "train", json.dumps(job, sort_keys=True)]
    else:
        cmd = [sys.executable, "-m", "algo_emu", "heads", "train", "--params", json.dumps(params, sort_keys=True),
               "--protocol", protocol, "--heads", str(H), "--p", str(p), "--seeds", *map(str, seeds), "--data", *data,
               "--out-dir", str(scratch), "--device", "cpu"]
    cmd += ["--threads", str(threads.pop())]
    t0 = time.time()
    log = wt / "logs" / f"replay_{s.name.replace('/', '_')}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as fh:
        rc = subprocess.run(cmd, cwd=wt, env=pinned_env(wt), stdout=fh, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise CampaignError(f"replay {setting}: training failed (exit {rc}); see {log}")
    compared, mismatched, max_diff = 0, [], 0.0
    for path, rec in sorted(recs.items()):
        new = read_json(scratch / f"seed{rec['seed']}" / "metrics.json")
        if new["data_sha256"] != rec["data_sha256"]:
            mismatched.append(f"seed{rec['seed']}: data sha256 differs")
            continue
        for e in range(epochs):
            old_l, new_l = rec["history"][e]["train_loss"], new["history"][e]["train_loss"]
            for role in sorted(old_l):
                compared += 1
                diff = abs(old_l[role] - new_l[role])
                max_diff = max(max_diff, diff)
                if old_l[role] != new_l[role]:
                    mismatched.append(f"seed{rec['seed']} {role} epoch {e + 1}: {old_l[role]!r} vs {new_l[role]!r}")
    outcome = {"commit": state["commit"], "epochs": epochs, "threads": first["environment"]["threads"],
               "compared": compared, "match": not mismatched and compared > 0, "max_abs_diff": max_diff,
               "mismatches": mismatched[:10], "n_mismatches": len(mismatched),
               "records_commits": sorted({r["environment"].get("git_commit") for r in recs.values()}),
               "records_code_versions": sorted({r["environment"].get("code_version") for r in recs.values()}),
               "seconds": round(time.time() - t0, 1), "when": utc_now(), "hardware": hardware(),
               "records_sha256": {p.relative_to(set_dir).as_posix(): sha256_file(p) for p in sorted(recs)}}
    state = load_state(set_dir)  # re-read: another process may have written it meanwhile
    state["settings"].setdefault(s.name, {})["replay"] = outcome
    save_state(set_dir, state)
    shutil.rmtree(scratch, ignore_errors=True)
    if not outcome["match"]:
        retire(set_dir, s)
    elif paths != in_set:  # reproduced: records kept apart until now join the campaign's set
        for src, dest in zip(paths, in_set):
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dest)
    return outcome


#: Where records that the campaign did not make and could not adopt are kept, with their own page.
PRE = "pre-campaign"


def retire(set_dir: Path, s: Setting) -> list[Path]:
    """Move a setting's records made by another commit (and their training log) out of the campaign's
    set into ``<set>/pre-campaign/``, where they keep their own page: the campaign's tables then hold only
    what its pinned commit made or adopted, and the setting is trained again."""
    moved = []
    for src in _records_in_set(set_dir, s):
        if src.is_file():
            dest = set_dir / PRE / src.relative_to(set_dir)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dest)
            moved.append(dest)
    if s.experiment == "heads":
        _, protocol, hp = s.name.split("/")
        log = set_dir / "logs" / f"{protocol}_{hp}.log"
        if log.is_file():
            (set_dir / PRE / "logs").mkdir(parents=True, exist_ok=True)
            os.replace(log, set_dir / PRE / "logs" / log.name)
    for d in sorted({p.parent for p in _records_in_set(set_dir, s)} | {p.parent.parent for p in _records_in_set(set_dir, s)},
                    reverse=True):
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()
    return moved


# ---------------------------------------------------------------------------------------------------------
# Run
# ---------------------------------------------------------------------------------------------------------

def _snakemake(wt: Path, config: str, targets: Iterable[str], cores: int = 2, log: Path | None = None,
               monitor: LoadMonitor | None = None) -> int:
    """Snakemake at the pinned commit's worktree; ``monitor``, when given, samples its process tree while it runs."""
    targets = list(targets)
    # --directory: the worktree itself, whatever folder (workdir) the pinned config names for its own runs
    cmd = [str(Path(sys.executable).with_name("snakemake")), *targets, "--profile", "workflow/profiles/default",
           "--cores", str(cores), "--configfile", config, "--directory", str(wt)]
    if log is None:
        return subprocess.run(cmd, cwd=wt, env=pinned_env(wt), check=True).returncode
    with open(log, "a") as fh:
        fh.write(f"{utc_now()} {shlex.join(cmd)}\n")
        fh.flush()
        proc = subprocess.Popen(cmd, cwd=wt, env=pinned_env(wt), stdout=fh, stderr=subprocess.STDOUT)
        try:
            if monitor is not None:
                monitor.start(proc.pid)
            return proc.wait()
        finally:
            if proc.poll() is None:  # interrupted here (KeyboardInterrupt): do not leave Snakemake running alone
                proc.terminate()
                proc.wait()
            if monitor is not None:
                monitor.stop()


def _hold_run_lock(wt: Path):
    """One ``campaign run`` per worktree: an exclusive lock on a file beside it, held while this process
    lives (the kernel drops it when the process dies, so a killed run leaves no stale lock). Holding it
    means no Snakemake of ours is running in the worktree, so a Snakemake lock found there was left by a
    killed run and is removed (``snakemake --unlock``)."""
    try:
        fh = hold_lock(wt.parent / f"{wt.name}.run.lock")
    except LockHeld as exc:
        raise CampaignError(f"another `campaign run` ({exc.holder}) is using the worktree {wt}; this call is "
                            "refused: wait for it to end, or stop it") from None
    locks = wt / ".snakemake" / "locks"
    if locks.is_dir() and any(locks.iterdir()):
        print(f"{utc_now()} campaign: removing the Snakemake lock a killed run left in {wt}", flush=True)
        subprocess.run([str(Path(sys.executable).with_name("snakemake")), "--unlock", "--profile",
                        "workflow/profiles/default", "--cores", "1"], cwd=wt, env=pinned_env(wt), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return fh


def record_load(set_dir: Path, s: Setting, load: dict) -> list[dict]:
    """Write what shared the machine with this call (:class:`tools.campaign.load.LoadMonitor`'s summary) into its
    entry of the setting's calls; returns them all."""
    path = _calls_path(set_dir, s)
    calls = read_json(path) if path.is_file() else [{}]
    calls[-1]["load"] = load
    write_json(path, calls)
    return calls


def _keep_saving(set_dir: Path, wt: Path, s: Setting, stop: threading.Event, every: float,
                 monitor: LoadMonitor | None = None) -> None:
    while not stop.wait(every):
        try:
            save_resume(set_dir, wt, s)
            if monitor is not None:
                record_load(set_dir, s, monitor.summary())
        except OSError:  # a checkpoint being replaced right now: the next round takes it
            pass


def run_setting(set_dir: Path, wt: Path, state: dict, s: Setting, cores: int, save_every: float) -> dict:
    start_call(set_dir, wt, s, reopen_finished(restore_resume(set_dir, wt, s)))
    log = wt.parent / "logs" / f"{_resume_name(s)}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    monitor = LoadMonitor()
    saver = threading.Thread(target=_keep_saving, args=(set_dir, wt, s, stop, save_every, monitor), daemon=True)
    saver.start()
    t0 = time.time()
    try:
        rc = _snakemake(wt, state["config"], s.targets, cores, log, monitor)
    finally:
        stop.set()
        saver.join()
        calls = record_load(set_dir, s, monitor.summary())
    wall = time.time() - t0
    if rc != 0:
        save_resume(set_dir, wt, s)
        raise CampaignError(f"setting {s.name} failed (snakemake exit {rc}); log: {log}; its resume state is "
                            f"under {set_dir / RESUME_DIR}")
    return finish_setting(set_dir, wt, state, s, calls, wall)


def training_seconds(wt: Path, s: Setting) -> float:
    """A finished setting's training seconds over every call that made it (a setting resumed after an
    interruption spans several): every epoch of each training job (:func:`tools.campaign.training.training_jobs`:
    E4's sidecars, else each folder of seeds and block of a record)."""
    sidecars = {wt / r: read_json(wt / r) for r in s.extras if r.endswith(".pt.json")}
    recs = {wt / r: read_json(wt / r) for r in s.records}
    from tools.campaign.training import training_jobs

    return sum(float(sum(b["epoch_seconds"])) for b in training_jobs(recs, sidecars).values())


def finish_setting(set_dir: Path, wt: Path, state: dict, s: Setting, calls: list[dict], wall: float | None) -> dict:
    """A setting whose jobs finished in the worktree: copy its records and extras into the set, check they name
    the pinned commit, drop its resume state; returns its state entry. ``wall``: this call's seconds (None when
    finishing what an earlier call trained, e.g. after a crash between the copy and the state's save).
    Training time: :func:`training_seconds`."""
    for r in (*s.records, *s.extras):
        dest = set_dir / s.set_path(r)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(wt / r, dest)
    commits = {c for r in s.records for c in record_commits(read_json(set_dir / s.set_path(r)))}
    if commits != {state["commit"]}:
        raise CampaignError(f"setting {s.name}: records name commits {sorted(map(str, commits))}, the campaign is "
                            f"pinned to {state['commit']}")
    trained = training_seconds(wt, s)
    drop_resume(set_dir, s)
    return {"status": "done", "commit": state["commit"], "code_version": state.get("code_version"),
            "wall_seconds_this_call": round(wall, 1) if wall is not None else None,
            "wall_seconds": round(trained or wall or 0.0, 1), "finished": utc_now(), "hardware": hardware(),
            "calls": calls}


def sync_extras(set_dir: Path, wt: Path, s: Setting) -> list[Path]:
    """Copy a done setting's extras that the set lacks from the worktree, only where the worktree's records are
    byte for byte the set's (the same run made both); returns what was copied."""
    missing = [r for r in s.extras if not (set_dir / s.set_path(r)).is_file() and (wt / r).is_file()]
    if not missing or any(not (wt / r).is_file() or sha256_file(wt / r) != sha256_file(set_dir / s.set_path(r))
                          for r in s.records):
        return []
    for r in missing:
        dest = set_dir / s.set_path(r)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(wt / r, dest)
    return [set_dir / s.set_path(r) for r in missing]


def _raise_priority() -> None:
    """The campaign's jobs are the evidence: on a shared machine, give their session's scheduling group
    (Linux autogroup; its children inherit it) the nice value ``ALGO_EMU_PRIORITY`` (default -10; needs
    root; best effort, ``ALGO_EMU_PRIORITY=0`` leaves the scheduler alone)."""
    try:
        Path("/proc/self/autogroup").write_text(os.environ.get("ALGO_EMU_PRIORITY", "-10"))
    except OSError:
        pass


def run(set_dir: str = DEFAULT_DIR, only: list[str] | None = None, max_settings: int | None = None,
        cores: int = 2, save_every: float = SAVE_EVERY_S, root: Path = REPO_ROOT) -> list[str]:
    """Run the campaign's settings still to do, in priority order; return the names finished."""
    root = Path(root)
    commit = load_state(Path(set_dir))["commit"]
    if _git("diff", "--stat", commit, "HEAD", "--", "requirements.lock", cwd=root, check=False):
        raise CampaignError(f"requirements.lock differs between the pinned commit {commit[:12]} and this "
                            "checkout: the environment would not be the one the campaign's settings were made in")
    # first, before the worktree is made or any state written: a second call at once is refused here
    lock = _hold_run_lock(worktree_path(root, commit))  # noqa: F841  (held until this process exits)
    set_dir, state, wt, cfg = open_campaign(set_dir, root)
    _raise_priority()
    state.setdefault("code_version", pinned_code_version(wt))
    save_state(set_dir, state)
    todo = [s for s in settings(cfg) if not only or s.name in only]
    if only:
        unknown = sorted(set(only) - {s.name for s in todo})
        if unknown:
            raise CampaignError(f"unknown setting(s) {unknown}; `campaign status` lists them")
    finished = []
    for s in todo:
        status = setting_status(set_dir, state, s)
        calls_file = _calls_path(set_dir, s)
        if status == "done" and state["settings"].get(s.name, {}).get("status") != "done" and calls_file.is_file():
            # its records reached the set but the call stopped before saving its state: finish it from the worktree
            state["settings"][s.name] = finish_setting(set_dir, wt, state, s, read_json(calls_file), None)
            save_state(set_dir, state)
            _page_in_fresh_process(set_dir, root)
            finished.append(s.name)
            print(f"{utc_now()} campaign: {s.name} finished from the worktree (records already in the set)", flush=True)
            continue
        if status in ("done", "adopted"):
            if sync_extras(set_dir, wt, s):
                _page_in_fresh_process(set_dir, root)
            continue
        if max_settings is not None and len(finished) >= max_settings:
            break
        kept_apart = all((set_dir / PRE / s.set_path(r)).is_file() for r in s.records)
        if s.experiment == "heads" and (status == "legacy" or (status == "todo" and kept_apart)) and \
                state["settings"].get(s.name, {}).get("replay", {}).get("commit") != state["commit"]:
            print(f"{utc_now()} campaign: {s.name} was made by another commit: replaying its first epoch", flush=True)
            if replay(set_dir, s.name, root=root)["match"]:
                _page_in_fresh_process(set_dir, root)
                state = load_state(set_dir)
                continue
            state = load_state(set_dir)
        print(f"{utc_now()} campaign: {s.name} ({status}) at {state['commit'][:12]}: {s.why}", flush=True)
        entry = run_setting(set_dir, wt, state, s, cores, save_every)
        state = load_state(set_dir)
        # made at the pinned commit now: an earlier replay of older records no longer describes it
        state["settings"][s.name] = {k: v for k, v in state["settings"].get(s.name, {}).items() if k != "replay"} | entry
        save_state(set_dir, state)
        _page_in_fresh_process(set_dir, root)
        finished.append(s.name)
        print(f"{utc_now()} campaign: {s.name} done in {entry['wall_seconds'] / 60:.1f} min", flush=True)
    return finished


def save(set_dir: str = DEFAULT_DIR, root: Path = REPO_ROOT) -> list[str]:
    """Copy the resume state of every unfinished setting whose checkpoint exists in the worktree."""
    set_dir, state, wt, cfg = open_campaign(set_dir, root)
    saved = []
    for s in settings(cfg):
        if setting_status(set_dir, state, s) in ("done", "adopted"):
            continue
        saved += [str(p) for p in save_resume(set_dir, wt, s)]
    return saved


def pin(set_dir: str = DEFAULT_DIR, commit: str = "HEAD", config: str = DEFAULT_CONFIG, reason: str = "",
        mixed_ok: bool = False, root: Path = REPO_ROOT) -> dict:
    """Start a campaign at ``commit``, or move one there: explicit and recorded. A move that leaves an
    experiment with settings at the old commit and settings still to do is refused unless ``mixed_ok``;
    then the move names those experiments and their pages say MIXED with both commits."""
    set_dir = Path(set_dir)
    if not reason:
        raise CampaignError("pin: --reason is required (a move of the campaign to other code is recorded)")
    full = _git("rev-parse", f"{commit}^{{commit}}", cwd=Path(root))
    path = set_dir / STATE
    if path.is_file():
        state = load_state(set_dir)
        if state["commit"] == full:
            return state
        wt_new = worktree(Path(root), full)
        cfg = pinned_config(wt_new, state["config"])
        by_exp: dict[str, list[tuple[str, str]]] = {}
        for s in settings(cfg):
            by_exp.setdefault(s.experiment, []).append((s.name, setting_status(set_dir, state, s)))
        mixed = {e: [n for n, st in v if st in ("done", "adopted")] for e, v in by_exp.items()
                 if any(st in ("done", "adopted") for _, st in v) and any(st not in ("done", "adopted") for _, st in v)}
        if mixed and not mixed_ok:
            raise CampaignError("pin: refused, these experiments have settings made at "
                                f"{state['commit'][:12]} and settings still to do, which would be made at "
                                f"{full[:12]} and mixed: {mixed}. Finish them first, replay them at the new commit, or "
                                "move with --mixed-ok (recorded; their pages then say MIXED).")
        state["moves"].append({"from": state["commit"], "to": full, "reason": reason, "when": utc_now(),
                               "mixed_experiments": sorted(mixed)})
        state["commit"] = full
        state.pop("code_version", None)
    else:
        state = {"commit": full, "config": config, "settings": {},
                 "moves": [{"from": None, "to": full, "reason": reason, "when": utc_now()}]}
    wt = worktree(Path(root), full)
    state["code_version"] = pinned_code_version(wt)
    cfg = pinned_config(wt, state["config"])
    from algo_emu.runtime import config_hash

    state["config_hash"] = config_hash(cfg)
    set_dir.mkdir(parents=True, exist_ok=True)
    save_state(set_dir, state)
    return state


def status(set_dir: str = DEFAULT_DIR, root: Path = REPO_ROOT) -> list[dict]:
    set_dir, state, wt, cfg = open_campaign(set_dir, root)
    rows = [{"setting": s.name, "status": setting_status(set_dir, state, s), "why": s.why} for s in settings(cfg)]
    for r in rows:
        print(f"{r['status']:8s} {r['setting']:34s} {r['why']}")
    return rows


#: The benchmark the predicted hours come from (``make bench``): seconds per step of each paper shape.
BENCHMARK = REPO_ROOT / "benchmarks" / "paper_scale.json"


#: The same benchmark made on the other machines the campaign ran on (``make bench
#: BENCH_OUT=tools/benchmarks/paper_scale_<machine>``): CPUs differ by several times at these shapes.
MACHINE_BENCHMARKS = "tools/benchmarks"


def benchmark_files(root: Path = REPO_ROOT) -> list[Path]:
    """:data:`BENCHMARK` first (the machine the README's cost table is priced on), then each other machine's
    (``tools/benchmarks/paper_scale_<machine>.json``)."""
    first = Path(root) / BENCHMARK.relative_to(REPO_ROOT)
    return ([first] if first.is_file() else []) + sorted((Path(root) / MACHINE_BENCHMARKS).glob("paper_scale_*.json"))


def predicted_from_benchmark(s: Setting, bench: Path | dict = BENCHMARK) -> float | None:
    """Predicted wall seconds of ``s`` on the benchmark's machine, or None when it has no row for it.
    ``bench``: the benchmark's JSON file, or its contents already read."""
    if isinstance(bench, Path) and not bench.is_file():
        return None
    bench = read_json(bench) if isinstance(bench, Path) else bench
    row = bench.get("settings", {}).get(s.name)
    if row is None and s.experiment == "essay":  # one setting: the essay's whole training DAG
        row = bench.get("prediction", {}).get("experiments", {}).get("E6 essay")
        return None if row is None else 3600.0 * float(row["hours"])
    return None if row is None else float(row["predicted_seconds"])


def _page_in_fresh_process(set_dir: Path, root: Path) -> None:
    """``campaign page`` in a new process, so that the page is built by the checkout's code as it is now
    (the commit the page names), not by the code a long ``campaign run`` loaded when it started. A failed
    rebuild does not stop the campaign (the records are in the set; ``campaign page`` rebuilds it) but is
    reported."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(root)), str(Path(root) / "src"),
                                                       os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-m", "tools.campaign", "page", "--dir", str(set_dir)], cwd=root,
                         env=env, capture_output=True, text=True)
    if res.returncode != 0:
        print(f"{utc_now()} campaign: rebuilding the page of {set_dir} FAILED (exit {res.returncode}); run "
              f"`python -m tools.campaign page --dir {set_dir}`:\n{res.stderr[-3000:]}", flush=True)


def build_page(set_dir: Path, root: Path = REPO_ROOT) -> None:
    """Tables, figures and README of the set from its adopted and done records, then its manifest."""
    from tools.campaign.page import build

    state = load_state(set_dir)
    build(set_dir, state, root)
    write_manifest(set_dir, load_state(set_dir))


def _run(set_dir: str, only: list[str] | None, max_settings: int | None, cores: int) -> None:
    run(set_dir, only, max_settings, cores)


def _replay(set_dir: str, setting: list[str], epochs: int) -> None:
    for name in setting:
        out = replay(Path(set_dir), name, epochs)
        print(f"{name}: {'MATCH' if out['match'] else 'DIFFERS'} ({out['compared']} losses compared, max |diff| "
              f"{out['max_abs_diff']:.3g}, {out['seconds']:.0f} s)", flush=True)
        for m in out["mismatches"]:
            print(f"  {m}")
    build_page(Path(set_dir))


def _save(set_dir: str) -> None:
    for p in save(set_dir):
        print(p)


def _pin(set_dir: str, commit: str, config: str, reason: str, mixed_ok: bool) -> None:
    st = pin(set_dir, commit, config, reason, mixed_ok)
    print(f"campaign at {st['commit']} ({st['code_version']}), config {st['config']} ({st['config_hash']})")


def _status(set_dir: str) -> None:
    status(set_dir)


def _page(set_dir: str) -> None:
    build_page(Path(set_dir))


def _variants(set_dir: str, checkout: str, config: str) -> None:
    from tools.campaign.variants import SUBDIR, import_variants

    imported = import_variants(set_dir, checkout, config)
    print(f"{Path(set_dir) / SUBDIR}: {len(imported['variants'])} variant(s) made by {imported['from_commit'][:12]} "
          f"({imported['code_version']}) imported from {checkout}; rebuilding the page", flush=True)
    build_page(Path(set_dir))


def _converged(set_dir: str, checkout: str, config: str) -> None:
    from tools.campaign.converged import SUBDIR, import_converged

    imported = import_converged(set_dir, checkout, config)
    print(f"{Path(set_dir) / SUBDIR}: the convergence check{' and the converged table' if imported['converged'] else ''}"
          f" made by {imported['from_commit'][:12]} ({imported['code_version']}) imported from {checkout}; rebuilding "
          "the page", flush=True)
    build_page(Path(set_dir))


DIR = arg("--dir", "set_dir", default=DEFAULT_DIR, help="the committed set (holds campaign.json)")
FROM = (arg("--from", "checkout", required=True, help="root of the checkout whose results/ hold the run"),
        arg("--config", default=DEFAULT_CONFIG, help="the config the run used, a path inside the checkout"))
STEPS = [
    Step("run", "run the settings still to do, in priority order, at the pinned commit", _run,
         [DIR, arg("--only", nargs="+", help="just these settings (names as `campaign status` prints them)"),
          arg("--max-settings", type=int, help="stop after this many settings"),
          arg("--cores", type=int, default=2)]),
    Step("replay", "retrain the first epochs of committed E1 settings at the pinned commit; compare bit for bit",
         _replay, [DIR, arg("--setting", nargs="+", required=True), arg("--epochs", type=int, default=1)]),
    Step("save", "copy unfinished settings' checkpoints into the set (to commit them)", _save, [DIR]),
    Step("pin", "start the campaign at a commit, or move it (explicit; refused where it would mix)", _pin,
         [DIR, arg("--commit", default="HEAD"), arg("--config", default=DEFAULT_CONFIG), arg("--reason", required=True),
          arg("--mixed-ok", action="store_true", help="move although some experiments would mix two commits")]),
    Step("status", "every setting with its status, in priority order", _status, [DIR]),
    Step("page", "rebuild the set's tables, figures, README and manifest", _page, [DIR]),
    Step("variants", "import a finished `snakemake heads_variants` run of a clean checkout into <dir>/variants/ "
         "(checked: every variant and seed, one commit, no uncommitted changes), then rebuild the page", _variants,
         [DIR, *FROM]),
    Step("converged", "import E1's convergence check (and the heads table at convergence, once made) of a clean "
         "checkout into <dir>/converged/ (checked as variants, and each table recomputed from its records), then "
         "rebuild the page", _converged,
         [DIR, *FROM]),
]
add_parser = commands.steps_parser(STEPS)
