"""The worker pool's doors to Ray: its actors (start, send work, hear when it is done) and the cluster watch.

Completions arrive as callbacks into a local queue (``ObjectRef.future``): a ``ray.wait`` over every
reference in flight costs O(N) per call, which made each dispatch slower the larger the cluster. Behind
this small interface the driver loop is measured and tested against an in-process stand-in
(``benchmarks/_standin.py``). A driver that only waits on its actors hangs when its raylet or the head
dies (FACTS: Ray), so ``ClusterWatch`` asks the GCS for the node table every ``CHECK_EVERY_S`` in a daemon
thread: the cluster is lost when that call raises, does not answer within ``ANSWER_WITHIN_S``, or shows
the driver's own node or every node dead.
"""

from __future__ import annotations

import pickle
import queue
import threading
import time
from concurrent.futures import Future
from typing import Any, Protocol

from ampsweep.jobs import DeviceSetup, TrialConfig, TrialWorker

#: (reference, its future): what each finished call puts on the completion queue
Completion = tuple[Any, "Future[Any]"]


class Actors(Protocol):
    """What the worker pool needs of a cluster: ``RayActors`` for single devices, ``GangActors``
    (``sweep.cluster._gang``) forming and killing a placement group of rank actors behind the same calls."""

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

    def ended(self, actor: Any) -> bool:
        """Whether ``actor`` was ended by the answer just read (a gang whose ranks came apart)."""
        ...


def owned(value: Any) -> Any:
    """``value`` copied off Ray's object store: Ray ends a driver that drops a view of a dead raylet's store
    (exit 1, no resume line; Ray 2.60, ``tests/test_object_store.py``), so answers are copied on arrival."""
    return pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def owned_answer(done: Future[Any]) -> Future[Any]:
    """``done`` with an ``owned`` copy of its result (an error passes as it is)."""
    if done.exception() is not None:
        return done
    answer: Future[Any] = Future()
    answer.set_result(owned(done.result()))
    return answer


class RayActors:
    """``TrialWorker`` actors on the Ray cluster this driver joined."""

    def __init__(self) -> None:
        from ray.exceptions import RayActorError, RayTaskError

        self.completions: queue.SimpleQueue[Completion] = queue.SimpleQueue()
        self.actor_died: tuple[type[BaseException], ...] = (RayActorError,)
        self.call_failed: tuple[type[BaseException], ...] = (RayTaskError,)

    def _watch(self, ref: Any) -> Any:
        # the callback runs on one of Ray's threads; the queue hands the result to the loop
        ref.future().add_done_callback(lambda future: self.completions.put((ref, owned_answer(future))))
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

    def ended(self, actor: Any) -> bool:
        return False  # a single actor ends by dying, which its calls' answers say


#: Seconds between two checks.
CHECK_EVERY_S = 5.0
#: A check that takes longer than this means the cluster is gone.
ANSWER_WITHIN_S = 30.0


def _node_table(box: dict[str, Any]) -> None:
    try:
        import ray

        box["nodes"] = ray.nodes()
    except Exception as exc:  # noqa: BLE001 - any failure to answer is the signal
        box["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]


class ClusterWatch:
    """Polled from the dispatch loop; ``problem()`` returns a sentence once the cluster is gone."""

    def __init__(self, own_node: str | None) -> None:
        self.own_node = own_node
        self._box: dict[str, Any] | None = None
        self._asked_at = 0.0
        self._next_at = time.monotonic() + CHECK_EVERY_S

    @classmethod
    def of_this_driver(cls) -> ClusterWatch:
        """A watch that also notices this driver's own node dying."""
        import ray

        try:
            return cls(ray.get_runtime_context().get_node_id())
        except Exception:  # noqa: BLE001 - the check then only looks for any live node
            return cls(None)

    def problem(self) -> str | None:
        now = time.monotonic()
        if self._box is None:
            if now < self._next_at:
                return None
            self._box = {}
            self._asked_at = now
            threading.Thread(target=_node_table, args=(self._box,), daemon=True).start()
            return None
        if "error" in self._box:
            return f"the Ray cluster stopped answering ({self._box['error']})"
        if "nodes" not in self._box:
            if now - self._asked_at > ANSWER_WITHIN_S:
                return (
                    f"the Ray cluster did not answer for {ANSWER_WITHIN_S:.0f} s (its head or raylet is gone)"
                )
            return None
        verdict = self._judge(self._box["nodes"])
        self._box = None
        self._next_at = now + CHECK_EVERY_S
        return verdict

    def _judge(self, nodes: list[dict[str, Any]]) -> str | None:
        alive = [n for n in nodes if n.get("Alive")]
        if not alive:
            return "every node of the Ray cluster is dead"
        if self.own_node and not any(n.get("NodeID") == self.own_node for n in alive):
            return "the Ray node this driver runs on died (its raylet exited)"
        return None
