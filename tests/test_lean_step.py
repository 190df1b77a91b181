"""The lean step writes the same numbers as the full step, both computed in this run.

The trainer runs the lean step: per-parameter statistics only on every
``layer_every``-th step. The full step computes them on every step (the
sampled variant of ``CompiledStep``, here through ``layer_every=1``). Which
variant runs a step must never change the trajectory, so on three seeded
trials (one that clips, one whose dynamic loss scale skips steps, one that
diverges) the ``steps`` tables agree bit for bit, and the lean trial's
``layers`` rows are the full trial's rows of the sampled steps, bit for bit.

Both sides run now, in one process on one machine: MindSpore's float16 CPU
kernels give other last bits on another CPU, so numbers recorded elsewhere
cannot be compared bit for bit (see ``docs/development.md``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from ampsweep.jobs import TrialConfig, build_workload
from ampsweep.jobs.training._batches import to_tensors
from ampsweep.jobs.training._step import LEAN, SAMPLED, SAMPLED_STATS
from ampsweep.jobs.training._trainer import CompiledStep, GraphCache, run_trial, seed_everything
from tests._trial import trial_config

_SEED_REPRO = "ampsweep.jobs.workloads.seed_repro:make"


def _trial(**overrides: Any) -> TrialConfig:
    values: dict[str, Any] = dict(
        workload=_SEED_REPRO,
        steps=120,
        abort_after=10,
        black_list=("CustomNorm",),
        clip=1.0,
        layer_every=10,
        # the loss in float16 with the network: with the default black list it diverges
        loss_placement="inside",
    )
    return trial_config(**{**values, **overrides})


TRIALS: dict[str, TrialConfig] = {
    # clip 1.0 fires on nearly every step
    "o2_customnorm_clip1": _trial(),
    # an initial scale of 65536 overflows: skipped steps, a falling and recovering scale
    "o2_customnorm_dynamic": _trial(clip=5.0, loss_scale="dynamic", steps=150),
    # CustomNorm cast to float16: the loss turns NaN and the trial diverges
    "o2_default_diverges": _trial(black_list=(), clip=None, steps=200),
}


@functools.cache
def _lean_and_full(name: str) -> tuple[Any, Any]:
    """The trial as the trainer runs it, and the same trial with the full step on every step."""
    config = TRIALS[name]
    lean = run_trial(config, config.workload)
    full = run_trial(dataclasses.replace(config, layer_every=1), config.workload)
    return lean, full


def _assert_same_columns(got: pa.Table, want: pa.Table, what: str) -> None:
    """Bit for bit, column by column: NaN where the other has NaN (``Table.equals`` calls NaN unequal)."""
    assert got.column_names == want.column_names and got.num_rows == want.num_rows, what
    for name in want.column_names:
        a, b = (
            got.column(name).to_numpy(zero_copy_only=False),
            want.column(name).to_numpy(zero_copy_only=False),
        )
        np.testing.assert_array_equal(a, b, err_msg=f"{what}.{name}")


@pytest.mark.parametrize("name", list(TRIALS))
def test_the_lean_step_writes_what_the_full_step_writes(name: str) -> None:
    config = TRIALS[name]
    lean, full = _lean_and_full(name)
    assert lean.error is None and full.error is None, (lean.error, full.error)
    assert (lean.outcome, lean.steps_run, lean.first_nonfinite_step) == (
        full.outcome,
        full.steps_run,
        full.first_nonfinite_step,
    )
    # step_ms is a timing, the one column that may differ
    _assert_same_columns(lean.steps.drop_columns(["step_ms"]), full.steps.drop_columns(["step_ms"]), "steps")
    # the full step wrote a row per parameter on every step; the lean step only on the sampled ones
    sampled = list(range(0, full.steps_run, config.layer_every))
    layer_names = set(full.layers.column("layer").to_pylist())
    assert sorted(set(full.layers.column("step").to_pylist())) == list(range(full.steps_run))
    assert sorted(set(lean.layers.column("step").to_pylist())) == sampled
    assert lean.layers.num_rows == len(sampled) * len(layer_names)
    keep = pc.is_in(full.layers.column("step"), value_set=pa.array(sampled, pa.int64()))
    _assert_same_columns(lean.layers, full.layers.filter(keep), "layers")


def test_the_trials_cover_clipping_skipping_and_divergence() -> None:
    """What makes the comparison worth having, on whatever CPU ran it."""
    clip = _lean_and_full("o2_customnorm_clip1")[0].steps
    dynamic = _lean_and_full("o2_customnorm_dynamic")[0].steps
    diverged = _lean_and_full("o2_default_diverges")[0]
    assert sum(clip.column("clipped").to_pylist()) > clip.num_rows // 2
    assert any(dynamic.column("skipped").to_pylist()), "an initial scale of 65536 overflows"
    assert len(set(dynamic.column("loss_scale").to_pylist())) >= 2, "skips change the scale"
    assert diverged.outcome.value == "diverged"
    assert any(n > 0 for n in diverged.layers.column("nonfinite").to_pylist()), (
        "a sampled step with non-finite gradients"
    )


def test_each_variant_compiles_once_per_graph() -> None:
    """Two trials on one cached graph: the first pays the compiles (its step, the statistics), the second none."""
    cache = GraphCache()
    config = _trial(steps=30, clip=None)
    first = run_trial(config, config.workload, cache=cache)
    step = cache.compiled_for(config, config.workload)
    assert step is not None and step.compiled == {LEAN, SAMPLED}
    second = run_trial(_trial(steps=30, clip=1.0, seed=1), config.workload, cache=cache)
    assert cache.compiled_for(config, config.workload) is step, "the second trial ran on the same graph"
    assert first.compile_s > 0 and second.compile_s == 0.0
    # neither variant's first call left a step time out, and ordinary steps are cheap again
    ms = second.steps.column("step_ms").to_numpy()
    assert len(ms) == 30 and (ms > 0).all()


def test_only_sampled_steps_copy_per_parameter_statistics() -> None:
    """An ordinary step's output holds the four step scalars and nothing per parameter."""
    config = _trial(steps=2, clip=None)
    workload = build_workload(config.workload, 0, {})
    step = CompiledStep(config, workload)
    batches = [to_tensors(b) for b, _ in zip(workload.batches, range(2))]
    head, stats = step.sampled(step.clip_tensor(None), batches[0])
    lean = step(step.clip_tensor(None), batches[1])
    params = len(step.layer_names)
    assert head.shape == (4,) and lean.shape == (4,) and stats.shape == (SAMPLED_STATS * params,)
    # the global norm is the norm of the per-parameter norms
    norms = stats.asnumpy()[:params].astype(np.float64)
    assert float(head.asnumpy()[1]) == pytest.approx(np.sqrt((norms**2).sum()), rel=1e-5)


@pytest.mark.parametrize("loss_scale", ["none", pytest.param("dynamic", marks=pytest.mark.slow)])
def test_either_variant_trains_the_same_model(loss_scale: str) -> None:
    """All-lean and all-sampled runs of one trial end with bit-identical training state."""
    config = _trial(steps=20, clip=1.0, loss_scale=loss_scale, workload_args={"hidden": 32})
    states = []
    for sampled in (False, True):
        seed_everything(config.seed)  # the same initial weights for both runs
        workload = build_workload(config.workload, 0, config.workload_args)
        step = CompiledStep(config, workload)
        clip = step.clip_tensor(config.clip)
        heads = []
        for batch, _ in zip(workload.batches, range(config.steps)):
            heads.append(
                step.sampled(clip, to_tensors(batch))[0] if sampled else step(clip, to_tensors(batch))
            )
        state = {key: param.asnumpy().copy() for key, param in step._state.items()}
        states.append((np.stack([h.asnumpy() for h in heads]), state))
    (lean_heads, lean_state), (sampled_heads, sampled_state) = states
    np.testing.assert_array_equal(lean_heads, sampled_heads)
    assert lean_state.keys() == sampled_state.keys()
    for key in lean_state:
        np.testing.assert_array_equal(lean_state[key], sampled_state[key], err_msg=str(key))
