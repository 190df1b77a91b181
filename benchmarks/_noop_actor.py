"""A stand-in for ``jobs.TrialWorker`` that trains nothing, for dispatch at scale.

On a simulated cluster of 64 fake devices there are 64 actor processes on a
2-core machine; 64 MindSpore imports would measure the machine, not the
launcher. This actor takes the same constructor and ``run`` arguments, imports
only ``jobs`` (no MindSpore), and answers every trial at once with a
``completed`` result of one step, built with the contract's schema. Everything
around it is the real launcher: device discovery, one actor per device with the
backend's resource request, graph-affine dispatch, ``ray.wait``/``ray.get``,
the driver's Parquet commit, progress.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

#: ``<folder>:<actors>``: every actor's first trial waits until that many actors have started
BARRIER_ENV = "AMPSWEEP_BENCH_ACTOR_BARRIER"
BARRIER_TIMEOUT_S = 900.0


def _one_step_table() -> Any:
    import pyarrow as pa

    from ampsweep.contracts import STEPS_SCHEMA

    columns = {}
    for field in STEPS_SCHEMA:
        if pa.types.is_boolean(field.type):
            columns[field.name] = pa.array([False], field.type)
        elif pa.types.is_integer(field.type) or pa.types.is_floating(field.type):
            columns[field.name] = pa.array([0], field.type)
        else:
            columns[field.name] = pa.nulls(1, field.type)
    return pa.table(columns, schema=STEPS_SCHEMA)


class NoopTrialWorker:
    """Constructor and ``run`` shaped like ``jobs.TrialWorker``'s; no training."""

    def __init__(self, worker_index: int, *args: Any, **kwargs: Any) -> None:
        self.worker_index = worker_index
        setup = next((a for a in (*args, *kwargs.values()) if hasattr(a, "device_kind")), None)
        self.kind = getattr(setup, "device_kind", "cpu")
        self.target = getattr(setup, "mindspore_target", "CPU")
        self.steps = _one_step_table()
        self.calls = 0
        self.barrier = os.environ.get(BARRIER_ENV)
        if self.barrier:
            folder, _ = self.barrier.rsplit(":", 1)
            (Path(folder) / str(os.getpid())).touch()

    def _wait_for_all_actors(self) -> None:
        """Hold the first trial until every actor has started, so that no trial is timed while
        other actors still start (on 2 cores, 128 starting Python processes would be measured)."""
        folder, actors = self.barrier.rsplit(":", 1)  # type: ignore[union-attr]
        deadline = time.monotonic() + BARRIER_TIMEOUT_S
        while len(os.listdir(folder)) < int(actors) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.barrier = None

    def info(self) -> dict[str, Any]:
        import os

        return {"worker_index": self.worker_index, "pid": os.getpid()}

    def run(self, config: Any, *args: Any, **kwargs: Any) -> Any:
        from ampsweep.jobs import Outcome, Placement, TrialResult

        if self.barrier:
            self._wait_for_all_actors()
        self.calls += 1
        placement = Placement(self.kind, self.target, worker_index=self.worker_index)
        return TrialResult(
            config=config,
            outcome=Outcome.COMPLETED,
            placement=placement,
            steps_run=1,
            final_loss=0.0,
            wall_s=0.0,
            steps=self.steps,
        )
