"""``ampsweep status``: who is running a sweep folder, read from its lock."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ampsweep.sweep.store._lock import DriverLock
from ampsweep.sweep.store._status import sweep_status
from ampsweep.sweep.store._store import SweepStore


def _lock_of(pid: int, root: Path) -> None:
    (root / "s" / "trials").mkdir(parents=True)  # a sweep folder with nothing committed yet
    lock = DriverLock(SweepStore(str(root), "s"))
    lock.info.pid = pid
    lock.beat(["abc123"], force=True)  # a fresh heartbeat: only the pid can tell


def test_a_driver_killed_with_its_lock_in_place_is_not_shown_as_running(tmp_path: Path) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    _lock_of(int(gone.stdout), tmp_path)
    status = sweep_status(str(tmp_path / "s"))
    assert status.driver is None and status.running == []


def test_a_live_driver_is_shown_with_what_it_runs(tmp_path: Path) -> None:
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _lock_of(alive.pid, tmp_path)
        status = sweep_status(str(tmp_path / "s"))
        assert status.driver is not None and f"pid {alive.pid}" in status.driver
        assert status.running == ["abc123"]
    finally:
        alive.kill()
        alive.wait()


def test_a_device_where_more_than_one_nan_did_not_reproduce_is_named_with_its_avoid_devices_entry(tmp_path):
    from ampsweep.contracts import NOT_REPRODUCED
    from tests.test_analysis import write_row
    from tests.test_faults import _fault

    root = tmp_path / "s"
    for trial, node, device in (("a", "n7", "3"), ("b", "n7", "3"), ("c", "n8", "0")):
        write_row(root, {"trial_id": trial, "outcome": "completed", "device_kind": "gpu"})
        row = {"kind": "nonfinite", "cause": NOT_REPRODUCED, "attempt": 1, "node": node, "device_id": device}
        _fault(root, trial, [row])
    lines = sweep_status(str(root)).lines()
    suspects = [line for line in lines if "suspect" in line]
    assert suspects == [
        "  suspect device: node n7, device 3: 2 NaNs did not reproduce; avoid_devices: ['n7:3']"
    ]
