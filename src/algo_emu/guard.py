"""Guards against the faults of a long run: orphaned writers, two writers of one setting, stale locks.

* :func:`die_with_job`: a step started by Snakemake (``python -m algo_emu ...`` in a rule's shell) ends
  when its job ends: the kernel kills it when its parent (the rule's shell) dies (Linux
  ``PR_SET_PDEATHSIG``), and a watchdog thread ends it when the Snakemake process that started the job
  is gone (its pid is in :data:`JOB_ENV`, set by ``workflow/rules/common.smk``). A killed Snakemake
  therefore leaves no job behind that would write its outputs after the fact.
* :func:`claim_setting`: one writer per setting. An exclusive ``flock`` on ``<checkpoint>.lock`` beside the
  training checkpoint; a second writer of the same setting is refused with the holder's pid. A job step
  holds it until the process exits (the kernel drops it on any exit, ``kill -9`` included, so it never
  goes stale); a library call only checks that no other process holds it.
* :func:`recover_workdir`: at the start of a Snakemake run (parse time, before Snakemake checks its own
  lock and its incomplete outputs), every run of this workflow holds a shared ``flock`` on
  ``.snakemake/algo_emu.run.lock`` for its life. When no other run holds it, a Snakemake lock left in
  ``.snakemake/locks`` was left by a killed run and is removed, and the outputs a killed run left
  incomplete are removed (so they are remade) and named; both are logged. When another run holds it,
  nothing is touched and the log names that run's pid.

Standard library only (and :mod:`algo_emu.io`, which imports no more): the workflow imports it at parse time.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import errno
import fcntl
import os
import select
import shutil
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import IO, Callable

from algo_emu.io import pid_alive  # (standard library only at import)

#: The pid of the Snakemake process that runs the jobs (set by workflow/rules/common.smk, inherited by jobs).
JOB_ENV = "ALGO_EMU_SNAKEMAKE_PID"
#: The pid of a rule's shell, exported by the shell itself (:data:`SHELL_PREFIX`, the workflow's shell prefix).
SHELL_ENV = "ALGO_EMU_JOB_SHELL"
#: The file descriptor on which a job's step reaches the console (Snakemake's own output) although the rule's shell
#: sends its stdout and stderr to the job's log: the shell prefix copies the shell's stderr there and names it in
#: :data:`CONSOLE_ENV` (:func:`to_console`).
CONSOLE_FD = 3
CONSOLE_ENV = "ALGO_EMU_CONSOLE_FD"
#: The prefix of every rule's shell command: Snakemake's own default for bash, then the shell's pid exported, then
#: the console kept open on :data:`CONSOLE_FD`. (A rule's shell command, not its prefix, is Snakemake's rerun
#: trigger for code: changing the prefix reruns nothing.)
SHELL_PREFIX = f"set -euo pipefail; export {SHELL_ENV}=$$; exec {CONSOLE_FD}>&2; export {CONSOLE_ENV}={CONSOLE_FD}; "
#: Exit status of a step stopped because its job ended.
ORPHAN_EXIT = 75

_HELD: dict[str, IO] = {}  # locks this process holds until it exits (_hold_for_life), by resolved path
_IN_JOB = False  # a job step (die_with_job ran): setting locks are held to the end of the process


class LockHeld(RuntimeError):
    """Another process holds a lock; ``holder`` names it (``process 1234 on host x``)."""

    def __init__(self, message: str, holder: str) -> None:
        super().__init__(message)
        self.holder = holder


# ----------------------------------------------------------------------------- locks


def lock_holders(path: str | os.PathLike) -> list[int]:
    """The pids holding a ``flock``/``fcntl`` lock on ``path`` (Linux ``/proc/locks``); empty where unknown."""
    try:
        st = os.stat(path)
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    for line in lines:
        parts = line.split()
        if "->" in parts:  # a waiter, not a holder
            continue
        try:
            i = next(k for k, p in enumerate(parts) if p.count(":") == 2)
            pid = int(parts[i - 1])
        except (StopIteration, ValueError):
            continue
        if parts[i] == dev and pid > 0 and pid not in pids:
            pids.append(pid)
    return pids


def _describe_holder(path: Path) -> str:
    pids = [p for p in lock_holders(path) if p != os.getpid()]
    if pids:
        return f"process {', '.join(map(str, pids))} on {socket.gethostname()}"
    with contextlib.suppress(OSError, ValueError, IndexError):
        pid, host = path.read_text().split()[:2]  # what an exclusive holder wrote (another host: /proc cannot tell)
        return f"process {int(pid)} on {host}"
    return "another process"


def hold_lock(path: str | os.PathLike, shared: bool = False) -> IO:
    """Take a non-blocking ``flock`` on ``path`` (created if absent); return the open file that holds it
    (the lock lasts while it is open: keep it, close it to release).

    Exclusive (default) or ``shared``; an exclusive holder writes ``<pid> <host>`` into the file. Raises
    :class:`LockHeld` naming the holder when another open file holds a conflicting lock (this process's
    own included). The kernel drops a lock when its process dies, however it dies: it never goes stale."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, "a+")
    try:
        fcntl.flock(fh, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except OSError as exc:
        fh.close()
        if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise
        holder = _describe_holder(path)
        raise LockHeld(f"{path} is held by {holder}", holder) from None
    if not shared:
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()} {socket.gethostname()}\n")
        fh.flush()
    return fh


def _hold_for_life(path: Path, shared: bool = False) -> None:
    """:func:`hold_lock` until this process exits (once per path: a lock this process holds so is kept)."""
    key = str(path.resolve())
    if key not in _HELD:
        _HELD[key] = hold_lock(path, shared=shared)


def claim_setting(checkpoint: str | os.PathLike | None) -> None:
    """One writer per setting: an exclusive lock on ``<checkpoint>.lock``; RuntimeError naming the holder's
    pid when another process holds it. Held until the process exits in a job step (:func:`die_with_job`
    ran), so it covers the records written after training; a library call only checks. None: nothing."""
    if checkpoint is None:
        return
    checkpoint = Path(checkpoint)
    lock = checkpoint.with_name(checkpoint.name + ".lock")
    try:
        if _IN_JOB:
            _hold_for_life(lock)
        elif str(lock.resolve()) not in _HELD:
            hold_lock(lock).close()
    except LockHeld as exc:
        raise RuntimeError(f"{checkpoint}: this setting is being written by {exc.holder} (it holds {lock}); "
                           "a second writer of the same setting is refused: wait for it to end, or stop it") from None


# ----------------------------------------------------------------------------- a job ends with its job


def to_console(message: str) -> bool:
    """Write ``message`` (one line) to the console of the Snakemake run that started this job, besides its log
    (:data:`CONSOLE_FD`): for what a user must see while the run goes on, such as a data source falling back.
    Outside a job (no :data:`CONSOLE_ENV`, or its descriptor closed) nothing is written: stderr is the console
    there, and the log line already reached it. Returns whether it was written."""
    fd = os.environ.get(CONSOLE_ENV, "")
    if not fd.isdigit():
        return False
    try:
        os.write(int(fd), f"algo-emu: {message}\n".encode())
    except OSError:
        return False
    return True


def _set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Linux: the kernel sends ``sig`` to this process when its parent dies (``prctl(PR_SET_PDEATHSIG)``)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(1, int(sig), 0, 0, 0) == 0  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        return False


def _stop(reason: str) -> None:
    with contextlib.suppress(Exception):
        sys.stderr.write(f"algo_emu: {reason}; stopping this step now (nothing more is written)\n")
        sys.stderr.flush()
    os._exit(ORPHAN_EXIT)


def _when_gone(pid: int, then: Callable[[], None], poll: float = 1.0) -> None:
    """Call ``then()`` from a daemon thread once process ``pid`` has ended (a pidfd where the kernel has
    them, so a recycled pid is never mistaken for it; else polling)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        then()
        return
    except (AttributeError, OSError):
        fd = None

    def watch() -> None:
        if fd is not None:
            select.select([fd], [], [])
        else:
            while pid_alive(pid):
                time.sleep(poll)
        then()

    threading.Thread(target=watch, name=f"algo-emu-watch-{pid}", daemon=True).start()


def _is_ancestor(pid: int) -> bool:
    """Whether ``pid`` is this process's parent, grandparent, ... (Linux ``/proc``; elsewhere: whether it lives)."""
    node = os.getppid()
    for _ in range(64):
        if node == pid:
            return True
        if node <= 1:
            return False
        try:
            node = int(Path(f"/proc/{node}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            return pid_alive(pid) and not Path("/proc/self").exists()
        except (ValueError, IndexError):
            return False
    return False


def die_with_job() -> None:
    """Make this process end when the job that started it ends (see the module's docstring). Outside a
    Snakemake job (:data:`JOB_ENV` unset) it does nothing: a step started by hand lives as it always did.

    The rule's shell exports its own pid (:data:`SHELL_ENV`, the shell prefix in common.smk), so a step
    whose shell was killed before this ran (while Python started) knows it and stops. A variable inherited
    by a process that neither of them started (their pids alive, not its ancestors) is ignored."""
    global _IN_JOB
    spec = os.environ.get(JOB_ENV, "")
    if not spec.isdigit() or _IN_JOB:
        return
    owner = int(spec)
    shell = int(os.environ.get(SHELL_ENV, "0")) if os.environ.get(SHELL_ENV, "").isdigit() else 0
    for pid, what in ((shell, "this job's shell (pid {})"), (owner, "the Snakemake process (pid {}) that started this job")):
        if pid and pid != os.getpid() and not _is_ancestor(pid):
            if pid_alive(pid):
                return  # the variables inherited by something that was not started as this job's step
            _stop(what.format(pid) + " is gone")  # it died before this step got here
    _IN_JOB = True
    parent = os.getppid()
    if parent != owner:  # started by the rule's shell: die with it
        _set_parent_death_signal()
        if os.getppid() != parent:  # it died before the kernel was told
            _stop(f"this job's shell (pid {parent}) is gone")
    _when_gone(owner, lambda: _stop(f"the Snakemake process (pid {owner}) that started this job is gone"))


# ----------------------------------------------------------------------------- a killed Snakemake run


RUN_LOCK = "algo_emu.run.lock"


def _incomplete_outputs(smk: Path) -> list[tuple[Path, str]]:
    """(marker, output path) of each output Snakemake marked incomplete (``.snakemake/incomplete``, its file
    persistence: the path urlsafe-base64-encoded, long names cut into ``@``-prefixed folders)."""
    root = smk / "incomplete"
    out = []
    if not root.is_dir():
        return out
    for marker in sorted(root.rglob("*")):
        if not marker.is_file() or marker.name == "migration_underway":
            continue
        parts = marker.relative_to(root).parts
        b64 = "".join(p[1:] if p.startswith("@") else p for p in parts)
        try:
            out.append((marker, base64.urlsafe_b64decode(b64.encode()).decode()))
        except (ValueError, UnicodeDecodeError):
            continue
    return out


def recover_workdir(workdir: str | os.PathLike = ".", log: Callable[[str], None] | None = None) -> dict:
    """Called by the workflow at parse time in the main Snakemake process, before Snakemake checks its lock
    and incomplete outputs. Holds a shared lock on ``.snakemake/algo_emu.run.lock`` for this process's life,
    after a non-blocking exclusive try that tells whether another run of the workflow is alive here.

    * another run alive: nothing is touched; its pid is logged (Snakemake refuses this run if they share
      files: "Directory cannot be locked").
    * none: Snakemake's own lock files (``.snakemake/locks``) were left by a killed run and are removed; each
      output a killed run left incomplete (``.snakemake/incomplete``) is removed, so it is remade, and named.

    Returns ``{"other_run": holder or None, "unlocked": [...], "incomplete": [...]}``; ``log`` (default:
    stderr) receives one line per action."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    workdir = Path(workdir)
    smk = workdir / ".snakemake"
    smk.mkdir(exist_ok=True)
    lock = smk / RUN_LOCK
    result: dict = {"other_run": None, "unlocked": [], "incomplete": []}
    if str(lock.resolve()) in _HELD:  # the Snakefile parsed twice in one process
        return result
    try:
        hold_lock(lock).close()  # exclusive: no other run of this workflow is alive here
    except LockHeld as exc:
        result["other_run"] = exc.holder
        log(f"algo_emu: another Snakemake run ({exc.holder}) is running in {workdir.resolve()}; its lock and "
            "incomplete outputs are left alone (if this run needs its files, Snakemake refuses it: wait for it "
            "to end, or stop it)")
        with contextlib.suppress(LockHeld):
            _hold_for_life(lock, shared=True)
        return result
    try:
        _hold_for_life(lock, shared=True)  # a run that starts from now on sees this one
    except LockHeld as exc:  # one that took it exclusively in between: it clears, this run leaves all alone
        result["other_run"] = exc.holder
        return result
    locks = smk / "locks"
    stale = sorted(p for p in locks.glob("*.lock")) if locks.is_dir() else []
    if stale:
        for p in stale:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
        result["unlocked"] = [p.name for p in stale]
        log(f"algo_emu: removed the Snakemake lock a killed run left in {workdir.resolve()} "
            f"({', '.join(p.name for p in stale)}): no Snakemake run of this workflow is running here")
    for marker, output in _incomplete_outputs(smk):
        target = workdir / output
        with contextlib.suppress(FileNotFoundError):
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            else:
                target.unlink()
        with contextlib.suppress(FileNotFoundError):
            marker.unlink()
        result["incomplete"].append(output)
    if result["incomplete"]:
        log(f"algo_emu: {len(result['incomplete'])} output(s) left incomplete by an interrupted run, removed "
            "and redone by this run:\n" + "\n".join(f"    {o}" for o in result["incomplete"]))
    return result
