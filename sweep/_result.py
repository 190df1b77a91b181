"""``SweepResult``: what a finished run reports, and the door to its analysis (imported only when asked
for, so a driver that only runs never loads pandas' report machinery)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from ampsweep.analysis import SweepAnalysis
    from ampsweep.contracts import TrialVerdict
    from ampsweep.jobs import Profile


@dataclass
class SweepResult:
    """A finished run: counts of this run, and the sweep folder to analyse."""

    root: str
    total: int
    skipped: int
    ran: int
    outcomes: dict[str, int] = field(default_factory=dict)
    #: of ``ran``, the trials whose results were copied, not trained (``SweepPlan.copy_map``): from
    #: an equivalent trial, or from the same run with a looser clip whose norm never reached theirs
    copied: int = 0
    #: the FP32 profile a worker ran at the sweep's end (``RunConfig.profile``), or why there is none
    profile: Profile | None = None
    profile_error: str | None = None

    @property
    def is_local(self) -> bool:
        return "://" not in self.root

    def add_run(self, other: SweepResult) -> None:
        """Count another run's trials into this one (a search runs many)."""
        self.ran += other.ran
        self.copied += other.copied
        for outcome, count in other.outcomes.items():
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + count

    def trials(self) -> pd.DataFrame:
        """One row per committed trial (``ampsweep.analysis.load_trials``)."""
        from ampsweep.analysis import load_trials

        return load_trials(self.root)

    def analyze(self, *, figures: bool = True) -> SweepAnalysis:
        """Scores, ranking and recommendation, computed once (``figures=False``: the ranking only)."""
        from ampsweep.analysis import analyze

        return analyze(self.root, figures=figures)

    def verdicts(self) -> dict[str, TrialVerdict]:
        """Each committed trial's verdict, as the report gives it: what a search decides from."""
        from ampsweep.analysis import trial_verdicts

        return trial_verdicts(self.root)

    def report(self, analysis: SweepAnalysis | None = None) -> Path:
        """Write ``report/`` (Markdown, HTML, JSON, CSV) and return its folder."""
        from ampsweep.analysis import write_report

        return Path(write_report(self.root, analysis=analysis or self.analyze()))
