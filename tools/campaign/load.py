"""What shared the machine with a long job, measured while it runs.

A job's summed epoch seconds count everything that happened to it: a pause (SIGSTOP while the machine
was needed for something else), other work beside it, a slow state of the machine. Only the last is a
fact about the code's speed. :class:`LoadMonitor` samples, every ``every`` seconds, the CPU seconds the
job's process tree used and the CPU seconds the rest of the machine used, so a record can say which it
was: a sample in which the job used under :data:`STALL_SHARE` of one core is a *stall* (paused or
starved); CPU the rest of the machine used is *others*. A slow machine shows neither.

Per-process accounting (psutil, Linux ``/proc``): each sample adds, per live process of the tree, the
CPU it used since the last sample, and a new process counts from its start. What the samples miss (each
process's last partial sample, a job shorter than one sample) is added when the job has ended, from the
CPU of this process's waited-for children. System-wide busy time is every CPU state except idle and iowait.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

LOAD_EVERY_S = 30.0
#: a sample in which the job's processes used less than this share of one core is a stall
STALL_SHARE = 0.1


def _reaped_children_cpu() -> float:
    """CPU seconds of this process's children that have ended and been waited for (with their own such children)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _busy(t) -> float:
    """Busy CPU seconds of a ``psutil.cpu_times()`` tuple: every state but idle and iowait."""
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


class LoadMonitor:
    """Samples a running job's process tree and the rest of the machine (see the module's docstring).

    ``start(pid)`` begins sampling in a thread; ``stop()`` takes a last sample and ends it; ``summary()``
    (any time, thread-safe) is what a record keeps. ``sample(dt)`` is one step, callable directly (tests)."""

    def __init__(self, every: float = LOAD_EVERY_S) -> None:
        import psutil

        self._ps = psutil
        self.every = float(every)
        self.cores = psutil.cpu_count() or 1
        self.sampled = self.job = self.others = self.stalled = 0.0
        self.stalls: list[list] = []  # [UTC start, seconds] of each run of stalled samples
        self._last: dict[int, float] = {}
        self._was_stalled = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._root = None
        self._reaped0 = 0.0

    # ------------------------------------------------------------------ sampling
    def _tree_cpu(self) -> dict[int, float]:
        ps = self._ps
        procs = [self._root]
        try:
            procs += self._root.children(recursive=True)
        except (ps.NoSuchProcess, ps.AccessDenied):
            pass
        out = {}
        for p in procs:
            try:
                t = p.cpu_times()
            except (ps.NoSuchProcess, ps.AccessDenied, ps.ZombieProcess):
                continue
            out[p.pid] = t.user + t.system
        return out

    def attach(self, pid: int) -> None:
        """Take the job's process (and its children from now on) as the one to measure; the first sample
        counts from here."""
        self._root = self._ps.Process(pid)
        self._last = self._tree_cpu()
        self._sys = _busy(self._ps.cpu_times())
        self._t = time.monotonic()

    def sample(self, final: bool = False) -> None:
        """One sample: the CPU since the last one. ``final``: the job has ended, so a low share is its end, not
        a stall."""
        now = time.monotonic()
        dt = now - self._t
        if dt <= 0:
            return
        cpu = self._tree_cpu()
        job = sum(max(0.0, c - self._last.get(pid, 0.0)) for pid, c in cpu.items())
        busy = _busy(self._ps.cpu_times())
        others = max(0.0, busy - self._sys - job)
        stalled = job < STALL_SHARE * dt and not final
        with self._lock:
            self.sampled += dt
            self.job += job
            self.others += others
            if stalled:
                self.stalled += dt
                if self._was_stalled and self.stalls:
                    self.stalls[-1][1] = round(self.stalls[-1][1] + dt, 1)
                else:
                    start = datetime.now(timezone.utc) - timedelta(seconds=dt)
                    self.stalls.append([start.isoformat(timespec="seconds"), round(dt, 1)])
            self._was_stalled = stalled
        self._last, self._sys, self._t = cpu, busy, now

    # ------------------------------------------------------------------ thread
    def start(self, pid: int) -> None:
        """Sample the job ``pid`` (a child of this process) in a thread until :meth:`stop`."""
        self._reaped0 = _reaped_children_cpu()
        self.attach(pid)
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.sample()
            except self._ps.Error:  # the job's root process is gone: stop() follows
                break

    def stop(self) -> None:
        """End sampling. Called after the job was waited for, its whole CPU is then known exactly (this process's
        reaped children, which include what their own reaped children used): what the samples missed (a job
        shorter than one sample, the last partial sample of each process) is added to the job and taken off
        what the samples gave to others."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            try:
                self.sample(final=True)
            except self._ps.Error:
                pass
            missing = _reaped_children_cpu() - self._reaped0 - self.job
            if missing > 0:
                with self._lock:
                    self.job += missing
                    self.others = max(0.0, self.others - missing)

    def summary(self) -> dict:
        """Seconds sampled, CPU seconds of the job and of everything else, seconds stalled (and when), the
        machine's logical cores; shares are of ``sampled x cores``."""
        with self._lock:
            cap = self.sampled * self.cores
            return {"every_s": self.every, "cores": self.cores, "sampled_s": round(self.sampled, 1),
                    "job_cpu_s": round(self.job, 1), "others_cpu_s": round(self.others, 1),
                    "job_share": round(self.job / cap, 3) if cap else None,
                    "others_share": round(self.others / cap, 3) if cap else None,
                    "stalled_s": round(self.stalled, 1), "stalls": [list(x) for x in self.stalls]}


def load_words(load: dict | None) -> str:
    """One line for a page or table: what shared the machine with a call (or that it was not measured)."""
    if not load or not load.get("sampled_s"):
        return "load not recorded"
    words = (f"job {load['job_share']:.0%} of {load['cores']} cores, others {load['others_share']:.0%}, "
             f"stalled {load['stalled_s'] / 60:.0f} min")
    return words + (f" in {len(load['stalls'])} stretch(es)" if load.get("stalls") else "")
