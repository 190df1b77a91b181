"""A mixed-precision trial may start while its FP32 baseline still runs on another actor.

The worker needs the baseline only at the trial's end (to tell a silent
failure from a healthy trial), so the driver hands it the running baseline's
call (``PendingBaseline``) and the worker waits for it there.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pyarrow as pa
import pytest

from ampsweep.jobs import Baseline, PendingBaseline
from ampsweep.sweep.scheduling._baselines import Baselines
from ampsweep.sweep.scheduling._slot import Slot
from tests._trial import trial_config


def _slot(*calls: object) -> Slot:
    return Slot(backend=None, index=0, calls=deque(calls))  # type: ignore[arg-type]


def _call(number: int) -> object:
    """A Ray object reference, as a single actor's call is (made without a running Ray)."""
    import ray

    return ray.ObjectRef(bytes(27) + bytes([number]))


def test_a_trial_gets_the_baseline_its_actor_runs_now_and_never_one_queued_behind_another():
    baselines = Baselines()
    fp32, amp = trial_config(amp_level="O0", seed=0), trial_config(amp_level="O2", seed=0)
    other, queued_fp32, running_fp32 = _call(1), _call(2), _call(3)
    queued = _slot(other, queued_fp32)
    baselines.sent(fp32, queued_fp32, queued)
    assert baselines.hint(amp) is None, "behind another call it could wait on anything"
    running = _slot(running_fp32)
    baselines.sent(fp32, running_fp32, running)
    assert baselines.hint(amp) == PendingBaseline([running_fp32])
    assert baselines.hint(fp32) is None, "an FP32 trial is judged by nothing"
    assert baselines.hint(trial_config(amp_level="O2", seed=1)) is None, "another seed's baseline"
    baselines.answered(fp32, running_fp32)
    assert baselines.hint(amp) is None
    baselines.add(fp32, Baseline(0.25, reached_target=True))
    assert baselines.hint(amp) == Baseline(0.25, reached_target=True), "a known baseline goes as it is"


def test_a_gangs_running_baseline_is_not_handed_out():
    """A gang's call is the pool's own key for its ranks' answers, not a Ray reference a worker could wait on."""
    baselines = Baselines()
    fp32, amp = trial_config(amp_level="O0", seed=0), trial_config(amp_level="O2", seed=0)
    key = object()
    baselines.sent(fp32, key, _slot(key))
    assert baselines.hint(amp) is None


@pytest.mark.slow
def test_a_silent_trial_started_beside_its_running_baseline_is_still_localized(tmp_path):
    import pyarrow.parquet as pq

    from ampsweep.sweep import RunConfig, Sweep

    spec = {
        "name": "beside",
        "workload": "ampsweep.jobs.workloads.silent_norm:make",
        "steps": 200,
        "grid": {"amp_level": ["O0", "O2"], "seed": [0]},
    }
    Sweep(spec).run(tmp_path, RunConfig(workers=2, progress=False))
    trials = {row["amp_level"]: row for row in pq.read_table(tmp_path / "beside" / "trials").to_pylist()}
    fp32, amp = trials["O0"], trials["O2"]
    # both actors start together: the FP32 trial goes to one, the O2 trial to the other with the
    # baseline still running (before, it went with no baseline at all, and nothing was replayed)
    assert amp["worker_index"] != fp32["worker_index"], "the second actor compiled the O2 graph"
    anomalies = pq.read_table(tmp_path / "beside" / "anomalies").to_pylist()
    assert [row["trial_id"] for row in anomalies] == [amp["trial_id"]], "its silent failure was replayed"


def _completed(loss: list[float], target_loss: float | None):
    """A completed O2 trial with these per-step losses, as the worker hands it to ``localize_mode``."""
    from ampsweep.contracts import STEPS_SCHEMA, final_loss
    from ampsweep.jobs import Outcome, Placement, TrialResult

    n = len(loss)
    columns = {
        field.name: pa.array(
            np.zeros(n, dtype=field.type.to_pandas_dtype()) if field.name != "loss" else loss, type=field.type
        )
        for field in STEPS_SCHEMA
    }
    columns["step"] = pa.array(range(n), type=pa.int64())
    return TrialResult(
        config=trial_config(amp_level="O2", steps=n),
        outcome=Outcome.COMPLETED,
        placement=Placement("cpu", "CPU"),
        steps_run=n,
        final_loss=final_loss(np.asarray(loss)),
        target_loss=target_loss,
        steps=pa.table(columns, schema=STEPS_SCHEMA),
    )


def test_a_target_fp32_never_reached_does_not_make_a_trial_that_learns_like_it_silent():
    from ampsweep.jobs.localization._diagnose import localize_mode

    # both runs fall from 2.3 to 1.3 and stop above the workload's target of 0.9
    fp32_loss = list(np.linspace(2.3, 1.3, 60))
    fp32 = Baseline.of_run(1.3, 0.9, fp32_loss)
    assert fp32 == Baseline(1.3, reached_target=False)
    trial = _completed(list(np.linspace(2.3, 1.31, 60)), target_loss=0.9)
    assert localize_mode(trial, fp32) is None, "it learns like FP32: nothing to replay"
    # the same trial against an FP32 run that got to the target is a silent failure to replay
    assert localize_mode(trial, Baseline(0.85, reached_target=True)) == ("departure", None)
    assert Baseline.of_run(1.3, None, fp32_loss).reached_target, (
        "no workload target: 1.1 x its own final loss"
    )
    assert Baseline.of_run(None, 0.9, fp32_loss) is None


def test_steps_a_dynamic_scaler_skipped_are_its_work_and_a_static_scales_are_overflows():
    from dataclasses import replace

    from ampsweep.jobs.localization._diagnose import localize_mode

    trial = _completed(list(np.linspace(2.3, 1.3, 60)), target_loss=None)
    nonfinite = [
        index < 2 for index in range(60)
    ]  # the first two steps overflowed in backward, and were skipped
    steps = trial.steps.set_column(4, "nonfinite", pa.array(nonfinite)).set_column(
        5, "skipped", pa.array(nonfinite)
    )
    fp32 = Baseline(1.3, reached_target=True)
    dynamic = replace(trial, config=replace(trial.config, loss_scale="dynamic"), steps=steps)
    assert localize_mode(dynamic, fp32) is None, "healthy: nothing to replay"
    static = replace(trial, config=replace(trial.config, loss_scale="static:65536"), steps=steps)
    assert localize_mode(static, fp32) == ("nonfinite", 0)
