"""Where an actor computes: the request a device backend makes, and what a row records.

The facts of each device kind (its MindSpore target, the variable through
which Ray names the visible device, whether to pin a core) belong to the
driver's device backends (``sweep/devices``); they reach the actor as one
``DeviceSetup`` so the actor applies them without knowing any kind by name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceSetup:
    """How one actor process sets itself up."""

    device_kind: str  # cpu | gpu | ascend: the Ray resource the actor claimed
    mindspore_target: str  # CPU | GPU | Ascend: what ``mindspore.set_device`` gets
    visible_devices_env: str | None = None  # e.g. CUDA_VISIBLE_DEVICES; None on CPU
    cpu_core: int | None = None  # pin the process to this core (CPU compute)
    cpu_threads: int | None = None  # MindSpore CPU operator threads
    #: launch every op in the calling thread (``mindspore.runtime.launch_blocking``): on one
    #: pinned core, the asynchronous hand-over to MindSpore's launch thread costs more than it
    #: overlaps; a hooked PyNative step (localization) ran 3x slower with it (``bench_launch``)
    launch_blocking: bool = False
    #: set MindSpore's deterministic mode (``mindspore.set_deterministic``) on an accelerator, so
    #: that running a trial again gives the same bits: what copies and localization replays assume
    deterministic: bool = False

    @property
    def exact_reruns(self) -> bool:
        """Whether a rerun of a trial here is bit-identical: always on CPU, on a device only deterministic."""
        return self.mindspore_target == "CPU" or self.deterministic

    def configure_mindspore(self) -> None:
        """Apply the MindSpore side of this setup in this process: device, op threads, launch mode.

        The actor calls it once it is pinned; the benchmarks that time what a
        worker computes call it too, so they run exactly as a worker does.
        """
        import mindspore as ms

        ms.set_device(self.mindspore_target, 0)
        if self.cpu_threads is not None:
            ms.device_context.cpu.op_tuning.threads_num(self.cpu_threads)
        if self.launch_blocking:
            ms.runtime.launch_blocking()
        if self.deterministic and self.mindspore_target != "CPU":
            ms.set_deterministic(True)


@dataclass(frozen=True)
class Placement:
    """Where a trial ran, as the ``trials`` table records it."""

    device_kind: str
    device_target: str  # what MindSpore computed on: CPU | GPU | Ascend
    node: str = ""  # Ray node id (first 12 hex chars); empty when no worker ran it
    device_id: str = ""  # the id Ray made visible; empty on CPU
    worker_index: int = -1
    mindspore_version: str = ""
    #: what a float16 overflow becomes on this device: ``inf_nan`` or ``saturation`` (±65504)
    overflow_mode: str = "inf_nan"


#: MindSpore's switch between the two overflow modes on Ascend
ASCEND_OVERFLOW_ENV = "MS_ASCEND_CHECK_OVERFLOW_MODE"


def overflow_mode(device_target: str, environ: dict[str, str] | None = None) -> str:
    """What a float16 overflow becomes where this process computes.

    CPU and GPU follow IEEE: inf and NaN. Ascend saturates to ±65504 (and a NaN
    to 0) on 910A-era chips and wherever INF/NaN mode is off
    (``MS_ASCEND_CHECK_OVERFLOW_MODE=SATURATION_MODE``); later chips default to
    INF/NaN mode. An Ascend run without the variable records ``ascend_default``.
    """
    if device_target != "Ascend":
        return "inf_nan"
    value = (environ if environ is not None else os.environ).get(ASCEND_OVERFLOW_ENV, "").upper()
    if value.startswith("SATURATION"):
        return "saturation"
    if value.startswith("INFNAN"):
        return "inf_nan"
    return "ascend_default"
