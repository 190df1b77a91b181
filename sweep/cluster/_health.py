"""Noticing that the Ray cluster itself went away, instead of waiting on it forever.

A driver that only waits on its actors hangs when its local raylet or the
head dies (FACTS: Ray). Every ``CHECK_EVERY_S`` the watch asks the GCS for
the node table in a daemon thread; the cluster is lost when that call raises,
does not answer within ``ANSWER_WITHIN_S``, or shows the driver's own node or
every node dead. A daemon thread, because a call into a dead cluster may
never return and must not keep the process alive.
"""

from __future__ import annotations

import threading
import time
from typing import Any

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
