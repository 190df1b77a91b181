"""An in-process stand-in for Ray's actors: the driver loop measured alone, at any device count.

``sweep.cluster._launcher.drive_trials`` is the driver's whole per-trial path (queue,
dispatch, completions, fail-fast, baselines, the Parquet commit, the lock's
heartbeat, progress). Given ``InProcessActors`` it runs against "actors" that
are ``NoopTrialWorker`` objects in this process: each call is answered at
once, with its arguments and its result pickled and unpickled as Ray would.
The time the stand-in spends being the actors (running ``NoopTrialWorker``,
unpickling the arguments, pickling the result) is counted in ``actor_s``, so
the driver's own time is the loop's time less that. 10,000 devices cost
10,000 small objects, not 10,000 processes.
"""

from __future__ import annotations

import itertools
import pickle
import queue
import time
from concurrent.futures import Future
from typing import Any

from ._noop_actor import NoopTrialWorker


class ActorGone(Exception):
    """Never raised here: the stand-in's actors do not die."""


class CallFailed(Exception):
    """Never raised here: the stand-in's calls do not fail."""


class InProcessActors:
    """``sweep.cluster._actors.Actors`` answered in this process, at once."""

    def __init__(self) -> None:
        self.completions: queue.SimpleQueue[tuple[Any, Future[Any]]] = queue.SimpleQueue()
        self.actor_died = (ActorGone,)
        self.call_failed = (CallFailed,)
        self._ids = itertools.count()
        self.calls = 0
        #: seconds spent on the actors' side of the calls (not the driver's work)
        self.actor_s = 0.0

    def _answer(self, work: Any, *args: Any) -> int:
        """Run ``work(*args)`` as the actor would; the driver gets the result unpickled."""
        arguments = pickle.dumps(args, protocol=5)  # the driver's side of sending the call
        started = time.perf_counter()
        sent = pickle.dumps(work(*pickle.loads(arguments)), protocol=5)
        self.actor_s += time.perf_counter() - started
        call = next(self._ids)
        future: Future[Any] = Future()
        future.set_result(pickle.loads(sent))
        self.completions.put((call, future))
        return call

    def start(self, index: int, setup: Any, options: dict[str, Any]) -> NoopTrialWorker:
        return NoopTrialWorker(index, setup)

    def probe(self, actor: NoopTrialWorker) -> int:
        return self._answer(actor.info)

    def run(self, actor: NoopTrialWorker, config: Any, workload_ref: str, hint: Any, start: Any) -> int:
        self.calls += 1
        return self._answer(actor.run, config, workload_ref, hint, start)

    def profile(self, actor: NoopTrialWorker, args: tuple[Any, ...]) -> int:
        return self._answer(lambda *_: None, *args)

    def kill(self, actor: NoopTrialWorker) -> None:
        pass

    def ended(self, actor: NoopTrialWorker) -> bool:
        return False


class QuietCluster:
    """A cluster watch that never finds a problem (there is no cluster)."""

    def problem(self) -> None:
        return None
