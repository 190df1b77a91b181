"""What a compiled graph costs an actor, as this sweep measured it: one compile, and each trial.

Near the end an idle actor may be offered a graph only other actors compiled; a compile costs seconds
(3 s for a small MLP on a CPU, 10 s and more for a ResNet), so when the holders would finish first the
actor waits (``TrialQueue`` asks :meth:`GraphCosts.worth_compiling`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Measured:
    compile_s: float = 0.0  # Σ over the trials that compiled the graph
    compiles: int = 0
    run_s: float = 0.0  # Σ of each trial's time on its actor besides the compile (training, replay)
    trials: int = 0


class GraphCosts:
    """Compile and per-trial seconds per graph id, from the results that came back."""

    def __init__(self) -> None:
        self._measured: dict[str, _Measured] = {}

    def record(self, graph: str, compile_s: float, busy_s: float) -> None:
        """One finished trial: its compile seconds (0 when its actor had the graph) and its whole time."""
        measured = self._measured.setdefault(graph, _Measured())
        if compile_s > 0:
            measured.compile_s += compile_s
            measured.compiles += 1
        measured.run_s += max(0.0, busy_s - compile_s)
        measured.trials += 1

    def worth_compiling(self, graph: str, trials_left: int, holders: int) -> bool:
        """Whether one more actor should compile ``graph``: unless its ``holders`` would finish its
        ``trials_left`` first. With nothing measured, yes: an idle device is the only other choice."""
        measured = self._measured.get(graph)
        if holders <= 0 or measured is None or not measured.compiles or not measured.trials:
            return True
        compile_s = measured.compile_s / measured.compiles
        per_trial_s = measured.run_s / measured.trials
        return compile_s < trials_left * per_trial_s / holders
