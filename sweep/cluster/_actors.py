"""The worker pool's one door to Ray: start an actor, send it work, hear when the work is done.

Completions arrive as callbacks into a local queue (``ObjectRef.future``), so
the driver never waits on a list of every reference in flight: a ``ray.wait``
over N references costs O(N) per call, and with one trial in flight per
device that made each dispatch slower the larger the cluster. Keeping Ray
behind this small interface is also what lets the driver loop be measured
and tested against an in-process stand-in (``benchmarks/_standin.py``).
"""

from __future__ import annotations

import queue
from concurrent.futures import Future
from typing import Any, Protocol

from ampsweep.jobs import DeviceSetup, TrialConfig, TrialWorker

#: (reference, its future): what each finished call puts on the completion queue
Completion = tuple[Any, "Future[Any]"]


class Actors(Protocol):
    """What the worker pool needs of a cluster; ``RayActors`` is the real one (a gang's would form
    and kill a placement group of rank actors behind the same calls)."""

    #: finished calls, in the order they finished
    completions: queue.SimpleQueue[Completion]
    #: exceptions that mean "the actor process is gone" (its trial may run again elsewhere)
    actor_died: tuple[type[BaseException], ...]
    #: exceptions that mean "the call failed on a live actor" (serialization and the like)
    call_failed: tuple[type[BaseException], ...]

    def start(self, index: int, setup: DeviceSetup, options: dict[str, Any]) -> Any: ...

    def probe(self, actor: Any) -> Any: ...

    def run(
        self, actor: Any, config: TrialConfig, workload_ref: str, hint: float | None, start: Any
    ) -> Any: ...

    def profile(self, actor: Any, args: tuple[Any, ...]) -> Any: ...

    def kill(self, actor: Any) -> None: ...


class RayActors:
    """``TrialWorker`` actors on the Ray cluster this driver joined."""

    def __init__(self) -> None:
        from ray.exceptions import RayActorError, RayTaskError

        self.completions: queue.SimpleQueue[Completion] = queue.SimpleQueue()
        self.actor_died: tuple[type[BaseException], ...] = (RayActorError,)
        self.call_failed: tuple[type[BaseException], ...] = (RayTaskError,)

    def _watch(self, ref: Any) -> Any:
        # the callback runs on one of Ray's threads; the queue hands the result to the loop
        ref.future().add_done_callback(lambda future: self.completions.put((ref, future)))
        return ref

    def start(self, index: int, setup: DeviceSetup, options: dict[str, Any]) -> Any:
        import ray

        return ray.remote(TrialWorker).options(max_restarts=0, **options).remote(index, setup)

    def probe(self, actor: Any) -> Any:
        return self._watch(actor.info.remote())

    def run(self, actor: Any, config: TrialConfig, workload_ref: str, hint: float | None, start: Any) -> Any:
        return self._watch(actor.run.remote(config, workload_ref, hint, start))

    def profile(self, actor: Any, args: tuple[Any, ...]) -> Any:
        return self._watch(actor.profile.remote(*args))

    def kill(self, actor: Any) -> None:
        import ray

        ray.kill(actor, no_restart=True)
