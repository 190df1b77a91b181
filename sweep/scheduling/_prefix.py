"""The snapshots a forked sweep's trials start from: found, read, or made on the way.

A snapshot ``OUT/_snapshots/`` holds is read, not run again; a missing ``{steps: N}`` one is an FP32
prefix run queued ahead of the trials. A seed's trials wait for their own snapshot only, so no actor
idles behind the slowest prefix. Every snapshot goes into Ray's object store once, so a worker on any
node gets its bytes with the trial that needs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ampsweep.jobs import TrialConfig, TrialResult

from .._errors import PrefixFailed
from ..planning._plan import SweepPlan
from ..store._store import SweepStore


def _prefix_problem(result: TrialResult) -> str:
    config = result.config
    if result.error:
        return f"the FP32 prefix of seed {config.seed} failed: {result.error}"
    where = result.first_nonfinite_step
    at = f" at step {where:,}" if where is not None else ""
    return (
        f"the FP32 prefix of seed {config.seed} diverged{at}, before step {config.steps:,}: FP32 itself breaks "
        "there, so there is no healthy state to fork from (choose a smaller start_from.steps)"
    )


def _put(data: bytes) -> Any:
    import ray

    return ray.put(data)


class Forks:
    """Which trials may start, and the object-store reference of each snapshot they start from; ``runs``:
    the prefix runs still to make, run first, each result handed to ``take``."""

    def __init__(self, plan: SweepPlan, pending: list[TrialConfig], store: SweepStore) -> None:
        self.store = store
        #: snapshot id -> its bytes in Ray's object store
        self.refs: dict[str, Any] = {}
        #: prefix trial id -> the snapshot it makes
        self._makes: dict[str, str] = {}
        self.runs: list[TrialConfig] = []
        for snapshot in sorted({t.start_from for t in pending if t.start_from}):
            point = plan.starts[snapshot]
            data = store.read_snapshot(snapshot)
            if data is None and point.prefix is not None:
                self._makes[point.prefix.trial_id] = snapshot
                self.runs.append(point.prefix)
                continue
            self.refs[snapshot] = _put(data if data is not None else Path(str(point.checkpoint)).read_bytes())

    def is_prefix(self, config: TrialConfig) -> bool:
        return config.trial_id in self._makes

    def snapshot_for(self, config: TrialConfig) -> Any:
        return self.refs.get(config.start_from) if config.start_from else None

    def take(self, result: TrialResult, committed: int, left: int) -> str | None:
        """The snapshot prefix run ``result`` made, stored and in the object store; None for any other run.
        A prefix that did not reach its step stops the sweep: no healthy state to fork from."""
        snapshot = self._makes.get(result.trial_id)
        if snapshot is None:
            return None
        if result.snapshot is None:
            raise PrefixFailed(_prefix_problem(result), committed, left)
        self.store.write_snapshot(snapshot, result.snapshot)
        self.refs[snapshot] = _put(result.snapshot)
        return snapshot
