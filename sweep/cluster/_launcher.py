"""Running a sweep on Ray: join or start the cluster, take the folder, dispatch, commit. Only the driver
writes files; an actor that dies mid-trial loses only that attempt (``_pool``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ampsweep.contracts import PLAN_FILE, SPEC_FILE, encode_plan, parse_reference
from ampsweep.jobs import Outcome, TrialConfig, TrialResult

from .._config import RunConfig
from .._errors import SpecError, warn
from .._result import SweepResult
from ..planning._plan import SweepPlan
from ..planning._resume import check_same_sweep
from ..scheduling._dispatch import Dispatcher
from ..scheduling._prefix import Forks
from ..scheduling._progress import SweepProgress
from ..store._lock import DriverLock
from ..store._store import SweepStore
from ._pool import WorkerPool
from ._ray_start import start_ray


def cluster_address(address: str | None) -> str | None:
    """The cluster to join: ``--address``, else the one a ``ray job submit`` driver runs in."""
    return address or os.environ.get("RAY_ADDRESS") or None


def ship_workload(workload_ref: str, address: str | None) -> tuple[str, dict[str, Any] | None]:
    """How workers on other machines find a workload file: a reference and a runtime_env (under ``ray job
    submit`` the job's working_dir travels already; with ``--address`` the file's folder is sent)."""
    reference = parse_reference(workload_ref)
    if address is None or not reference.is_file:
        return workload_ref, None
    path = os.path.abspath(reference.module)
    if "working_dir" in os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR", ""):  # under ``ray job submit``
        cwd = os.getcwd()
        if os.path.commonpath([cwd, path]) == cwd:
            return str(reference.with_module(os.path.relpath(path, cwd))), None
        return workload_ref, None
    return str(reference.with_module(os.path.basename(path))), {"working_dir": os.path.dirname(path)}


def gang_of(plan: SweepPlan) -> tuple[int, str, float | None]:
    """The devices each trial of ``plan`` runs on, how its gang is placed and its stall bound (the spec's
    ``devices_per_trial``, ``placement_strategy`` and ``stall_timeout_s``, kept on the plan)."""
    sizes = sorted(
        {plan.devices_per_trial}
        | {trial.devices for trial in plan.trials}
        | {p.devices for p in plan.prefixes}
    )
    if len(sizes) > 1:  # a gang runs trials of its own size only
        raise SpecError(
            "devices_per_trial",
            sizes[-1],
            f"every run of a sweep trains on the same number of devices, and this plan mixes "
            f"{' and '.join(map(str, sizes))}",
        )
    return sizes[0], plan.placement_strategy, plan.stall_timeout_s


def run_sweep(
    plan: SweepPlan,
    resolved_yaml: str,
    out: str,
    run: RunConfig,
    snapshots: str | None = None,
    pool: WorkerPool | None = None,
) -> SweepResult:
    """Run every trial of ``plan`` that ``out`` does not already hold, on ``pool`` (the sweep's workers,
    kept across its rounds; without one, a pool of this run's own). The folder is checked before Ray
    starts; the resolved spec and the plan are written before any trial."""
    if pool is None:
        with WorkerPool(run, plan.devices) as own:
            return run_sweep(plan, resolved_yaml, out, run, snapshots, own)
    import ray

    store = SweepStore(out, plan.name, snapshots)
    check_same_sweep(store, resolved_yaml)
    lock = DriverLock(store)
    lock.check()
    done = store.committed()
    for trial_id, problem in sorted(store.unreadable(done).items()):
        warn(f"trial {trial_id}: {problem}; it runs again")
        done.discard(trial_id)
    pending = [t for t in plan.trials if t.trial_id not in done]
    result = SweepResult(root=store.root, total=len(plan), skipped=len(plan) - len(pending), ran=0)

    def write_plan() -> None:
        store.write_text(SPEC_FILE, resolved_yaml)
        store.write_text(PLAN_FILE, encode_plan(plan.name, plan.entries()))

    if not pending:
        write_plan()
        return result

    address = cluster_address(run.address)
    if not ray.is_initialized():
        # a caller that started Ray itself decided the runtime_env already
        pool.workload_ref, shipped = ship_workload(plan.workload_ref, address)
        start_ray(address, run.workers, {**(run.runtime_env or {}), **(shipped or {})} or None)
    pool.use_gangs(*gang_of(plan))
    pool.open()  # before anything is written: a device kind the cluster lacks is a usage error
    lock.acquire()
    try:
        write_plan()
        workload_ref = pool.workload_ref or plan.workload_ref
        dispatcher = drive_trials(plan, workload_ref, store, pending, pool, run, result, lock.beat)
    finally:
        lock.release()
    if dispatcher.pending:
        raise RuntimeError(
            f"every worker died repeatedly; {len(dispatcher.pending)} trials were not run "
            f"(last error: {pool.last_error})"
        )
    return result


def drive_trials(
    plan: SweepPlan,
    workload_ref: str,
    store: SweepStore,
    pending: list[TrialConfig],
    pool: WorkerPool,
    run: RunConfig,
    result: SweepResult,
    heartbeat: Callable[[list[str]], None],
) -> Dispatcher:
    """Run ``pending`` on ``pool``, commit each finished trial into ``store``; with ``run.profile``, the
    FP32 profile too. Nothing here needs a cluster: ``bench_launcher`` runs it on in-process stand-ins."""
    copies = plan.copy_map(pending, pool.exact_reruns())
    forks = Forks(plan, pending, store) if any(t.start_from for t in pending) else None
    if forks is not None and forks.runs:
        print(
            f"ampsweep: {len(forks.runs)} FP32 prefix runs of {forks.runs[0].steps:,} steps (one per seed); "
            "each seed's trials start as soon as its snapshot is saved",
            flush=True,
        )

    def commit(trial: TrialResult, attempts: int) -> None:
        store.commit(trial, equivalent_to=plan.equivalent_to.get(trial.trial_id), attempts=attempts)
        outcome = Outcome(trial.outcome).value
        result.outcomes[outcome] = result.outcomes.get(outcome, 0) + 1
        result.ran += 1
        result.copied += int(attempts == 0)

    done = len(plan) - len(pending)
    finished = {t.trial_id for t in plan.trials} - {t.trial_id for t in pending}
    with SweepProgress(len(plan), done, run.progress) as bar:
        baselines, train = store.baselines(plan.trials, finished), copies.to_train(pending)
        dispatcher = Dispatcher(
            train, workload_ref, copies, commit, bar, done, baselines, forks, not run.keep_going
        )

        def beat(running: list[str]) -> None:
            heartbeat(running)
            bar.set_running(len(running))

        # not on a gang: the profile is a single-device run, and one rank alone would wait in the step's
        # collectives for ranks that never join it; the driver (the CLI) profiles then
        profile = _profile_args(plan, workload_ref, forks) if run.profile and pool.gang_size == 1 else None
        answer = pool.run(dispatcher, beat, profile)
    if isinstance(answer, BaseException):
        text = str(answer).strip()
        result.profile_error = f"{type(answer).__name__}: {text.splitlines()[-1] if text else ''}"
    elif answer is not None:
        result.profile = answer
    return dispatcher


def _profile_args(
    plan: SweepPlan, workload_ref: str, forks: Forks | None
) -> Callable[[], tuple[Any, ...] | None]:
    """The FP32 profile of the first seed from where its trials start; None when that start is not at
    hand (a snapshot no pending trial used): the CLI profiles in the driver instead."""
    first = plan.trials[0]

    def args() -> tuple[Any, ...] | None:
        start = forks.refs.get(first.start_from) if forks is not None and first.start_from else None
        if first.start_from and start is None:
            return None
        return (workload_ref, first.seed, first.steps, dict(first.workload_args), first.start_step, start)

    return args
