"""The trials still to run, indexed so that choosing the next one costs the same at any cluster size.

The order (an own graph, a graph no actor holds, a graph worth compiling once more; FP32 first) is
``docs/internals.md`` ("Scheduling"). FP32 first also puts the FP32 graph on every actor, which the
localization replays a broken trial's FP32 twin on (an actor sent to a mixed-precision graph first
replayed without it: 2x the localization time). ``run_last`` trials (an equivalence confirmed on a graph
of its own) fill the gaps at the end; a forked trial is in line once its snapshot exists. Trials are kept
per phase and per graph, so a choice looks at the actor's own graphs and the graph heads only: its cost
grows with the graphs, never with the trials or devices (a scan of the queue per dispatch did).
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, deque
from collections.abc import Iterable

from ampsweep.contracts import FP32_LEVEL
from ampsweep.jobs import TrialConfig

from ._graph_costs import GraphCosts

#: a trial's place in line; a retried trial goes to the front
_Entry = tuple[int, TrialConfig]


class TrialQueue:
    """Trials in line, by phase and graph; trials waiting for a snapshot are held aside."""

    def __init__(
        self,
        trials: Iterable[TrialConfig] = (),
        ready_snapshots: Iterable[str] = (),
        run_last: Iterable[str] = (),
    ) -> None:
        #: phase (FP32, mixed precision, last) -> graph id -> that graph's trials in line order
        self._lines: tuple[dict[str, deque[_Entry]], ...] = ({}, {}, {})
        self._last_ids = frozenset(run_last)
        #: snapshot id -> trials that start from it, held until it exists
        self._waiting: dict[str, list[_Entry]] = {}
        self._ready: set[str] = set(ready_snapshots)
        self._order = itertools.count()
        self._front = itertools.count(-1, -1)
        self._queued = 0
        self._last: _Entry | None = None
        #: graph id -> how many live actors have compiled it
        self.holders: Counter[str] = Counter()
        self.costs = GraphCosts()
        for config in trials:
            self.push(config)

    def __len__(self) -> int:
        """Every trial not yet handed out, those waiting for a snapshot included."""
        return self._queued

    def __bool__(self) -> bool:
        return self._queued > 0

    def push(self, config: TrialConfig, *, front: bool = False) -> None:
        """Queue a trial at the back, or at the front (a trial whose worker died runs again first)."""
        entry = (next(self._front) if front else next(self._order), config)
        self._queued += 1
        if config.start_from and config.start_from not in self._ready:
            self._waiting.setdefault(config.start_from, []).append(entry)
            return
        self._insert(entry)

    def _phase(self, config: TrialConfig) -> int:
        """0 for FP32 trials, which run first; 1 for mixed precision; 2 for ``run_last``."""
        if config.trial_id in self._last_ids:
            return 2
        return 0 if config.amp_level == FP32_LEVEL else 1

    def release(self, snapshot: str) -> None:
        """A snapshot now exists: the trials that start from it join the line in their old places."""
        self._ready.add(snapshot)
        for entry in self._waiting.pop(snapshot, []):
            self._insert(entry)

    def _insert(self, entry: _Entry) -> None:
        lines = self._lines[self._phase(entry[1])]
        line = lines.setdefault(entry[1].graph_id, deque())
        if not line or line[-1][0] < entry[0]:
            line.append(entry)
        elif entry[0] < line[0][0]:
            line.appendleft(entry)
        else:  # a released trial between queued ones: rare (once per snapshot), so a sort is fine
            line.append(entry)
            lines[entry[1].graph_id] = deque(sorted(line, key=lambda e: e[0]))

    def take(self, own: set[str]) -> TrialConfig | None:
        """The trial an actor that compiled the graphs ``own`` runs next; None when none may start. Before it
        compiles a graph another actor holds, an actor runs the ``run_last`` trials of its own graphs: they
        cost no compile, and fill the gap the compile would have filled."""
        first = next((p for p, lines in enumerate(self._lines) if lines), None)
        if first is None:
            return None
        last = len(self._lines) - 1
        if first == last:
            return self._held_or_unheld(last, own) or self._worth_compiling(last)
        return (
            self._held_or_unheld(first, own)
            or self._held_or_unheld(last, own, unheld=False)
            or self._worth_compiling(first)
            or self._held_or_unheld(last, own)
            or self._worth_compiling(last)
        )  # None: the actors holding these graphs will be done sooner than a compile

    def _heads(self, phase: int) -> list[tuple[int, str]]:
        return [(line[0][0], graph) for graph, line in self._lines[phase].items()]

    def _held_or_unheld(self, phase: int, own: set[str], *, unheld: bool = True) -> TrialConfig | None:
        """The phase's first trial on a graph in ``own``, else (``unheld``) on a graph no actor holds."""
        heads = self._heads(phase)
        pick = [head for head in heads if head[1] in own]
        if not pick and unheld:
            pick = [head for head in heads if not self.holders[head[1]]]
        return self._pop(phase, min(pick)[1]) if pick else None

    def _worth_compiling(self, phase: int) -> TrialConfig | None:
        """The phase's first trial in line whose graph is worth compiling once more (``GraphCosts``)."""
        for _, graph in sorted(self._heads(phase)):
            if self.costs.worth_compiling(graph, len(self._lines[phase][graph]), self.holders[graph]):
                return self._pop(phase, graph)
        return None

    def _pop(self, phase: int, graph: str) -> TrialConfig:
        lines = self._lines[phase]
        line = lines[graph]
        self._last = line.popleft()
        if not line:
            del lines[graph]
        self._queued -= 1
        return self._last[1]

    def untake(self) -> None:
        """Put the trial ``take`` just returned back in its old place."""
        if self._last is not None:
            self._insert(self._last)
            self._queued += 1
            self._last = None

    def hold(self, graphs: set[str], graph: str) -> None:
        """An actor compiled ``graph`` (added to its own ``graphs``)."""
        if graph not in graphs:
            graphs.add(graph)
            self.holders[graph] += 1

    def drop(self, graphs: set[str]) -> None:
        """An actor died or was given up: its compiled graphs are held by nobody through it."""
        for graph in graphs:
            self.holders[graph] -= 1
        graphs.clear()

    def remaining(self) -> list[TrialConfig]:
        """The trials not handed out, in line order (for messages and for the caller's count)."""
        entries = [e for lines in self._lines for line in lines.values() for e in line]
        entries += [e for held in self._waiting.values() for e in held]
        return [config for _, config in heapq.nsmallest(len(entries), entries, key=lambda e: e[0])]
