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

from typing import Any


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

    def info(self) -> dict[str, Any]:
        import os

        return {"worker_index": self.worker_index, "pid": os.getpid()}

    def run(self, config: Any, *args: Any, **kwargs: Any) -> Any:
        from ampsweep.jobs import Outcome, Placement, TrialResult

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
