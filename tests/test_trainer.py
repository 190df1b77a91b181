"""The compiled step's arithmetic against NumPy: global norm, clipping, per-layer statistics."""

from __future__ import annotations

import numpy as np
import pytest

from jobs import TrialConfig, build_workload
from jobs._trainer import CompiledStep, _first_abort, _to_tensors, is_clipped, run_trial
from tests.linear_workload import numpy_gradient

LINEAR = "tests.linear_workload:make"


def _config(clip: float | None, **overrides) -> TrialConfig:
    values = dict(
        workload=LINEAR,
        steps=3,
        abort_after=2,
        amp_level="O0",
        black_list=(),
        clip=clip,
        loss_scale="none",
        dtype="float16",
        seed=0,
    )
    values.update(overrides)
    return TrialConfig(**values)


def _one_step(clip: float | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, CompiledStep]:
    config = _config(clip)
    workload = build_workload(LINEAR, 0, {})
    step = CompiledStep(config, workload)
    before = workload.network.weight.asnumpy().copy()
    vector = step(step.clip_tensor(clip), _to_tensors(next(iter(workload.batches)))).asnumpy()
    after = workload.network.weight.asnumpy()
    return before, after, vector, step


@pytest.mark.parametrize("clip", [None, 1e6, 0.5, 2.0])
def test_clipping_matches_numpy(clip):
    before, after, vector, step = _one_step(clip)
    grad = numpy_gradient(before)
    norm = np.linalg.norm(grad)
    assert vector[1] == pytest.approx(norm, rel=1e-5), "recorded norm is the pre-clip global norm"
    factor = 1.0 if clip is None or norm <= clip else clip / (norm + 1e-6)
    np.testing.assert_allclose(before - after, grad * factor, rtol=1e-4, atol=1e-6)  # SGD, lr = 1
    if clip is not None and norm > clip:
        assert np.linalg.norm(before - after) == pytest.approx(clip, rel=1e-4)
    # per-layer statistics: one parameter here, so its norm is the global norm
    params = len(step.layer_names)
    assert step.layer_names == ["weight"]
    assert vector[4] == pytest.approx(norm, rel=1e-5)
    assert vector[4 + params] == pytest.approx(np.abs(grad).max(), rel=1e-5)
    assert vector[4 + 2 * params] == 0


def test_clip_decision_recorded_exactly():
    norms = np.array([0.5, 1.0, 1.0000001, np.inf, np.nan])
    assert is_clipped(norms, 1.0).tolist() == [False, False, True, False, False]
    assert not is_clipped(norms, None).any()


def test_abort_needs_consecutive_nonfinite_steps():
    finite = np.array([True, False, True, False, False, False, True])
    assert _first_abort(finite, 3) == 5
    assert _first_abort(finite, 4) is None


def test_trial_records_per_step_and_per_layer_values():
    outcome = run_trial(_config(0.5, steps=30), LINEAR)
    assert outcome.outcome == "completed" and outcome.steps_run == 30
    metrics = outcome.metrics
    assert metrics.loss.shape == (30,) and np.isfinite(metrics.loss).all()
    assert metrics.loss[-1] < metrics.loss[0]
    np.testing.assert_allclose(metrics.layer_norm[:, 0], metrics.grad_norm, rtol=1e-5)
    assert outcome.compile_s > 0
    assert (metrics.step_ms > 0).all()


def test_exception_in_workload_is_a_failed_outcome(tmp_path):
    short = tmp_path / "short.py"
    short.write_text(
        "from tests.linear_workload import make as base\n"
        "def make(seed):\n"
        "    w = base(seed)\n"
        "    w.batches = iter([next(iter(w.batches))] * 5)\n"
        "    return w\n"
    )
    outcome = run_trial(_config(None, steps=30, workload=f"{short}:make"), f"{short}:make")
    assert outcome.outcome == "failed"
    assert outcome.error == "RuntimeError: workload batches ended after 5 steps; the spec asks for 30"
    assert "Traceback" in outcome.traceback


def test_bfloat16_on_cpu_fails_in_one_sentence():
    outcome = run_trial(_config(None, amp_level="O2", dtype="bfloat16"), LINEAR)
    assert outcome.outcome == "failed"
    assert outcome.error.count(".") == 1 and "bfloat16" in outcome.error and "CPU" in outcome.error
