"""Routing trials to device actors one at a time, and surviving what a long run meets.

Trials are handed out as actors free up (not pre-split): no device idles while
trials remain, a slow trial holds back nobody, and an actor holds the trial it
runs plus the next (``depth``). The dispatcher only routes; each decision has
a part of its own: ``TrialQueue`` picks the next trial (own graphs first),
``Copies`` makes the plan's copies and releases held trials, ``FailFastGate``
holds the first results until they show whether the workload is broken,
``Forks`` releases a seed's trials once its snapshot exists and ``Baselines``
gives each trial its FP32 reference. Handled here: a new actor first answers a
probe (one that never starts holds no trial), a worker killed mid-trial (the
trial runs again, counted in ``attempts``), a trial that kills ``max_attempts``
workers (``failed``), a lost cluster (``ClusterLost``), Ctrl-C (``Interrupted``).
Every result, copies included, is committed through one path (``_record``).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ampsweep.contracts import FP32_LEVEL
from ampsweep.jobs import Hint, Outcome, Placement, TrialConfig, TrialResult

from .._config import FailurePolicy
from .._errors import ClusterLost, Interrupted
from ..cluster._actors import Actors, RayActors
from ..cluster._health import ClusterWatch
from ..devices import device_setup
from ..planning._copies import CopyMap
from ._baselines import Baselines
from ._copies import Copies
from ._fail_fast import FailFastGate
from ._prefix import Forks
from ._progress import SweepProgress
from ._queue import TrialQueue
from ._slot import Slot

#: Seconds without any live actor after which the sweep gives up waiting for one to start.
NO_ACTOR_TIMEOUT_S = 300.0
#: How long the loop waits for a finished call before it checks the cluster and Ctrl-C again.
_TICK_S = 1.0


@dataclass
class DispatchOptions:
    workload_ref: str
    compute_on: str | None
    failure: FailurePolicy
    fail_fast: bool = True
    #: trials an actor holds at once: it starts the next one without a round trip to the driver
    depth: int = 2
    #: the plan's copies of the pending trials (``SweepPlan.copy_map``)
    copies: CopyMap = field(default_factory=CopyMap)
    #: on a GPU or NPU, workers set MindSpore's deterministic mode (``RunConfig.deterministic``)
    deterministic: bool = True


class Dispatcher:
    """Runs ``pending`` on ``slots``; ``commit`` writes one finished trial (a copy: attempts 0).
    The driver's work per trial does not grow with the cluster: a
    finished call arrives on ``actors.completions`` (no wait over all calls), the next trial
    comes from ``TrialQueue`` (no scan), and the lock's heartbeat is written once a second.
    """

    def __init__(
        self,
        slots: list[Slot],
        pending: list[TrialConfig],
        options: DispatchOptions,
        commit: Callable[[TrialResult, int], None],
        bar: SweepProgress,
        heartbeat: Callable[[list[str]], None],
        committed_before: int,
        baselines: Baselines,
        forks: Forks | None = None,
        actors: Actors | None = None,
    ) -> None:
        self.baselines = baselines
        self.slots = slots
        #: a forked sweep's snapshots; its prefix runs go ahead of every trial
        self.forks = forks
        self.queue = TrialQueue(
            [*(forks.runs if forks else []), *pending],
            forks.refs if forks else (),
            options.copies.confirm_last,
        )
        self.options = options
        self.copies = Copies(options.copies)
        #: copies made from a result the gate still holds: committed right after it
        self._copies_of: dict[str, list[TrialResult]] = {}
        self.actors: Actors = actors if actors is not None else RayActors()  # type: ignore[assignment]
        self._commit = commit
        self.bar = bar
        self.heartbeat = heartbeat
        self.attempts: dict[str, int] = {}
        #: call -> the slot, the actor it went to, its trial
        self.in_flight: dict[Any, tuple[Slot, Any, TrialConfig]] = {}
        #: readiness probe of a new actor -> its slot and that actor (a later replacement has another)
        self.probes: dict[Any, tuple[Slot, Any]] = {}
        self.committed = committed_before
        self.gate = FailFastGate(options.fail_fast)
        self._last_live = time.monotonic()
        self._next_beat = 0.0
        self._running = 0  # slots with at least one call
        #: calls that were running on an actor when it died (the others behind it never started)
        self._lost: set[Any] = set()
        #: ready actors left idle while trials wait for the actors that compiled their graphs
        self._idle: dict[int, Slot] = {}
        self.last_error = ""

    @property
    def pending(self) -> list[TrialConfig]:
        """The trials not handed out yet, in line order."""
        return self.queue.remaining() + self.copies.unmade()

    def _left(self) -> int:
        return len(self.queue) + len(self.in_flight) + len(self.copies)

    def _setup(self, slot: Slot) -> Any:
        return device_setup(slot.backend, slot.ordinal, self.options.compute_on, self.options.deterministic)

    def _start_actor(self, slot: Slot) -> None:
        setup = self._setup(slot)
        slot.actor = self.actors.start(slot.index, setup, slot.backend.actor_options())
        slot.ready = False
        self.queue.drop(slot.graphs)
        self.probes[self.actors.probe(slot.actor)] = (slot, slot.actor)

    def _give_up(self, slot: Slot) -> None:
        slot.gone = True
        self.queue.drop(slot.graphs)
        if slot.actor is not None:
            self.actors.kill(slot.actor)

    def _take_for(self, slot: Slot) -> tuple[TrialConfig, Hint] | None:
        config = self.queue.take(slot.graphs)
        if config is None:
            return None  # every queued trial waits for a snapshot; a finished prefix dispatches again
        hint = self.baselines.hint(config)
        if slot.calls and config.amp_level != FP32_LEVEL and hint is None:
            # a queued call gets its hint now: wait for the seed's FP32 result rather than send none
            self.queue.untake()
            return None
        self.queue.hold(slot.graphs, config.graph_id)
        return config, hint

    def _dispatch(self, slot: Slot, before_ready: bool = False) -> None:
        """Give ``slot`` trials until it holds ``depth``; one while the queue is short: the last
        trials go to whichever actor frees first. ``before_ready``: one queued behind a first
        actor's start.

        Short means fewer than ``depth`` trials for every slot: with 4 ResNet trials on 2
        actors, the first actor to finish once queued both remaining trials behind each other
        while the second actor idled for 100 s.
        """
        if slot.gone or not (slot.ready or before_ready):
            return
        short = len(self.queue) < self.options.depth * len(self.slots)
        depth = 1 if before_ready or short else self.options.depth
        while len(slot.calls) < depth and self.queue:
            taken = self._take_for(slot)
            if taken is None:
                break
            config, hint = taken
            self.attempts[config.trial_id] = self.attempts.get(config.trial_id, 0) + 1
            start = self.forks.snapshot_for(config) if self.forks else None
            call = self.actors.run(slot.actor, config, self.options.workload_ref, hint, start)
            self.in_flight[call] = (slot, slot.actor, config)
            if self.forks is None or not self.forks.is_prefix(config):
                self.baselines.sent(config, call, slot)
            if not slot.calls:
                self._running += 1
            slot.calls.append(call)
        if slot.ready and not slot.calls and not self.queue and self.copies:  # idle, else: train, not wait
            self.queue.push(self.copies.release_one())
            self._dispatch(slot)
            return
        if slot.ready and not slot.calls and (self.queue or self.copies):
            self._idle[slot.index] = slot  # asks again when an answer changes the queue
        else:
            self._idle.pop(slot.index, None)

    def _answered(self, slot: Slot, call: Any) -> None:
        """``call`` is no longer in flight on ``slot``."""
        if call in slot.calls:
            slot.calls.remove(call)
            if not slot.calls:
                self._running -= 1

    def _failed(self, config: TrialConfig, slot: Slot, error: str) -> TrialResult:
        setup = self._setup(slot)
        return TrialResult.failure(
            config, error, Placement(setup.device_kind, setup.mindspore_target, worker_index=slot.index)
        )

    def _finish(self, result: TrialResult) -> None:
        """A trial is back: a prefix releases its seed's trials; any other makes its copies,
        releases the trials held for it, and passes the fail-fast gate to be committed."""
        released = self.forks.take(result, self.committed, self._left()) if self.forks else None
        if released is not None:
            self.queue.release(released)
            for slot in self.slots:  # the trials this snapshot held back may start now
                self._dispatch(slot)
            return
        copies, to_train = self.copies.after(result, self.baselines.hint)
        for config in to_train:
            self.queue.push(config)
        if to_train:
            self._wake_idle()
        for copy in copies:
            self.baselines.add_result(copy)
        if copies:
            self._copies_of[result.trial_id] = copies
        for ready in self.gate.admit(result, self.committed, self._left()):
            self._record(ready)

    def _record(self, result: TrialResult) -> None:
        """Commit ``result``, then each copy made from it: the one place trials are committed."""
        self._commit(result, self.attempts.get(result.trial_id, 1))
        self.committed += 1
        self.bar.finished(Outcome(result.outcome).value)
        for copy in self._copies_of.pop(result.trial_id, ()):
            self._commit(copy, 0)
            self.committed += 1
            self.bar.finished(Outcome(copy.outcome).value)

    def run(self, watch: ClusterWatch) -> None:
        for slot in self.slots:
            if slot.actor is not None and slot.ready and not slot.gone:
                self._dispatch(slot)  # an actor kept from an earlier phase
            else:
                self._start_actor(slot)
                self._dispatch(slot, before_ready=True)
        try:
            while self._work_left():
                problem = watch.problem()
                if problem:
                    raise ClusterLost(problem, self.committed, self._left())
                self._beat()
                try:
                    call, answer = self.actors.completions.get(timeout=_TICK_S)
                except queue.Empty:
                    self._check_no_actor()
                    continue
                if call in self.probes:
                    self._probe_answered(call, answer)
                elif call in self.in_flight:
                    self._trial_answered(call, answer)
        except KeyboardInterrupt:
            raise Interrupted("interrupted", self.committed, self._left()) from None
        finally:
            for slot, actor in self.probes.values():  # actors that never started (e.g. their node is gone)
                if actor is slot.actor:
                    self._give_up(slot)
        for ready in self.gate.close(self.committed, self._left()):  # a run shorter than the gate
            self._record(ready)

    def _work_left(self) -> bool:
        """An answer is awaited; else an actor left idle with trials in line is asked once more
        (it is otherwise asked only once a second, after the loop would have ended)."""
        if self.in_flight or (self.queue and self.probes):
            return True
        if self._idle and (self.queue or self.copies):
            self._wake_idle()
            return bool(self.in_flight)
        return False

    def _beat(self) -> None:
        """The lock's heartbeat and the progress line, at most once a second (each costs O(devices))."""
        now = time.monotonic()
        if now < self._next_beat:
            return
        self._next_beat = now + _TICK_S
        self._wake_idle()
        running = (self.in_flight.get(slot.calls[0]) for slot in self.slots if slot.calls)
        self.heartbeat([held[2].trial_id for held in running if held is not None])
        self.bar.set_running(self._running)

    def _probe_answered(self, call: Any, answer: Future[Any]) -> None:
        slot, actor = self.probes.pop(call)
        if actor is not slot.actor:
            return  # the probe of an actor already replaced
        try:
            answer.result()
        except (*self.actors.actor_died, *self.actors.call_failed) as exc:
            if not slot.busy:  # else its trial's failure replaces the actor
                self._actor_died(slot, exc)
            return
        slot.ready = True
        self._last_live = time.monotonic()
        self._dispatch(slot)

    def _trial_answered(self, call: Any, answer: Future[Any]) -> None:
        slot, actor, config = self.in_flight.pop(call)
        self.baselines.answered(config, call)
        started = slot.runs(call) or call in self._lost  # the oldest ran
        self._lost.discard(call)
        self._answered(slot, call)
        try:
            result = answer.result()
        except self.actors.actor_died as exc:
            if not started:
                self.attempts[config.trial_id] -= 1  # queued behind the lost trial: it never started
            if self.attempts[config.trial_id] >= self.options.failure.max_attempts:
                limit = self.options.failure.max_attempts
                self._finish(
                    self._failed(
                        config, slot, f"WorkerDied: the worker died {limit} times running this trial"
                    )
                )
            else:
                self.queue.push(config, front=True)
                self.bar.retry()
            if actor is slot.actor:  # the first of its calls to fail replaces it; the rest only requeue
                self._actor_died(slot, exc, running_left=not started)
            self._wake_idle()  # the trial is back in the queue, and its graph may have lost a holder
            return
        except self.actors.call_failed as exc:  # the trial code is guarded; this is serialization etc.
            text = str(exc).strip()
            result = self._failed(config, slot, text.splitlines()[-1] if text else type(exc).__name__)
        else:
            slot.deaths = 0
        # the next trial first, the Parquet commit after: the actor trains while the driver writes
        if self.forks is None or not self.forks.is_prefix(config):
            self.baselines.add_result(result)
        self.queue.costs.record(config.graph_id, result.compile_s, result.wall_s + result.diagnose_s)
        self._last_live = time.monotonic()
        self._dispatch(slot)
        self._finish(result)

    def _wake_idle(self) -> None:
        """Ask the idle actors again: once a second, when a trial comes back, before the loop ends.
        Not on every answer: that would cost O(devices) each."""
        for slot in list(self._idle.values()):
            self._dispatch(slot)

    def _actor_died(self, slot: Slot, exc: BaseException, running_left: bool = False) -> None:
        """``running_left``: the failure that told us came from a queued call, so the oldest
        call still listed is the one the actor was running (it counts as an attempt)."""
        slot.deaths += 1
        slot.ready = False
        if running_left and slot.calls:
            self._lost.add(slot.calls[0])
        for call in list(slot.calls):  # the dead actor's other calls fail too; they are requeued then
            self._answered(slot, call)
        if slot.deaths >= self.options.failure.max_slot_deaths:
            text = str(exc).strip()
            self.last_error = text.splitlines()[0] if text else repr(exc)
            self._give_up(slot)
            return
        self._start_actor(slot)

    def _check_no_actor(self) -> None:
        if any(s.ready and not s.gone for s in self.slots) or self.in_flight:
            self._last_live = time.monotonic()
            return
        if time.monotonic() - self._last_live > NO_ACTOR_TIMEOUT_S:
            for slot, _ in list(self.probes.values()):
                self._give_up(slot)
            self.probes.clear()
