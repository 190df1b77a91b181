"""Device kinds as backends, chosen from Ray's cluster resources."""

from __future__ import annotations

from .._errors import SpecError
from ._base import AscendBackend, CpuBackend, DeviceBackend, GpuBackend, device_setup

DEVICE_KINDS = ("ascend", "gpu", "cpu")


def discover(
    requested: str | list[str], resources: dict[str, float], workers: int | None
) -> list[tuple[DeviceBackend, int]]:
    """Backends to start and how many actors each, for ``devices: auto | kind | [kinds]``: ``auto`` prefers
    NPU, then GPU, then CPU; a kind asked for by name that the cluster lacks is an error, not a fallback."""
    backends: dict[str, DeviceBackend] = {
        "ascend": AscendBackend(),
        "gpu": GpuBackend(),
        "cpu": CpuBackend(workers),
    }
    if requested == "auto":
        for kind in ("ascend", "gpu"):
            count = backends[kind].available(resources)
            if count:
                return [(backends[kind], count if workers is None else min(count, workers))]
        return [(backends["cpu"], backends["cpu"].available(resources))]
    kinds = [requested] if isinstance(requested, str) else list(requested)
    chosen = []
    for kind in kinds:
        count = backends[kind].available(resources)
        if count == 0:
            raise SpecError(
                "devices",
                kind,
                f"the Ray cluster has no {kind} resource (it has: {', '.join(sorted(resources))})",
            )
        chosen.append((backends[kind], count))
    return chosen


__all__ = [
    "DEVICE_KINDS",
    "AscendBackend",
    "CpuBackend",
    "DeviceBackend",
    "GpuBackend",
    "device_setup",
    "discover",
]
