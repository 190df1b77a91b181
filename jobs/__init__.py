"""What runs on a device: the workload contract, one trial's training, the Ray actor.

Importing this package is cheap; MindSpore is imported by the functions that
need it, so the driver can plan a sweep without loading a device runtime.
"""

from __future__ import annotations

from ._config import TrialConfig, loss_scale_kind
from ._schema import LAYERS_SCHEMA, STEPS_SCHEMA, TRIALS_SCHEMA
from ._workload import Workload, WorkloadError, build_workload, load_factory, resolve_reference

__all__ = [
    "LAYERS_SCHEMA",
    "STEPS_SCHEMA",
    "TRIALS_SCHEMA",
    "TrialConfig",
    "Workload",
    "WorkloadError",
    "build_workload",
    "load_factory",
    "loss_scale_kind",
    "resolve_reference",
]
