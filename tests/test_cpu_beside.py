"""``benchmarks._cpu``: the CPU a sweep's workers used, and what the machine spent beside them."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks._cpu import CpuBeside

pytestmark = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads /proc")

BUSY = "import time\nend = time.process_time() + 1.2\nwhile time.process_time() < end: pass\n"


def test_a_process_titled_as_a_worker_is_counted_as_one_and_the_rest_beside_it():
    # a title of this test's own, so Ray workers other tests left behind are not counted
    title = f"ampsweep-test-worker-{os.getpid()}"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with CpuBeside(workers=1, interval=0.1, title=title) as cpu:
        # exec -a gives the child a title, as Ray titles a TrialWorker actor
        child = subprocess.Popen(["bash", "-c", f'exec -a "{title}" {sys.executable} -c "$0"', BUSY])
        start = time.time()
        child.wait(timeout=60)
        time.sleep(0.3)
        end = time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    beside = cpu.between(start, end)
    assert beside is not None
    # the child's CPU time, as the kernel accounts it to this process, is the workers'. Sampling misses
    # about an interval at each end (CPU spent after a worker's last sample before it exits, and the
    # interpolation at the window's start), more when a loaded machine delays the sampling thread:
    # half is a bound no such delay reaches, and a worker counted as "beside" would give 0
    assert used * 0.5 <= beside.workers_s <= used + 0.05
    assert beside.busy_s >= beside.workers_s * 0.5 and beside.others_s >= 0


def test_a_window_outside_the_samples_is_not_measured():
    with CpuBeside(workers=1, interval=0.05) as cpu:
        time.sleep(0.2)
    assert cpu.between(time.time() + 10, time.time() + 20) is None
