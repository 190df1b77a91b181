"""A validated sweep's trials: what ``plan`` prints, ``run`` runs and ``plan.json`` records."""

from __future__ import annotations

from dataclasses import dataclass, field

from ampsweep.contracts import SNAPSHOT_FOLDER, PlanEntry
from ampsweep.jobs import TrialConfig

from ._copies import CopyMap, plan_copies
from ._grid import count_graphs, equivalents, expand_grid
from ._spec import SweepSpec
from ._start import StartPoint, Starts


@dataclass(frozen=True)
class SweepPlan:
    """Every trial of a spec, in order, with the trials that duplicate another."""

    name: str
    workload_ref: str  # resolved so it means the same file in every process
    devices: str | list[str]
    trials: list[TrialConfig]
    equivalent_to: dict[str, str] = field(default_factory=dict)
    #: snapshot id -> where it comes from, for every snapshot a trial starts from
    starts: dict[str, StartPoint] = field(default_factory=dict)
    #: the devices each trial runs on (a gang above 1) and where a gang's devices may lie: the spec's
    devices_per_trial: int = 1
    placement_strategy: str = "STRICT_PACK"
    #: the spec's ``stall_timeout_s`` (None: the gang's own, from its step time)
    stall_timeout_s: float | None = None

    @classmethod
    def from_spec(
        cls,
        spec: SweepSpec,
        workload_ref: str,
        loss_only_classes: frozenset[str] = frozenset(),
        starts: Starts | None = None,
        trials: list[TrialConfig] | None = None,
        name: str | None = None,
    ) -> SweepPlan:
        """The plan of ``trials`` (default: the spec's grid) in the folder ``name`` (default: the spec's)."""
        trials = expand_grid(spec, starts) if trials is None else trials
        return cls(
            name or spec.name,
            workload_ref,
            spec.devices,
            trials,
            equivalents(trials, loss_only_classes),
            starts_of(trials, starts),
            spec.devices_per_trial,
            spec.placement_strategy,
            spec.stall_timeout_s,
        )

    @property
    def prefixes(self) -> list[TrialConfig]:
        """The FP32 prefix runs the trials need (one per seed), before any trial."""
        return [p.prefix for p in self.starts.values() if p.prefix is not None]

    @property
    def graphs(self) -> int:
        """Distinct compiled graphs: each worker compiles each at most once."""
        return count_graphs(self.trials)

    def __len__(self) -> int:
        return len(self.trials)

    def copy_map(self, pending: list[TrialConfig], exact_reruns: bool) -> CopyMap:
        """Which of ``pending`` are copied instead of trained, and on what condition (``_copies``)."""
        return plan_copies(pending, self.equivalent_to, exact_reruns)

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
        rows = self._start_lines()
        for trial in self.trials:
            same = self.equivalent_to.get(trial.trial_id)
            note = f"  (same as {same})" if same else ""
            rows.append(f"{trial.trial_id}  graph {trial.graph_id}  {trial.label}{note}")
        return [head, *rows]

    def _start_lines(self) -> list[str]:
        if not self.starts:
            return []
        steps = sum(t.steps for t in self.trials)
        point = next(iter(self.starts.values()))
        lines = [
            f"trials start at step {point.step:,} from {point.source}: {len(self)} trials x "
            f"{self.trials[0].steps:,} steps = {steps:,} steps"
        ]
        prefixes = self.prefixes
        if prefixes:
            cost = sum(p.steps for p in prefixes)
            lines.append(
                f"prefix: {len(prefixes)} FP32 runs of {prefixes[0].steps:,} steps (one per seed) = {cost:,} steps, "
                f"run once before the trials and kept in OUT/{SNAPSHOT_FOLDER}/ for resume and later sweeps"
            )
            lines += [
                f"prefix {p.prefix.trial_id}  seed {p.prefix.seed}  snapshot {sid}"
                for sid, p in self.starts.items()
                if p.prefix is not None
            ]
        return lines


def starts_of(trials: list[TrialConfig], starts: Starts | None) -> dict[str, StartPoint]:
    """The start point of every snapshot the trials name."""
    if starts is None:
        return {}
    found: dict[str, StartPoint] = {}
    for trial in trials:
        if trial.start_from and trial.start_from not in found:
            point = starts.for_seed(trial.seed)
            if point is not None:
                found[point.snapshot] = point
    return found
