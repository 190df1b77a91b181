"""The Ray actor: one long-lived process per device, running trials one by one.

MindSpore is imported and the device is set once per process; each trial's
result goes back to the driver as Arrow tables, and the driver alone writes
files, so a dead actor can never leave a half-committed trial behind.
"""

from __future__ import annotations

import os
import socket
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pyarrow as pa

from ._config import TrialConfig
from ._schema import LAYERS_SCHEMA, STEPS_SCHEMA, TRIALS_SCHEMA

#: Environment variable through which Ray tells a process its device, per kind.
VISIBLE_DEVICES_ENV = {"ascend": "ASCEND_RT_VISIBLE_DEVICES", "gpu": "CUDA_VISIBLE_DEVICES"}
_MINDSPORE_TARGET = {"ascend": "Ascend", "gpu": "GPU", "cpu": "CPU"}


@dataclass
class TrialRecord:
    """A finished trial as the three tables the store writes."""

    trial_id: str
    trial: pa.Table
    steps: pa.Table
    layers: pa.Table


def _layer_rows(config: TrialConfig, metrics: Any, clipped: np.ndarray, skipped: np.ndarray) -> pa.Table:
    n = len(metrics.loss)
    sampled = (np.arange(n) % max(1, config.layer_every)) == 0
    anomalous = clipped | skipped | ~metrics.finite | ~np.isfinite(metrics.loss)
    steps = np.flatnonzero(sampled | anomalous)
    params = len(metrics.layer_names)
    return pa.table(
        {
            "step": np.repeat(steps, params).astype(np.int64),
            "layer": pa.array(metrics.layer_names * len(steps), pa.string()),
            "grad_norm": metrics.layer_norm[steps].reshape(-1).astype(np.float64),
            "grad_absmax": metrics.layer_absmax[steps].reshape(-1).astype(np.float64),
            "nonfinite": metrics.layer_nonfinite[steps].reshape(-1).astype(np.int64),
        },
        schema=LAYERS_SCHEMA,
    )


def to_record(
    config: TrialConfig,
    outcome: Any,
    *,
    sweep: str,
    equivalent_to: str | None,
    placement: dict[str, Any],
) -> TrialRecord:
    """Lay one trial's outcome out as the Parquet tables of DESIGN.md."""
    from ._trainer import is_clipped

    metrics = outcome.metrics
    if metrics is not None:
        clipped = is_clipped(metrics.grad_norm, config.clip)
        skipped = ~metrics.finite if config.loss_scale != "none" else np.zeros(len(metrics.loss), bool)
        steps = pa.table(
            {
                "step": np.arange(len(metrics.loss), dtype=np.int64),
                "loss": metrics.loss,
                "grad_norm": metrics.grad_norm,
                "clipped": clipped,
                "nonfinite": ~metrics.finite | ~np.isfinite(metrics.loss),
                "skipped": skipped,
                "loss_scale": metrics.scale,
                "step_ms": metrics.step_ms.astype(np.float64),
            },
            schema=STEPS_SCHEMA,
        )
        layers = _layer_rows(config, metrics, clipped, skipped)
    else:
        steps = STEPS_SCHEMA.empty_table()
        layers = LAYERS_SCHEMA.empty_table()
    row = {
        "trial_id": config.trial_id,
        "sweep": sweep,
        "workload": config.workload,
        "graph_id": config.graph_id,
        "amp_level": config.amp_level,
        "black_list": list(config.black_list),
        "clip": config.clip,
        "loss_scale": config.loss_scale,
        "dtype": config.dtype,
        "seed": config.seed,
        "steps": config.steps,
        "outcome": outcome.outcome,
        "steps_run": outcome.steps_run,
        "first_nonfinite_step": outcome.first_nonfinite_step,
        "final_loss": outcome.final_loss,
        "target_loss": outcome.target_loss,
        "equivalent_to": equivalent_to,
        "error": outcome.error,
        "traceback": outcome.traceback,
        "wall_s": outcome.wall_s,
        "compile_s": outcome.compile_s,
        "device_kind": placement["device_kind"],
        "node": placement["node"],
        "device_id": placement["device_id"],
        "worker_index": placement["worker_index"],
        "finished_at": datetime.now(timezone.utc),
    }
    trial = pa.Table.from_pylist([row], schema=TRIALS_SCHEMA)
    return TrialRecord(config.trial_id, trial, steps, layers)


class TrialWorker:
    """Actor body (wrapped with ``ray.remote`` by the launcher's device backend).

    ``compute_on`` is the backend MindSpore really uses: normally the device
    kind, ``"cpu"`` for a dry run that keeps Ray's scheduling and pinning.
    """

    def __init__(self, worker_index: int, device_kind: str, compute_on: str, cpu_core: int | None) -> None:
        self.worker_index = worker_index
        self.device_kind = device_kind
        self.compute_on = compute_on
        if cpu_core is not None and hasattr(os, "sched_setaffinity"):
            # two MindSpore processes on two cores thrash unless each owns one
            os.sched_setaffinity(0, {cpu_core % (os.cpu_count() or 1)})
        # A relative workload file is relative to where Ray started us: the
        # job's (or runtime_env's) working_dir on a cluster.
        self.home = os.getcwd()
        # AMP's O1 rewrite writes generated sources under the working directory;
        # keep them out of the user's checkout
        os.chdir(tempfile.mkdtemp(prefix="ampsweep-worker-"))
        import mindspore as ms

        ms.set_device(_MINDSPORE_TARGET[compute_on], 0)
        if compute_on == "cpu":
            ms.device_context.cpu.op_tuning.threads_num(1)
        env = VISIBLE_DEVICES_ENV.get(device_kind)
        self.placement = {
            "device_kind": device_kind,
            "node": socket.gethostname(),
            "device_id": os.environ.get(env, "") if env else "",
            "worker_index": worker_index,
        }
        try:
            import ray

            self.placement["node"] = ray.get_runtime_context().get_node_id()[:12]
        except Exception:  # outside Ray (tests call the class directly)
            pass

        from ._trainer import GraphCache

        self.graphs = GraphCache()

    def info(self) -> dict[str, Any]:
        return dict(self.placement, pid=os.getpid())

    def run(
        self, config: TrialConfig, workload_ref: str, sweep: str, equivalent_to: str | None
    ) -> TrialRecord:
        from ._trainer import run_trial

        module, _, attr = workload_ref.rpartition(":")
        if module.endswith(".py") and not os.path.isabs(module):
            workload_ref = f"{os.path.join(self.home, module)}:{attr}"
        outcome = run_trial(config, workload_ref, _MINDSPORE_TARGET[self.compute_on], self.graphs)
        return to_record(config, outcome, sweep=sweep, equivalent_to=equivalent_to, placement=self.placement)
