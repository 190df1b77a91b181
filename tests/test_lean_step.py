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

from jobs import TrialConfig

GOLDEN = Path(__file__).parent / "golden" / "lean_step.json"
_SEED_REPRO = "jobs.workloads.seed_repro:make"


def _trial(**overrides: Any) -> TrialConfig:
    values: dict[str, Any] = dict(
        workload=_SEED_REPRO,
        steps=120,
        abort_after=10,
        amp_level="O2",
        black_list=("CustomNorm",),
        clip=1.0,
        loss_scale="none",
        dtype="float16",
        seed=0,
        layer_every=10,
    )
    values.update(overrides)
    return TrialConfig(**values)


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
