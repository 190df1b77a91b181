"""A long sweep's failure paths, end to end on real Ray: nothing lost, nothing hung (slow).

Each test starts (and ends) only its own Ray: a driver's private local cluster
or a ``ray.cluster_utils.Cluster``; nothing here stops other Ray processes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
import yaml

from ampsweep.contracts import LOCK_FILE, part_path
from tests._killer import killer_workload
from tests._wait import wait_until

pytestmark = pytest.mark.slow
TINY = Path(__file__).parent / "workloads" / "tiny_mlp.py"
ROOT = Path(__file__).parent.parent
#: A floor of 5 ms (20 ms) under each step, so that a run is still going when a test
#: interrupts it, however fast the machine.
PACED = {"pause_s": 0.005}
SLOW = {"pause_s": 0.02}


def _spec(
    tmp_path: Path,
    workload: str = f"{TINY}:make",
    steps: int = 20,
    name: str = "rel",
    workload_args: dict | None = None,
    **grid,
) -> Path:
    spec = {
        "name": name,
        "workload": workload,
        "workload_args": workload_args or {},
        "steps": steps,
        "abort_after": 3,
        "grid": {"amp_level": ["O0", "O2"], "clip": [None, 1.0], "seed": [0], **grid},
    }
    path = tmp_path / f"{name}-{len(list(tmp_path.glob('*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _command(spec: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "ampsweep",
        "run",
        str(spec),
        "--out",
        str(out),
        "--workers",
        "2",
        "--no-progress",
        *extra,
    ]


def _run(spec: Path, out: Path, *extra: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(_command(spec, out, *extra), capture_output=True, text=True, timeout=timeout)


def _start(spec: Path, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        _command(spec, out, *extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _wait_for_rows(out: Path, name: str, count: int, proc: subprocess.Popen, limit: float = 300) -> None:
    trials = out / name / "trials"

    def committed() -> bool:
        assert proc.poll() is None, proc.communicate()
        return len(list(trials.glob("[!.]*.parquet"))) >= count

    wait_until(committed, limit, message=f"{count} committed trial rows under {trials}")


def _finish(proc: subprocess.Popen, timeout: float, what: str) -> str:
    """The stopped driver's stderr; a driver still running after ``timeout`` s is killed and the test fails."""
    try:
        return proc.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"hung: the run was still going {timeout:g} s after {what}")


def _left(line: str) -> int:
    """How many trials a stopped run's one-line summary says are left."""
    found = re.search(r"; (\d+) trials are committed, (\d+) left; resume with: ", line)
    assert found, line
    return int(found[2])


def _steps(root: Path) -> pd.DataFrame:
    part = ds.partitioning(pa.schema([("trial_id", pa.string())]), flavor="hive")
    return ds.dataset(root / "steps", format="parquet", partitioning=part).to_table().to_pandas()


def _assert_each_trial_once(root: Path, steps: int) -> pd.DataFrame:
    trials = pd.read_parquet(root / "trials")
    assert trials["trial_id"].is_unique
    table = _steps(root)
    for trial_id, group in table.groupby("trial_id"):
        run = int(trials.set_index("trial_id").loc[trial_id, "steps_run"])
        assert sorted(group["step"]) == list(range(run)), trial_id
    assert set(table["trial_id"]) <= set(trials["trial_id"])
    return trials


def test_driver_sigkill_then_resume_equals_an_uninterrupted_run(tmp_path):
    spec = _spec(tmp_path, steps=120, workload_args=PACED, seed=[0, 1, 2])
    out = tmp_path / "killed"
    proc = _start(spec, out)
    _wait_for_rows(out, "rel", 3, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    rows = out / "rel" / "trials"
    before = {p.name: p.stat().st_mtime_ns for p in rows.glob("[!.]*.parquet")}
    assert 3 <= len(before) < 12
    assert (out / "rel" / LOCK_FILE).exists(), "the killed driver left its lock behind"
    resumed = _run(spec, out)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"{12 - len(before)} trials run" in resumed.stdout
    after = {p.name: p.stat().st_mtime_ns for p in rows.glob("[!.]*.parquet")}
    assert all(after[name] == mtime for name, mtime in before.items()), "no finished trial is rerun"

    clean = tmp_path / "clean"
    assert _run(spec, clean).returncode == 0
    got, want = _assert_each_trial_once(out / "rel", 120), _assert_each_trial_once(clean / "rel", 120)
    keys = ["trial_id", "outcome", "steps_run"]
    assert (
        got[keys].sort_values("trial_id").values.tolist()
        == want[keys].sort_values("trial_id").values.tolist()
    )
    losses = [
        _steps(root).sort_values(["trial_id", "step"])["loss"].tolist()
        for root in (out / "rel", clean / "rel")
    ]
    assert losses[0] == losses[1]


def test_ctrl_c_stops_the_sweep_midway_and_says_how_to_resume(tmp_path):
    # each trial paces >= 2 s: the 9+ trials after the first committed rows take far longer
    # than stopping does, so a driver that ignored Ctrl-C would run to the end (or hang)
    spec = _spec(tmp_path, steps=400, workload_args=PACED, seed=[0, 1, 2])
    out = tmp_path / "out"
    proc = _start(spec, out)
    _wait_for_rows(out, "rel", 1, proc)
    proc.send_signal(signal.SIGINT)
    stderr = _finish(proc, 60, "Ctrl-C")
    assert proc.returncode == 130, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("ampsweep: stopped: interrupted;") and f"resume with: ampsweep run {spec}" in last
    assert _left(last) > 0, "Ctrl-C stopped the sweep before its last trial, not after it"
    assert not (out / "rel" / LOCK_FILE).exists(), "the lock is released"
    resumed = _run(spec, out)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _assert_each_trial_once(out / "rel", 400)
    assert len(pd.read_parquet(out / "rel" / "trials")) == 12


def test_losing_the_local_ray_node_ends_the_run_with_a_resume_line(tmp_path):
    # each trial takes >= 10 s whatever the machine's speed: the GCS needs ~15 s to call the
    # node dead, and a sweep that finishes before that rightly exits 0
    spec = _spec(tmp_path, steps=2000, workload_args=PACED, seed=[0, 1, 2])
    out = tmp_path / "out"
    proc = _start(spec, out)
    _wait_for_rows(out, "rel", 1, proc)
    raylets = [p for p in psutil.Process(proc.pid).children(recursive=True) if p.name() == "raylet"]
    assert raylets, "the driver started a private local Ray"
    for raylet in raylets:
        raylet.kill()
    stderr = _finish(proc, 120, "its Ray node died")
    assert proc.returncode != 0
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("ampsweep: stopped: ") and "resume with: ampsweep run" in last, stderr[-2000:]
    assert _left(last) > 0, "the run stopped when its node died, not after its last trial"
    try:  # what is left of that private cluster shares the driver's session
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    resumed = _run(spec, out)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert len(pd.read_parquet(out / "rel" / "trials")) == 12


def test_a_second_driver_is_refused_and_a_stale_lock_is_not(tmp_path):
    spec = _spec(tmp_path, steps=300, workload_args=SLOW, seed=[0, 1])
    out = tmp_path / "out"
    first = _start(spec, out)
    _wait_for_rows(out, "rel", 1, first)
    second = _run(spec, out, timeout=120)
    first.communicate(timeout=600)
    assert second.returncode == 2
    line = second.stderr.strip()
    assert "\n" not in line and "another ampsweep run is using this sweep folder" in line
    assert f"pid {first.pid} on {socket.gethostname()}, started" in line
    # a lock left by a driver that no longer exists does not block
    lock = out / "rel" / LOCK_FILE
    lock.write_text(
        json.dumps(
            {
                "host": socket.gethostname(),
                "pid": 2**22 + 12345,
                "started_at": "then",
                "heartbeat": time.time(),
                "running": [],
            }
        )
    )
    extended = _spec(tmp_path, steps=300, workload_args=SLOW, seed=[0, 1, 2])
    again = _run(extended, out)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "4 trials run" in again.stdout and "8 already done" in again.stdout, "only the new seed runs"


def test_changing_a_fixed_setting_under_the_same_name_is_refused(tmp_path):
    out = tmp_path / "out"
    assert _run(_spec(tmp_path, steps=10, amp_level=["O0"], clip=[None]), out).returncode == 0
    changed = _run(_spec(tmp_path, steps=12, amp_level=["O0"], clip=[None]), out)
    assert changed.returncode == 2
    assert changed.stderr.strip().startswith("ampsweep: error: steps: 12 is not allowed; the sweep in")
    assert "was run with steps 10" in changed.stderr


def test_a_corrupt_file_is_reported_skipped_and_rerun(tmp_path):
    spec = _spec(tmp_path, steps=10)
    out = tmp_path / "out"
    assert _run(spec, out).returncode == 0
    root = out / "rel"
    victim = sorted(p.stem for p in (root / "trials").glob("*.parquet"))[0]
    steps_file = root / part_path("steps", victim)
    steps_file.write_bytes(steps_file.read_bytes()[:40])  # truncated mid-write by a full disk, say
    report = subprocess.run(
        [sys.executable, "-m", "ampsweep", "report", str(root)], capture_output=True, text=True
    )
    assert report.returncode == 0, report.stderr[-2000:]
    assert victim in report.stdout + report.stderr + (root / "report" / "report.md").read_text()
    rerun = _run(spec, out)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert f"trial {victim}: steps/trial_id={victim}/part-0.parquet is unreadable" in rerun.stderr
    assert "1 trials run" in rerun.stdout
    _assert_each_trial_once(root, 10)


def test_a_broken_workload_stops_after_the_first_trials(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text(
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('tiny_for_broken', {str(TINY)!r})\n"
        "tiny = importlib.util.module_from_spec(spec); sys.modules['tiny_for_broken'] = tiny\n"
        "spec.loader.exec_module(tiny)\n"
        "def bad_batches():\n"
        "    while True:\n"
        "        raise ValueError('shapes (16, 8) and (7, 3) do not align')\n"
        "        yield\n"
        "def make(seed, **kw):\n"
        "    workload = tiny.make(seed, **kw)\n"
        "    workload.batches = bad_batches()\n"
        "    return workload\n"
    )
    spec = _spec(tmp_path, workload=f"{broken}:make", seed=[0, 1, 2])
    out = tmp_path / "out"
    result = _run(spec, out, timeout=300)
    assert result.returncode == 3
    assert result.stderr.count("ValueError: shapes (16, 8) and (7, 3) do not align") == 1, result.stderr
    assert f'File "{broken}", line 7, in bad_batches' in result.stderr
    assert "the workload is broken: the first 3 trials" in result.stderr and "--keep-going" in result.stderr
    # it stopped after those first trials: none of the other 9 was run
    assert _left(result.stderr.strip().splitlines()[-1]) == 12
    assert not list((out / "rel" / "trials").glob("*.parquet")), (
        "the failures are not committed: a fix reruns them"
    )
    kept = _run(spec, out, "--keep-going")
    assert kept.returncode == 0
    assert set(pd.read_parquet(out / "rel" / "trials")["outcome"]) == {"failed"}


def test_simulated_cluster_survives_a_killed_actor_and_a_removed_node(tmp_path):
    import ray
    from ray.cluster_utils import Cluster

    from ampsweep.sweep import RunConfig, Sweep

    killer, marker = killer_workload(tmp_path, TINY)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        doomed = cluster.add_node(num_cpus=1, resources={"NPU": 2})
        cluster.add_node(num_cpus=1, resources={"NPU": 2})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        sweep = Sweep(
            {
                "name": "nodes",
                "workload": f"{killer}:make",
                "steps": 200,
                "devices": "ascend",
                "grid": {"amp_level": ["O0", "O2"], "clip": [None, 1.0], "seed": [0, 1, 2, 3]},
            }
        )
        import threading

        def remove_later() -> None:
            trials = tmp_path / "nodes" / "trials"
            try:
                wait_until(
                    lambda: len(list(trials.glob("*.parquet"))) >= 3, 120, message="3 committed trials"
                )
            except AssertionError:
                pass  # the sweep's own result is checked below; remove the node all the same
            cluster.remove_node(doomed)

        remover = threading.Thread(target=remove_later, daemon=True)
        remover.start()
        result = sweep.run(tmp_path, RunConfig(compute_on="cpu", progress=False))
        remover.join(timeout=5)
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert marker.exists(), "an actor really was SIGKILLed mid-trial"
    assert result.ran == 16 and sum(result.outcomes.values()) == 16
    trials = _assert_each_trial_once(tmp_path / "nodes", 200)
    assert len(trials) == 16
    assert (trials["attempts"] > 1).any(), "the killed trial ran again"
    assert trials["attempts"].min() == 1
