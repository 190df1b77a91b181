"""Handing trials to device actors one at a time, and surviving what a long run meets.

Trials are handed out one at a time (not pre-split), so no device idles while
trials remain and a slow trial holds back nobody; an actor prefers trials of a
graph it has compiled, then a graph no other actor has (``next_trial``). A new
actor first answers a probe, so an actor that can never start (its node was
removed) holds no trial. What goes wrong is handled
here: a worker killed mid-trial (the trial runs again elsewhere, ``attempts``
counts it), a trial that kills ``max_attempts`` workers (``failed``), a
cluster that goes away (``ClusterLost``), a workload whose first trials all
fail alike (``WorkloadBroken``), Ctrl-C (``Interrupted``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ampsweep.contracts import FP32_LEVEL
from ampsweep.jobs import Outcome, Placement, TrialConfig, TrialResult, TrialWorker

from ._baselines import Baselines
from ._config import FailurePolicy
from ._errors import ClusterLost, Interrupted, WorkloadBroken
from ._health import ClusterWatch
from ._prefix import Forks
from ._progress import SweepProgress
from .devices import DeviceBackend, device_setup

#: Trials whose results decide whether the workload itself is broken.
FAIL_FAST_TRIALS = 3
#: Seconds without any live actor after which the sweep gives up waiting for one to start.
NO_ACTOR_TIMEOUT_S = 300.0
#: How long ``ray.wait`` blocks before the loop checks the cluster and Ctrl-C again.
_TICK_S = 1.0


@dataclass
class Slot:
    """One device an actor runs on; its actor is replaced when it dies."""

    backend: DeviceBackend
    index: int
    ordinal: int
    actor: Any = None
    ready: bool = False
    busy: bool = False
    deaths: int = 0
    gone: bool = False
    graphs: set[str] = field(default_factory=set)


@dataclass
class DispatchOptions:
    workload_ref: str
    compute_on: str | None
    failure: FailurePolicy
    fail_fast: bool = True


def baseline_first(trials: list[TrialConfig]) -> list[TrialConfig]:
    """FP32 (O0) trials first: a broken workload shows on the baseline at once, and each
    mixed-precision trial can be judged against its seed's FP32 final loss."""
    return sorted(trials, key=lambda trial: trial.amp_level != FP32_LEVEL)


def next_trial(
    pending: deque[TrialConfig],
    own: set[str],
    held: set[str],
    startable: Callable[[TrialConfig], bool] = lambda _: True,
) -> int | None:
    """Which queued trial an actor holding the graphs ``own`` runs next (its queue position).

    A compile costs seconds, so an actor takes, in this order: a trial of a graph it
    has compiled; one of a graph no other actor holds (so each graph is compiled by
    as few actors as possible); else the first trial it may start. The search never
    passes an FP32 trial for a mixed-precision one, so baselines still run first.
    Trials that may not start yet (their snapshot is still being made) are passed
    over; ``None`` when no queued trial may start.
    """
    first: int | None = None
    fresh: int | None = None
    phase = False
    for position, candidate in enumerate(pending):
        if not startable(candidate):
            continue
        if first is None:
            first, phase = position, candidate.amp_level != FP32_LEVEL
        elif (candidate.amp_level != FP32_LEVEL) != phase:
            break
        if candidate.graph_id in own:
            return position
        if fresh is None and candidate.graph_id not in held:
            fresh = position
    return first if fresh is None else fresh


def workload_frame(traceback_text: str | None) -> str:
    """The last traceback frame outside ampsweep, MindSpore and the standard library: the user's line."""
    if not traceback_text:
        return ""
    lines = traceback_text.splitlines()
    frames = [i for i, line in enumerate(lines) if line.lstrip().startswith('File "')]
    skip = ("/jobs/_", "/sweep/", "site-packages", "/lib/python3")
    for index in reversed(frames):
        if not any(part in lines[index] for part in skip):
            code = lines[index + 1].strip() if index + 1 < len(lines) else ""
            return f"{lines[index].strip()}\n    {code}".rstrip()
    return ""


class Dispatcher:
    """Runs ``pending`` on ``slots`` until done; ``commit`` is called once per finished trial."""

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
    ) -> None:
        self.baselines = baselines
        self.slots = slots
        #: a forked sweep's snapshots; its prefix runs go ahead of every trial
        self.forks = forks
        self.pending: deque[TrialConfig] = deque(baseline_first([*(forks.runs if forks else []), *pending]))
        self.options = options
        self._commit = commit
        self.bar = bar
        self.heartbeat = heartbeat
        self.attempts: dict[str, int] = {}
        self.in_flight: dict[Any, tuple[Slot, TrialConfig]] = {}
        #: readiness probe of a new actor -> its slot and that actor (a later replacement has another)
        self.probes: dict[Any, tuple[Slot, Any]] = {}
        self.committed = committed_before
        self._early: list[TrialResult] | None = [] if options.fail_fast else None
        self._last_live = time.monotonic()
        self.last_error = ""

    # actors ---------------------------------------------------------------
    def _start_actor(self, slot: Slot) -> None:
        import ray

        remote = ray.remote(TrialWorker).options(max_restarts=0, **slot.backend.actor_options())
        setup = device_setup(slot.backend, slot.ordinal, self.options.compute_on)
        slot.actor = remote.remote(slot.index, setup)
        slot.ready = False
        slot.graphs.clear()
        self.probes[slot.actor.info.remote()] = (slot, slot.actor)

    def _give_up(self, slot: Slot) -> None:
        import ray

        slot.gone = True
        if slot.actor is not None:
            ray.kill(slot.actor, no_restart=True)

    # trials ---------------------------------------------------------------
    def _take_for(self, slot: Slot) -> TrialConfig | None:
        held = set().union(*(other.graphs for other in self.slots if other is not slot and not other.gone))
        startable = self.forks.startable if self.forks else lambda _: True
        position = next_trial(self.pending, slot.graphs, held, startable)
        if position is None:
            return None
        config = self.pending[position]
        del self.pending[position]
        slot.graphs.add(config.graph_id)
        return config

    def _dispatch(self, slot: Slot, before_ready: bool = False) -> None:
        """Hand ``slot`` its next trial. ``before_ready``: queue it behind the actor's start (used
        for the first actors, whose devices the cluster just reported: every device gets a trial
        even when some actors start much faster than others)."""
        if not self.pending or slot.gone or slot.busy or not (slot.ready or before_ready):
            return
        config = self._take_for(slot)
        if config is None:
            return  # every queued trial waits for a snapshot; a finished prefix dispatches again
        slot.busy = True
        self.attempts[config.trial_id] = self.attempts.get(config.trial_id, 0) + 1
        hint = self.baselines.for_trial(config) if config.amp_level != FP32_LEVEL else None
        start = self.forks.snapshot_for(config) if self.forks else None
        self.in_flight[slot.actor.run.remote(config, self.options.workload_ref, hint, start)] = (slot, config)

    def _failed(self, config: TrialConfig, slot: Slot, error: str) -> TrialResult:
        setup = device_setup(slot.backend, slot.ordinal, self.options.compute_on)
        return TrialResult.failure(
            config, error, Placement(setup.device_kind, setup.mindspore_target, worker_index=slot.index)
        )

    def _finish(self, result: TrialResult) -> None:
        if self.forks is not None and self.forks.take(
            result, self.committed, len(self.pending) + len(self.in_flight)
        ):
            for slot in self.slots:  # the trials this snapshot held back may start now
                self._dispatch(slot)
            return
        if self._early is not None:
            self._early.append(result)
            if len(self._early) < min(
                FAIL_FAST_TRIALS, len(self._early) + len(self.pending) + len(self.in_flight)
            ):
                return
            early, self._early = self._early, None
            self._judge_early(early)
            for held in early:
                self._record(held)
            return
        self._record(result)

    def _record(self, result: TrialResult) -> None:
        self._commit(result, self.attempts.get(result.trial_id, 1))
        self.committed += 1
        self.bar.finished(Outcome(result.outcome).value)

    def _judge_early(self, early: list[TrialResult]) -> None:
        errors = {r.error for r in early}
        all_failed = all(r.outcome == Outcome.FAILED for r in early)
        baseline = any(r.config.amp_level == FP32_LEVEL for r in early)
        if all_failed and len(errors) == 1 and baseline and early[0].error:
            where = workload_frame(early[0].traceback)
            detail = f"{early[0].error}" + (f"\n  {where}" if where else "")
            left = len(self.pending) + len(self.in_flight) + len(early)
            raise WorkloadBroken(
                f"the workload is broken: the first {len(early)} trials, the FP32 baseline among them, "
                "all failed with the same exception (fix it and run again, or pass --keep-going)",
                self.committed,
                left,
                detail,
            )

    # the loop -------------------------------------------------------------
    def run(self, watch: ClusterWatch) -> None:
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        for slot in self.slots:
            if slot.actor is not None and slot.ready and not slot.gone:
                self._dispatch(slot)  # an actor kept from an earlier phase (the FP32 prefixes)
            else:
                self._start_actor(slot)
                self._dispatch(slot, before_ready=True)
        try:
            while self.in_flight or (self.pending and self.probes):
                problem = watch.problem()
                if problem:
                    raise ClusterLost(problem, self.committed, len(self.pending) + len(self.in_flight))
                self.heartbeat([config.trial_id for _, config in self.in_flight.values()])
                self.bar.set_running(len(self.in_flight))
                waiting = [*self.in_flight, *self.probes]
                ready, _ = ray.wait(waiting, num_returns=1, timeout=_TICK_S)
                if not ready:
                    self._check_no_actor()
                    continue
                ref = ready[0]
                if ref in self.probes:
                    slot, actor = self.probes.pop(ref)
                    if actor is not slot.actor:
                        continue  # the probe of an actor already replaced
                    try:
                        ray.get(ref)
                    except (RayActorError, RayTaskError) as exc:
                        if not slot.busy:  # else its trial's failure replaces the actor
                            self._actor_died(slot, exc)
                        continue
                    slot.ready = True
                    self._last_live = time.monotonic()
                    self._dispatch(slot)
                    continue
                slot, config = self.in_flight.pop(ref)
                slot.busy = False
                try:
                    result = ray.get(ref)
                except RayActorError as exc:
                    if self.attempts[config.trial_id] >= self.options.failure.max_attempts:
                        limit = self.options.failure.max_attempts
                        self._finish(
                            self._failed(
                                config, slot, f"WorkerDied: the worker died {limit} times running this trial"
                            )
                        )
                    else:
                        self.pending.appendleft(config)
                        self.bar.retry()
                    self._actor_died(slot, exc)
                    continue
                except RayTaskError as exc:  # the trial code is guarded; this is serialization etc.
                    text = str(exc).strip()
                    result = self._failed(config, slot, text.splitlines()[-1] if text else type(exc).__name__)
                else:
                    slot.deaths = 0
                # the next trial first, the Parquet commit after: the actor trains while the
                # driver writes (its seed's FP32 loss is known before the next trial is handed out)
                if self.forks is None or not self.forks.is_prefix(config):
                    self.baselines.add(result.config, result.final_loss)
                self._last_live = time.monotonic()
                self._dispatch(slot)
                self._finish(result)
        except KeyboardInterrupt:
            raise Interrupted(
                "interrupted", self.committed, len(self.pending) + len(self.in_flight)
            ) from None
        finally:
            for slot, actor in self.probes.values():  # actors that never started (e.g. their node is gone)
                if actor is slot.actor:
                    self._give_up(slot)
        if self._early:  # fewer trials than FAIL_FAST_TRIALS in the whole run
            early, self._early = self._early, None
            self._judge_early(early)
            for held in early:
                self._record(held)

    def _actor_died(self, slot: Slot, exc: BaseException) -> None:
        slot.deaths += 1
        slot.ready = False
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
