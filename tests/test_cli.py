"""What a user sees of the CLI outside a terminal: a closed pipe, a log file."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import yaml

from ampsweep.sweep.scheduling._progress import SweepProgress

TINY = Path(__file__).parent / "workloads" / "tiny_mlp.py"


def test_plan_into_a_closed_pipe_exits_quietly(tmp_path):
    spec = tmp_path / "big.yaml"
    # ~2000 plan lines: far more than a pipe buffers, so `head` closes it mid-write
    spec.write_text(
        yaml.safe_dump(
            {"name": "big", "workload": f"{TINY}:make", "steps": 5, "grid": {"seed": list(range(1000))}}
        )
    )
    shell = f"{sys.executable} -m ampsweep plan {spec} | head -n 2; exit ${{PIPESTATUS[0]}}"
    ran = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=120)
    assert ran.stdout.splitlines()[0].startswith("big: 2000 trials")
    assert len(ran.stdout.splitlines()) == 2
    assert "Traceback" not in ran.stderr and "BrokenPipe" not in ran.stderr, ran.stderr
    assert ran.returncode == 141


def test_progress_in_a_log_is_one_readable_line():
    log = io.StringIO()
    with SweepProgress(total=5, already_done=1, enabled=True, log=log) as bar:
        bar.set_running(2)
        bar.finished("completed")
        bar.finished("diverged")
    lines = log.getvalue().splitlines()
    assert lines, "at least the first and the final line"
    last = lines[-1]
    assert last.startswith("[ampsweep] 3/5 trials · completed 1 · diverged 1 · failed 0 · running 2")
    assert "elapsed 0:00:0" in last and "ETA 0:00:0" in last
    assert "…" not in log.getvalue()


def test_progress_disabled_writes_nothing():
    log = io.StringIO()
    with SweepProgress(total=2, already_done=0, enabled=False, log=log) as bar:
        bar.finished("completed")
    assert log.getvalue() == ""
