"""A validated sweep's trials: what ``plan`` prints, ``run`` runs and ``plan.json`` records."""

from __future__ import annotations

from dataclasses import dataclass, field

from ampsweep.contracts import PlanEntry
from ampsweep.jobs import TrialConfig

from ._grid import count_graphs, equivalents, expand_grid
from ._spec import SweepSpec


@dataclass(frozen=True)
class SweepPlan:
    """Every trial of a spec, in order, with the trials that duplicate another."""

    name: str
    workload_ref: str  # resolved so it means the same file in every process
    devices: str | list[str]
    trials: list[TrialConfig]
    equivalent_to: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_spec(
        cls, spec: SweepSpec, workload_ref: str, loss_only_classes: frozenset[str] = frozenset()
    ) -> SweepPlan:
        trials = expand_grid(spec)
        return cls(spec.name, workload_ref, spec.devices, trials, equivalents(trials, loss_only_classes))

    @property
    def graphs(self) -> int:
        """Distinct compiled graphs: each worker compiles each at most once."""
        return count_graphs(self.trials)

    def __len__(self) -> int:
        return len(self.trials)

    def entries(self) -> list[PlanEntry]:
        return [
            PlanEntry(t.trial_id, t.graph_id, t.label, self.equivalent_to.get(t.trial_id))
            for t in self.trials
        ]

    def lines(self) -> list[str]:
        """The human listing ``ampsweep plan`` prints."""
        head = (
            f"{self.name}: {len(self)} trials, {self.graphs} distinct compiled graphs, "
            f"{len(self.equivalent_to)} equivalent to another trial"
        )
        rows = []
        for trial in self.trials:
            same = self.equivalent_to.get(trial.trial_id)
            note = f"  (same as {same})" if same else ""
            rows.append(f"{trial.trial_id}  graph {trial.graph_id}  {trial.label}{note}")
        return [head, *rows]
