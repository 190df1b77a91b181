"""What the launcher needs to know about each kind of device, and how an actor is set up."""

from __future__ import annotations

from typing import Any, Protocol

from ampsweep.jobs import DeviceSetup


class DeviceBackend(Protocol):
    """One kind of device: how many a cluster has and how an actor claims and uses one."""

    kind: str
    #: what ``mindspore.set_device`` is given on this kind
    mindspore_target: str
    #: the variable Ray sets to the device it assigned; None where there is none
    visible_devices_env: str | None

    def available(self, resources: dict[str, float]) -> int:
        """How many actors of this kind the cluster can host."""

    def actor_options(self) -> dict[str, Any]:
        """``ray.remote`` options that pin one actor to one device."""


class AscendBackend:
    """Ascend actors: Ray's ``NPU`` resource sets ``ASCEND_RT_VISIBLE_DEVICES`` per actor."""

    kind = "ascend"
    mindspore_target = "Ascend"
    visible_devices_env: str | None = "ASCEND_RT_VISIBLE_DEVICES"

    def available(self, resources: dict[str, float]) -> int:
        return int(resources.get("NPU", 0))

    def actor_options(self) -> dict[str, Any]:
        return {"resources": {"NPU": 1}, "num_cpus": 0}


class GpuBackend:
    """GPU actors: Ray's ``num_gpus=1`` sets ``CUDA_VISIBLE_DEVICES`` to the one it assigned."""

    kind = "gpu"
    mindspore_target = "GPU"
    visible_devices_env: str | None = "CUDA_VISIBLE_DEVICES"

    def available(self, resources: dict[str, float]) -> int:
        return int(resources.get("GPU", 0))

    def actor_options(self) -> dict[str, Any]:
        return {"num_gpus": 1, "num_cpus": 0}


class CpuBackend:
    """CPU actors: one per core, each pinned so MindSpore processes do not thrash."""

    kind = "cpu"
    mindspore_target = "CPU"
    visible_devices_env: str | None = None

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers

    def available(self, resources: dict[str, float]) -> int:
        cores = int(resources.get("CPU", 1))
        return max(1, min(self.workers or cores, cores))

    def actor_options(self) -> dict[str, Any]:
        return {"num_cpus": 1}


def device_setup(
    backend: DeviceBackend, ordinal: int, compute_on: str | None, deterministic: bool = True
) -> DeviceSetup:
    """The setup of the ``ordinal``-th actor of a sweep. On CPU (or ``--compute-on cpu``): one core and one
    MindSpore thread (two processes on two cores thrash otherwise), ops launched synchronously (nothing to
    overlap). On a device, ``deterministic``: a copy or a replay is only as good as a bit-identical rerun."""
    on_cpu = (compute_on or backend.kind) == "cpu"
    return DeviceSetup(
        device_kind=backend.kind,
        mindspore_target="CPU" if on_cpu else backend.mindspore_target,
        visible_devices_env=backend.visible_devices_env,
        cpu_core=ordinal if on_cpu else None,
        cpu_threads=1 if on_cpu else None,
        launch_blocking=on_cpu,
        deterministic=deterministic and not on_cpu,
    )
