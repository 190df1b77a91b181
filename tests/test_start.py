"""``ampsweep run``'s start: the workload check runs beside Ray's start, and so does ``meanwhile``."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from ampsweep.sweep import RunConfig, SpecError
from ampsweep.sweep._early import validate_while_ray_starts


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_work_given_for_the_wait_runs_once_the_spec_is_valid_and_its_failure_is_ignored(write_spec, tmp_path):
    import ray

    calls: list[bool] = []

    def meanwhile() -> None:
        calls.append(ray.is_initialized())
        raise RuntimeError("only a head start")

    sweep = validate_while_ray_starts(write_spec(), RunConfig(workers=1), str(tmp_path / "out"), meanwhile)
    assert sweep.name == "tiny"
    assert ray.is_initialized()
    assert len(calls) == 1


def test_a_bad_workload_stops_the_started_cluster_and_skips_the_work_given_for_the_wait(write_spec, tmp_path):
    import ray

    calls: list[str] = []
    spec = write_spec({"grid": {"black_list": [["Scalar"]]}})
    with pytest.raises(SpecError, match="grid.black_list"):
        validate_while_ray_starts(
            spec, RunConfig(workers=1), str(tmp_path / "out"), lambda: calls.append("ran")
        )
    assert calls == []
    assert not ray.is_initialized()
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
def test_the_check_gives_way_to_ray_start_and_the_driver_thread_keeps_its_priority(write_spec, tmp_path):
    def own_nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    seen: list[int] = []
    before = own_nice()
    validate_while_ray_starts(
        write_spec(), RunConfig(workers=1), str(tmp_path / "out"), lambda: seen.append(own_nice())
    )
    assert seen == [19]
    assert own_nice() == before


def _committed(out, spec_path, skip: int = 0) -> None:
    """Commit files (readable Parquet, no real trial) for every trial of the spec but ``skip``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ampsweep.contracts import part_path, trial_row_path
    from ampsweep.sweep import expand_grid
    from ampsweep.sweep._spec import read_spec

    spec = read_spec(spec_path)
    for trial in expand_grid(spec)[skip:]:
        for relative in (trial_row_path(trial.trial_id), part_path("steps", trial.trial_id)):
            path = out / spec.name / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table({"step": [0]}), path)


def test_a_rerun_of_a_finished_sweep_starts_no_cluster(write_spec, tmp_path):
    import ray

    spec, out = write_spec(), tmp_path / "out"
    _committed(out, spec)
    calls: list[str] = []
    sweep = validate_while_ray_starts(spec, RunConfig(workers=1), str(out), lambda: calls.append("ran"))
    assert sweep.name == "tiny" and not ray.is_initialized() and calls == []


def test_a_sweep_with_a_trial_left_starts_its_cluster(write_spec, tmp_path):
    import ray

    spec, out = write_spec(), tmp_path / "out"
    _committed(out, spec, skip=1)
    validate_while_ray_starts(spec, RunConfig(workers=1), str(out))
    assert ray.is_initialized()
