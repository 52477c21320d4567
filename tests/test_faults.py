"""Faults injected (docs/reliability.md): kill anything anywhere, damage a file, fill the disk, run twice at
once; nothing is lost and nothing half-written is accepted.

The default suite runs the fast checks: each guard on its own, one Snakemake run killed with -9 while a second
run is refused, and two `campaign run` calls at once. The checks that rerun the pipeline after a kill -9 at each
rule type and compare its tables byte for byte with an uninterrupted run are marked slow (`pytest -m slow`).
Every process a test kills is one it started (its own child, or a descendant of a Snakemake it started).
"""

from __future__ import annotations

import base64
import errno
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch
import yaml

from algo_emu import guard, io
from algo_emu.config import ConfigError, load_config
from algo_emu.data import heads as hd
from algo_emu.frozen import parameter_digest
from algo_emu.report import manifest as mf
from algo_emu.runtime import REPO_ROOT
from algo_emu.experiments.theorem31_tables import RUNS as T31_RUNS
from algo_emu.train import FAIL_ENV, TrainConfig, train_ensemble
from algo_emu.tables import load_runs

from test_robustness import _model, _Task, _train

SNAKEFILE = str(REPO_ROOT / "Snakefile")
TINY = REPO_ROOT / "tests" / "tiny.yaml"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
needs_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and prctl (Linux)")


# ----------------------------------------------------------------------------- helpers: processes we started


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (a process this test started)."""
    parents = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            pp = _ppid(int(d.name))
            if pp is not None:
                parents.setdefault(pp, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _gone(pid: int) -> bool:
    """Ended (or a zombie waiting for its parent to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _wait(cond, timeout: float, what: str, proc: subprocess.Popen | None = None):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        value = cond()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"{what}: the run ended first (rc {proc.returncode}):\n{out[-3000:]}")
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _step(root: int, needle: str, checkpointed_in: Path | None = None) -> int | None:
    """The pid of the job step (python) under ``root`` whose command line holds ``needle`` (``checkpointed_in``:
    and whose job's ``checkpoint`` exists in that folder)."""
    for pid in _descendants(root):
        argv = _argv(pid)
        if argv and os.path.basename(argv[0]).startswith("python") and needle in " ".join(argv):
            if checkpointed_in is None or ((ckpt := _job_checkpoint(argv)) and (checkpointed_in / ckpt).exists()):
                return pid
    return None


def _job_checkpoint(argv: list[str]) -> str | None:
    """The ``checkpoint`` of a step's job (``python -m algo_emu <experiment> <step> JOB``), if it names one."""
    for arg in argv:
        if arg.startswith("{"):
            try:
                return json.loads(arg).get("checkpoint")
            except ValueError:
                return None
    return None


def _snakemake_cmd(workdir: Path, config: Path, *targets: str, cores: int = 2) -> list[str]:
    """The README's command (``snakemake --cores N <target>``), run in ``workdir``."""
    return [sys.executable, "-m", "snakemake", "-s", SNAKEFILE, "--directory", str(workdir), "--configfile",
            str(config), "--cores", str(cores), *targets]


def _run(cmd: list[str], timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout)


def _start(cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _config(tmp_path: Path, **sections) -> Path:
    """tests/tiny.yaml with ``sections`` merged in (section -> keys)."""
    cfg = yaml.safe_load(TINY.read_text())
    for name, keys in sections.items():
        cfg[name] = {**cfg.get(name, {}), **keys}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


# ----------------------------------------------------------------------------- config: every bad key named


@pytest.mark.parametrize("cfg,message", [
    ({"heads": {"hiden_width": 8}}, "heads.hiden_width: unknown key"),
    ({"heads": {"epoch": 3, "lrr": 0.1}}, "heads.epoch: unknown key (did you mean heads.epochs?)\n"
                                          "heads.lrr: unknown key (did you mean heads.lr?)"),
    ({"essay": {"model": {"d_modle": 16}}}, "essay.model.d_modle: unknown key (did you mean essay.model.d_model?)"),
    ({"seedz": [0]}, "seedz: unknown key (did you mean seeds?)"),
    ({"theorem31": {"epochs": 0}}, "theorem31.epochs: 0 is less than the minimum of 1"),
])
def test_fault_unknown_or_bad_config_key_is_named_section_key(tmp_path, cfg, message):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError) as info:
        load_config(path, gpu_check=False)
    assert str(info.value) == message


# ----------------------------------------------------------------------------- durable, atomic writes


def test_fault_atomic_write_syncs_the_file_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}") if sys.platform.startswith("linux") else fd))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("rename", str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(io.os, "fsync", fsync)
    monkeypatch.setattr(io.os, "replace", replace)
    target = tmp_path / "sub" / "record.json"
    io.write_json(target, {"a": 1})
    assert [e[0] for e in events] == ["fsync", "rename", "fsync"]
    if sys.platform.startswith("linux"):
        assert events[0][1].startswith(str(target.parent / ".record.json.~")) and events[0][1].endswith(".json.tmp")
        assert events[2][1] == str(target.parent)
    assert events[1][1] == str(target) and json.loads(target.read_text()) == {"a": 1}
    # every writer of records, checkpoints, tables and manifests goes through atomic_path: one place
    events.clear()
    io.save_torch(tmp_path / "ckpt.pt", {"x": torch.ones(2)})
    io.write_csv(tmp_path / "t.csv", __import__("pandas").DataFrame({"a": [1.0]}))
    assert [e[0] for e in events] == ["fsync", "rename", "fsync"] * 2


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 64 KiB tmpfs (root only): a full disk."""
    if not IS_ROOT or not sys.platform.startswith("linux"):
        pytest.skip("a full disk is simulated with a small tmpfs, which needs root on Linux (this run is not root)")
    mnt = tmp_path / "full"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if proc.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_fault_full_disk_names_the_file_and_leaves_nothing_half_written(small_tmpfs, heads_params):
    mnt = small_tmpfs
    with pytest.raises(io.DiskFullError, match=f"no space left on the device of {mnt}: {mnt}/big.json not written"):
        io.write_json(mnt / "big.json", {"x": "y" * 200_000})
    with pytest.raises(io.DiskFullError, match=f"{mnt}/model.pt not written") as info:
        io.save_torch(mnt / "model.pt", {"x": torch.zeros(100_000)})
    assert info.value.errno == errno.ENOSPC
    assert list(mnt.iterdir()) == []  # no output, no temporary file
    # a data step through the command line: a clear error, no data set, no sidecar; rerun with space: made
    params = heads_params | {"n_prompts": 2000}
    cmd = [sys.executable, "-m", "algo_emu", "heads", "data",
           json.dumps({"params": params, "seed": 0, "path": str(mnt / "data" / "dataset.pt")})]
    proc = _run(cmd, timeout=300)
    assert proc.returncode != 0
    assert f"DiskFullError: [Errno 28] no space left on the device of {mnt}/data: {mnt}/data/dataset.pt not written" \
        in proc.stderr
    assert [p.name for p in (mnt / "data").iterdir()] == []
    subprocess.run(["mount", "-o", "remount,size=4m", str(mnt)], check=True)
    assert _run(cmd, timeout=300).returncode == 0
    data = hd.load_dataset(mnt / "data" / "dataset.pt", params)  # verified against its sidecar
    ref = hd.generate(0, params["n_prompts"], params["n_tokens"], params["d"], params["target_hidden"], "independent")
    assert all(torch.equal(data[k], ref[k]) for k in ref)


# ----------------------------------------------------------------------------- damaged files, refused by name


def _flip_byte(path: Path, at: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    data[int(len(data) * at)] ^= 0xFF
    path.write_bytes(bytes(data))


def _flip_tensor_byte(path: Path) -> None:
    """Flip one byte in the middle of the largest tensor of a torch archive (a bit rot in the weights)."""
    import struct
    import zipfile

    with zipfile.ZipFile(path) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.compress_size)
    data = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
    data[info.header_offset + 30 + name_len + extra_len + info.compress_size // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_fault_damaged_checkpoint_is_refused_by_name_and_the_run_trains_from_scratch(tmp_path, monkeypatch, caplog):
    straight, _ = _train(None)
    for damage in ("flip", "truncate"):
        ckpt = tmp_path / f"{damage}.pt"
        monkeypatch.setenv(FAIL_ENV, "0")
        with pytest.raises(RuntimeError, match="injected failure"):
            _train(ckpt)  # killed after epoch 1: a checkpoint to resume
        monkeypatch.delenv(FAIL_ENV)
        if damage == "flip":
            _flip_tensor_byte(ckpt)
            torch.load(ckpt, weights_only=False)  # torch.load alone loads it without a word
        else:
            ckpt.write_bytes(ckpt.read_bytes()[:200])
        with pytest.raises(io.CorruptFileError, match=f"^{ckpt}: damaged"):
            io.load_torch(ckpt, weights_only=False)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="algo_emu.train"):
            model, res = _train(ckpt)
        assert (res.resumed_from, res.epochs_run) == (0, 3)
        assert parameter_digest(model) == parameter_digest(straight)  # the numbers of an uninterrupted run
        assert f"not resuming {ckpt}: {ckpt}: damaged" in caplog.text


def test_fault_damaged_data_file_is_refused_by_name(tmp_path, heads_params):
    path = tmp_path / "data" / "seed0" / "dataset.pt"
    hd.write_dataset(path, 0, heads_params)
    _flip_byte(path)
    with pytest.raises(io.CorruptFileError, match=rf"^{path}: sha256 .* does not match its sidecar .*: damaged or "
                                                  rf"edited after it was written; remove it \(rm {path}\) and run the "
                                                  "same command again to remake it"):
        hd.load_dataset(path, heads_params)


def test_fault_damaged_or_edited_record_is_refused_by_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    record = Path("results/theorem31/runs/p4/seed0/metrics.json")
    io.write_json(record, {"seed": 0, "mse": 0.5})
    io.write_text("results/tables/t.csv", "a\n1\n")
    mf.write("results/manifest.json", ["results/tables/t.csv"], {"device": "cpu"}, [], "results/benchmarks")
    assert mf.verify("results") == []
    record.write_text(json.dumps({"seed": 0, "mse": 0.25}, indent=2, sort_keys=True) + "\n")  # edited
    with pytest.raises(SystemExit):
        mf.verify_trees(["results"])
    out = capsys.readouterr().out
    assert f"DIFFERS {record}: differs from the manifest" in out and "results: 1 problem(s)" in out
    record.write_text('{"seed": 0, "mse"')  # damaged
    with pytest.raises(ValueError, match=f"^{record}: not valid JSON"):
        load_runs([str(record)], T31_RUNS)  # what aggregation reads


# ----------------------------------------------------------------------------- one writer per setting


def test_fault_second_writer_of_a_setting_is_refused_naming_the_first(tmp_path):
    ckpt = tmp_path / "ckpt.pt"
    code = ("import sys, time; from algo_emu import guard; guard._IN_JOB = True; guard.claim_setting(sys.argv[1]); "
            "print('holding', flush=True); time.sleep(120)")
    first = subprocess.Popen([sys.executable, "-c", code, str(ckpt)], stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().strip() == "holding"
        with pytest.raises(RuntimeError, match=rf"^{ckpt}: this setting is being written by process {first.pid} on "
                                               rf".* \(it holds {ckpt}.lock\); a second writer of the same setting is "
                                               "refused"):
            train_ensemble(_model(), _Task(), TrainConfig(epochs=1), checkpoint=ckpt)
        assert not ckpt.exists()
    finally:
        first.kill()  # kill -9: the kernel drops its lock
        first.wait()
    model, res = _train(ckpt)
    assert res.epochs_run == 3 and ckpt.exists()


# ----------------------------------------------------------------------------- a step ends with its job


STEP = ("import os, sys, time; from algo_emu.guard import die_with_job; die_with_job(); "
        "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(120); open(sys.argv[1] + '.late', 'w').write('x')")


@needs_linux
@pytest.mark.parametrize("killed", ["shell", "snakemake", "early", "none", "foreign"])
def test_fault_a_job_step_ends_when_its_shell_or_its_snakemake_is_killed(tmp_path, killed):
    """A stand-in for Snakemake (a bash exporting its pid as ALGO_EMU_SNAKEMAKE_PID, as common.smk does) runs a
    rule's shell (with the workflow's shell prefix), which runs the step. ``snakemake``: the stand-in is killed;
    ``shell``: the rule's shell is; ``early``: the shell is gone before the step starts. ``none``: a step started
    by hand (no variable) outlives its shell, as it always did; ``foreign``: the variable names a live process
    that is not the step's ancestor (inherited by something else): ignored."""
    pid_file = tmp_path / "step.pid"
    stranger = subprocess.Popen(["sleep", "300"])
    export = {"none": f"unset {guard.JOB_ENV}", "foreign": f"export {guard.JOB_ENV}={stranger.pid}"}.get(
        killed, f"export {guard.JOB_ENV}=$$")
    prefix = guard.SHELL_PREFIX.replace("$", "\\$") if killed != "none" else "set -euo pipefail; "
    run = f"{sys.executable} -c \\\"{STEP}\\\" {pid_file}"
    step_cmd = prefix + (f"{run} & exit 0" if killed == "early" else f"{run}; true")
    err_file = tmp_path / "stderr.txt"
    with open(err_file, "w") as err:
        owner = subprocess.Popen(["bash", "-c", f'{export}; bash -c "{step_cmd}"; exec sleep 300'], stderr=err)
    try:
        if killed == "early":  # started with its shell gone: it stops before it does anything
            said = "this job's shell (pid "
            _wait(lambda: said in err_file.read_text() or pid_file.exists(), 120, "the orphaned step to stop")
            assert not pid_file.exists(), "the orphaned step went on"
            assert ") is gone; stopping this step now (nothing more is written)" in err_file.read_text()
            return
        step = int(_wait(lambda: pid_file.exists() and pid_file.read_text(), 120, "the step to start"))
        shell = _ppid(step)
        assert shell in _descendants(owner.pid) and _argv(shell)[0].endswith("bash")
        os.kill(owner.pid if killed == "snakemake" else shell, signal.SIGKILL)
        if killed in ("none", "foreign"):
            time.sleep(1.5)
            assert not _gone(step)  # outlives its shell
            os.kill(step, signal.SIGKILL)  # ours: started by this test
        else:
            _wait(lambda: _gone(step), 10, "the orphaned step to end")
        assert not Path(str(pid_file) + ".late").exists()
        if killed == "snakemake":
            _wait(lambda: f"the Snakemake process (pid {owner.pid}) that started this job is gone; stopping this step "
                          "now" in err_file.read_text(), 10, "the step's last words")
    finally:
        if pid_file.exists() and pid_file.read_text() and not _gone(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)  # a step this test started, left running by a failure
        for p in (owner, stranger):
            if p.poll() is None:
                p.kill()
            p.wait()


# ----------------------------------------------------------------------------- a killed Snakemake run's leftovers


def _marker(smk: Path, output: str) -> Path:
    """Snakemake's own incomplete marker for ``output`` (its FilePersistence._record_path: long names cut)."""
    from snakemake.persistence.file import FilePersistence

    fake = types.SimpleNamespace(_fetch_max_len=lambda subject: 255)
    path = Path(FilePersistence._record_path(fake, str(smk / "incomplete"), output))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"external_jobid": None}))
    return path


def test_fault_stale_snakemake_lock_and_incomplete_outputs_are_cleared_only_when_no_run_is_alive(tmp_path):
    smk = tmp_path / ".snakemake"
    (smk / "locks").mkdir(parents=True)
    (smk / "locks" / "0.input.lock").write_text("data/x.pt\n")
    (smk / "locks" / "0.output.lock").write_text("results/x.csv\n")
    long_dir = "results/" + "/".join(["a_rather_long_folder_name_" + str(i) for i in range(8)])
    outputs = ["results/x.csv", f"{long_dir}/seed0/metrics.json", "results/variants/v1"]
    for out in outputs[:2]:
        (tmp_path / out).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / out).write_text("half")
    (tmp_path / outputs[2]).mkdir(parents=True)
    (tmp_path / outputs[2] / "seed0.json").write_text("{}")
    markers = [_marker(smk, out) for out in outputs]
    assert any(p.name.startswith("@") for p in markers[1].parents)  # the long one is cut into folders
    (tmp_path / "results" / "done.csv").write_text("kept")

    # another run of the workflow is alive here: nothing is touched, its pid is named
    code = ("import sys, time; from algo_emu import guard; guard._hold_for_life(guard.Path(sys.argv[1]), shared=True); "
            "print('holding', flush=True); time.sleep(120)")
    other = subprocess.Popen([sys.executable, "-c", code, str(smk / guard.RUN_LOCK)], stdout=subprocess.PIPE, text=True)
    lines = []
    try:
        assert other.stdout.readline().strip() == "holding"
        got = guard.recover_workdir(tmp_path, log=lines.append)
        assert got == {"other_run": f"process {other.pid} on {os.uname().nodename}", "unlocked": [], "incomplete": []}
        assert f"another Snakemake run (process {other.pid} on" in lines[0]
        assert all(p.exists() for p in markers) and len(list((smk / "locks").iterdir())) == 2
        guard._HELD.pop(str((smk / guard.RUN_LOCK).resolve())).close()  # as if this process had ended
    finally:
        other.kill()
        other.wait()

    # none alive (the other was killed with -9): the lock goes, the incomplete outputs go and are named
    lines.clear()
    got = guard.recover_workdir(tmp_path, log=lines.append)
    try:
        assert got["other_run"] is None and got["unlocked"] == ["0.input.lock", "0.output.lock"]
        assert sorted(got["incomplete"]) == sorted(outputs)
        assert "removed the Snakemake lock a killed run left in" in lines[0] and "0.output.lock" in lines[0]
        assert lines[1].startswith("algo_emu: 3 output(s) left incomplete by an interrupted run, removed and redone")
        assert all(out in lines[1] for out in outputs)
        assert not any((tmp_path / out).exists() for out in outputs) and not any(p.exists() for p in markers)
        assert (tmp_path / "results" / "done.csv").read_text() == "kept"
        assert list((smk / "locks").iterdir()) == []
    finally:
        guard._HELD.pop(str((smk / guard.RUN_LOCK).resolve())).close()


@needs_linux
def test_fault_snakemake_killed_while_a_second_run_is_refused_then_the_same_command_resumes(tmp_path):
    """Run A trains; run B (the same command, at once) is refused naming A; A is killed with -9: its job
    ends with it; the same command again clears A's lock, names the incomplete outputs and resumes the
    checkpoint."""
    config = _config(tmp_path, theorem31={"p_sweep": [4], "fs": ["tanh"], "epochs": 300})
    work = tmp_path / "work"
    cmd = _snakemake_cmd(work, config, "results/theorem31/runs/p4/model.pt", cores=1)
    ckpt = work / "results/theorem31/checkpoints/p4.pt"
    a, step = _start(cmd), None
    try:
        step = _wait(lambda: _step(a.pid, "theorem31 train") if ckpt.exists() else None, 300, "training", a)
        # held still while B runs and A is killed: on a fast machine the step would otherwise finish first,
        # and B would find nothing to do
        os.kill(step, signal.SIGSTOP)
        b = _run(cmd, timeout=300)
        assert b.returncode != 0, b.stdout[-3000:]
        assert f"algo_emu: another Snakemake run (process {a.pid} on" in b.stderr
        assert "Directory cannot be locked" in b.stdout + b.stderr
        assert not _gone(step)  # B touched nothing of A's
        a.kill()  # kill -9 of Snakemake itself
        a.wait()
        os.kill(step, signal.SIGCONT)  # its watchdog now sees Snakemake gone
        _wait(lambda: _gone(step), 60, "the orphaned training step to end")
    finally:
        if step is not None and not _gone(step):
            os.kill(step, signal.SIGCONT)
        if a.poll() is None:
            a.kill()
            a.wait()
    epoch = torch.load(ckpt, weights_only=False)["epoch"]
    assert 0 < epoch < 300 and not (work / "results/theorem31/runs/p4/model.pt").exists()
    assert sorted(p.name for p in (work / ".snakemake/locks").iterdir())  # Snakemake's lock, left behind
    c = _run(cmd, timeout=600)
    assert c.returncode == 0, c.stderr[-3000:]
    assert f"removed the Snakemake lock a killed run left in {work}" in c.stderr
    assert "output(s) left incomplete by an interrupted run, removed and redone by this run:\n" in c.stderr
    assert "    results/theorem31/runs/p4/model.pt" in c.stderr
    run_log = max((work / ".snakemake/log").glob("*.snakemake.log")).read_text()  # Snakemake's log file has them too
    assert "removed the Snakemake lock a killed run left in" in run_log and "results/theorem31/runs/p4/model.pt" in run_log
    log = (work / "logs/theorem31/train_p4.log").read_text()
    assert f"resumed from results/theorem31/checkpoints/p4.pt at epoch " in log
    assert json.loads((work / "results/theorem31/runs/p4/seed0/metrics.json").read_text())["timing"][
        "resumed_from_epoch"] >= epoch


# ----------------------------------------------------------------------------- slow: kill -9 anywhere, rerun, same tables


def _tables(workdir: Path) -> dict[str, bytes]:
    """Every table and report of a run (results/tables/*, results/replication.md): its bytes."""
    files = sorted((workdir / "results" / "tables").iterdir())
    files += [p for p in [workdir / "results" / "replication.md"] if p.exists()]
    return {p.relative_to(workdir).as_posix(): p.read_bytes() for p in files}


def _assert_same_tables(workdir: Path, baseline: dict[str, bytes]) -> None:
    got = _tables(workdir)
    assert sorted(got) == sorted(baseline)
    differ = [name for name in baseline if got[name] != baseline[name]]
    assert not differ, f"differ from the uninterrupted run: {differ}"


STAT_TARGET = "statistical_table"
# data x2, train, train_blind, evaluate, aggregate; enough epochs that a kill lands after a checkpoint
STAT = {"modes": ["fitted"], "heads_sweep": [1], "epochs": 100}
CHECKPOINTS = "results/statistical/checkpoints"


@pytest.fixture(scope="module")
def stat_baseline(tmp_path_factory):
    """An uninterrupted run of statistical_table (the E3 chain, one setting) on tests/tiny.yaml."""
    tmp = tmp_path_factory.mktemp("stat_baseline")
    config = _config(tmp, statistical=STAT)
    proc = _run(_snakemake_cmd(tmp / "work", config, STAT_TARGET))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return config, _tables(tmp / "work")


def _kill_then_rerun(tmp_path: Path, config: Path, target: str, needle: str, victim: str,
                     after_checkpoint: bool = False) -> tuple[Path, str]:
    """Start the README's command for ``target`` in a fresh folder; when the step whose command line holds
    ``needle`` runs (``after_checkpoint``: and has written a checkpoint), kill -9 ``victim`` (``step``: its
    python, ``shell``: the rule's bash wrapper, ``snakemake``: Snakemake itself); check no process of the run is
    left; rerun the same command; return the folder and the rerun's log."""
    work = tmp_path / "work"
    cmd = _snakemake_cmd(work, config, target)
    run = _start(cmd)
    try:
        step = _wait(lambda: _step(run.pid, needle, work if after_checkpoint else None), 1200, f"a step '{needle}'",
                     run)
        jobs = _descendants(run.pid)  # every job's shell and step running now
        os.kill({"step": step, "shell": _ppid(step), "snakemake": run.pid}[victim], signal.SIGKILL)
        _wait(lambda: _gone(step), 120, "the killed job's step to end (it may still be importing)")
        run.wait(timeout=1200)
        assert run.returncode != 0
        _wait(lambda: all(_gone(p) for p in jobs), 15, "every job of the killed run to end (no orphan)")
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    time.sleep(3)  # an orphan, were there one, would write now
    again = _run(cmd)
    assert again.returncode == 0, again.stderr[-3000:]
    return work, again.stderr


@pytest.mark.slow
@needs_linux
@pytest.mark.parametrize("rule,needle", [
    ("data", "statistical data"),
    ("train", "statistical train"),
    ("evaluate", "statistical evaluate"),
    ("aggregate", "statistical aggregate"),
])
def test_fault_kill9_at_each_rule_type_then_rerun_gives_the_same_tables(tmp_path, stat_baseline, rule, needle):
    """A training step is killed after it wrote a checkpoint: the rerun resumes it."""
    config, baseline = stat_baseline
    work, _ = _kill_then_rerun(tmp_path, config, STAT_TARGET, needle, "step", after_checkpoint=rule == "train")
    if rule == "train":
        logs = "".join(p.read_text() for p in (work / "logs" / "statistical").glob("train*.log"))
        assert f"resumed from {CHECKPOINTS}/" in logs
    _assert_same_tables(work, baseline)


@pytest.mark.slow
@needs_linux
@pytest.mark.parametrize("victim", ["snakemake", "shell"])
def test_fault_kill9_of_snakemake_or_a_job_shell_leaves_no_orphan_then_rerun_gives_the_same_tables(
        tmp_path, stat_baseline, victim):
    """The issue's two orphan cases: Snakemake killed (its lock left behind), and the training job's shell
    wrapper killed (Snakemake records the job failed; its python must not write the outputs afterwards)."""
    config, baseline = stat_baseline
    work, log = _kill_then_rerun(tmp_path, config, STAT_TARGET, "statistical train", victim, after_checkpoint=True)
    if victim == "snakemake":
        assert "removed the Snakemake lock a killed run left in" in log
        assert "left incomplete by an interrupted run, removed and redone by this run:\n    results/statistical/models/" \
            in log
    _assert_same_tables(work, baseline)


@pytest.mark.slow
@needs_linux
def test_fault_full_disk_during_a_run_then_rerun_gives_the_same_tables(tmp_path, stat_baseline):
    if not IS_ROOT:
        pytest.skip("a full disk is simulated with a small tmpfs, which needs root (this run is not root)")
    config, baseline = stat_baseline
    work = tmp_path / "work"
    models = work / "results" / "statistical" / "models"
    models.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(models)], check=True)
    try:
        cmd = _snakemake_cmd(work, config, STAT_TARGET)
        first = _run(cmd)
        assert first.returncode != 0
        logs = "".join(p.read_text() for p in (work / "logs" / "statistical").glob("train*.log"))
        assert f"no space left on the device of {models.relative_to(work)}" in logs
        assert not any(p.suffix == ".pt" for p in models.iterdir())  # nothing half-written accepted
        subprocess.run(["mount", "-o", "remount,size=4m", str(models)], check=True)
        again = _run(cmd)
        assert again.returncode == 0, again.stderr[-3000:]
        _assert_same_tables(work, baseline)
    finally:
        subprocess.run(["umount", "-l", str(models)], check=False)


@pytest.fixture(scope="module")
def all_baseline(tmp_path_factory):
    """An uninterrupted `snakemake all` on tests/tiny.yaml (the whole DAG: the report's inputs)."""
    work = tmp_path_factory.mktemp("all_baseline") / "work"
    proc = _run(_snakemake_cmd(work, TINY, "all"), timeout=5400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return work


@pytest.mark.slow
@needs_linux
def test_fault_kill9_at_the_report_rule_then_rerun_gives_the_same_tables_and_report(tmp_path, all_baseline):
    """The report rules read every table of `all`: a finished run is copied, its report redone
    (--forcerun replication) and killed with -9 there; the same command again makes the same report."""
    work = tmp_path / "work"
    shutil.copytree(all_baseline, work, symlinks=True)
    baseline = _tables(all_baseline)
    run = _start(_snakemake_cmd(work, TINY, "all", "--forcerun", "replication"))
    try:
        step = _wait(lambda: _step(run.pid, "algo_emu report replication"), 1200, "the report step", run)
        os.kill(step, signal.SIGKILL)
        run.wait(timeout=600)
        assert run.returncode != 0 and not (work / "results" / "replication.md").exists()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    again = _run(_snakemake_cmd(work, TINY, "all"))
    assert again.returncode == 0, again.stderr[-3000:]
    _assert_same_tables(work, baseline)
    assert mf.verify(work / "results") == []
    # a record edited after the manifest was written: named by the manifest check
    record = next((work / "results" / "statistical" / "runs").rglob("metrics.json"))
    record.write_text(record.read_text().replace('"seed"', '"seed" ', 1))
    problems = mf.verify(work / "results")
    assert len(problems) == 1 and problems[0].startswith(f"{record}: differs from the manifest")
