"""One protocol for the searches that run in rounds: propose a batch of trials, run it, observe it.

As with Optuna's samplers (ask, tell) and Ray Tune's searchers (suggest, on_trial_complete), a search
only decides; ``run_rounds`` runs each batch on the sweep's worker pool. A new kind of search is a new
``RoundSearch``, not a new loop.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from .._config import RunConfig
from .._result import SweepResult
from ..cluster._launcher import run_sweep
from ..cluster._pool import WorkerPool
from ..planning._plan import SweepPlan


@dataclass(frozen=True)
class Batch:
    """One round: a plan (what ``out`` holds already does not run again) and the folder it goes under."""

    plan: SweepPlan
    out: str


class RoundSearch(Protocol):
    resolved_yaml: str  # the resolved spec every round's folder records

    def propose(self) -> Batch | None:
        """The next batch to run; None: the search is over."""

    def observe(self, batch: Batch, ran: SweepResult) -> None:
        """``batch`` ran (its trials are committed): what ``ran`` shows (its counts, ``verdicts()`` and
        ``analyze()``) decides the next proposal."""


def run_rounds(search: RoundSearch, pool: WorkerPool, run: RunConfig, snapshots: str) -> None:
    """Run ``search``'s batches on ``pool`` until it proposes none. A round's end is not the sweep's:
    no FP32 profile after each (the sweep's one is the grid's, or the CLI's at the end)."""
    quiet = replace(run, profile=False)
    while (batch := search.propose()) is not None:
        search.observe(batch, run_sweep(batch.plan, search.resolved_yaml, batch.out, quiet, snapshots, pool))
