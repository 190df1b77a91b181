"""A full disk is an error like any other: one line, its own exit code, nothing half-written.

The fast tests inject ENOSPC where the driver writes (a trial's commit, the
lock's heartbeat, the plan, the report); the slow one runs ``ampsweep run`` with
``--out`` on a real 200 KB tmpfs (it needs root and ``mount``), then enlarges
it and resumes.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from ampsweep.contracts import LOCK_FILE, PLAN_FILE, encode_plan
from ampsweep.jobs.training._trainer import run_trial
from ampsweep.sweep import Sweep, SweepStore
from ampsweep.sweep._errors import OutOfSpace
from ampsweep.sweep.cli import main
from ampsweep.sweep.store._lock import DriverLock

TESTS = Path(__file__).parent
TINY = TESTS / "workloads" / "tiny_mlp.py"
EXIT_OUT_OF_SPACE = 4
NO_SPACE = "No space left on device"


def _spec(folder: Path, **changes) -> Path:
    spec = {
        "name": "full",
        "workload": "tests.linear_workload:make",
        "steps": 12,
        "grid": {"amp_level": ["O0", "O2"], "seed": [0]},
        **changes,
    }
    path = folder / f"spec-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _temporaries(root: Path) -> list[Path]:
    """Dot-prefixed files a write left behind (the lock file is not one: it is the lock)."""
    return [p for p in root.rglob(".*") if p.is_file() and p.name != LOCK_FILE]


def _files(root: Path, folder: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / folder).glob("[!.]*"))}


def _no_space() -> OSError:
    return OSError(errno.ENOSPC, f"Error writing bytes to file. Detail: [errno 28] {NO_SPACE}")


def _fill_after(monkeypatch, rows: int) -> list[str]:
    """Let ``rows`` ``trials/`` rows be written, then fail every Parquet write half-way with ENOSPC.

    Returns the temporary paths the failed writes began, to check they are gone.
    """
    real = pq.write_table
    written: list[str] = []
    begun: list[str] = []

    def write_table(table, where, *args, **kwargs):
        if len(written) >= rows:
            begun.append(str(where))
            kwargs.get("filesystem").open_output_stream(str(where)).write(b"PAR1 half a file")
            raise _no_space()
        real(table, where, *args, **kwargs)
        if "/trials/" in str(where):
            written.append(str(where))

    monkeypatch.setattr(pq, "write_table", write_table)
    return begun


def test_a_commit_into_a_full_disk_stops_with_the_file_and_leaves_nothing_half_written(tmp_path, monkeypatch):
    plan = Sweep.from_yaml(_spec(tmp_path, grid={"amp_level": ["O0", "O2"], "seed": [0, 1]})).plan()
    results = [run_trial(config, plan.workload_ref) for config in plan.trials]
    store = SweepStore(str(tmp_path / "out"), plan.name)
    root = Path(store.root)
    store.write_text(PLAN_FILE, encode_plan(plan.name, plan.entries()))
    begun = _fill_after(monkeypatch, rows=2)
    store.commit(results[0])
    store.commit(results[1])
    before = _files(root, "trials")
    with pytest.raises(OutOfSpace) as stopped:
        store.commit(results[2])
    stop = stopped.value
    assert stop.exit_code == EXIT_OUT_OF_SPACE
    assert (stop.committed, stop.left) == (2, 2)
    assert str(stop).startswith("could not write steps/trial_id="), str(stop)
    assert f"in {root}: {NO_SPACE}; 2 trials are committed, 2 left" in str(stop)
    assert begun and not any(Path(p).exists() for p in begun), "the half-written file is removed"
    assert not _temporaries(root)
    assert store.committed() == {results[0].trial_id, results[1].trial_id}, "no trial looks committed"
    assert _files(root, "trials") == before

    monkeypatch.undo()  # space again: the same trial commits over its debris
    store.commit(results[2])
    store.commit(results[3])
    assert store.committed() == {r.trial_id for r in results}
    assert {k: v for k, v in _files(root, "trials").items() if k in before} == before


def test_a_full_disk_on_the_trials_row_itself_leaves_the_trial_uncommitted(tmp_path, monkeypatch):
    plan = Sweep.from_yaml(_spec(tmp_path)).plan()
    result = run_trial(plan.trials[0], plan.workload_ref)
    store = SweepStore(str(tmp_path / "out"), plan.name)
    real = pq.write_table

    def write_table(table, where, *args, **kwargs):
        if "/trials/" in str(where):
            kwargs["filesystem"].open_output_stream(str(where)).write(b"PAR1")
            raise OSError(errno.EDQUOT, "Disk quota exceeded")
        real(table, where, *args, **kwargs)

    monkeypatch.setattr(pq, "write_table", write_table)
    with pytest.raises(OutOfSpace, match=r"^could not write trials/\w+\.parquet in .*: Disk quota exceeded"):
        store.commit(result)
    assert store.committed() == set()
    assert not _temporaries(Path(store.root))


def test_other_write_errors_are_not_called_a_full_disk(tmp_path, monkeypatch):
    store = SweepStore(str(tmp_path / "out"), "full")

    def refuse(table, where, *args, **kwargs):
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(pq, "write_table", refuse)
    with pytest.raises(PermissionError):
        store.write_table(store.path("trials/abc.parquet"), None)


def test_a_heartbeat_into_a_full_disk_stops_and_the_lock_is_released(tmp_path, monkeypatch):
    store = SweepStore(str(tmp_path / "out"), "full")
    lock = DriverLock(store)
    lock.acquire()
    real = store.write_bytes

    def full(relative: str, data: bytes) -> None:
        def half(temporary: str) -> None:
            with store.fs.open_output_stream(temporary) as stream:
                stream.write(data[: len(data) // 2])
            raise _no_space()

        store._atomic_write(store.path(relative), half)

    monkeypatch.setattr(store, "write_bytes", full)
    with pytest.raises(
        OutOfSpace, match=rf"^could not write {LOCK_FILE} in .*: {NO_SPACE}; 0 trials are committed$"
    ):
        lock.beat(["abc"], force=True)
    assert (Path(store.root) / LOCK_FILE).is_file(), "the old lock file is whole"
    assert not _temporaries(Path(store.root))
    lock.release()
    assert not (Path(store.root) / LOCK_FILE).exists()
    monkeypatch.setattr(store, "write_bytes", real)
    DriverLock(SweepStore(str(tmp_path / "out"), "full")).acquire()  # the rerun is not refused


def test_run_and_report_into_a_full_disk_end_with_one_line_and_exit_4(tmp_path, monkeypatch, capsys):
    """Through ``ampsweep run`` itself: every trial committed already, so no Ray starts; the
    plan, then the report, meet a full disk."""
    spec = _spec(tmp_path)
    plan = Sweep.from_yaml(spec).plan()
    out = tmp_path / "out"
    store = SweepStore(str(out), plan.name)
    for config in plan.trials:
        store.commit(run_trial(config, plan.workload_ref))
    root = Path(store.root)
    real = SweepStore.write_bytes

    def plan_full(self, relative: str, data: bytes) -> None:
        if relative != PLAN_FILE:
            return real(self, relative, data)

        def half(temporary: str) -> None:
            with self.fs.open_output_stream(temporary) as stream:
                stream.write(data[:10])
            raise _no_space()

        self._atomic_write(self.path(relative), half)

    argv = ["run", str(spec), "--out", str(out), "--no-progress"]
    with monkeypatch.context() as patch:
        patch.setattr(SweepStore, "write_bytes", plan_full)
        code = main(argv)
    err = capsys.readouterr().err
    assert code == EXIT_OUT_OF_SPACE, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0] == (
        f"ampsweep: stopped: could not write {PLAN_FILE} in {root}: {NO_SPACE}; 2 trials are committed; "
        f"resume with: ampsweep run {spec} --out {out} --no-progress"
    )
    assert not (root / PLAN_FILE).exists() and not _temporaries(root)
    assert not (root / LOCK_FILE).exists()

    real_replace = os.replace

    def report_full(source, target, *args, **kwargs):
        if str(target).endswith("report.html"):
            raise _no_space()
        return real_replace(source, target, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", report_full)
        code = main(argv)
    captured = capsys.readouterr()
    assert code == EXIT_OUT_OF_SPACE, captured.err
    lines = captured.err.strip().splitlines()
    assert "Traceback" not in captured.err
    assert lines[-1] == (
        f"ampsweep: stopped: could not write report/report.html in {root}: {NO_SPACE}; "
        f"rerun with: ampsweep report {root}"
    ), captured.err
    assert not _temporaries(root / "report")
    assert not (root / "report" / "report.html").exists()

    assert main(["report", str(root)]) == 0
    assert (root / "report" / "report.html").is_file() and not _temporaries(root)


# --- a real full disk ---------------------------------------------------------------------------


def _mount(where: Path, size: str) -> str | None:
    """Mount a tmpfs of ``size`` at ``where``; the reason when this machine does not allow it."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return "mounting a tmpfs needs root and mount(8)"
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True
    )
    return None if done.returncode == 0 else f"mount -t tmpfs refused: {done.stderr.strip()}"


def _run(spec: Path, out: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "ampsweep", "run", str(spec), "--out", str(out), "--workers", "2"]
    return subprocess.run([*command, "--no-progress"], capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_sweep_into_a_real_full_disk_stops_with_a_resume_line_and_resumes(tmp_path):
    disk = tmp_path / "disk"
    refused = _mount(disk, "200k")
    if refused:
        pytest.skip(refused)
    try:
        spec = tmp_path / "spec.yaml"
        grid = {"amp_level": ["O0", "O2"], "clip": [None, 1.0], "seed": [0, 1, 2, 3]}
        spec.write_text(
            yaml.safe_dump({"name": "disk", "workload": f"{TINY}:make", "steps": 300, "grid": grid})
        )
        root = disk / "disk"
        first = _run(spec, disk)
        assert first.returncode == EXIT_OUT_OF_SPACE, first.stderr
        assert "Traceback" not in first.stderr, first.stderr
        last = first.stderr.strip().splitlines()[-1]
        assert last.startswith("ampsweep: stopped: could not write "), first.stderr
        assert f"{NO_SPACE}; " in last and f"; resume with: ampsweep run {spec} --out {disk}" in last, last
        assert not _temporaries(root), _temporaries(root)
        assert not (root / LOCK_FILE).exists()
        kept = _files(root, "trials")
        assert 0 < len(kept) < 16, "the disk filled mid-sweep"

        subprocess.run(["mount", "-o", "remount,size=50m", str(disk)], check=True)
        second = _run(spec, disk)
        assert second.returncode == 0, second.stderr
        trials = pd.read_parquet(root / "trials")
        assert len(trials) == 16 and trials["trial_id"].is_unique
        assert {k: v for k, v in _files(root, "trials").items() if k in kept} == kept
        steps = pd.read_parquet(root / "steps")
        counts = steps["trial_id"].astype(str).value_counts().to_dict()
        assert counts == dict(zip(trials["trial_id"].astype(str), trials["steps_run"])), "each step once"
        assert not _temporaries(root)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
