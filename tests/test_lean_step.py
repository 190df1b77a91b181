"""The lean step writes the same numbers as the step that computed everything on every step.

``tests/golden/lean_step.json`` holds the tables three seeded trials produced
*before* the lean step (see ``tests/golden/make_lean_step_golden.py``): a
clipping trial, a dynamic-loss-scaling trial with skipped steps, and a trial
that diverges. Step metrics must agree bit for bit on every step, and the
per-parameter rows of the sampled steps too: which variant of the compiled step
runs a step must never change the trajectory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ampsweep.jobs import TrialConfig, build_workload
from ampsweep.jobs.training._batches import to_tensors
from ampsweep.jobs.training._capture import sampled_steps
from ampsweep.jobs.training._step import SAMPLED_STATS
from ampsweep.jobs.training._trainer import CompiledStep, GraphCache, run_trial, seed_everything
from tests._trial import trial_config

GOLDEN = Path(__file__).parent / "golden" / "lean_step.json"
_SEED_REPRO = "ampsweep.jobs.workloads.seed_repro:make"


def _trial(**overrides: Any) -> TrialConfig:
    values: dict[str, Any] = dict(
        workload=_SEED_REPRO,
        steps=120,
        abort_after=10,
        black_list=("CustomNorm",),
        clip=1.0,
        layer_every=10,
        # the golden tables were made when the loss was always cast with the network
        loss_placement="inside",
    )
    return trial_config(**{**values, **overrides})


#: The trials of the golden file. Changing one means regenerating it from pre-lean code.
TRIALS: dict[str, TrialConfig] = {
    # clip 1.0 fires on nearly every step: before the lean step each clipped step had layer rows
    "o2_customnorm_clip1": _trial(),
    # an initial scale of 65536 overflows: skipped steps, a falling and recovering scale
    "o2_customnorm_dynamic": _trial(clip=5.0, loss_scale="dynamic", steps=150),
    # CustomNorm cast to float16: the loss turns NaN and the trial diverges
    "o2_default_diverges": _trial(black_list=(), clip=None, steps=200),
}

_STEP_COLUMNS = ("step", "loss", "grad_norm", "clipped", "nonfinite", "skipped", "loss_scale")
_LAYER_COLUMNS = ("step", "layer", "grad_norm", "grad_absmax", "nonfinite")


def table_values(result: Any, layer_every: int) -> dict[str, dict[str, list]]:
    """The compared content of a result: its steps table and its sampled layers rows."""
    steps = {name: result.steps.column(name).to_pylist() for name in _STEP_COLUMNS}
    layers = result.layers.to_pydict()
    keep = [i for i, step in enumerate(layers["step"]) if step % layer_every == 0]
    return {
        "steps": steps,
        "layers": {name: [layers[name][i] for i in keep] for name in _LAYER_COLUMNS},
    }


def _golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())


def _assert_same(got: dict[str, list], want: dict[str, list], what: str) -> None:
    assert got.keys() == want.keys()
    for name in want:
        a, b = got[name], want[name]
        assert len(a) == len(b), f"{what}.{name}: {len(a)} rows, golden has {len(b)}"
        if a and isinstance(b[0], float):
            # bit for bit, NaN where the golden has NaN
            np.testing.assert_array_equal(
                np.asarray(a, np.float64), np.asarray(b, np.float64), err_msg=f"{what}.{name}"
            )
        else:
            assert a == b, f"{what}.{name}"


@pytest.mark.parametrize("name", list(TRIALS))
def test_tables_match_the_pre_lean_trainer(name: str) -> None:
    config = TRIALS[name]
    want = _golden()[name]
    result = run_trial(config, config.workload)
    assert str(result.outcome.value) == want["outcome"]
    got = table_values(result, config.layer_every)
    _assert_same(got["steps"], want["steps"], f"{name} steps")
    _assert_same(got["layers"], want["layers"], f"{name} layers")
    # and the layers table now holds exactly the sampled steps, nothing else
    layer_steps = sorted(set(result.layers.column("step").to_pylist()))
    assert layer_steps == sampled_steps(config, result.steps_run).tolist()
    assert result.layers.num_rows == len(layer_steps) * len(set(result.layers.column("layer").to_pylist()))


def test_the_golden_trials_cover_clipping_skipping_and_divergence() -> None:
    golden = _golden()
    clip = golden["o2_customnorm_clip1"]["steps"]
    dynamic = golden["o2_customnorm_dynamic"]["steps"]
    diverged = golden["o2_default_diverges"]
    assert sum(clip["clipped"]) > len(clip["step"]) // 2
    assert any(dynamic["skipped"]) and len(set(dynamic["loss_scale"])) >= 2, "skips change the scale"
    assert diverged["outcome"] == "diverged"
    assert any(n > 0 for n in diverged["layers"]["nonfinite"]), "a sampled step with non-finite gradients"


def test_each_variant_compiles_once_per_graph() -> None:
    """Two trials on one cached graph: the first pays the compiles (its step, the statistics), the second none."""
    cache = GraphCache()
    config = _trial(steps=30, clip=None)
    first = run_trial(config, config.workload, cache=cache)
    step, reused = cache.step_for(config, config.workload, build_workload(config.workload, 0, {}))
    assert reused and step.compiled == {"lean", "sampled"}
    second = run_trial(_trial(steps=30, clip=1.0, seed=1), config.workload, cache=cache)
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


@pytest.mark.parametrize("loss_scale", ["none", "dynamic"])
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
