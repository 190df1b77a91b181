"""The compiled step's arithmetic against NumPy: global norm, clipping, per-layer statistics."""

from __future__ import annotations

import numpy as np
import pytest

from ampsweep.jobs import TrialConfig, build_workload
from ampsweep.jobs.training._batches import to_tensors
from ampsweep.jobs.training._capture import is_clipped
from ampsweep.jobs.training._step import SAMPLED_STATS
from ampsweep.jobs.training._trainer import CompiledStep, _first_abort, run_trial
from tests._trial import trial_config
from tests.linear_workload import numpy_gradient

LINEAR = "tests.linear_workload:make"


def _config(clip: float | None, **overrides) -> TrialConfig:
    return trial_config(
        **{"workload": LINEAR, "steps": 3, "abort_after": 2, "amp_level": "O0", "clip": clip, **overrides}
    )


def _one_step(
    clip: float | None, *, sampled: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, CompiledStep]:
    """One step of the linear workload, sampled (with statistics) or ordinary."""
    config = _config(clip)
    workload = build_workload(LINEAR, 0, {})
    step = CompiledStep(config, workload)
    before = workload.network.weight.asnumpy().copy()
    batch = to_tensors(next(iter(workload.batches)))
    if sampled:
        head, stats = step.sampled(step.clip_tensor(clip), batch)
        vector, layer_stats = head.asnumpy(), stats.asnumpy()
    else:
        vector, layer_stats = step(step.clip_tensor(clip), batch).asnumpy(), None
    after = workload.network.weight.asnumpy()
    return before, after, vector, layer_stats, step


@pytest.mark.parametrize("sampled", [True, False], ids=["sampled", "lean"])
@pytest.mark.parametrize("clip", [None, 1e6, 0.5, 2.0])
def test_clipping_matches_numpy(clip, sampled):
    before, after, vector, stats, step = _one_step(clip, sampled=sampled)
    grad = numpy_gradient(before)
    norm = np.linalg.norm(grad)
    assert vector[1] == pytest.approx(norm, rel=1e-5), "recorded norm is the pre-clip global norm"
    factor = 1.0 if clip is None or norm <= clip else clip / (norm + 1e-6)
    np.testing.assert_allclose(before - after, grad * factor, rtol=1e-4, atol=1e-6)  # SGD, lr = 1
    if clip is not None and norm > clip:
        assert np.linalg.norm(before - after) == pytest.approx(clip, rel=1e-4)
    assert vector.shape == (4,) and vector[2] == 1.0 and vector[3] == 1.0, "finite, no loss scaling"
    if stats is None:
        return
    # per-layer statistics: one parameter here, so its norm is the global norm
    params = len(step.layer_names)
    assert step.layer_names == ["weight"] and stats.shape == (SAMPLED_STATS * params,)
    assert stats[0] == pytest.approx(norm, rel=1e-5)
    assert stats[params] == pytest.approx(np.abs(grad).max(), rel=1e-5)
    assert stats[2 * params] == 0


def test_clip_decision_recorded_exactly():
    norms = np.array([0.5, 1.0, 1.0000001, np.inf, np.nan])
    assert is_clipped(norms, 1.0).tolist() == [False, False, True, False, False]
    assert not is_clipped(norms, None).any()


def test_abort_needs_consecutive_nonfinite_steps():
    finite = np.array([True, False, True, False, False, False, True])
    assert _first_abort(finite, 3) == 5
    assert _first_abort(finite, 4) is None


def test_trial_records_per_step_and_per_layer_values():
    outcome = run_trial(_config(0.5, steps=30, layer_every=1), LINEAR)
    assert outcome.outcome == "completed" and outcome.steps_run == 30
    steps = outcome.steps.to_pandas()
    assert steps["step"].tolist() == list(range(30)) and np.isfinite(steps["loss"]).all()
    assert steps["loss"].iloc[-1] < steps["loss"].iloc[0]
    layers = outcome.layers.to_pandas()
    assert layers["step"].tolist() == list(range(30)), "one parameter, every step sampled"
    np.testing.assert_allclose(layers["grad_norm"], steps["grad_norm"], rtol=1e-5)
    assert outcome.compile_s > 0
    assert (steps["step_ms"] > 0).all()
    assert outcome.final_loss == pytest.approx(steps["loss"].iloc[-3:].mean())


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
    assert outcome.error.startswith(
        "RuntimeError: workload batches ended after 5 steps; the spec asks for 30"
    )
    assert "Traceback" in outcome.traceback


def test_bfloat16_on_cpu_fails_in_one_sentence():
    outcome = run_trial(_config(None, amp_level="O2", dtype="bfloat16"), LINEAR)
    assert outcome.outcome == "failed"
    assert outcome.error.count(".") == 1 and "bfloat16" in outcome.error and "CPU" in outcome.error


def test_a_module_constant_under_o1_fails_with_what_to_do(tmp_path):
    # O1 regenerates the network's code without its module's globals (a MindSpore limit)
    module = tmp_path / "scaled_workload.py"
    module.write_text(
        "from mindspore import nn\n"
        "from tests.linear_workload import make as base\n"
        "FACTOR = 2.0\n"
        "class Scaled(nn.Cell):\n"
        "    def __init__(self, inner):\n"
        "        super().__init__()\n"
        "        self.inner = inner\n"
        "    def construct(self, x):\n"
        "        return self.inner(x) * FACTOR\n"
        "def make(seed):\n"
        "    w = base(seed)\n"
        "    w.network = Scaled(w.network)\n"
        "    return w\n"
    )
    reference = f"{module}:make"
    outcome = run_trial(_config(None, amp_level="O1", workload=reference), reference)
    assert outcome.outcome == "failed"
    assert outcome.error.startswith("NameError") and "keep such values as Cell attributes" in outcome.error
