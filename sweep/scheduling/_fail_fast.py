"""The fail-fast gate: the first results wait until they show whether the workload itself is broken.

A workload that raises on every trial (a typo in the user's factory, a
missing file) would otherwise fail the whole grid one trial at a time. The
first ``FAIL_FAST_TRIALS`` results are held back; if they all failed alike
(``check_first_trials``), the sweep stops with one line and nothing of those
trials is committed, so a fixed workload reruns them. Otherwise they are let
through in order. ``--keep-going`` turns the gate off.
"""

from __future__ import annotations

from ampsweep.jobs import TrialResult

from .._errors import check_first_trials

#: Trials whose results decide whether the workload itself is broken.
FAIL_FAST_TRIALS = 3


class FailFastGate:
    """Holds the first results back; ``admit`` returns what may be recorded now."""

    def __init__(self, enabled: bool) -> None:
        self._held: list[TrialResult] | None = [] if enabled else None

    def admit(self, result: TrialResult, committed: int, left: int) -> list[TrialResult]:
        """``result`` and any held before it once the gate has decided; ``left``: trials not back yet.

        Raises ``WorkloadBroken`` when the first results all failed alike.
        """
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
