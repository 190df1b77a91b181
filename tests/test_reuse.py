"""One compile per graph: a reused graph trains exactly as a fresh process would."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

from ampsweep.jobs import TrialConfig
from ampsweep.jobs.training._trainer import GraphCache, run_trial


def _config(
    seed: int, clip: float | None, loss_scale: str, amp_level: str = "O2", loss_placement: str = "outside"
) -> TrialConfig:
    return TrialConfig(
        workload="ampsweep.jobs.workloads.seed_repro:make",
        steps=40,
        abort_after=10,
        amp_level=amp_level,
        loss_placement=loss_placement,
        black_list=("CustomNorm",),
        clip=clip,
        loss_scale=loss_scale,
        dtype="float16",
        seed=seed,
        workload_args={"hidden": 32},
    )


_FRESH = """
import json, sys
import mindspore as ms
ms.device_context.cpu.op_tuning.threads_num(1)
from ampsweep.jobs import TrialConfig
from ampsweep.jobs.training._trainer import run_trial
config = TrialConfig(**json.loads(sys.argv[1]))
result = run_trial(config, config.workload)
print(json.dumps([result.steps.column(name).to_pylist() for name in ("loss", "grad_norm", "loss_scale")]
                 + [result.layers.column(name).to_pylist() for name in ("grad_absmax", "layer")]))
"""


def _fresh_process(config: TrialConfig) -> list:
    # the dataclass fields only: ``trial_id``/``graph_id`` are cached beside them once asked for
    fields = {
        **{f.name: getattr(config, f.name) for f in dataclasses.fields(config)},
        "black_list": list(config.black_list),
    }
    out = subprocess.run(
        [sys.executable, "-c", _FRESH, json.dumps(fields)], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow  # each case trains again in a fresh process (seconds on 2 cores)
@pytest.mark.parametrize(
    ("loss_scale", "amp_level", "loss_placement"),
    [
        ("none", "O2", "outside"),
        ("dynamic", "O2", "outside"),
        # O1's rewrite of a network cast with its loss renamed the parameters (fc1.weight ->
        # network.fc1.weight): the held graph's second trial failed to load its start
        ("none", "O1", "inside"),
    ],
)
def test_reused_graph_is_bit_identical_to_a_fresh_process(loss_scale, amp_level, loss_placement):
    cache = GraphCache()
    first = run_trial(
        _config(seed=1, clip=None, loss_scale=loss_scale, amp_level=amp_level, loss_placement=loss_placement),
        "ampsweep.jobs.workloads.seed_repro:make",
        cache=cache,
    )
    target = _config(
        seed=0, clip=0.7, loss_scale=loss_scale, amp_level=amp_level, loss_placement=loss_placement
    )
    reused = run_trial(target, target.workload, cache=cache)
    assert first.compile_s > 0 and reused.compile_s == 0.0, "the second trial must reuse the compiled graph"
    expected = _fresh_process(target)
    got = [reused.steps.column(name).to_pylist() for name in ("loss", "grad_norm", "loss_scale")]
    got += [reused.layers.column(name).to_pylist() for name in ("grad_absmax", "layer")]
    assert not any(name.startswith("network.") for name in got[-1]), "the user's parameter names, as in FP32"
    # exact equality (NaN == NaN as JSON null-free floats compare via repr)
    assert json.dumps(got) == json.dumps(expected)


def test_dynamic_scale_falls_and_recovers_with_skipped_steps():
    config = TrialConfig(
        workload="ampsweep.jobs.workloads.seed_repro:make",
        steps=150,
        abort_after=10,
        amp_level="O2",
        black_list=("CustomNorm",),
        clip=None,
        loss_scale="dynamic",
        dtype="float16",
        seed=0,
        loss_placement="inside",  # the loss in float16 is what overflows at a scale of 65536
    )
    steps = run_trial(config, config.workload).steps.to_pandas()
    scale = steps["loss_scale"].to_numpy()
    skipped = steps["skipped"].to_numpy()
    assert skipped.any(), "an initial scale of 65536 overflows float16 gradients"
    assert scale.min() < scale[0], "the scale falls after overflow"
    lowest = int(np.argmin(scale))
    assert scale[lowest:].max() > scale[lowest], "and doubles again after a window of finite steps"
    assert np.isfinite(steps["loss"]).all()


def test_o0_trials_share_one_graph_whatever_their_black_list_and_placement():
    """O0 casts nothing: a black list, dtype or loss placement under O0 reuses the one FP32 graph."""
    from dataclasses import replace

    cache = GraphCache()
    plain = replace(_config(seed=1, clip=None, loss_scale="none"), amp_level="O0", black_list=())
    first = run_trial(plain, plain.workload, cache=cache)
    target = replace(plain, seed=0, black_list=("CustomNorm",), loss_placement="inside", dtype="bfloat16")
    assert target.graph_id == plain.graph_id and target.trial_id != plain.trial_id
    reused = run_trial(target, target.workload, cache=cache)
    assert first.compile_s > 0 and reused.compile_s == 0.0, "the O0 graph must be reused"
    got = [reused.steps.column(name).to_pylist() for name in ("loss", "grad_norm", "loss_scale")]
    got += [reused.layers.column(name).to_pylist() for name in ("grad_absmax", "layer")]
    assert not any(name.startswith("network.") for name in got[-1]), "the user's parameter names, as in FP32"
    assert json.dumps(got) == json.dumps(_fresh_process(target))
