"""What the launcher needs to know about one kind of device."""

from __future__ import annotations

from typing import Any, Protocol


class DeviceBackend(Protocol):
    """One kind of device: how many a cluster has and how an actor claims one."""

    kind: str

    def available(self, resources: dict[str, float]) -> int:
        """How many actors of this kind the cluster can host."""

    def actor_options(self) -> dict[str, Any]:
        """``ray.remote`` options that pin one actor to one device."""
