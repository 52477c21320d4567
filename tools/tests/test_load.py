"""tools.campaign.load: what shared the machine with a job, measured while it ran. A real child process, busy, then
stopped (SIGSTOP), then busy again: its CPU is counted, the stopped stretch is one stall, and the summary is what a
campaign call records (written into its calls.json by campaign.record_load)."""

import os
import signal
import subprocess
import sys
import time

import pytest

from tools.campaign import load as ld

BUSY = "import time\nt = time.time()\nwhile time.time() - t < 60:\n    pass\n"


@pytest.fixture
def busy_child():
    proc = subprocess.Popen([sys.executable, "-c", BUSY])
    yield proc
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait()


def test_load_monitor_counts_the_jobs_cpu_and_names_one_stall_for_a_pause(busy_child, monkeypatch):
    # a starved job is a stall too; so that this test does not depend on what else runs (a niced test beside a
    # training job gets about a tenth of a core), the threshold here is 1 % of a core: a stopped job uses 0
    monkeypatch.setattr(ld, "STALL_SHARE", 0.01)
    m = ld.LoadMonitor(every=0.5)
    m.attach(busy_child.pid)
    time.sleep(1.0)
    m.sample()
    assert m.job > 0.01 and m.stalled == 0.0
    os.kill(busy_child.pid, signal.SIGSTOP)
    time.sleep(0.3)
    m.sample()  # the stop falls inside this sample: partly busy
    stalled_before = m.stalled
    for _ in range(2):
        time.sleep(1.0)
        m.sample()  # stopped: the job uses nothing
    assert m.stalled - stalled_before >= 1.9
    os.kill(busy_child.pid, signal.SIGCONT)
    time.sleep(1.0)
    m.sample()
    s = m.summary()
    assert len(s["stalls"]) == 1 and s["stalls"][0][1] >= 1.9  # the two stopped samples are one stretch
    assert s["job_cpu_s"] <= s["sampled_s"] * 1.05  # one busy thread: at most one core
    assert 0 < s["job_share"] <= 1 and 0 <= s["others_share"] <= 1 and s["cores"] == ld.LoadMonitor().cores
    assert ld.load_words(s).endswith("in 1 stretch(es)")


def test_load_monitor_thread_samples_until_stopped_and_survives_the_job_ending(busy_child):
    m = ld.LoadMonitor(every=0.2)
    m.start(busy_child.pid)
    time.sleep(0.7)
    busy_child.kill()
    busy_child.wait()
    time.sleep(0.5)
    m.stop()  # the job is gone: no error, the samples taken are kept
    s = m.summary()
    assert s["sampled_s"] >= 1.0 and s["job_cpu_s"] > 0


def test_load_words_say_when_nothing_was_measured():
    assert ld.load_words(None) == "load not recorded" and ld.load_words({"sampled_s": 0}) == "load not recorded"
    words = ld.load_words({"cores": 2, "sampled_s": 60, "job_share": 0.97, "others_share": 0.01, "stalled_s": 0,
                           "stalls": []})
    assert words == "job 97% of 2 cores, others 1%, stalled 0 min"


def test_a_job_shorter_than_one_sample_still_has_its_cpu_counted():
    """The last sample comes after the job has ended and been waited for, when its processes are gone; the CPU
    they used is then read from this process's reaped children, so a short job is not recorded as idle."""
    burn = "import time\nwhile time.process_time() < 0.3:\n    pass\n"  # 0.3 s of CPU, however long that takes
    proc = subprocess.Popen([sys.executable, "-c", burn])
    m = ld.LoadMonitor(every=60.0)  # no sample falls inside the job
    m.start(proc.pid)
    proc.wait()
    m.stop()
    s = m.summary()
    assert s["job_cpu_s"] >= 0.3 and s["sampled_s"] > 0
    assert s["stalled_s"] == 0 and s["stalls"] == []  # the sample after its end is not a stall
