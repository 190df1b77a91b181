"""The late_softmax workload: deterministic, positionable data; a late float16 overflow and its fix."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ampsweep.jobs import TrialConfig, TrialResult, Workload
from ampsweep.jobs.workloads import late_softmax


def _first(workload: Workload, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return list(itertools.islice(workload.batches, n))


def test_the_factory_builds_and_its_batches_are_deterministic():
    workload = late_softmax.make(seed=0)
    assert isinstance(workload, Workload)
    names = {type(cell).__name__ for _, cell in workload.network.cells_and_names()}
    assert {"ExpSoftmax", "LayerNorm"} <= names
    assert workload.target_loss is not None

    a, b = _first(workload, 5), _first(late_softmax.make(seed=0), 5)
    for (xa, ya), (xb, yb) in zip(a, b, strict=True):
        assert xa.dtype == np.float32 and xa.shape == (32, late_softmax.FEATURES)
        assert ya.dtype == np.int32 and ya.shape == (32,)
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    assert not np.array_equal(a[0][0], a[1][0])  # steps differ
    assert not np.array_equal(a[0][0], _first(late_softmax.make(seed=1), 1)[0][0])  # seeds differ


@pytest.mark.parametrize("start", [1, 7, 1200])
def test_start_step_positions_the_data_where_a_run_from_zero_is(start):
    from_zero = next(itertools.islice(late_softmax.make(seed=2).batches, start, None))
    forked = _first(late_softmax.make(seed=2, start_step=start), 2)
    np.testing.assert_array_equal(forked[0][0], from_zero[0])
    np.testing.assert_array_equal(forked[0][1], from_zero[1])
    after = next(itertools.islice(late_softmax.make(seed=2).batches, start + 1, None))
    np.testing.assert_array_equal(forked[1][0], after[0])


def _run(black: tuple[str, ...], steps: int) -> TrialResult:
    from ampsweep.jobs.training._trainer import run_trial

    config = TrialConfig(
        workload="ampsweep.jobs.workloads.late_softmax:make",
        steps=steps,
        abort_after=10,
        amp_level="O2",
        black_list=black,
        clip=None,
        loss_scale="none",
        dtype="float16",
        seed=0,
        localize=False,
    )
    return run_trial(config, config.workload)


@pytest.mark.slow
def test_o2_goes_nan_late_and_an_fp32_softmax_fixes_it():
    broken = _run((), 1800)
    assert broken.outcome == "diverged", broken.error
    # it trained first: well past the target, and finite for hundreds of steps
    assert broken.first_nonfinite_step is not None and broken.first_nonfinite_step > 800
    loss = broken.steps.column("loss").to_numpy()
    assert np.isfinite(loss[: broken.first_nonfinite_step]).all()
    assert loss[broken.first_nonfinite_step - 100 : broken.first_nonfinite_step].mean() < broken.target_loss

    fixed = _run(("ExpSoftmax",), 1800)
    assert fixed.outcome == "completed", fixed.error
    assert np.isfinite(fixed.steps.column("loss").to_numpy()).all()
    assert fixed.final_loss < fixed.target_loss
