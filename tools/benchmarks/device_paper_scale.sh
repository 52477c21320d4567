#!/usr/bin/env bash
# Every trained experiment (E1 heads, E2 theorem31, E3 statistical, E4 ames) at the paper's scale on one GPU,
# inside a stated time budget, writing the records the Snakemake rules write (docs/gpu.md).
#
# On a GPU machine without snakemake or a network:
#   run(command="bash tools/benchmarks/device_paper_scale.sh", carry=[".whl", "data/raw"], timeout_s=600)
# Here on CPU at tiny scale (what tests/test_device_script.py runs):
#   OUT=/tmp/out SCALE=tiny BUDGET=300 PYTHON=.venv/bin/python bash tools/benchmarks/device_paper_scale.sh
#
# Why the package CLI and not snakemake: snakemake is not installed on the device machine (carrying it would
# be ~30 wheels, untested there) and it cannot stop every job at a deadline and say what was cut. The script
# runs exactly the CLI steps the rules run (workflow/rules/{heads,theorem31,statistical,ames}.smk), with
# the same --params (each rule's slice of the config section, defaults filled by algo_emu.config.load_config),
# so the per-seed records are the same files; a test checks the slices against the rules.
#
# Budget (BUDGET seconds from the script's start, default 540: a 10-minute command limit with margin):
#   * phase 1, until BUDGET - RESERVE: one scheduler runs every step (data, fits, training, weight-blind
#     baselines, frozen evaluation) as its own process, at most MAX_JOBS at once (default 4, fewer on fewer CPUs: docs/gpu.md says why;
#     all share the one GPU), ready steps started in the order of EXPERIMENTS (default: E1's published heads
#     sweep first, the headline; then E2, E4, E3, E1's p sweep, E1's independent protocol).
#     At the deadline every running step is stopped (SIGTERM, then SIGKILL) and nothing new starts.
#   * phase 2, until BUDGET - 20: aggregation from the settings whose every per-seed record exists.
#     E1: `heads aggregate --allow-partial` (its tables say PARTIAL and name the missing rows), fit, figures.
#     E2-E4 have no partial mode: a complete experiment's tables go to tables/ (figures to figures/); a
#     partial one's tables are built from its complete settings only into tables/partial/ (E2 over its complete
#     p; E3 per mode over that mode's complete H, as its table needs a full grid), beside a README.md naming
#     what is missing. A setting with a missing seed record is never aggregated.
#   * phase 3: packing (seconds).
# Settings not finished are named in status.json and README.md (SUMMARY.md) with why: cut at the deadline
# (epoch k/N reached), failed (exit code, last log line), blocked (a step it needs did not finish), not
# started (no time left) or not selected (EXPERIMENTS). Training checkpoints are written every epoch; those
# of unfinished steps (and finished frozen models whose evaluation did not run) come back in resume.tar.gz, or
# cut into resume.tar.gz.part00, .part01, ... when larger than one returned file may be (RESUME_PART_MIB); what
# does not fit in the files a runner returns is left out setting by setting, the longest-trained kept first,
# and SUMMARY.md says which. RESUME=<that file, or its first part> continues them in a later call. REUSE_DIR
# (default results/reference/gpu in the copy sent, i.e. a committed earlier run) supplies settings already
# complete, when its config hash matches, and its resume state (if committed there) is the default RESUME. A checkpoint of other code or config is
# ignored by the trainer (its fingerprint), so a stale RESUME costs only the time to unpack it.
#
# Returned under $OUT (flat: a remote runner may return at most 8 files, no more than 2 folders deep):
#   gpu_reference.tar.gz  gpu/...: extract in results/reference/ -> results/reference/gpu/ (records, tables,
#                         figures, learning curves, README.md, status.json, device.json; never weights)
#   SUMMARY.md            = gpu/README.md: what finished, what is missing and why, the device, the times
#   status.json           per experiment: wanted / complete / missing settings; per step: state, seconds, epochs
#   device.json           GPU name, driver, torch and CUDA versions, CPU count
#   logs.tar.gz           every step's log (per-epoch times: the numbers to size the next budget)
#   resume.tar.gz         checkpoints and frozen models of unfinished work (absent when nothing is unfinished),
#                         or resume.tar.gz.part00, .part01, ... (cat joins them) when over RESUME_PART_MIB
# Exit status: 0 every selected setting complete, 3 partial (records written, missing ones named), 1 nothing.
#
# Knobs (environment): OUT (required), BUDGET=540, RESERVE=60 (phase 2 + 3), MAX_JOBS=4 (or the CPU count if fewer),
# SCALE=paper|tiny (config/config.yaml or tests/tiny.yaml), CONFIG=<yaml> (overrides SCALE's file),
# DEVICE=cuda (tiny: cpu), EXPERIMENTS="heads theorem31 ames statistical p_sweep independent",
# COMPILE=0|1|config (torch.compile the training step; default 0: compile time on 16 concurrent jobs would eat
# the budget and inductor is untried there; E1's sweep config hash does not include it), THREADS=1 (torch
# threads per step), WORK=/tmp/algo-emu-gpu (scratch), RESUME, REUSE_DIR, RESUME_PART_MIB=15 (largest part),
# RETURN_FILES=8 (files a runner returns), SPARE_FILES=1 (of those, left for the caller's own), GIT_COMMIT (recorded in
# device.json; the copy sent has no .git), PYTHON (default python3: the one holding torch there).
set -uo pipefail
: "${OUT:?set OUT (the folder the results are written to)}"
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=${PYTHON:-python3}
# jsonschema (config validation) is not installed on the device machine: install the carried wheels (docs/gpu.md).
if ! "$PY" -c "import jsonschema" 2>/dev/null; then
  if ls "$REPO"/.whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/algo-emu-site \
      "$REPO"/.whl/*.whl || { echo "installing .whl/*.whl failed"; exit 1; }
    export PYTHONPATH=/tmp/algo-emu-site${PYTHONPATH:+:$PYTHONPATH}
  else
    echo "jsonschema is missing and no .whl/ was carried: see docs/gpu.md (pip download ... -d .whl)"; exit 1
  fi
fi
export REPO OUT PYTHONPATH=$REPO/src:$REPO${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exec "$PY" - <<'PYEOF'
import json, os, re, shutil, signal, subprocess, sys, tarfile, time
from pathlib import Path

T0 = time.time()
E = os.environ
REPO, OUT = Path(E["REPO"]), Path(E["OUT"]).absolute()
SCALE = E.get("SCALE", "paper")
CONFIG = Path(E.get("CONFIG") or (REPO / ("config/config.yaml" if SCALE == "paper" else "tests/tiny.yaml"))).absolute()
DEVICE = E.get("DEVICE") or ("cuda" if SCALE == "paper" else "cpu")
BUDGET = float(E.get("BUDGET", 540))
RESERVE = float(E.get("RESERVE", 60))
PACK = 20.0  # seconds kept for phase 3 (learning curves, tar files)
MAX_JOBS = int(E.get("MAX_JOBS") or min(4, os.cpu_count() or 1))
THREADS = E.get("THREADS", "1")
ORDER = E.get("EXPERIMENTS", "heads theorem31 ames statistical p_sweep independent").split()
COMPILE = E.get("COMPILE", "0")
WORK = Path(E.get("WORK") or "/tmp/algo-emu-gpu").absolute()
RESUME = str(Path(E["RESUME"]).absolute()) if E.get("RESUME") else ""
REUSE = Path(E.get("REUSE_DIR") or REPO / "results/reference/gpu").absolute()
PYX = sys.executable
if DEVICE.startswith("cuda"):  # every model lives on the GPU (sdpa): building the CPU kernel in each process is waste
    os.environ.setdefault("ALGO_EMU_KERNEL", "off")
GROUPS = ("heads", "theorem31", "ames", "statistical", "p_sweep", "independent")
bad = [g for g in ORDER if g not in GROUPS]
if bad:
    sys.exit(f"EXPERIMENTS: unknown {bad} (known: {' '.join(GROUPS)})")


def say(msg):
    print(f"[{time.time() - T0:6.1f} s] {msg}", flush=True)


from algo_emu.config import load_config  # noqa: E402
from tools.resume_parts import join_parts, pack_parts  # noqa: E402
from algo_emu.runtime import config_hash  # noqa: E402
from algo_emu.experiments.step_keys import OMITTED_AT  # noqa: E402
from algo_emu.experiments.heads_settings import p_sweep_protocol, settings as heads_settings, setting_name  # noqa: E402

cfg = load_config(CONFIG, gpu_check=False)
if COMPILE in ("0", "1"):
    for sec in ("heads", "theorem31", "statistical", "ames"):
        cfg[sec]["compile"] = COMPILE == "1"
SEEDS = [int(s) for s in cfg["seeds"]]
S = [str(s) for s in SEEDS]
HEADS, T31, STAT, AMES = cfg["heads"], cfg["theorem31"], cfg["statistical"], cfg["ames"]
CHASH = config_hash({k: cfg[k] for k in ("seeds", "heads", "theorem31", "statistical", "ames")})

# Each rule's slice of its section (workflow/rules/*.smk; tests/test_device_script.py checks these against them).
T31_TRAIN = {k: v for k, v in T31.items() if k != "p_sweep"}
STAT_TRAIN = {k: v for k, v in STAT.items() if k not in ("modes", "heads_sweep", "eval_prompts", "eval_chunk")}
STAT_EVAL = {k: STAT[k] for k in ("n_context", "n_query", "d", "algorithms", "data_params", "eval_prompts", "eval_chunk") if k in STAT}
AMES_DOWNLOAD_KEYS = ("source", "openml_data_id", "openml_sha256", "openml_timeout_s", "packaged_sha256", "local_sha256", "na_values")
AMES_PREPARE_KEYS = ("na_values", "test_fraction", "drop_id_columns", "fit_statistics_on", "categories_from")
AMES_REFERENCE_FIT_KEYS = ("reference_alpha", "cv_folds", "ridge_log10_alpha_min", "ridge_log10_alpha_max", "ridge_n_alphas",
                           "lasso_n_alphas", "lasso_eps", "lasso_max_iter")
AMES_POOL_KEYS = ("pool_bootstraps", "pool_heldout_bootstraps", "pool_log10_alpha_min", "pool_log10_alpha_max", "pool_n_alphas",
                  "pool_coef_scale_min", "pool_coef_scale_max", "pool_perturb_scale", "pool_perturb_rank", "pool_pairs_per_row",
                  "pool_eval_pairs_per_row")
AMES_TRAIN_KEYS = ("heads", "total_tokens", "hidden", "epochs", "batch_size", "lr", "checkpoint_every", "compile", "attention",
                   "lr_schedule")


def sub(keys):
    # as the rules slice them: a key at its omitted value (algo_emu.experiments.step_keys.OMITTED_AT) is left out
    return {k: AMES[k] for k in keys if k in AMES and not (k in OMITTED_AT and AMES[k] == OMITTED_AT[k])}


def js(obj):
    return json.dumps(obj, sort_keys=True)


# ------------------------------------------------------------------------------------------ scratch, reuse, resume
MARK = WORK / ".algo-emu-gpu-work"
if WORK.exists() and any(WORK.iterdir()):
    if not MARK.is_file():
        sys.exit(f"WORK={WORK} exists and is not this script's scratch folder (no {MARK.name}): not removing it")
    shutil.rmtree(WORK)
(WORK / "logs").mkdir(parents=True)
MARK.touch()
OUT.mkdir(parents=True, exist_ok=True)
os.chdir(WORK)
reused = False
if (REUSE / "status.json").is_file():
    old = json.loads((REUSE / "status.json").read_text())
    if old.get("config_hash") == CHASH:
        for d in ("heads", "theorem31", "statistical", "ames"):
            if (REUSE / d).is_dir():
                shutil.copytree(REUSE / d, WORK / "results" / d, dirs_exist_ok=True)
        reused = True
        say(f"reusing the records of {REUSE} (config hash {CHASH})")
        for cand in ("resume.tar.gz", "resume.tar.gz.part00"):  # whole, or cut into parts (below)
            if not RESUME and (REUSE / cand).is_file():
                RESUME = str(REUSE / cand)
    else:
        say(f"not reusing {REUSE}: config hash {old.get('config_hash')} != {CHASH}")
if RESUME:
    try:  # RESUME names the whole file or one of its parts (resume.tar.gz.part00, ...): joined here
        whole = join_parts(RESUME, WORK / ".resume-joined.tar.gz")
    except FileNotFoundError as exc:
        sys.exit(f"RESUME: {exc}")
    with tarfile.open(whole) as tf:
        try:
            tf.extractall(WORK, filter="data")
        except TypeError:  # Python without extraction filters
            tf.extractall(WORK)
    say(f"resumed from {RESUME}")
raw = REPO / "data/raw"
if (raw / "ames.csv").is_file() and (raw / "ames.provenance.json").is_file():
    (WORK / "data/raw").mkdir(parents=True)
    for n in ("ames.csv", "ames.provenance.json"):
        shutil.copy2(raw / n, WORK / "data/raw" / n)


# ------------------------------------------------------------------------------------------ the steps
class Task:
    def __init__(self, name, group, setting, argv, outputs, deps=(), train=False):
        self.name, self.group, self.setting, self.argv = name, group, setting, argv
        self.outputs, self.deps, self.train = list(outputs), list(deps), train
        self.state, self.rc, self.start, self.end, self.proc = "pending", None, None, None, None
        self.log = WORK / "logs" / f"{name}.log"

    def present(self):
        return bool(self.outputs) and all(Path(o).exists() for o in self.outputs)


def cli(*args):
    return [PYX, "-m", "algo_emu", *map(str, args)]


TASKS: list[Task] = []
SETTINGS: dict = {}  # (experiment, setting) -> {"group", "records"}


def task(*a, **k):
    t = Task(*a, **k)
    TASKS.append(t)
    return t


def setting(exp, name, group, records):
    SETTINGS[(exp, name)] = {"group": group, "records": list(records)}
    return (exp, name)


dev = ["--device", DEVICE, "--threads", THREADS]
# E1 ---------------------------------------------------------------------------------------------
hp = js(HEADS)
data_tasks = {}
for protocol, H, p in heads_settings(HEADS):
    in_heads_sweep = H in HEADS["heads_sweep"] and p == HEADS["p_heads_sweep"]
    group = ("heads" if protocol == "published" else "independent") if in_heads_sweep else "p_sweep"
    if protocol == "independent" and not in_heads_sweep:
        group = "independent"
    if protocol == "published":
        data = ["data/heads/published/dataset.pt"]
        if "published" not in data_tasks:
            data_tasks["published"] = [task("heads_data_published", None, None,
                                            cli("heads", "data", "--params", hp, "--protocol", "published", "--seed", 0,
                                                "--out", data[0]), data)]
    else:
        data = [f"data/heads/seed{s}/dataset.pt" for s in SEEDS]
        if "independent" not in data_tasks:
            data_tasks["independent"] = [task(f"heads_data_seed{s}", None, None,
                                              cli("heads", "data", "--params", hp, "--seed", s, "--out", d), [d])
                                         for s, d in zip(SEEDS, data)]
    name = setting_name(H, p)
    runs = f"results/heads/{protocol}/runs/{name}"
    st = setting("E1", f"{protocol} H={H} p={p}", group, [f"{runs}/seed{s}/metrics.json" for s in SEEDS])
    task(f"heads_train_{protocol}_{name}", group, st,
         cli("heads", "train", "--params", hp, "--protocol", protocol, "--heads", H, "--p", p, "--seeds", *S,
             "--data", *data, "--out-dir", runs, "--checkpoint", f"results/heads/checkpoints/{protocol}_{name}.pt", *dev),
         SETTINGS[st]["records"], deps=data_tasks[protocol], train=True)
# E2 ---------------------------------------------------------------------------------------------
for p in T31["p_sweep"]:
    for kind, blind in (("runs", []), ("blind", ["--blind"])):
        out = f"results/theorem31/{kind}/p{p}"
        st = setting("E2", f"{'model' if kind == 'runs' else 'weight-blind'} p={p}", "theorem31",
                     [f"{out}/seed{s}/metrics.json" for s in SEEDS])
        ck = f"results/theorem31/checkpoints/{'' if kind == 'runs' else 'blind_'}p{p}.pt"
        task(f"theorem31_{'train' if kind == 'runs' else 'blind'}_p{p}", "theorem31", st,
             cli("theorem31", "train", *blind, "--params", js(T31_TRAIN), "--p", p, "--seeds", *S, "--out-dir", out,
                 "--checkpoint", ck, *dev), SETTINGS[st]["records"], train=True)
# E3 ---------------------------------------------------------------------------------------------
for mode in STAT["modes"]:
    for H in STAT["heads_sweep"]:
        m = f"results/statistical/models/{mode}_H{H}"
        runs = f"results/statistical/runs/{mode}_H{H}"
        st = setting("E3", f"{mode} H={H}", "statistical", [f"{runs}/seed{s}/metrics.json" for s in SEEDS])
        tr = [task(f"statistical_{'blind' if b else 'train'}_{mode}_H{H}", "statistical", st,
                   cli("statistical", "train", *(["--blind"] if b else []), "--params", js(STAT_TRAIN), "--mode", mode,
                       "--heads", H, "--seeds", *S, "--model", f"{m}{b}.pt",
                       "--checkpoint", f"results/statistical/checkpoints/{mode}_H{H}{b}.pt", *dev),
                   [f"{m}{b}.pt", f"{m}{b}.pt.json"], train=True) for b in ("", "_blind")]
        task(f"statistical_evaluate_{mode}_H{H}", "statistical", st,
             cli("statistical", "evaluate", "--params", js(STAT_EVAL), "--mode", mode, "--heads", H, "--seeds", *S,
                 "--model", f"{m}.pt", "--blind-model", f"{m}_blind.pt", "--out-dir", runs, *dev),
             SETTINGS[st]["records"], deps=tr)
# E4 ---------------------------------------------------------------------------------------------
csv, prov = "data/raw/ames.csv", "data/raw/ames.provenance.json"
dl = task("ames_download", None, None, cli("ames", "download", "--params", js(sub(AMES_DOWNLOAD_KEYS)), "--out-csv", csv,
                                          "--out-provenance", prov), [csv, prov])
prep = [task(f"ames_prepare_seed{s}", None, None,
             cli("ames", "prepare", "--params", js(sub(AMES_PREPARE_KEYS)), "--csv", csv, "--provenance", prov, "--seed", s,
                 "--out", f"data/ames/seed{s}/prepared.npz", "--out-meta", f"data/ames/seed{s}/prepared.json"),
             [f"data/ames/seed{s}/prepared.npz", f"data/ames/seed{s}/prepared.json"], deps=[dl]) for s in SEEDS]
prepared = [f"data/ames/seed{s}/prepared.npz" for s in SEEDS]
for mode in AMES.get("modes", ["corrected", "reference_code"]):
    base = f"results/ames/{mode}"
    st = setting("E4", mode, "ames", [f"{base}/seed{s}/metrics.json" for s in SEEDS])
    keys = AMES_REFERENCE_FIT_KEYS + (AMES_POOL_KEYS if mode == "corrected" else ())
    fits = [task(f"ames_fit_{mode}_seed{s}", "ames", st,
                 cli("ames", "fit", "--params", js(sub(keys)), "--mode", mode, "--seed", s, "--prepared", pr,
                     "--out", f"{base}/seed{s}/fits.npz", "--out-json", f"{base}/seed{s}/fits.json"),
                 [f"{base}/seed{s}/fits.npz", f"{base}/seed{s}/fits.json"], deps=[pt])
            for s, pr, pt in zip(SEEDS, prepared, prep)]
    fitfiles = [f"{base}/seed{s}/fits.npz" for s in SEEDS]
    tr = [task(f"ames_train{'_blind' if b else ''}_{mode}", "ames", st,
               cli("ames", "train", *(["--blind"] if b else []), "--params", js(sub(AMES_TRAIN_KEYS)), "--mode", mode,
                   "--seeds", *S, "--prepared", *prepared, "--fits", *fitfiles, "--out", f"{base}/{name}.pt",
                   "--checkpoint-dir", f"{base}/checkpoints", *dev),
               [f"{base}/{name}.pt", f"{base}/{name}.pt.json"], deps=fits + prep, train=True)
          for b, name in ((False, "emulator"), (True, "blind"))]
    task(f"ames_evaluate_{mode}", "ames", st,
         cli("ames", "evaluate", "--mode", mode, "--seeds", *S, "--prepared", *prepared, "--fits", *fitfiles,
             "--emulator", f"{base}/emulator.pt", "--blind", f"{base}/blind.pt", "--out-dir", base,
             "--predictions", f"{base}/predictions.csv", *dev),
         SETTINGS[st]["records"] + [f"{base}/predictions.csv"], deps=tr)


def complete(key):
    return all(Path(r).is_file() for r in SETTINGS[key]["records"])


# What runs: steps of selected, not yet complete settings, and the shared steps they need; by EXPERIMENTS order.
selected = [t for t in TASKS if t.setting is not None and SETTINGS[t.setting]["group"] in ORDER]
for t in selected:
    if complete(t.setting):
        t.state = "present"
needed, stack = set(), [t for t in selected if t.state == "pending"]
while stack:
    t = stack.pop()
    if id(t) not in needed:
        needed.add(id(t))
        stack += t.deps
for t in TASKS:
    if id(t) not in needed and t.state == "pending":
        t.state = "not selected" if t.setting is not None and SETTINGS[t.setting]["group"] not in ORDER else "not needed"
    elif t.state == "pending" and t.present():
        t.state = "present"  # e.g. a frozen model from RESUME, data carried along
rank = {g: i for i, g in enumerate(ORDER)}


def prio(t):
    if t.setting is None:  # shared data steps: just before the first setting that needs them, however indirectly
        return min((prio(u) for u in TASKS if t in u.deps), default=99.5) - 0.5
    return rank.get(SETTINGS[t.setting]["group"], 99)


QUEUE = sorted([t for t in TASKS if t.state == "pending"], key=prio)


def stop(t):
    try:
        os.killpg(t.proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


LIVE: list = []  # running steps, stopped with the script if it is stopped itself (e.g. the call's time limit)


def _stopped(signum, frame):
    for t in LIVE:
        try:
            os.killpg(t.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, _stopped)
signal.signal(signal.SIGINT, _stopped)


def schedule(queue, deadline, jobs):
    """Run ``queue`` (ordered) with at most ``jobs`` at once; at ``deadline`` stop what runs, start nothing new."""
    running: list[Task] = LIVE
    running.clear()
    ok = ("done", "present")
    while True:
        now = time.time()
        for t in list(running):
            rc = t.proc.poll()
            if rc is not None:
                running.remove(t)
                t.rc, t.end = rc, now
                t.state = "done" if rc == 0 and (t.present() or not t.outputs) else "failed"
                t.fh.close()
                say(f"{t.state:7s} {t.name} ({t.end - t.start:.0f} s)")
        if now >= deadline:
            for t in running:
                stop(t)
            grace = time.time() + 10
            while time.time() < grace and any(t.proc.poll() is None for t in running):
                time.sleep(0.2)
            for t in running:
                if t.proc.poll() is None:
                    os.killpg(t.proc.pid, signal.SIGKILL)
                    t.proc.wait()
                t.state, t.rc, t.end = "cut", t.proc.returncode, time.time()
                t.fh.close()
                say(f"cut     {t.name} at the deadline ({t.end - t.start:.0f} s)")
            for t in queue:
                if t.state == "pending":
                    t.state = "not started"
            return
        for t in queue:
            if t.state == "pending" and any(d.state not in ok + ("pending", "running") for d in t.deps):
                t.state = "blocked"
        for t in queue:
            if len(running) >= jobs:
                break
            if t.state == "pending" and all(d.state in ok for d in t.deps):
                t.fh = open(t.log, "w")
                t.start, t.state = time.time(), "running"
                t.proc = subprocess.Popen(t.argv, stdout=t.fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          process_group=0, cwd=WORK)  # own group (killpg), same session
                running.append(t)
        if not running and not any(t.state == "pending" for t in queue):
            return
        if not running:  # pending ones wait on something that cannot come
            for t in queue:
                if t.state == "pending":
                    t.state = "blocked"
            return
        time.sleep(0.3)


say(f"config {CONFIG} (hash {CHASH}), device {DEVICE}, budget {BUDGET:.0f} s (training until {BUDGET - RESERVE:.0f} s), "
    f"{MAX_JOBS} jobs at once, {len(QUEUE)} steps to run, order {' '.join(ORDER)}")
schedule(QUEUE, T0 + BUDGET - RESERVE, MAX_JOBS)
say("phase 1 (data, training, evaluation) over")


# ------------------------------------------------------------------------------------------ status of every setting
def progress(t):
    if not t.log.is_file():
        return None
    hits = re.findall(r"epoch (\d+)/(\d+)", t.log.read_text(errors="replace"))
    return f"epoch {hits[-1][0]}/{hits[-1][1]}" if hits else None


def last_line(t):
    lines = [x for x in t.log.read_text(errors="replace").splitlines() if x.strip()] if t.log.is_file() else []
    return lines[-1][-300:] if lines else ""


def why(t):
    if t.state == "cut":
        return f"{t.name}: cut at the deadline after {t.end - t.start:.0f} s" + (f" ({progress(t)})" if progress(t) else "")
    if t.state == "failed":
        return f"{t.name}: failed (exit {t.rc}): {last_line(t)}"
    if t.state == "blocked":
        bad = [d.name for d in t.deps if d.state not in ("done", "present")]
        return f"{t.name}: blocked ({', '.join(bad)} did not finish)"
    if t.state == "not started":
        return f"{t.name}: not started (no time left before the deadline)"
    return f"{t.name}: {t.state}"


status = {"scale": SCALE, "config": str(CONFIG.relative_to(REPO) if CONFIG.is_relative_to(REPO) else CONFIG),
          "config_hash": CHASH, "device": DEVICE, "budget_s": BUDGET, "reserve_s": RESERVE, "max_jobs": MAX_JOBS,
          "threads": THREADS, "compile": COMPILE, "seeds": SEEDS, "order": ORDER, "reused": str(REUSE) if reused else None,
          "resumed_from": RESUME or None, "experiments": {}, "steps": []}
complete_sets = {}
for (exp, name), info in SETTINGS.items():
    e = status["experiments"].setdefault(exp, {"wanted": [], "complete": [], "missing": {}})
    e["wanted"].append(name)
    if complete((exp, name)):
        e["complete"].append(name)
        complete_sets.setdefault(exp, []).append((exp, name))
    elif info["group"] not in ORDER:
        e["missing"][name] = f"not selected (EXPERIMENTS={' '.join(ORDER)})"
    else:
        mine = [t for t in TASKS if t.setting == (exp, name)]
        shared = [d for t in mine for d in t.deps if d.setting is None]
        bad = [t for t in shared + mine if t.state not in ("done", "present", "not needed")]
        e["missing"][name] = "; ".join(why(t) for t in bad) or "records missing after every step finished"
for t in TASKS:
    status["steps"].append({"name": t.name, "state": t.state, "rc": t.rc, "progress": progress(t) if t.train else None,
                            "start_s": round(t.start - T0, 1) if t.start else None,
                            "wall_s": round(t.end - t.start, 1) if t.start and t.end else None})


# ------------------------------------------------------------------------------------------ phase 2: aggregation
def recs(exp):
    return [r for key in complete_sets.get(exp, []) for r in SETTINGS[key]["records"]]


T, F = "results/tables", "results/figures"
agg = []
if recs("E1"):
    present = sorted({k[1].split()[0] for k in complete_sets["E1"]})
    hp1 = js(dict(HEADS, protocols=[p for p in HEADS["protocols"] if p in present]))
    a = Task("agg_heads", None, None, cli("heads", "aggregate", "--params", hp1, "--metrics", *recs("E1"), "--runs",
                                          f"{T}/heads_runs.csv", "--heads-table", f"{T}/heads_vs_mse.csv", "--p-table",
                                          f"{T}/prompt_length_vs_mse.csv", "--allow-partial"), [f"{T}/heads_vs_mse.csv"])
    f = Task("agg_heads_fit", None, None, cli("heads", "fit", "--params", hp1, "--runs", f"{T}/heads_runs.csv", "--out",
                                              f"{T}/heads_fit.json"), [f"{T}/heads_fit.json"], deps=[a])
    g = Task("fig_heads", None, None, cli("heads", "figure", "--kind", "heads", "--table", f"{T}/heads_vs_mse.csv", "--fit",
                                          f"{T}/heads_fit.json", "--runs", f"{T}/heads_runs.csv", "--out",
                                          f"{F}/heads_vs_mse"), [], deps=[f])
    agg += [a, f, g]
    psp = p_sweep_protocol(HEADS)
    ps = {k[1] for k in complete_sets["E1"] if k[1].startswith(f"{psp} H={HEADS['heads_p_sweep']} ")}
    if len(ps) >= 2:
        agg.append(Task("fig_prompt_length", None, None, cli("heads", "figure", "--kind", "prompt_length", "--table",
                                                             f"{T}/prompt_length_vs_mse.csv", "--runs", f"{T}/heads_runs.csv",
                                                             "--out", f"{F}/prompt_length_vs_mse"), [], deps=[a]))
partial_notes = {}
for exp in ("E2", "E3", "E4"):
    full = not status["experiments"].get(exp, {}).get("missing")
    if not recs(exp):
        continue
    d = T if full else f"{T}/partial"
    if not full:
        partial_notes[exp] = status["experiments"][exp]["missing"]
    if exp == "E2":
        runs = [r for r in recs("E2") if "/runs/" in r]
        blind = [r for r in recs("E2") if "/blind/" in r]
        # a p is aggregated only with both its model and its baseline
        pm = {re.search(r"/(p\d+)/", r).group(1) for r in runs} & {re.search(r"/(p\d+)/", r).group(1) for r in blind}
        runs = [r for r in runs if re.search(r"/(p\d+)/", r).group(1) in pm]
        blind = [r for r in blind if re.search(r"/(p\d+)/", r).group(1) in pm]
        if not pm:
            continue
        # the tables iterate over p_sweep: a partial set's params name only its complete p
        t31 = T31 if full else dict(T31, p_sweep=sorted(int(x[1:]) for x in pm))
        a = Task("agg_theorem31", None, None, cli("theorem31", "aggregate", "--params", js(t31), "--metrics", *runs,
                                                  "--blind-metrics", *blind, "--runs", f"{d}/theorem31_runs.csv", "--f-table",
                                                  f"{d}/f_emulation.csv", "--gd-table", f"{d}/f_gd_step.csv", "--ablation-table",
                                                  f"{d}/f_emulation_ablation.csv", "--ablation-runs",
                                                  f"{d}/f_emulation_ablation_runs.csv"), [f"{d}/f_emulation.csv"])
        agg.append(a)
        if full:
            agg += [Task("fig_theorem31", None, None, cli("theorem31", "figure", "--table", f"{T}/f_emulation.csv", "--gd-table",
                                                          f"{T}/f_gd_step.csv", "--runs", f"{T}/theorem31_runs.csv", "--out",
                                                          f"{F}/f_emulation"), [], deps=[a]),
                    Task("fig_theorem31_ablation", None, None, cli("theorem31", "ablation-figure", "--table",
                                                                   f"{T}/f_emulation_ablation.csv", "--runs",
                                                                   f"{T}/f_emulation_ablation_runs.csv", "--out",
                                                                   f"{F}/f_emulation_ablation"), [], deps=[a])]
    elif exp == "E3":
        # the table iterates over modes x heads_sweep: a partial set is aggregated per mode, over that mode's complete H
        parts = [("", STAT, recs("E3"))] if full else []
        if not full:
            for mode in STAT["modes"]:
                hs = [H for H in STAT["heads_sweep"] if ("E3", f"{mode} H={H}") in complete_sets["E3"]]
                if hs:
                    parts.append((f"_{mode}", dict(STAT, modes=[mode], heads_sweep=hs),
                                  [r for H in hs for r in SETTINGS[("E3", f"{mode} H={H}")]["records"]]))
        for suffix, sp, rr in parts:
            a = Task(f"agg_statistical{suffix}", None, None,
                     cli("statistical", "aggregate", "--params", js(sp), "--metrics", *rr, "--runs",
                         f"{d}/statistical{suffix}_runs.csv", "--table", f"{d}/statistical{suffix}_emulation.csv",
                         "--ablation-table", f"{d}/statistical{suffix}_ablation.csv", "--ablation-runs",
                         f"{d}/statistical{suffix}_ablation_runs.csv"), [f"{d}/statistical{suffix}_emulation.csv"])
            agg.append(a)
        if full:
            agg += [Task("fig_statistical", None, None, cli("statistical", "figure", "--table", f"{T}/statistical_emulation.csv",
                                                            "--runs", f"{T}/statistical_runs.csv", "--out",
                                                            f"{F}/statistical_heads"), [], deps=[a]),
                    Task("fig_statistical_ablation", None, None, cli("statistical", "ablation-figure", "--table",
                                                                     f"{T}/statistical_ablation.csv", "--runs",
                                                                     f"{T}/statistical_ablation_runs.csv", "--out",
                                                                     f"{F}/statistical_ablation"), [], deps=[a])]
    else:
        modes = [k[1] for k in complete_sets["E4"]]
        a = Task("agg_ames", None, None, cli("ames", "aggregate", "--modes", *modes, "--metrics", *recs("E4"), "--table",
                                             f"{d}/ames.csv", "--runs", f"{d}/ames_runs.csv", "--ablation-table",
                                             f"{d}/ames_ablation.csv"), [f"{d}/ames.csv"])
        agg.append(a)
        if full:
            agg.append(Task("fig_ames", None, None, cli("ames", "figure", "--table", f"{T}/ames.csv", "--runs",
                                                        f"{T}/ames_runs.csv", "--predictions",
                                                        *[f"results/ames/{m}/predictions.csv" for m in modes], "--out",
                                                        f"{F}/ames", "--ablation-table", f"{T}/ames_ablation.csv",
                                                        "--ablation-out", f"{F}/ames_ablation"), [], deps=[a]))
agg.sort(key=lambda t: 2 if t.name.startswith("fig_") else 1 if t.name.endswith("_fit") else 0)  # tables first, figures last
for t in agg:
    Path(t.outputs[0] if t.outputs else f"{F}/x").parent.mkdir(parents=True, exist_ok=True)
Path(F).mkdir(parents=True, exist_ok=True)
schedule(agg, T0 + BUDGET - PACK, max(MAX_JOBS, 1))
for t in agg:
    status["steps"].append({"name": t.name, "state": t.state, "rc": t.rc, "progress": None,
                            "start_s": round(t.start - T0, 1) if t.start else None,
                            "wall_s": round(t.end - t.start, 1) if t.start and t.end else None})
status["aggregation_failed"] = [why(t) for t in agg if t.state != "done"]
say("phase 2 (aggregation) over")

# ------------------------------------------------------------------------------------------ phase 3: packing
GPU = WORK / "gpu"
GPU.mkdir()
try:
    from algo_emu.refset import KEEP_SUFFIXES, SKIP_DIRS, SKIP_SUFFIXES
except Exception:  # noqa: BLE001  (an older tree: the same lists)
    KEEP_SUFFIXES = (".json", ".csv", ".md", ".tex", ".tsv", ".png", ".pdf")
    SKIP_SUFFIXES, SKIP_DIRS = (".pt", ".npz", ".npy", ".ckpt", ".html", ".log"), ("checkpoints", "reference")
res = WORK / "results"
if res.is_dir():
    for path in sorted(res.rglob("*")):
        rel = path.relative_to(res)
        if (path.is_file() and not any(x in SKIP_DIRS for x in rel.parts[:-1]) and not path.name.endswith(SKIP_SUFFIXES)
                and path.name.endswith(KEEP_SUFFIXES)):
            (GPU / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, GPU / rel)
if partial_notes:
    (GPU / "tables/partial").mkdir(parents=True, exist_ok=True)
    lines = ["# PARTIAL tables: not the experiments' results", "",
             "Built from the complete settings only; these experiments have settings missing (why, per setting):", ""]
    for exp, miss in partial_notes.items():
        lines += [f"## {exp}", ""] + [f"- {k}: {v}" for k, v in miss.items()] + [""]
    (GPU / "tables/partial/README.md").write_text("\n".join(lines))
try:  # learning curves of whatever records exist (algo_emu.refset; torch-free)
    from algo_emu.refset import curves_figure, flattening, learning_curves
    curves = learning_curves(GPU)
    if len(curves):
        (GPU / "tables").mkdir(exist_ok=True)
        (GPU / "figures").mkdir(exist_ok=True)
        curves.to_csv(GPU / "tables/learning_curves.csv", index=False)
        flattening(curves).to_csv(GPU / "tables/learning_curves_summary.csv", index=False)
        if time.time() < T0 + BUDGET - 5:  # the figure only while the budget lasts; the table always
            curves_figure(curves, GPU / "figures/learning_curves")
        else:
            status["learning_curves_error"] = "figure skipped: no time left in the budget"
except Exception as exc:  # noqa: BLE001
    status["learning_curves_error"] = repr(exc)

# device.json
devinfo = {"device_requested": DEVICE, "cpu_count": os.cpu_count(), "git_commit": E.get("GIT_COMMIT")}
try:
    import torch
    devinfo |= {"torch": torch.__version__, "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
                "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                "gpu_memory_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
                if torch.cuda.is_available() else None}
except Exception as exc:  # noqa: BLE001
    devinfo["torch_error"] = repr(exc)
try:
    devinfo["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=20).stdout.strip() or None
except Exception:  # noqa: BLE001
    devinfo["nvidia_smi"] = None
if not devinfo["git_commit"]:
    try:
        devinfo["git_commit"] = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                                               timeout=5).stdout.strip() or None
    except Exception:  # noqa: BLE001
        pass
try:
    from algo_emu.runtime import code_version
    devinfo["code_version"] = code_version()
except Exception:  # noqa: BLE001
    pass
gpu_name = devinfo.get("gpu") or f"{DEVICE} (no GPU)"

# ------------------------------------------------------------------------------------------ resume state
# Checkpoints and frozen models of the settings not complete (what a later call with RESUME continues from). A remote
# runner returns at most RETURN_FILES files of 16 MiB: beside the OUT_FILES, the state comes back as resume.tar.gz,
# or cut into resume.tar.gz.part00, .part01, ... (RESUME_PART_MIB each) in the files left, SPARE_FILES kept free for
# the caller's own (an nvidia-smi log). What does not fit is left out whole, setting by setting: the settings whose
# training ran longest are kept first (their loss would cost the most GPU time to redo).
OUT_FILES = ("SUMMARY.md", "status.json", "device.json", "gpu_reference.tar.gz", "logs.tar.gz")
PART_BYTES = int(float(E.get("RESUME_PART_MIB", 15)) * 2**20)
RETURN_FILES = int(E.get("RETURN_FILES", 8))
MAX_PARTS = RETURN_FILES - len(OUT_FILES) - int(E.get("SPARE_FILES", 1))


def resume_files(key):
    keep = []
    for t in TASKS:
        if t.setting == key and t.train:
            keep += [o for o in t.outputs if Path(o).is_file() and o.endswith(".pt")]
            keep += [a for i, a in enumerate(t.argv) if t.argv[i - 1] == "--checkpoint" and Path(a).is_file()]
            for i, a in enumerate(t.argv):
                if t.argv[i - 1] == "--checkpoint-dir" and Path(a).is_dir():
                    keep += [str(x) for x in Path(a).glob("*.pt")]
    keep = sorted(set(keep))
    return keep + [k + ".json" for k in keep if Path(k + ".json").is_file()]


trained_s = {}
for t in TASKS:
    if t.train and t.start:
        trained_s[t.setting] = trained_s.get(t.setting, 0.0) + ((t.end or time.time()) - t.start)
groups = sorted(((key, resume_files(key)) for key in SETTINGS if not complete(key)), key=lambda g: -trained_s.get(g[0], 0.0))
written, packed = pack_parts([g for g in groups if g[1]], OUT, "resume.tar.gz", PART_BYTES, MAX_PARTS, WORK)
status["resume"] = {
    "files": [f.name for f in written], "part_mib": PART_BYTES / 2**20, "max_parts": MAX_PARTS,
    "settings": [{"experiment": x["key"][0], "setting": x["key"][1], "trained_s": round(trained_s.get(x["key"], 0.0), 1),
                  "gz_bytes": x["gz_bytes"], "returned": x["returned"]} for x in packed]}

missing_total = sum(len(e["missing"]) for e in status["experiments"].values())
wanted_total = sum(len(e["wanted"]) for e in status["experiments"].values())
status["complete"] = missing_total == 0 and not status["aggregation_failed"]
status["wall_s"] = round(time.time() - T0, 1)
agg_note = f"; {len(status['aggregation_failed'])} aggregation steps did not finish" if status["aggregation_failed"] else ""
lines = [f"# GPU run: {'complete' if status['complete'] else 'PARTIAL'} ({wanted_total - missing_total} of {wanted_total} "
         f"settings{agg_note})", "",
         f"Made by `tools/benchmarks/device_paper_scale.sh` (docs/gpu.md) on {gpu_name}, config `{status['config']}` "
         f"(hash `{CHASH}`), seeds {SEEDS}, budget {BUDGET:.0f} s (training until {BUDGET - RESERVE:.0f} s), {MAX_JOBS} steps "
         f"at once, compile {COMPILE}, commit `{devinfo.get('git_commit')}`, code `{devinfo.get('code_version')}`; "
         f"took {status['wall_s']:.0f} s." + (f" Earlier records reused from `{REUSE}`." if reused else "")
         + (f" Resumed from `{RESUME}`." if RESUME else ""), "",
         "Per-seed records: `heads/`, `theorem31/`, `statistical/`, `ames/` (the layout of `results/`); tables of complete "
         "experiments in `tables/`, of partial ones in `tables/partial/` (built from their complete settings, named "
         "below); `status.json`: every setting and step with its state and seconds; `device.json`.", "",
         "| experiment | settings | complete | missing |", "|---|---|---|---|"]
for exp, e in status["experiments"].items():
    lines.append(f"| {exp} | {len(e['wanted'])} | {len(e['complete'])} | {len(e['missing'])} |")
for exp, e in status["experiments"].items():
    if e["missing"]:
        lines += ["", f"## {exp}: missing", ""] + [f"- {k}: {v}" for k, v in e["missing"].items()]
if status["aggregation_failed"]:
    lines += ["", "## Aggregation steps that did not finish", ""] + [f"- {x}" for x in status["aggregation_failed"]]
if status["resume"]["settings"]:
    r = status["resume"]
    how = (" + ".join(f"`{f}`" for f in r["files"]) + (" (joined by `cat`, or named by RESUME as they are)" if len(r["files"]) > 1 else "")
           if r["files"] else "nothing returned")
    lines += ["", "## Resume state", "", f"Checkpoints of the settings not complete: {how}; parts of at most "
              f"{r['part_mib']:g} MiB, at most {r['max_parts']}. A setting left out starts again from epoch 0 in the next call.",
              "", "| setting | training s | gz MiB | returned |", "|---|---|---|---|"]
    lines += [f"| {x['experiment']} {x['setting']} | {x['trained_s']:.0f} | {x['gz_bytes'] / 2**20:.2f} | "
              f"{'yes' if x['returned'] else 'no: over the return limit'} |" for x in r["settings"]]
lines += ["", "## Steps (seconds from the start; training progress)", "", "| step | state | start | wall | progress |",
          "|---|---|---|---|---|"]
for s in status["steps"]:
    if s["state"] not in ("not needed", "not selected"):
        lines.append(f"| {s['name']} | {s['state']} | {s['start_s'] if s['start_s'] is not None else ''} | "
                     f"{s['wall_s'] if s['wall_s'] is not None else ''} | {s['progress'] or ''} |")
summary = "\n".join(lines) + "\n"
(GPU / "README.md").write_text(summary)
(GPU / "status.json").write_text(json.dumps(status, indent=1) + "\n")
(GPU / "device.json").write_text(json.dumps(devinfo, indent=1) + "\n")
for n in ("README.md", "status.json", "device.json"):
    shutil.copy2(GPU / n, OUT / ("SUMMARY.md" if n == "README.md" else n))
with tarfile.open(OUT / "gpu_reference.tar.gz", "w:gz") as tf:
    tf.add(GPU, arcname="gpu")
with tarfile.open(OUT / "logs.tar.gz", "w:gz") as tf:
    tf.add(WORK / "logs", arcname="logs")
if len(list(OUT.iterdir())) > RETURN_FILES:
    print(f"{len(list(OUT.iterdir()))} files under $OUT: more than the {RETURN_FILES} a remote runner returns")
for f in sorted(OUT.iterdir()):
    size = f.stat().st_size
    print(f"$OUT/{f.name}: {size / 2**20:.2f} MiB" + ("  OVER the 16 MiB a remote runner may return" if size > 16 * 2**20 else ""))
print(summary)
sys.exit(0 if status["complete"] else (3 if wanted_total > missing_total else 1))
PYEOF
