"""A continuation keeps the dynamic loss scaler's state (issue 46 item 5).

The horizon continues a trial from its end snapshot. The snapshot carries the
dynamic scaler's scale and its count of good steps, so the continuation scales
as the trial would have gone on: the same scales, step for step, as one run
over both stretches. Everything compared here runs now, in this process.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mindspore")

from ampsweep.jobs.training._snapshot import SCALER_PREFIX, read_checkpoint, snapshot_id  # noqa: E402
from ampsweep.jobs.training._step import GraphCache  # noqa: E402
from ampsweep.jobs.training._trainer import run_trial  # noqa: E402
from tests._trial import trial_config  # noqa: E402

TINY = f"{Path(__file__).parent / 'workloads' / 'tiny_mlp.py'}:make"
#: 2^20 overflows float16 in the first steps, so the scale falls to 2^17 by step 3; after
#: DYNAMIC_SCALE_WINDOW (50) good steps it doubles again, inside the continuation
FIRST, AFTER = 30, 30


def _dynamic(steps: int, **changes: object):
    config = trial_config(workload=TINY, steps=steps, loss_scale="dynamic:1048576", abort_after=steps)
    return dataclasses.replace(config, **changes)


def _scales(result) -> list[float]:
    return result.steps.column("loss_scale").to_pylist()


@pytest.mark.parametrize("held", [False, True], ids=["fresh process", "worker's held graph"])
def test_a_continuation_goes_on_with_the_scale_and_counter_its_trial_ended_with(held: bool) -> None:
    cache = GraphCache() if held else None
    whole = run_trial(_dynamic(FIRST + AFTER), TINY, cache=cache)
    trial = run_trial(_dynamic(FIRST, save_snapshot=True), TINY, cache=cache)
    assert trial.snapshot is not None, trial.error
    start = read_checkpoint(trial.snapshot)
    ended_with = float(start[SCALER_PREFIX + "scale_value"].asnumpy())
    assert ended_with < 2**20, "the scale fell during the trial: a new scaler would restart it"

    config = _dynamic(AFTER, start_step=FIRST, start_from=snapshot_id(trial.snapshot))
    continued = run_trial(config, TINY, cache=cache, start=start)
    assert continued.outcome == "completed", continued.error
    assert _scales(continued)[0] == ended_with
    # the counter too: the doubling after 50 good steps comes where one run over both has it
    assert len(set(_scales(whole)[FIRST:])) > 1, "the window should end inside the continuation"
    assert _scales(continued) == _scales(whole)[FIRST:]
    np.testing.assert_allclose(
        continued.steps.column("loss").to_pylist(), whole.steps.column("loss").to_pylist()[FIRST:], rtol=1e-6
    )


def test_only_a_dynamic_scaler_continues_and_a_replay_starts_where_the_trial_did() -> None:
    from ampsweep.jobs.localization._replay import Replay

    trial = run_trial(_dynamic(FIRST, save_snapshot=True), TINY)
    start = read_checkpoint(trial.snapshot)
    ended_with = float(start[SCALER_PREFIX + "scale_value"].asnumpy())
    config = _dynamic(AFTER, start_step=FIRST, start_from=snapshot_id(trial.snapshot))
    replay = Replay(config, TINY, AFTER, start)
    try:
        assert float(replay.scaler.scale_value.asnumpy()) == ended_with
    finally:
        replay.close()
    # a static scale is the configuration's own, whatever the snapshot says
    static = run_trial(dataclasses.replace(config, loss_scale="static:1024"), TINY, start=start)
    assert set(_scales(static)) == {1024.0}


_WORKER = """
import dataclasses, json, sys
from ampsweep.jobs._placement import DeviceSetup
from ampsweep.jobs._worker import TrialWorker
from ampsweep.jobs.training._snapshot import snapshot_id
from tests.test_continue_scaler import AFTER, FIRST, TINY, _dynamic, _scales

worker = TrialWorker(0, DeviceSetup("cpu", "CPU"))  # first: it sets the device up
trial = worker.run(_dynamic(FIRST, save_snapshot=True), TINY)
config = _dynamic(AFTER, start_step=FIRST, start_from=snapshot_id(trial.snapshot))
continued = worker.run(config, TINY, start=trial.snapshot)
unseen = dataclasses.replace(config, steps=AFTER - 1)  # a start this worker never built
print(json.dumps([_scales(trial), _scales(continued), continued.error, worker.run(unseen, TINY).error]))
"""


@pytest.mark.slow
def test_a_worker_hands_the_snapshot_it_was_given_to_the_continuation() -> None:
    """``TrialWorker.run(start=bytes)``: the actor decodes the snapshot itself and passes it on (a process of its own)."""
    root = Path(__file__).parent.parent
    out = subprocess.run(
        [sys.executable, "-c", _WORKER], capture_output=True, text=True, check=True, cwd=root
    ).stdout
    trial, continued, error, without = json.loads(out.strip().splitlines()[-1])
    assert error is None and continued[0] < 2**20 and continued[0] in trial
    assert continued == _scales(run_trial(_dynamic(FIRST + AFTER), TINY))[FIRST:]
    assert without.startswith("RuntimeError: the trial starts from snapshot")
