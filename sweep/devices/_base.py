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

    def cpu_core(self, worker_index: int) -> int | None:
        """The core to pin a CPU-computing actor to, or None to leave it free."""
