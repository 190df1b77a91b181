"""GPU actors: Ray's ``num_gpus=1`` sets ``CUDA_VISIBLE_DEVICES`` to the one it assigned."""

from __future__ import annotations

from typing import Any


class GpuBackend:
    kind = "gpu"
    mindspore_target = "GPU"
    visible_devices_env: str | None = "CUDA_VISIBLE_DEVICES"

    def available(self, resources: dict[str, float]) -> int:
        return int(resources.get("GPU", 0))

    def actor_options(self) -> dict[str, Any]:
        return {"num_gpus": 1, "num_cpus": 0}
