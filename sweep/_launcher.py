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

from ampsweep_contracts import PLAN_FILE, SPEC_FILE, encode_plan, parse_reference
from jobs import Placement, TrialConfig, TrialResult, TrialWorker

from ._config import FailurePolicy, RunConfig
from ._plan import SweepPlan
from ._progress import SweepProgress
from ._store import SweepStore
from .devices import DeviceBackend, device_setup, discover


@dataclass
class SweepRun:
    """What a finished run reports back: counts, and where the results are."""

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
    reference = parse_reference(workload_ref)
    if address is None or not reference.is_file:
        return workload_ref, None
    path = os.path.abspath(reference.module)
    if _inside_ray_job():
        cwd = os.getcwd()
        if os.path.commonpath([cwd, path]) == cwd:
            return str(reference.with_module(os.path.relpath(path, cwd))), None
        return workload_ref, None
    return str(reference.with_module(os.path.basename(path))), {"working_dir": os.path.dirname(path)}


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

    remote = ray.remote(TrialWorker).options(max_restarts=0, **slot.backend.actor_options())
    return remote.remote(slot.index, device_setup(slot.backend, slot.ordinal, compute_on))


def _failed_result(config: TrialConfig, error: str, slot: _Slot, compute_on: str | None) -> TrialResult:
    """A trial no worker could finish: recorded where it was last tried."""
    setup = device_setup(slot.backend, slot.ordinal, compute_on)
    placement = Placement(setup.device_kind, setup.mindspore_target, worker_index=slot.index)
    return TrialResult.failure(config, error, placement)


def run_sweep(plan: SweepPlan, resolved_yaml: str, out: str, run: RunConfig) -> SweepRun:
    """Run every trial of ``plan`` that ``out`` does not already hold.

    The plan is validated already (``Sweep`` does that); this is the part that
    needs Ray. The resolved spec and the plan are written before any trial.
    """
    import ray
    from ray.exceptions import RayActorError, RayTaskError

    failure = run.failure or FailurePolicy()
    compute_on = run.compute_on
    workers = run.workers
    trials = plan.trials
    equivalent = plan.equivalent_to
    store = SweepStore(out, plan.name)
    done = store.committed()
    pending = deque(t for t in trials if t.trial_id not in done)
    result = SweepRun(root=store.root, total=len(trials), skipped=len(trials) - len(pending), ran=0)
    workload_ref = plan.workload_ref

    def write_plan() -> None:
        store.write_text(SPEC_FILE, resolved_yaml)
        store.write_text(PLAN_FILE, encode_plan(plan.name, plan.entries()))

    if not pending:
        write_plan()
        return result

    address = cluster_address(run.address)
    if not ray.is_initialized():
        # a caller that started Ray itself decided the runtime_env already
        workload_ref, shipped = ship_workload(workload_ref, address)
        start_ray(address, workers, {**(run.runtime_env or {}), **(shipped or {})} or None)
    # discover before writing anything: a device kind the cluster lacks is a usage error
    layout = discover(run.devices or plan.devices, ray.cluster_resources(), workers)
    write_plan()
    slots = [_Slot(backend, i) for backend, count in layout for i in range(count)]
    for ordinal, slot in enumerate(slots):
        slot.ordinal = ordinal
    slots = slots[: max(1, len(pending))]
    for slot in slots:
        slot.actor = _new_actor(slot, compute_on)

    attempts: dict[str, int] = {}
    last_error = ""

    in_flight: dict[Any, tuple[_Slot, TrialConfig]] = {}
    idle = list(slots)
    with SweepProgress(len(trials), result.skipped, run.progress) as bar:

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
                attempts[config.trial_id] = attempts.get(config.trial_id, 0) + 1
                ref = slot.actor.run.remote(config, workload_ref)
                in_flight[ref] = (slot, config)
            bar.set_running(len(in_flight))

        def commit(trial: TrialResult) -> None:
            store.commit(
                trial,
                equivalent_to=equivalent.get(trial.trial_id),
                attempts=attempts.get(trial.trial_id, 1),
            )
            outcome = trial.outcome.value
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
                if attempts[config.trial_id] >= failure.max_attempts:
                    message = f"WorkerDied: the worker died {failure.max_attempts} times running this trial"
                    commit(_failed_result(config, message, slot, compute_on))
                else:
                    pending.appendleft(config)
                    bar.retry()
                slot.deaths += 1
                if slot.deaths >= failure.max_slot_deaths:
                    last_error = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                    continue  # give this device slot up
                slot.actor = _new_actor(slot, compute_on)
                slot.graphs.clear()
            except RayTaskError as exc:  # the trial code itself is guarded; this is serialization etc.
                first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
                commit(_failed_result(config, first, slot, compute_on))
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
