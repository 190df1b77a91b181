"""A gang: the rank actors of one data-parallel trial, formed once and kept as one slot of the pool
(docs/large-models.md).

N rank actors and MindSpore's scheduler role share one Ray placement group; MindSpore's dynamic-cluster
variables (``MS_ROLE``, ``MS_WORKER_NUM``, ``MS_SCHED_HOST``, ``MS_SCHED_PORT``, ``MS_NODE_ID``) reach
each through its ``runtime_env``, since ``communication.init()`` reads them once per process. To the
pool a gang is one actor (``GangActors``). A trial's answer is rank 0's once every rank answered and
their parameters agree; any rank's death ends the gang, because its peers would wait in a collective
forever; ampsweep's own stall bound reads each rank's progress while it trains (``StallClock``).
"""

from __future__ import annotations

import queue
import re
import socket
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field, replace
from typing import Any

from ampsweep.contracts import parse_loss_scale
from ampsweep.jobs import (
    LOCALIZING,
    DeviceSetup,
    RankAnswer,
    TrialConfig,
    TrialResult,
    TrialWorker,
    merge_ranks,
)

from ._actors import Completion, owned

#: how long a gang may take to form (its placement group placed, every rank joined) before it is lost
FORM_TIMEOUT_S = 600.0
#: after one rank's part of a trial failed, how long the other ranks may take to answer (``all_ranks``)
STRAGGLERS_S = 30.0
#: a rank behind its peers, and not moving, for this many of the gang's median steps has stalled ...
STALL_STEPS = 20
#: ... but never sooner than this (a spec's ``stall_timeout_s`` sets the bound itself)
MIN_STALL_S = 60.0
#: how often the driver reads a running gang's progress (``TrialWorker.progress``), and how long it waits
PROGRESS_EVERY_S, PROGRESS_TIMEOUT_S = 1.0, 2.0


class GangScheduler:
    """MindSpore's scheduler role of one gang: its ``communication.init()`` serves for the gang's life."""

    def serve(self) -> None:
        import mindspore as ms
        from mindspore import communication

        ms.set_device("CPU")
        communication.init()  # returns only when the cluster ends


def _scheduler_address() -> tuple[str, int]:
    """The node's address and a port free on it: where the gang's ranks find their scheduler."""
    import ray

    with socket.socket() as probe:
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    return ray.util.get_node_ip_address(), port


def bundle_of(options: dict[str, Any]) -> dict[str, float]:
    """The placement-group bundle one rank claims: the device its backend's options ask for."""
    bundle: dict[str, float] = {}
    if options.get("num_cpus"):
        bundle["CPU"] = float(options["num_cpus"])
    if options.get("num_gpus"):
        bundle["GPU"] = float(options["num_gpus"])
    bundle.update({name: float(amount) for name, amount in options.get("resources", {}).items()})
    return bundle


def rank_environment(size: int, rank: int, host: str, port: int, role: str = "MS_WORKER") -> dict[str, str]:
    """MindSpore's dynamic-cluster variables for one process of a gang.

    ``MS_TOPO_TIMEOUT`` (seconds, as ``msrun`` sets it): a process whose peers never join gives up in
    ``communication.init()`` instead of waiting forever, and its gang is formed again.
    """
    env = {
        "MS_ROLE": role,
        "MS_WORKER_NUM": str(size),
        "MS_SCHED_HOST": host,
        "MS_SCHED_PORT": str(port),
        "MS_TOPO_TIMEOUT": str(int(FORM_TIMEOUT_S)),
    }
    if role == "MS_WORKER":
        env["MS_NODE_ID"] = str(rank)
    return env


@dataclass(eq=False)
class Gang:
    """One formed (or forming) gang: its placement group, scheduler and rank actors."""

    index: int
    size: int
    group: Any = None
    scheduler: Any = None
    ranks: list[Any] = field(default_factory=list)
    #: the formation's outcome: the ranks' ``info``, or the exception it ended with
    formed: Future[Any] = field(default_factory=Future)
    killed: bool = False
    #: re-entrant: forming sends the calls that waited while it holds the lock
    lock: threading.RLock = field(default_factory=threading.RLock)
    #: calls sent before the ranks existed: sent as soon as they do
    waiting: list[tuple[Any, tuple[Any, ...]]] = field(default_factory=list)
    #: the combined answers of the calls its ranks are running (failed at once if its scheduler dies)
    pending: list[Future[Any]] = field(default_factory=list)
    #: trials sent to its ranks so far: the n-th is the ranks' ``progress`` call n
    trials_sent: int = 0
    #: set when the gang is ended; its progress watches (``watches``) stop, and ``kill`` waits for them,
    #: so none calls Ray after the pool has closed (a call racing ``ray.shutdown`` can crash the driver)
    ended: threading.Event = field(default_factory=threading.Event)
    watches: list[threading.Thread] = field(default_factory=list)


class GangActors:
    """The ``Actors`` of a pool whose trials each run on a gang of ``size`` rank actors."""

    def __init__(
        self, size: int, strategy: str = "STRICT_PACK", stall_timeout_s: float | None = None
    ) -> None:
        from ray.exceptions import RayActorError, RayTaskError

        self.size = size
        self.strategy = strategy
        #: the spec's bound on a stalled rank; None: ``STALL_STEPS`` of the gang's median step
        self.stall_timeout_s = stall_timeout_s
        self.completions: queue.SimpleQueue[Completion] = queue.SimpleQueue()
        self.actor_died: tuple[type[BaseException], ...] = (RayActorError, GangLost)
        self.call_failed: tuple[type[BaseException], ...] = (RayTaskError, RankCallFailed)
        #: the gang of each slot: a slot's new gang ends the one it replaces
        self._gangs: dict[int, Gang] = {}
        #: ``start`` (the pool's thread) and ``kill`` (a thread of its own) both change ``_gangs``
        self._table = threading.Lock()

    # forming ------------------------------------------------------------------------------------
    def start(self, index: int, setup: DeviceSetup, options: dict[str, Any]) -> Gang:
        gang = Gang(index, self.size)
        with self._table:
            old = self._gangs.pop(index, None)
            self._gangs[index] = gang
        if old is not None:
            self.kill(old)
        threading.Thread(target=self._form, args=(gang, setup, options), daemon=True).start()
        return gang

    def _form(self, gang: Gang, setup: DeviceSetup, options: dict[str, Any]) -> None:
        # MindSpore bounds the ranks' ``communication.init()`` (``MS_TOPO_TIMEOUT``); this bounds the rest
        # (the placement group, the scheduler's address, the ranks' answers), whatever holds them up
        timer = threading.Timer(FORM_TIMEOUT_S, lambda: _expire(gang.formed, self.size))
        timer.daemon = True
        timer.start()
        try:
            self._form_now(gang, setup, options)
        except BaseException as exc:  # noqa: BLE001 - the probe carries it to the pool
            lost = GangLost(f"the gang could not form: {type(exc).__name__}: {exc}".splitlines()[0])
            self._fail_waiting(gang, lost)
            if not gang.formed.done():
                gang.formed.set_exception(lost)  # the pool forms it again, or gives the slot up

    def _form_now(self, gang: Gang, setup: DeviceSetup, options: dict[str, Any]) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundle = bundle_of(options)
        with gang.lock:
            if gang.killed:
                return
            gang.group = placement_group([dict(bundle) for _ in range(self.size)], strategy=self.strategy)
        try:
            ray.get(gang.group.ready(), timeout=FORM_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            raise GangLost(
                f"its {self.size} devices were not free together ({self.strategy}) within {FORM_TIMEOUT_S:.0f} s"
            ) from None

        def in_bundle(rank: int) -> PlacementGroupSchedulingStrategy:
            return PlacementGroupSchedulingStrategy(
                placement_group=gang.group, placement_group_bundle_index=rank
            )

        host, port = ray.get(
            ray.remote(num_cpus=0)(_scheduler_address).options(scheduling_strategy=in_bundle(0)).remote(),
            timeout=FORM_TIMEOUT_S,
        )
        with gang.lock:
            if gang.killed:
                _remove(gang.group)  # ended while it formed: kill() found no group to remove yet
                return
            gang.scheduler = (
                ray.remote(GangScheduler)
                .options(
                    num_cpus=0,
                    max_restarts=0,
                    scheduling_strategy=in_bundle(0),
                    runtime_env={"env_vars": rank_environment(self.size, 0, host, port, role="MS_SCHED")},
                )
                .remote()
            )
            # its ``init()`` returns only when the cluster ends: an answer while the gang lives is its death
            gang.scheduler.serve.remote().future().add_done_callback(
                lambda done: self._scheduler_ended(gang, done)
            )
            for rank in range(self.size):
                # each rank pins its own core on CPU: the gang's ranks are its slot's n-th devices
                rank_setup = replace(
                    setup,
                    cpu_core=None if setup.cpu_core is None else gang.index * self.size + rank,
                )
                gang.ranks.append(
                    # ``progress`` answers from a group of its own while ``run_rank`` trains
                    ray.remote(concurrency_groups={PROGRESS_GROUP: 1})(TrialWorker)  # type: ignore[call-overload]
                    .options(
                        max_restarts=0,
                        scheduling_strategy=in_bundle(rank),
                        runtime_env={"env_vars": rank_environment(self.size, rank, host, port)},
                        **options,
                    )
                    .remote(gang.index, rank_setup)
                )
            # in the order the pool sent them, before any later call: a rank runs its calls in order
            waiting, gang.waiting = gang.waiting, []
            for key, args in waiting:
                self._send(gang, key, args)
        infos = all_ranks([rank.info.remote() for rank in gang.ranks])
        infos.add_done_callback(lambda done: _copy(done, gang.formed))

    def _scheduler_ended(self, gang: Gang, done: Future[Any]) -> None:
        """The gang's scheduler process ended while the gang lived: its trials fail over to a new gang."""
        if gang.killed:
            return
        error = done.exception()
        why = "ended" if error is None else f"died ({type(error).__name__})"
        lost = GangLost(f"the gang's MindSpore scheduler process {why}: its ranks can no longer communicate")
        with gang.lock:
            pending, gang.pending = gang.pending, []
        for combined in pending:
            if not combined.done():
                try:
                    combined.set_exception(lost)
                except InvalidStateError:
                    pass  # answered meanwhile
        threading.Thread(target=self.kill, args=(gang,), daemon=True).start()

    def probe(self, actor: Gang) -> Any:
        key = object()
        actor.formed.add_done_callback(lambda done: self.completions.put((key, done)))
        return key

    # calls --------------------------------------------------------------------------------------
    def run(self, actor: Gang, config: TrialConfig, workload_ref: str, hint: Any, start: Any) -> Any:
        return self._call(actor, ("run_rank", config, workload_ref, hint, start))

    def profile(self, actor: Gang, args: tuple[Any, ...]) -> Any:
        raise NotImplementedError("a gang's sweep is profiled by the driver (``drive_trials``)")

    def _call(self, gang: Gang, args: tuple[Any, ...]) -> Any:
        key = object()
        with gang.lock:
            if not gang.ranks and not gang.killed and not gang.formed.done():
                gang.waiting.append((key, args))
                return key
        self._send(gang, key, args)
        return key

    def _send(self, gang: Gang, key: Any, args: tuple[Any, ...]) -> None:
        if gang.killed or not gang.ranks:
            answer: Future[Any] = Future()
            answer.set_exception(GangLost("the gang was ended"))
            self.completions.put((key, answer))
            return
        method, *rest = args
        refs = [getattr(rank, method).remote(*rest) for rank in gang.ranks]
        combined = all_ranks(refs, failed=_part_failed)
        with gang.lock:
            gang.pending = [f for f in gang.pending if not f.done()] + [combined]
        combined.add_done_callback(lambda done: self.completions.put((key, self._answer(gang, done))))
        if method == "run_rank":
            with gang.lock:
                gang.trials_sent += 1
                call = gang.trials_sent
            watch = threading.Thread(target=self._watch_progress, args=(gang, combined, call), daemon=True)
            with gang.lock:
                gang.watches = [w for w in gang.watches if w.is_alive()] + [watch]
            watch.start()

    def _watch_progress(self, gang: Gang, combined: Future[Any], call: int) -> None:
        """Read the ranks' progress while trial call ``call`` runs; a rank that stalled ends it
        (``StallClock``) before the collective's own timeout would (CPU: about 30 s; HCCL: 1,836 s;
        NCCL: maybe never). A call queued behind another is judged only once a rank has begun it."""
        import ray

        session = ray.get_runtime_context().get_session_name()
        clock = StallClock(self.size, self.stall_timeout_s)
        while not combined.done() and not gang.ended.wait(PROGRESS_EVERY_S) and not gang.killed:
            if not ray.is_initialized() or ray.get_runtime_context().get_session_name() != session:
                return  # the cluster this call ran on is gone: its ranks with it
            try:
                asked = [
                    rank.progress.options(concurrency_group=PROGRESS_GROUP).remote() for rank in gang.ranks
                ]
                readings = ray.get(asked, timeout=PROGRESS_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - a rank that cannot answer has not moved
                readings = None
            if readings is not None and max(r[0] for r in readings) != call:
                continue  # still queued behind an earlier call (or already answered)
            stalled = clock.read(readings, time.monotonic())
            if stalled is not None and not combined.done():
                try:
                    combined.set_exception(stalled)
                except InvalidStateError:
                    pass  # answered meanwhile
                return

    def ended(self, actor: Gang) -> bool:
        """Whether the gang was ended (its ranks apart, a rank stalled): the pool forms its slot again now,
        so the trials queued behind the one that ended it never count an attempt."""
        return actor.killed

    def _answer(self, gang: Gang, done: Future[Any]) -> Future[Any]:
        """The trial's answer (``answer_of``); a gang whose ranks ended its trial apart is ended (on a
        thread: this runs on one of Ray's), and the calls after it find it ended."""
        answer, apart = answer_of(done)
        if apart:
            with gang.lock:
                gang.killed = True
            threading.Thread(target=self.kill, args=(gang,), daemon=True).start()
        return answer

    def _fail_waiting(self, gang: Gang, error: BaseException) -> None:
        with gang.lock:
            waiting, gang.waiting = gang.waiting, []
        for key, _ in waiting:
            answer: Future[Any] = Future()
            answer.set_exception(error)
            self.completions.put((key, answer))

    def kill(self, actor: Gang) -> None:
        """End the gang: its ranks, its scheduler and its placement group."""
        import ray

        with actor.lock:
            actor.killed = True
            watches = list(actor.watches)
        actor.ended.set()
        for watch in watches:
            if watch is not threading.current_thread():
                watch.join(PROGRESS_TIMEOUT_S + 1.0)
        for process in [*actor.ranks, actor.scheduler]:
            if process is not None:
                try:
                    ray.kill(process, no_restart=True)
                except Exception:  # noqa: BLE001, S110 - already gone
                    pass
        if actor.group is not None:
            _remove(actor.group)
        self._fail_waiting(actor, GangLost("the gang was ended"))
        if not actor.formed.done():  # its probe answers, as a killed single actor's does
            try:
                actor.formed.set_exception(GangLost("the gang was ended while it formed"))
            except InvalidStateError:
                pass  # it formed meanwhile
        with self._table:  # a newer gang of the slot keeps its entry
            if self._gangs.get(actor.index) is actor:
                del self._gangs[actor.index]


def _remove(group: Any) -> None:
    """Free a placement group's devices (its node may be gone already)."""
    from ray.util.placement_group import remove_placement_group

    try:
        remove_placement_group(group)
    except Exception:  # noqa: BLE001, S110 - its node may be gone
        pass


class GangLost(RuntimeError):
    """The gang a call was sent to ended (or never formed): its trial runs again on a new gang."""


def all_ranks(refs: list[Any], failed: Callable[[Any], bool] | None = None) -> Future[Any]:
    """Every rank's answer, in rank order; or the first exception (the other ranks may wait forever).

    ``failed``: an answer that says its rank's part failed. The other ranks then
    get ``STRAGGLERS_S`` to answer; after that the answers come back with None
    for the ranks still waiting (in a collective the failed rank never joined).
    """
    combined: Future[Any] = Future()
    answers: list[Any] = [None] * len(refs)
    left = [len(refs)]
    lock = threading.Lock()
    timer: list[threading.Timer] = []

    def one(rank: int, done: Future[Any]) -> None:
        with lock:
            if combined.done():
                return
            error = done.exception()
            if error is not None:
                combined.set_exception(_naming(error, rank, len(refs)))
                return
            answers[rank] = owned(done.result())  # off the object store (``owned``)
            left[0] -= 1
            if left[0] == 0:
                combined.set_result(answers)
            elif failed is not None and failed(answers[rank]) and not timer:
                timer.append(threading.Timer(STRAGGLERS_S, give_up))
                timer[0].daemon = True
                timer[0].start()

    def give_up() -> None:
        with lock:
            if not combined.done():
                combined.set_result(list(answers))

    for rank, ref in enumerate(refs):
        ref.future().add_done_callback(lambda done, rank=rank: one(rank, done))
    return combined


class RankCallFailed(RuntimeError):
    """A rank's call raised outside the trial (the trial itself is guarded): its trial fails, naming the rank."""


#: the Ray concurrency group in which a rank answers ``progress`` while it trains
PROGRESS_GROUP = "progress"


class StallClock:
    """Which rank of a gang stopped coming, from successive readings of the ranks' ``progress``.

    A rank is behind when its (call, phase, step) is before the furthest rank's; it has stalled when it
    stayed behind, without moving, for longer than the bound: ``stall_timeout_s``, else ``STALL_STEPS``
    times the gang's median step, at least ``MIN_STALL_S``. One rank a step behind is normal (a slower
    rank between its peer's step and its own); one that does not move while its peers wait is not.
    """

    def __init__(self, size: int, stall_timeout_s: float | None) -> None:
        self.size = size
        self.stall_timeout_s = stall_timeout_s
        self._seen: dict[int, tuple[int, int, int]] = {}
        self._since: dict[int, float] = {}
        self._step_s: list[float] = []
        self._last_read: float | None = None

    def bound_s(self) -> float:
        if self.stall_timeout_s is not None:
            return self.stall_timeout_s
        step_s = statistics.median(self._step_s) if self._step_s else 0.0
        return max(MIN_STALL_S, STALL_STEPS * step_s)

    def read(
        self, readings: list[tuple[int, int, int, float | None]] | None, now: float
    ) -> BaseException | None:
        """The exception that ends a stalled rank's call (None: none stalled), from one reading per rank
        (None: the ranks could not all answer, so nobody moved)."""
        if readings is not None:
            self._step_s = [r[3] for r in readings if r[3] is not None] or self._step_s
            lead = max(r[:3] for r in readings)
            for rank, reading in enumerate(readings):
                at = reading[:3]
                if at == lead:
                    self._since.pop(rank, None)
                elif self._seen.get(rank) != at or rank not in self._since:
                    self._since[rank] = now  # behind, but it moved: count from here
                self._seen[rank] = at
        for rank, since in sorted(self._since.items()):
            waited = now - since
            if waited > self.bound_s():
                call, phase, step = max(self._seen.values())
                return _stalled(rank, self.size, phase, step, waited)
        return None


def _stalled(rank: int, size: int, phase: int, step: int, waited: float) -> BaseException:
    """A stalled rank's error: in training its trial fails, naming it; in a localization the trial runs
    again (its training was not at fault, and its result is on the rank that waits)."""
    where = f"before step {step}" if step >= 0 else "before its first step"
    if phase == LOCALIZING:
        return GangLost(
            f"rank {rank} of {size} stalled in the localization replay {where} (its peers waited {waited:.0f} s)"
        )
    return RankCallFailed(f"rank {rank} of {size} stalled {where} (its peers waited {waited:.0f} s)")


def _naming(error: BaseException, rank: int, size: int) -> BaseException:
    """A rank's call that raised, as the pool reads it: a death stays a death (the trial runs again); any
    other exception fails the trial with a line that names the rank."""
    from ray.exceptions import RayTaskError

    if not isinstance(error, RayTaskError):
        return error
    text = str(error).strip()
    return RankCallFailed(
        f"rank {rank} of {size} failed outside its trial: {text.splitlines()[-1] if text else type(error).__name__}"
    )


def _expire(formed: Future[Any], size: int) -> None:
    """A gang whose ranks have not all joined in ``FORM_TIMEOUT_S`` is lost (the pool forms it again)."""
    try:
        formed.set_exception(GangLost(f"its {size} ranks did not all join within {FORM_TIMEOUT_S:.0f} s"))
    except InvalidStateError:
        pass  # formed (or ended) in time


def _copy(source: Future[Any], target: Future[Any]) -> None:
    error = source.exception()
    try:
        if error is not None:
            target.set_exception(error)
        else:
            target.set_result(source.result())
    except InvalidStateError:
        pass  # answered already: the gang was ended while it formed


def differing_ranks(checksums: list[str]) -> str | None:
    """The reason a trial failed when its ranks ended with different parameters, else None."""
    if len(set(checksums)) <= 1:
        return None
    apart = [rank for rank, value in enumerate(checksums) if value != checksums[0]]
    return (
        f"RanksDiverged: the ranks ended with different parameters (rank 0 {checksums[0]}, "
        f"rank {apart[0]} {checksums[apart[0]]}): the data-parallel ranks trained apart"
    )


def answer_of(done: Future[Any]) -> tuple[Future[Any], bool]:
    """What the pool reads for a trial from its ranks' combined answers (``all_ranks``), and whether its
    gang must be ended before the next trial (``trial_answer``).

    Any exception from a rank's call (its actor died, its method raised outside the trial) ends the
    gang too: the other ranks may still wait in a collective that rank will never join.
    """
    answer: Future[Any] = Future()
    try:
        result, apart = trial_answer(done.result())
    except BaseException as exc:  # noqa: BLE001 - the pool reads it off the future
        answer.set_exception(exc)
        return answer, True
    answer.set_result(result)
    return answer, apart


#: what a rank's error says when its collective gave up waiting (MindSpore's CPU kernels, HCCL, NCCL)
_COLLECTIVE = re.compile(
    r"AllReduce|AllGather|Broadcast|ReduceScatter|HCCL|NCCL|MCCL|collective", re.IGNORECASE
)


def _part_failed(answer: RankAnswer) -> bool:
    """A rank's answer after which its peers may never answer: its part failed, or it left them apart."""
    return answer.apart or (answer.result is not None and bool(answer.result.error))


def trial_answer(answers: list[RankAnswer | None]) -> tuple[TrialResult, bool]:
    """A trial's result from its ranks' answers (None: a rank that never answered), and whether its
    ranks ended it apart, so that the gang must be formed again.

    The result is rank 0's, failed when another rank's part failed or the ranks
    ended with different parameters. Ranks that all failed at the same step ran
    the same collectives and stay in step; one that failed while another went on
    (or waits for it) leaves the next trial's collectives paired with this one's.
    Its anomalies are the ranks' findings merged: the Cell that broke first, on
    the rank whose part it broke on.
    """
    failed = [
        (rank, a.result)
        for rank, a in enumerate(answers)
        if a is not None and a.result is not None and a.result.error
    ]
    if failed:
        apart = len(failed) < len(answers) or len({result.steps_run for _, result in failed}) > 1
        rank, first = failed[0]
        silent = [r for r, a in enumerate(answers) if a is None]
        if silent and _COLLECTIVE.search(first.error or ""):  # a rank gave up waiting for one that never came
            where = "" if first.failed_step is None else f" before step {first.failed_step}"
            reason = (
                f"rank {silent[0]} of {len(answers)} stalled{where}: rank {rank} waited for it in a collective "
                f"until that gave up ({first.error})"
            )
        elif rank == 0:
            return first, apart
        else:
            reason = f"rank {rank} of {len(answers)} failed: {first.error}"
        return TrialResult.failure(first.config, reason, first.placement, wall_s=first.wall_s), apart
    result = next((a.result for a in answers if a is not None and a.result is not None), None)
    if result is None:
        raise GangLost("no rank returned the trial's result")
    apart = any(a is None or a.apart for a in answers)  # a rank left its peers in a localization replay
    checksums = [a.checksum for a in answers if a is not None]
    apart_reason = differing_ranks(checksums) if all(checksums) else None
    if apart_reason is not None:
        return TrialResult.failure(result.config, apart_reason, result.placement, wall_s=result.wall_s), apart
    dynamic = parse_loss_scale(result.config.loss_scale).kind == "dynamic"
    found = merge_ranks([a.anomalies for a in answers if a is not None], dynamic)
    return replace(result, anomalies=found), apart


__all__ = [
    "Gang",
    "GangActors",
    "GangLost",
    "GangScheduler",
    "all_ranks",
    "answer_of",
    "bundle_of",
    "rank_environment",
    "trial_answer",
]
