"""Where an actor computes: the request a device backend makes, and what a row records.

The facts of each device kind (its MindSpore target, the variable through
which Ray names the visible device, whether to pin a core) belong to the
driver's device backends (``sweep/devices``); they reach the actor as one
``DeviceSetup`` so the actor applies them without knowing any kind by name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceSetup:
    """How one actor process sets itself up."""

    device_kind: str  # cpu | gpu | ascend: the Ray resource the actor claimed
    mindspore_target: str  # CPU | GPU | Ascend: what ``mindspore.set_device`` gets
    visible_devices_env: str | None = None  # e.g. CUDA_VISIBLE_DEVICES; None on CPU
    cpu_core: int | None = None  # pin the process to this core (CPU compute)
    cpu_threads: int | None = None  # MindSpore CPU operator threads


@dataclass(frozen=True)
class Placement:
    """Where a trial ran, as the ``trials`` table records it."""

    device_kind: str
    device_target: str  # what MindSpore computed on: CPU | GPU | Ascend
    node: str = ""  # Ray node id (first 12 hex chars); empty when no worker ran it
    device_id: str = ""  # the id Ray made visible; empty on CPU
    worker_index: int = -1
    mindspore_version: str = ""
