"""Deciding which trial runs next, and committing each one that comes back.

The worker pool owns the actors and the one completion loop; it asks for a slot's next trial (``take``)
and hands back each answer (``learn``, then ``finish``). Trials go out as actors free up (not pre-split),
so no device idles while trials remain. Each decision has a part of its own (``TrialQueue``, ``Copies``,
``FailFastGate``, ``Forks``, ``Baselines``); every result, copies included, is committed through
``_record``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ampsweep.contracts import FP32_LEVEL
from ampsweep.jobs import Hint, Outcome, TrialConfig, TrialResult

from .._errors import check_first_trials
from ..planning._copies import CopyMap
from ._baselines import Baselines
from ._copies import Copies
from ._prefix import Forks
from ._progress import SweepProgress
from ._queue import TrialQueue

if TYPE_CHECKING:
    from ._slot import Slot

#: Trials whose results decide whether the workload itself is broken.
FAIL_FAST_TRIALS = 3


class FailFastGate:
    """Holds the first results back; ``admit`` returns what may be recorded now. A workload that raises on
    every trial would otherwise fail the grid one trial at a time: when the first ``FAIL_FAST_TRIALS`` all
    failed alike, none is committed, so a fixed workload reruns them (``--keep-going``: no gate)."""

    def __init__(self, enabled: bool) -> None:
        self._held: list[TrialResult] | None = [] if enabled else None

    def admit(self, result: TrialResult, committed: int, left: int) -> list[TrialResult]:
        """``result`` and any held before it once the gate has decided (``WorkloadBroken`` when the first
        results all failed alike); ``left``: trials not back yet."""
        if self._held is None:
            return [result]
        self._held.append(result)
        if len(self._held) < min(FAIL_FAST_TRIALS, len(self._held) + left):
            return []
        return self.close(committed, left)

    def close(self, committed: int, left: int) -> list[TrialResult]:
        """Decide on what is held (a run with fewer trials than the gate waits for) and open."""
        held, self._held = self._held or [], None
        if held:
            check_first_trials(held, committed, left + len(held))
        return held


class Dispatcher:
    """Runs ``pending`` on a ``WorkerPool``; ``commit`` writes one finished trial (a copy: attempts 0);
    ``copies``: the plan's copies of the pending trials. Each answer touches its own trial only."""

    def __init__(
        self,
        pending: list[TrialConfig],
        workload_ref: str,
        copies: CopyMap,
        commit: Callable[[TrialResult, int], None],
        bar: SweepProgress,
        committed_before: int,
        baselines: Baselines,
        forks: Forks | None = None,
        fail_fast: bool = True,
    ) -> None:
        self.baselines = baselines
        self.workload_ref = workload_ref
        #: a forked sweep's snapshots; its prefix runs go ahead of every trial
        self.forks = forks
        self.queue = TrialQueue(
            [*(forks.runs if forks else []), *pending],
            forks.refs if forks else (),
            copies.confirm_last,
        )
        self.copies = Copies(copies)
        #: copies made from a result the gate still holds: committed right after it
        self._copies_of: dict[str, list[TrialResult]] = {}
        #: trial id -> the workers it took (the pool counts them)
        self._attempts: dict[str, int] = {}
        self._commit = commit
        self.bar = bar
        self.committed = committed_before
        self.gate = FailFastGate(fail_fast)
        self._in_flight = 0

    @property
    def pending(self) -> list[TrialConfig]:
        """The trials not handed out yet, in line order."""
        return self.queue.remaining() + self.copies.unmade()

    def left(self) -> int:
        return len(self.queue) + self._in_flight + len(self.copies)

    def waiting(self) -> int:
        return len(self.queue)

    def drained(self) -> bool:
        return not self.queue and not self.copies

    def attach(self, slots: Sequence[Slot]) -> None:
        """Actors kept from an earlier run hold the graphs they compiled: the queue counts them."""
        for slot in slots:
            if not slot.gone:
                self.queue.holders.update(slot.graphs)

    def _is_prefix(self, config: TrialConfig) -> bool:
        return self.forks is not None and self.forks.is_prefix(config)

    def take(self, slot: Slot, idle: bool) -> tuple[TrialConfig, Hint, Any] | None:
        """The next trial for ``slot``, its FP32 hint and its start; None: none may start on it now (an
        ``idle`` slot with nothing in line trains a held trial rather than wait for its copy)."""
        if idle and not self.queue and self.copies:
            self.queue.push(self.copies.release_one())
        config = self.queue.take(slot.graphs)
        if config is None:
            return None  # every queued trial waits for a snapshot; a finished prefix dispatches again
        hint = self.baselines.hint(config)
        if slot.calls and config.amp_level != FP32_LEVEL and hint is None:
            # a queued call gets its hint now: wait for the seed's FP32 result rather than send none
            self.queue.untake()
            return None
        self.queue.hold(slot.graphs, config.graph_id)
        return config, hint, self.forks.snapshot_for(config) if self.forks else None

    def sent(self, config: TrialConfig, call: Any, slot: Slot) -> None:
        self._in_flight += 1
        if not self._is_prefix(config):
            self.baselines.sent(config, call, slot)

    def answered(self, config: TrialConfig, call: Any) -> None:
        self._in_flight -= 1
        self.baselines.answered(config, call)

    def requeue(self, config: TrialConfig) -> None:
        self.queue.push(config, front=True)
        self.bar.retry()

    def dropped(self, slot: Slot) -> None:
        self.queue.drop(slot.graphs)

    def learn(self, config: TrialConfig, result: TrialResult) -> None:
        if not self._is_prefix(config):
            self.baselines.add_result(result)
        self.queue.costs.record(config.graph_id, result.compile_s, result.wall_s + result.diagnose_s)

    def finish(self, result: TrialResult, attempts: int) -> str:
        """A trial is back: a prefix releases its seed's trials; any other makes its copies,
        releases the trials held for it, and passes the fail-fast gate to be committed.
        Returns which slots the pool asks again: "all" (a snapshot exists), "idle" or ""."""
        released = self.forks.take(result, self.committed, self.left()) if self.forks else None
        if released is not None:
            self.queue.release(released)
            return "all"  # the trials this snapshot held back may start now
        self._attempts[result.trial_id] = attempts
        copies, to_train = self.copies.after(result, self.baselines.hint)
        for config in to_train:
            self.queue.push(config)
        for copy in copies:
            self.baselines.add_result(copy)
        if copies:
            self._copies_of[result.trial_id] = copies
        for ready in self.gate.admit(result, self.committed, self.left()):
            self._record(ready)
        return "idle" if to_train else ""

    def _record(self, result: TrialResult) -> None:
        """Commit ``result``, then each copy made from it: the one place trials are committed."""
        copies = [(copy, 0) for copy in self._copies_of.pop(result.trial_id, ())]
        for done, attempts in [(result, self._attempts.pop(result.trial_id, 1)), *copies]:
            self._commit(done, attempts)
            self.committed += 1
            self.bar.finished(Outcome(done.outcome).value)

    def close(self) -> None:
        for ready in self.gate.close(self.committed, self.left()):  # a run shorter than the gate
            self._record(ready)
