"""The dispatcher's parts on their own: the fail-fast gate and the FP32 profile after the trials."""

from __future__ import annotations

from pathlib import Path

import pytest

from ampsweep.jobs import Outcome, Placement, TrialResult
from ampsweep.sweep import RunConfig, Sweep, SweepStore
from ampsweep.sweep._errors import WorkloadBroken
from ampsweep.sweep._result import SweepResult
from ampsweep.sweep.cluster._launcher import drive_trials
from ampsweep.sweep.cluster._pool import WorkerPool
from ampsweep.sweep.devices import AscendBackend
from ampsweep.sweep.scheduling._dispatch import FAIL_FAST_TRIALS, FailFastGate
from benchmarks._standin import InProcessActors, QuietCluster
from tests._trial import trial_config

NOOP = Path(__file__).resolve().parents[1] / "benchmarks" / "noop_workload.py"


def _failed(seed: int, error: str = "NameError: x", amp_level: str = "O0") -> TrialResult:
    config = trial_config(amp_level=amp_level, seed=seed)
    return TrialResult.failure(config, error, Placement("cpu", "CPU"), traceback="Traceback\n  raise")


def _completed(seed: int) -> TrialResult:
    return TrialResult(trial_config(seed=seed), Outcome.COMPLETED, Placement("cpu", "CPU"))


def test_the_gate_holds_the_first_results_then_lets_them_through_in_order():
    gate = FailFastGate(enabled=True)
    first = [_completed(seed) for seed in range(FAIL_FAST_TRIALS)]
    out = [gate.admit(result, committed=0, left=10) for result in first]
    assert out[:-1] == [[]] * (FAIL_FAST_TRIALS - 1) and out[-1] == first
    later = _completed(99)
    assert gate.admit(later, committed=3, left=9) == [later]


def test_the_gate_stops_a_sweep_whose_first_trials_all_fail_alike():
    gate = FailFastGate(enabled=True)
    for seed in range(FAIL_FAST_TRIALS - 1):
        assert gate.admit(_failed(seed), committed=0, left=10) == []
    with pytest.raises(WorkloadBroken, match="the workload is broken"):
        gate.admit(_failed(FAIL_FAST_TRIALS), committed=0, left=10)


def test_the_gate_decides_on_a_run_shorter_than_it_and_can_be_turned_off():
    short = FailFastGate(enabled=True)
    assert short.admit(_completed(0), committed=0, left=1) == []
    held = _completed(1)
    assert short.admit(held, committed=0, left=0) == [_completed(0), held]
    off = FailFastGate(enabled=False)
    assert all(off.admit(_failed(seed), committed=0, left=5) == [_failed(seed)] for seed in range(5))


class _Recording(InProcessActors):
    """Answers at once and records what each actor was asked, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def run(self, actor, config, workload_ref, hint, start):
        self.asked.append("trial")
        return super().run(actor, config, workload_ref, hint, start)

    def profile(self, actor, args):
        self.asked.append("profile")
        return self._answer(lambda *_: {"profiled": args[1]}, *args)


def test_the_profile_runs_once_after_every_trial_on_a_free_actor(tmp_path):
    plan = Sweep(
        {"name": "p", "workload": f"{NOOP}:make", "steps": 1, "devices": "ascend",
         "grid": {"amp_level": ["O0", "O2"], "seed": [0, 1]}}
    ).plan()  # fmt: skip
    store = SweepStore(str(tmp_path), plan.name)
    result = SweepResult(root=store.root, total=len(plan), skipped=0, ran=0)
    actors = _Recording()
    run = RunConfig(progress=False, profile=True)
    pool = WorkerPool(run, backends=[AscendBackend()] * 2, actors=actors, watch=QuietCluster())
    drive_trials(plan, plan.workload_ref, store, plan.trials, pool, run, result, lambda running: None)
    assert actors.asked == ["trial"] * len(plan) + ["profile"]
    assert result.profile == {"profiled": plan.trials[0].seed} and result.profile_error is None
    assert len(store.committed()) == len(plan)
