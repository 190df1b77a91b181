"""One pool of workers for a whole sweep: the grid, the horizon rounds, the adaptive rounds, the profile.

Opened once per sweep (``Sweep.run``), so a later round finds its actors with MindSpore imported and
their graphs compiled (about 4 s of start-up and a compile per graph each round, on the horizon
benchmark). What it owns and what the ``Dispatcher`` decides: ``docs/internals.md`` ("Scheduling"). A
``Slot`` is one actor on one device, or a gang of rank actors whose ``actor`` is the gang's handle
(``GangActors``); the loop, the attempts and the dispatcher are the same for both.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from ampsweep.jobs import Placement, TrialConfig, TrialResult

from .._config import FailurePolicy, RunConfig
from .._errors import ClusterLost, Interrupted, SpecError, warn
from ..devices import DeviceBackend, device_setup, discover
from ..scheduling._reruns import Reruns
from ..scheduling._slot import Slot
from ._actors import Actors, ClusterWatch, RayActors

if TYPE_CHECKING:
    from ..scheduling._dispatch import Dispatcher

#: Seconds without any live actor after which the sweep gives up waiting for one to start.
NO_ACTOR_TIMEOUT_S = 300.0
#: How long the loop waits for a finished call before it checks the cluster and Ctrl-C again.
_TICK_S = 1.0


class WorkerPool:
    """The actors of one sweep, kept across its runs; ``run(work, heartbeat)`` is the completion loop; leaving
    it as a context manager kills the actors. ``backends``: one slot each (default: discovered on first use);
    ``actors`` and ``watch`` replace Ray's actors and the cluster watch (an in-process stand-in)."""

    _work: Dispatcher  # the run in progress (``run``)

    def __init__(
        self,
        config: RunConfig,
        devices: str | list[str] = "auto",
        *,
        backends: Sequence[DeviceBackend] = (),
        actors: Actors | None = None,
        watch: Any = None,
        depth: int = 2,
    ) -> None:
        self.config = config
        self.devices = devices
        self.failure = config.failure or FailurePolicy()
        #: trials an actor holds at once: it starts the next one without a round trip to the driver
        self.depth = depth
        self.slots = [Slot(backend, index) for index, backend in enumerate(backends)]
        self.actors: Actors = actors if actors is not None else RayActors()
        self.watch = watch  # found in ``open`` (it needs Ray): ``ClusterWatch``
        #: the workload reference as the workers see it (``ship_workload``), once Ray is started
        self.workload_ref: str | None = None
        #: readiness probe of a new actor -> its slot and that actor (a later replacement has another)
        self.probes: dict[Any, tuple[Slot, Any]] = {}
        #: call -> its slot, the actor it went to, its trial (None: the profile)
        self.in_flight: dict[Any, tuple[Slot, Any, TrialConfig | None]] = {}
        #: trial id -> workers it ran on in this run (a run counts its own)
        self.attempts: dict[str, int] = {}
        #: trials whose NaN an exact replay did not reproduce: run once more, on another device
        self.reruns = Reruns()
        #: the spec's ``avoid_devices``; an actor found on one is held idle (``_held``) so none lands there
        self.avoid: set[str] = set()
        self._held: list[tuple[str, Any]] = []  # (its device, the actor)
        self.last_error = ""
        self._heartbeat: Callable[[list[str]], None] = lambda running: None
        self._profile: Callable[[], tuple[Any, ...] | None] | None = None
        self._profile_answer: Any = None  # the profile's answer, or the exception it ended with
        self._live = 0  # slots with an actor that is not given up
        #: calls that were running on an actor when it died (the others behind it never started)
        self._lost: set[Any] = set()
        #: ready actors left idle while trials wait for the actors that compiled their graphs
        self._idle: dict[int, Slot] = {}
        self._last_live = time.monotonic()
        self._next_beat = 0.0
        #: devices of each trial: above 1, each slot is a gang of that many rank actors (``_gang``)
        self.gang_size = 1
        self.placement_strategy = "STRICT_PACK"

    def use_gangs(
        self, size: int, strategy: str = "STRICT_PACK", stall_timeout_s: float | None = None
    ) -> None:
        """Run every trial on a gang of ``size`` rank actors (data parallel), before ``open``."""
        if size <= 1 or self.gang_size == size:
            return
        from ._gang import GangActors

        self.gang_size, self.placement_strategy = size, strategy
        if isinstance(self.actors, RayActors):  # a stand-in (benchmarks, tests) stays as it is
            self.actors = GangActors(size, strategy, stall_timeout_s)

    # the cluster --------------------------------------------------------------------------------
    def open(self) -> None:
        """Find the devices once (Ray is started): a device kind the cluster lacks is a usage error."""
        self.watch = self.watch or ClusterWatch.of_this_driver()
        if self.slots:
            return
        import ray

        layout = discover(self.config.devices or self.devices, ray.cluster_resources(), self.config.workers)
        if self.gang_size > 1:
            nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
            layout = gang_layout(layout, nodes, self.gang_size, self.placement_strategy)
        backends = [backend for backend, count in layout for _ in range(count)]
        self.slots = [Slot(backend, index) for index, backend in enumerate(backends)]

    def exact_reruns(self) -> bool:
        """Whether rerunning a trial on these devices gives the same bits (what a copy assumes)."""
        run = self.config
        return run.deterministic or all((run.compute_on or s.backend.kind) == "cpu" for s in self.slots)

    def close(self, kill: bool = True) -> None:
        """Let the actors go; ``kill``: end them now (not after a lost cluster, which may not answer)."""
        for slot in self.slots:
            if kill and slot.actor is not None and not slot.gone:
                self.actors.kill(slot.actor)
            slot.actor, slot.ready, slot.gone = None, False, True
        for _, actor in self._held if kill else ():
            self.actors.kill(actor)
        self._held.clear()
        self.probes.clear()
        self.in_flight.clear()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: Any) -> None:
        # a lost cluster may not answer a kill; anything else (a broken workload, Ctrl-C) ends the actors
        # and frees their placement groups, or a later sweep in this process could never place its gangs
        self.close(kill=kind is None or not issubclass(kind, ClusterLost))

    # the loop -----------------------------------------------------------------------------------
    def run(
        self,
        work: Dispatcher,
        heartbeat: Callable[[list[str]], None],
        profile: Callable[[], tuple[Any, ...] | None] | None = None,
    ) -> Any:
        """Run ``work`` to its end; ``heartbeat`` gets the running trials' ids once a second. ``profile``: the
        arguments of ``TrialWorker.profile``, asked for once nothing is left to hand out, for the first actor
        left idle; returns its answer, the exception it ended with, or None when it did not run."""
        self.open()
        self._work, self._heartbeat, self._profile = work, heartbeat, profile
        self._profile_answer = None
        self.attempts = {}
        self._idle.clear()
        self._last_live, self._next_beat = time.monotonic(), 0.0
        work.attach(self.slots)
        wanted = work.left()
        for slot in self.slots:
            if slot.gone:
                continue
            if slot.actor is None:
                if self._live >= wanted:
                    continue  # no more actors than trials
                self._start_actor(slot)
            self._dispatch(slot, before_ready=not slot.ready and not self.avoid)
        try:
            while self._work_left():
                problem = self.watch.problem()
                if problem:
                    raise ClusterLost(problem, work.committed, work.left())
                self._beat()
                try:
                    call, answer = self.actors.completions.get(timeout=_TICK_S)
                except queue.Empty:
                    self._check_no_actor()
                    continue
                if call in self.probes:
                    self._probe_answered(call, answer)
                elif call in self.in_flight:
                    self._call_answered(call, answer)
        except KeyboardInterrupt:
            raise Interrupted("interrupted", work.committed, work.left()) from None
        work.close()
        return self._profile_answer

    def _work_left(self) -> bool:
        """An answer is awaited; else an actor left idle with trials in line is asked once more
        (it is otherwise asked only once a second, after the loop would have ended)."""
        if self.in_flight or (self._work.waiting() and self.probes):
            return True
        if self._idle and not self._work.drained():
            self._wake(idle_only=True)
            return bool(self.in_flight)
        return False

    def _beat(self) -> None:
        """The heartbeat, at most once a second (it costs O(devices))."""
        now = time.monotonic()
        if now < self._next_beat:
            return
        self._next_beat = now + _TICK_S
        self._wake(idle_only=True)
        running = (self.in_flight.get(slot.calls[0]) for slot in self.slots if slot.calls)
        self._heartbeat([held[2].trial_id for held in running if held is not None and held[2] is not None])

    def _wake(self, idle_only: bool) -> None:
        """Ask again the idle actors (once a second, when a trial comes back), or every actor (a
        snapshot released its trials). Not on every answer: that would cost O(devices) each."""
        for slot in list(self._idle.values()) if idle_only else self.slots:
            self._dispatch(slot)

    # actors -------------------------------------------------------------------------------------
    def _setup(self, slot: Slot) -> Any:
        run = self.config
        return device_setup(slot.backend, slot.index, run.compute_on, run.deterministic)

    def prestart(self, count: int) -> None:
        """Ask for the first ``count`` actors before there is work (``run`` hands them theirs): the CLI
        checks the workload while they start (``checked_while_actors_start``)."""
        if count <= 0:
            return  # nothing opened: a gang's pool is shaped by ``use_gangs`` first
        self.open()
        for slot in self.slots[:count]:
            if slot.actor is None and not slot.gone:
                self._request_actor(slot)

    def _request_actor(self, slot: Slot) -> None:
        if slot.actor is None:
            self._live += 1
        slot.actor = self.actors.start(slot.index, self._setup(slot), slot.backend.actor_options())
        slot.ready = False
        self.probes[self.actors.probe(slot.actor)] = (slot, slot.actor)

    def _start_actor(self, slot: Slot) -> None:
        self._request_actor(slot)
        self._work.dropped(slot)

    def _give_up(self, slot: Slot) -> None:
        if slot.gone:
            return
        slot.gone = True
        self._live -= 1
        self._work.dropped(slot)
        if slot.actor is not None:
            self.actors.kill(slot.actor)

    def _probe_answered(self, call: Any, answer: Future[Any]) -> None:
        slot, actor = self.probes.pop(call)
        if actor is not slot.actor:
            return  # the probe of an actor already replaced
        try:
            where = avoided(answer.result(), self.avoid)
        except (*self.actors.actor_died, *self.actors.call_failed) as exc:
            if not slot.calls:  # else its trial's failure replaces the actor
                self._actor_died(slot, exc)
            return
        if where is not None:
            self._avoided(slot, where)
            return
        slot.ready = True
        self._last_live = time.monotonic()
        self._dispatch(slot)

    def _avoided(self, slot: Slot, where: str) -> None:
        """``slot``'s actor is on an avoided device: the slot is given up, a slot not started yet starts."""
        if where not in dict(self._held):  # once per device (a node's CPU workers share one)
            warn(f"device {where} is in avoid_devices: its workers are held idle, no trial runs there")
        self._held.append((where, slot.actor))
        slot.actor = None
        self._give_up(slot)
        spare = next((s for s in self.slots if s.actor is None and not s.gone), None)
        if spare is not None:
            self._start_actor(spare)
        elif self._live == 0:
            raise SpecError(
                "avoid_devices",
                sorted(self.avoid),
                "it leaves no device to run on: every worker was on one of them",
            )

    def _actor_died(self, slot: Slot, exc: BaseException, running_left: bool = False) -> None:
        """``running_left``: the failure that told us came from a queued call, so the oldest
        call still listed is the one the actor was running (it counts as an attempt)."""
        slot.deaths += 1
        slot.ready = False
        if running_left and slot.calls:
            self._lost.add(slot.calls[0])
        slot.calls.clear()  # the dead actor's other calls fail too; they are requeued then
        if slot.deaths >= self.failure.max_slot_deaths:
            text = str(exc).strip()
            self.last_error = text.splitlines()[0] if text else repr(exc)
            self._give_up(slot)
            return
        self._start_actor(slot)

    def _check_no_actor(self) -> None:
        if self.in_flight or any(s.ready and not s.gone for s in self.slots):
            self._last_live = time.monotonic()
            return
        if time.monotonic() - self._last_live > NO_ACTOR_TIMEOUT_S:
            for slot, _ in list(self.probes.values()):
                self._give_up(slot)
            self.probes.clear()

    # calls --------------------------------------------------------------------------------------
    def _dispatch(self, slot: Slot, before_ready: bool = False) -> None:
        """Give ``slot`` trials until it holds ``depth``; one while the line is short (fewer than ``depth``
        per slot): with 4 ResNet trials on 2 actors, the first to finish once queued both remaining trials
        while the second idled for 100 s. ``before_ready``: one queued behind a first actor's start."""
        if slot.gone or not (slot.ready or before_ready):
            return
        work = self._work
        short = work.waiting() < self.depth * self._live
        depth = 1 if before_ready or short else self.depth
        while len(slot.calls) < depth:
            taken = work.take(slot, idle=slot.ready and not slot.calls)
            if taken is None:
                break
            config, hint, start = taken
            if self.reruns.avoids(config.trial_id, slot.index) and self._live > 1:
                work.queue.untake()  # where its first run broke: another device takes it when free
                break
            self.attempts[config.trial_id] = self.attempts.get(config.trial_id, 0) + 1
            call = self.actors.run(slot.actor, config, work.workload_ref, hint, start)
            self._sent(slot, call, config)
            work.sent(config, call, slot)
        if slot.ready and not slot.calls and work.drained() and self._profile is not None:
            args, self._profile = self._profile(), None
            if args is not None:
                self._sent(slot, self.actors.profile(slot.actor, args), None)
        if slot.ready and not slot.calls and not work.drained():
            self._idle[slot.index] = slot  # asked again when an answer changes the line
        else:
            self._idle.pop(slot.index, None)

    def _sent(self, slot: Slot, call: Any, config: TrialConfig | None) -> None:
        self.in_flight[call] = (slot, slot.actor, config)
        slot.calls.append(call)

    def _answered(self, slot: Slot, call: Any) -> bool:
        """``call`` is no longer in flight on ``slot``; whether its actor had started it."""
        started = slot.runs(call) or call in self._lost
        self._lost.discard(call)
        if call in slot.calls:
            slot.calls.remove(call)
        return started

    def _failed(self, config: TrialConfig, slot: Slot, error: str) -> TrialResult:
        setup = self._setup(slot)
        where = Placement(setup.device_kind, setup.mindspore_target, worker_index=slot.index)
        return TrialResult.failure(config, error, where)

    def _call_answered(self, call: Any, answer: Future[Any]) -> None:
        slot, actor, config = self.in_flight.pop(call)
        started = self._answered(slot, call)
        if config is None:  # the profile: it is extra, so its failure is reported, not raised
            error = answer.exception()
            self._profile_answer = error if error is not None else answer.result()
            if isinstance(error, self.actors.actor_died) and actor is slot.actor:
                self._actor_died(slot, error)
            self._dispatch(slot)
            return
        self._work.answered(config, call)
        try:
            result = answer.result()
        except self.actors.actor_died as exc:
            self._worker_died(slot, actor, config, started, exc)
            return
        except self.actors.call_failed as exc:  # the trial code is guarded; this is serialization etc.
            text = str(exc).strip()
            result = self._failed(config, slot, text.splitlines()[-1] if text else type(exc).__name__)
        else:
            slot.deaths = 0
            if self.reruns.wanted(result, slot.index):
                self._work.requeue(config)
                self._wake(idle_only=True)
                self._dispatch(slot)
                return
        if actor is slot.actor and self.actors.ended(actor):  # e.g. a gang whose rank stalled: form it again
            self._actor_died(slot, RuntimeError(result.error or "its ranks came apart"))
        # the next trial first, the Parquet commit after: the actor trains while the driver writes
        self._work.learn(config, result)
        self._last_live = time.monotonic()
        self._dispatch(slot)
        self._finished(result)

    def _finished(self, result: TrialResult) -> None:
        wake = self._work.finish(result, self.attempts.get(result.trial_id, 1))
        if wake:
            self._wake(idle_only=wake == "idle")

    def _worker_died(
        self, slot: Slot, actor: Any, config: TrialConfig, started: bool, exc: BaseException
    ) -> None:
        """The trial runs again (the running one counts an attempt), or is ``failed`` after ``max_attempts``."""
        if not started:
            self.attempts[config.trial_id] -= 1  # queued behind the lost trial: it never started
        limit = self.failure.max_attempts
        if self.attempts[config.trial_id] >= limit:
            self._finished(
                self._failed(config, slot, f"WorkerDied: the worker died {limit} times running this trial")
            )
        else:
            self._work.requeue(config)
        if actor is slot.actor:  # the first of its calls to fail replaces it; the rest only requeue
            self._actor_died(slot, exc, running_left=not started)
        self._wake(idle_only=True)  # the trial is back in line, and its graph may have lost a holder


def avoided(info: Any, avoid: set[str]) -> str | None:
    """The first device of ``info`` (``TrialWorker.info()``, a list of them for a gang) in ``avoid``."""
    infos = info if isinstance(info, list) else [info]
    places = [f"{i.get('node', '')}:{i.get('device_id', '')}" for i in infos] if avoid else []
    return next((place for place in places if place in avoid), None)


def gang_layout(
    layout: list[tuple[DeviceBackend, int]], nodes: list[dict[str, float]], size: int, strategy: str
) -> list[tuple[DeviceBackend, int]]:
    """How many gangs of ``size`` devices each backend holds: per node under ``STRICT_PACK`` (an NPU ring does
    not span nodes). A cluster with room for none is a usage error before anything runs."""
    gangs = []
    for backend, count in layout:
        per_node = [backend.available(resources) for resources in nodes] or [count]
        held = sum(n // size for n in per_node) if strategy == "STRICT_PACK" else sum(per_node) // size
        held = min(held, count // size)
        if held == 0:
            where = (
                f"the most on one node is {max(per_node)}" if strategy == "STRICT_PACK" else f"it has {count}"
            )
            raise SpecError(
                "devices_per_trial",
                size,
                f"the Ray cluster has no room for a gang of {size} {backend.kind} devices ({where}, "
                f"placement_strategy {strategy})",
            )
        gangs.append((backend, held))
    return gangs
