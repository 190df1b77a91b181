"""One device the dispatcher hands trials to; its actor is replaced when it dies."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..devices import DeviceBackend


@dataclass
class Slot:
    """One device an actor runs on; its actor is replaced when it dies."""

    backend: DeviceBackend
    index: int
    ordinal: int
    actor: Any = None
    ready: bool = False
    deaths: int = 0
    gone: bool = False
    graphs: set[str] = field(default_factory=set)
    #: the calls sent to the current actor and not answered yet, oldest (the running one) first
    calls: deque[Any] = field(default_factory=deque)

    @property
    def busy(self) -> bool:
        return bool(self.calls)

    def runs(self, call: Any) -> bool:
        """Whether the actor runs ``call`` now: the oldest call it has not answered."""
        return bool(self.calls) and self.calls[0] is call
