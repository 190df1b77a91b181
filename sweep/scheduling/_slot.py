"""A place trials run: one actor on one device, or a gang of rank actors whose ``actor`` is the gang's
handle (``sweep.cluster._gang``)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..devices import DeviceBackend


@dataclass
class Slot:
    """One place trials run (a device and its actor); its actor is replaced when it dies."""

    backend: DeviceBackend
    #: its place in the pool, and which device of its kind it is (the n-th CPU actor pins core n)
    index: int
    actor: Any = None
    ready: bool = False
    deaths: int = 0
    gone: bool = False
    #: the graphs its actor compiled (the dispatcher prefers their trials)
    graphs: set[str] = field(default_factory=set)
    #: the calls sent to the current actor and not answered yet, oldest (the running one) first
    calls: deque[Any] = field(default_factory=deque)

    def runs(self, call: Any) -> bool:
        """Whether the actor runs ``call`` now: the oldest call it has not answered."""
        return bool(self.calls) and self.calls[0] is call
