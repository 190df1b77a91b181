"""What runs on a device: the workload contract, one trial's training, the Ray actor.

Importing this package is cheap; MindSpore is imported by the functions that
need it, so the driver can plan a sweep without loading a device runtime.
The driver uses only the names imported here, its public names (no ``__all__``
lists them again).
"""

# ruff: noqa: F401
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
