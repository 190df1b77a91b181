"""Running a sweep on Ray: actors per device, one trial at a time each, commit as they finish.

Trials are handed out one at a time (not pre-split), so no device idles while
trials remain and a slow trial holds back nobody. Only the driver writes
files; an actor that dies mid-trial loses only that attempt: the trial goes
back to the queue and the actor is replaced.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from jobs import TrialConfig

from ._grid import equivalents, expand_grid
from ._progress import SweepProgress
from ._spec import SweepSpec
from ._store import SweepStore
from .devices import DeviceBackend, discover

#: How often one trial may lose its worker before it is recorded as failed.
MAX_TRIAL_ATTEMPTS = 3
#: How often a device slot may lose its actor in a row before it is given up.
MAX_SLOT_DEATHS = 3


@dataclass
class SweepRun:
    """What a finished ``run_sweep`` reports back."""

    root: str
    total: int
    skipped: int
    ran: int
    outcomes: dict[str, int] = field(default_factory=dict)


@dataclass
class _Slot:
    backend: DeviceBackend
    index: int
    ordinal: int = 0
    actor: Any = None
    deaths: int = 0
    graphs: set[str] = field(default_factory=set)


def cluster_address(address: str | None) -> str | None:
    """The cluster to join: ``--address``, else the one a ``ray job submit`` driver runs in."""
    return address or os.environ.get("RAY_ADDRESS") or None


def _inside_ray_job() -> bool:
    return "working_dir" in os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR", "")


def ship_workload(workload_ref: str, address: str | None) -> tuple[str, dict[str, Any] | None]:
    """How workers on other machines find a workload file: a reference and a runtime_env.

    Locally the absolute path works everywhere. Under ``ray job submit`` the
    job's working_dir already travels to every worker, so the path becomes
    relative to it. With ``--address`` the file's folder is sent as the
    runtime_env working_dir.
    """
    module, _, attr = workload_ref.rpartition(":")
    if address is None or not module.endswith(".py"):
        return workload_ref, None
    path = os.path.abspath(module)
    if _inside_ray_job():
        cwd = os.getcwd()
        if os.path.commonpath([cwd, path]) == cwd:
            return f"{os.path.relpath(path, cwd)}:{attr}", None
        return workload_ref, None
    return f"{os.path.basename(path)}:{attr}", {"working_dir": os.path.dirname(path)}


def start_ray(address: str | None, workers: int | None, runtime_env: dict[str, Any] | None = None) -> None:
    """Join a cluster or start a private local one.

    ``address="local"`` matters: a bare ``ray.init()`` silently attaches to any
    cluster whose address another tool left in ``/tmp/ray``.
    """
    import ray

    if ray.is_initialized():
        return
    common: dict[str, Any] = {"logging_level": "ERROR", "log_to_driver": False}
    if runtime_env:
        common["runtime_env"] = runtime_env
    if address:
        ray.init(address=address, **common)
    else:
        cores = os.cpu_count() or 1
        ray.init(address="local", num_cpus=max(cores, workers or 0), include_dashboard=False, **common)


def _new_actor(slot: _Slot, compute_on: str | None) -> Any:
    import ray

    from jobs._worker import TrialWorker

    remote = ray.remote(TrialWorker).options(max_restarts=0, **slot.backend.actor_options())
    kind = slot.backend.kind
    compute = compute_on or kind
    # computing on CPU (a CPU actor, or a dry run of a device sweep) pins one core per actor
    core = slot.ordinal if compute == "cpu" else None
    return remote.remote(slot.index, kind, compute, core)


def _failed_record(
    config: TrialConfig, sweep: str, equivalent_to: str | None, error: str, slot: _Slot
) -> Any:
    from jobs._trainer import TrialOutcome
    from jobs._worker import to_record

    outcome = TrialOutcome.failure(error)
    placement = {"device_kind": slot.backend.kind, "node": "", "device_id": "", "worker_index": slot.index}
    return to_record(config, outcome, sweep=sweep, equivalent_to=equivalent_to, placement=placement)


def run_sweep(
    spec: SweepSpec,
    resolved_yaml: str,
    workload_ref: str,
    out: str,
    *,
    workers: int | None = None,
    address: str | None = None,
    devices: str | list[str] | None = None,
    compute_on: str | None = None,
    progress: bool = True,
    runtime_env: dict[str, Any] | None = None,
) -> SweepRun:
    """Run every trial of ``spec`` that ``out`` does not already hold."""
    import ray
    from ray.exceptions import RayActorError, RayTaskError

    trials = expand_grid(spec)
    equivalent = equivalents(trials)
    store = SweepStore(out, spec.name)
    done = store.committed()
    pending = deque(t for t in trials if t.trial_id not in done)
    result = SweepRun(root=store.root, total=len(trials), skipped=len(trials) - len(pending), ran=0)
    if not pending:
        store.write_text("sweep.yaml", resolved_yaml)
        return result

    address = cluster_address(address)
    if not ray.is_initialized():
        # a caller that started Ray itself decided the runtime_env already
        workload_ref, shipped = ship_workload(workload_ref, address)
        start_ray(address, workers, {**(runtime_env or {}), **(shipped or {})} or None)
    # discover before writing anything: a device kind the cluster lacks is a usage error
    plan = discover(devices or spec.devices, ray.cluster_resources(), workers)
    store.write_text("sweep.yaml", resolved_yaml)
    slots = [_Slot(backend, i) for backend, count in plan for i in range(count)]
    for ordinal, slot in enumerate(slots):
        slot.ordinal = ordinal
    slots = slots[: max(1, len(pending))]
    for slot in slots:
        slot.actor = _new_actor(slot, compute_on)

    attempts: dict[str, int] = {}
    last_error = ""

    in_flight: dict[Any, tuple[_Slot, TrialConfig]] = {}
    idle = list(slots)
    with SweepProgress(len(trials), result.skipped, progress) as bar:

        def take_for(slot: _Slot) -> TrialConfig:
            # prefer a trial whose graph this actor has compiled already
            for position, candidate in enumerate(pending):
                if candidate.graph_id in slot.graphs:
                    del pending[position]
                    return candidate
            config = pending.popleft()
            slot.graphs.add(config.graph_id)
            return config

        def dispatch() -> None:
            while idle and pending:
                slot = idle.pop()
                config = take_for(slot)
                ref = slot.actor.run.remote(config, workload_ref, spec.name, equivalent.get(config.trial_id))
                in_flight[ref] = (slot, config)
            bar.set_running(len(in_flight))

        def commit(record: Any) -> None:
            store.commit(record)
            outcome = record.trial.column("outcome")[0].as_py()
            result.outcomes[outcome] = result.outcomes.get(outcome, 0) + 1
            result.ran += 1
            bar.finished(outcome)

        dispatch()
        while in_flight:
            ready, _ = ray.wait(list(in_flight), num_returns=1)
            slot, config = in_flight.pop(ready[0])
            try:
                record = ray.get(ready[0])
            except RayActorError as exc:
                attempts[config.trial_id] = attempts.get(config.trial_id, 0) + 1
                if attempts[config.trial_id] >= MAX_TRIAL_ATTEMPTS:
                    message = f"WorkerDied: the worker died {MAX_TRIAL_ATTEMPTS} times running this trial"
                    commit(_failed_record(config, spec.name, equivalent.get(config.trial_id), message, slot))
                else:
                    pending.appendleft(config)
                    bar.retry()
                slot.deaths += 1
                if slot.deaths >= MAX_SLOT_DEATHS:
                    last_error = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                    continue  # give this device slot up
                slot.actor = _new_actor(slot, compute_on)
                slot.graphs.clear()
            except RayTaskError as exc:  # the trial code itself is guarded; this is serialization etc.
                first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
                commit(_failed_record(config, spec.name, equivalent.get(config.trial_id), first, slot))
            else:
                slot.deaths = 0
                commit(record)
            idle.append(slot)
            dispatch()
    if pending:
        raise RuntimeError(
            f"every worker died repeatedly; {len(pending)} trials were not run (last error: {last_error})"
        )
    return result
