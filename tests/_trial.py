"""One way for tests to write down a trial: the fields every test repeats, with overrides."""

from __future__ import annotations

from typing import Any

from ampsweep.jobs import TrialConfig

DEFAULTS: dict[str, Any] = {
    "workload": "ampsweep.jobs.workloads.seed_repro:make",
    "steps": 10,
    "abort_after": 5,
    "amp_level": "O2",
    "black_list": (),
    "clip": None,
    "loss_scale": "none",
    "dtype": "float16",
    "seed": 0,
}


def trial_config(**overrides: Any) -> TrialConfig:
    """A ``TrialConfig`` of seed_repro under O2 for 10 steps, changed by ``overrides``."""
    return TrialConfig(**{**DEFAULTS, **overrides})
