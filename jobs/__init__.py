"""What runs on a device: the workload contract, one trial's training, the Ray actor.

Importing this package is cheap; MindSpore is imported by the functions that
need it, so the driver can plan a sweep without loading a device runtime.
The driver uses only the names exported here.
"""

from __future__ import annotations

from ._config import TrialConfig
from ._placement import DeviceSetup, Placement
from ._result import Outcome, RankAnswer, TrialResult
from ._worker import TrialWorker
from ._workload import Workload, WorkloadError, build_workload, load_factory, resolve_reference
from .localization._diagnose import merge_ranks
from .profiling._profile import CellProfile, Profile, profile
from .training._amp import known_layer_types, network_cell_types
from .training._baseline import Baseline, Hint, PendingBaseline
from .training._clip_copy import clip_engages, same_run_with_clip
from .training._data_parallel import LOCALIZING
from .training._snapshot import checkpoint_step, misfits, read_checkpoint, snapshot_id
from .training._trainer import mindspore_version

__all__ = [
    "Baseline",
    "LOCALIZING",
    "CellProfile",
    "DeviceSetup",
    "Hint",
    "Outcome",
    "PendingBaseline",
    "Placement",
    "Profile",
    "RankAnswer",
    "TrialConfig",
    "TrialResult",
    "TrialWorker",
    "Workload",
    "WorkloadError",
    "build_workload",
    "checkpoint_step",
    "mindspore_version",
    "misfits",
    "read_checkpoint",
    "snapshot_id",
    "clip_engages",
    "same_run_with_clip",
    "known_layer_types",
    "load_factory",
    "merge_ranks",
    "network_cell_types",
    "profile",
    "resolve_reference",
]
