"""CPU actors: one per core, each pinned so MindSpore processes do not thrash."""

from __future__ import annotations

from typing import Any


class CpuBackend:
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
