"""Ascend actors: Ray's ``NPU`` resource sets ``ASCEND_RT_VISIBLE_DEVICES`` per actor."""

from __future__ import annotations

from typing import Any


class AscendBackend:
    kind = "ascend"
    mindspore_target = "Ascend"
    visible_devices_env: str | None = "ASCEND_RT_VISIBLE_DEVICES"

    def available(self, resources: dict[str, float]) -> int:
        return int(resources.get("NPU", 0))

    def actor_options(self) -> dict[str, Any]:
        return {"resources": {"NPU": 1}, "num_cpus": 0}
