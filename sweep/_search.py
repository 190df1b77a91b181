"""``search: adaptive``: find the smallest black list instead of testing guesses.

For each mixed-precision level (× dtype × loss scale) of the grid:

1. **baseline** — FP32 (O0) on every seed: what "learns as well as FP32" means.
2. **grow** — the level with MindSpore's default black list. While any seed
   diverges or fails silently (finite, but final loss beyond
   ``ampsweep.contracts.silent_loss_limit`` of its seed's FP32), add the Cell
   class the localization replays named most often, and run again (at most
   ``search_rounds`` classes).
3. **shrink** — delta debugging: drop each added class whose removal keeps
   every seed stable (a class added early may be unnecessary once a later one
   is in).
4. **clip** — every clip threshold of the grid on the minimal list.
5. **confirm** — the best configurations on the minimal list (the analysis
   ranking decides) again on ``confirm.seeds`` more seeds and
   ``confirm.steps_factor`` times the steps, with their FP32 baselines, in the
   sub-folder ``confirm/``: a divergence that hits one run in four, or starts
   after the last step, is invisible to the grid.

Every probe is an ordinary trial with an ordinary id, committed like a grid
trial, so a resumed search finds its earlier rounds committed and takes the
same decisions again without rerunning them. ``search.json`` records the path.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from ampsweep.contracts import (
    CONFIRM_FOLDER,
    SEARCH_FILE,
    SearchFamily,
    SearchLog,
    SearchRound,
    encode_search,
    learns_clearly_worse,
    part_path,
    trial_row_path,
)
from ampsweep.jobs import TrialConfig

from ._config import RunConfig
from ._grid import equivalents
from ._launcher import SweepRun, run_sweep
from ._plan import SweepPlan
from ._store import SweepStore

if TYPE_CHECKING:
    from ._spec import SweepSpec
    from ._workload_check import WorkloadFacts

STABLE, DIVERGED, SILENT, FAILED = "stable", "diverged", "silent", "failed"


class AdaptiveSearch:
    """One adaptive search over a validated sweep; ``run`` returns what ``Sweep.run`` returns."""

    def __init__(
        self, spec: SweepSpec, workload: WorkloadFacts, resolved_yaml: str, out: str, config: RunConfig
    ) -> None:
        self.spec = spec
        self.workload = workload
        self.resolved_yaml = resolved_yaml
        self.out = out
        self.config = config
        self.store = SweepStore(out, self.spec.name)
        self.planned: dict[str, TrialConfig] = {}
        self.log = SearchLog(sweep=self.spec.name)
        self.totals = SweepRun(root=self.store.root, total=0, skipped=0, ran=0)
        self.confirmed_trials = 0  # trials planned in the confirm/ sub-folder
        grid = self.spec.grid
        self.seeds = list(grid.seed)
        self.search_clip = None if None in grid.clip else grid.clip[0]

    # trials -------------------------------------------------------------------
    def _trial(
        self,
        family: SearchFamily,
        black: list[str],
        clip: float | None,
        seed: int,
        steps: int | None = None,
        level: str | None = None,
    ) -> TrialConfig:
        """A probe of ``family`` (or, with ``level="O0"``, its FP32 baseline)."""
        spec = self.spec
        level = level or family.amp_level
        return TrialConfig(
            workload=spec.workload,
            workload_args=dict(spec.workload_args),
            steps=steps or spec.steps,
            abort_after=spec.abort_after,
            layer_every=spec.layer_every,
            localize=spec.localize,
            amp_level=level,
            black_list=tuple(black),
            clip=clip,
            loss_scale=family.loss_scale if level != "O0" else "none",
            dtype=family.dtype,
            seed=seed,
            loss_placement=family.loss_placement,
        )

    def _run(self, trials: list[TrialConfig], store: SweepStore | None = None) -> None:
        """Run what is not committed yet; the plan written is every trial of the search so far."""
        target = store or self.store
        if target is self.store:
            for trial in trials:
                self.planned.setdefault(trial.trial_id, trial)
            planned = list(self.planned.values())
        else:
            planned = trials
            self.confirmed_trials += len(trials)
        name = self.spec.name if target is self.store else CONFIRM_FOLDER
        same = equivalents(planned, self.workload.loss_only_classes)
        plan = SweepPlan(name, self.workload.reference, self.spec.devices, planned, same)
        out = self.out if target is self.store else self.store.root
        done = run_sweep(plan, self.resolved_yaml, out, self.config)
        self.totals.ran += done.ran
        for outcome, count in done.outcomes.items():
            self.totals.outcomes[outcome] = self.totals.outcomes.get(outcome, 0) + count

    def _row(self, store: SweepStore, trial: TrialConfig) -> dict:
        table = pq.read_table(
            store.path(trial_row_path(trial.trial_id)), columns=["outcome", "final_loss"], filesystem=store.fs
        )
        return table.to_pylist()[0]

    def _localized(self, store: SweepStore, trial: TrialConfig) -> tuple[str, str] | None:
        """``(class, "cell (class, phase)")`` of the trial's anomaly row, if the replay found one."""
        try:
            rows = pq.read_table(
                store.path(part_path("anomalies", trial.trial_id)), filesystem=store.fs
            ).to_pylist()
        except (FileNotFoundError, OSError, pa.ArrowException):
            return None
        if not rows:
            return None
        row = rows[0]
        return row["cell_class"], f"{row['cell']} ({row['cell_class']}, {row['phase']})"

    def _judge(self, store: SweepStore, trial: TrialConfig, baseline: TrialConfig | None) -> str:
        row = self._row(store, trial)
        if row["outcome"] == "diverged":
            return DIVERGED
        if row["outcome"] == "failed":
            return FAILED
        fp32 = self._row(store, baseline)["final_loss"] if baseline is not None else None
        return SILENT if learns_clearly_worse(row["final_loss"], fp32) else STABLE

    def _probe(
        self,
        family: SearchFamily,
        phase: str,
        black: list[str],
        clip: float | None,
        baselines: dict[int, TrialConfig],
        seeds: list[int] | None = None,
        steps: int | None = None,
        store: SweepStore | None = None,
    ) -> SearchRound:
        store = store or self.store
        seeds = seeds or self.seeds
        trials = [self._trial(family, black, clip, seed, steps) for seed in seeds]
        self._run(trials, store)
        probe = SearchRound(
            round=len(family.rounds) + 1,
            phase=phase,
            black_list=list(black),
            clip=clip,
            outcomes={},
            trial_ids=[t.trial_id for t in trials],
        )
        for trial in trials:
            verdict = self._judge(store, trial, baselines.get(trial.seed))
            probe.outcomes[str(trial.seed)] = verdict
            if verdict in (DIVERGED, SILENT):
                found = self._localized(store, trial)
                if found:
                    probe.localized.append(found[1])
        family.rounds.append(probe)
        self._save()
        return probe

    @staticmethod
    def _stable(probe: SearchRound) -> bool:
        return all(v == STABLE for v in probe.outcomes.values())

    # the search ---------------------------------------------------------------
    def _baselines(
        self,
        family: SearchFamily,
        seeds: list[int],
        steps: int | None = None,
        store: SweepStore | None = None,
    ) -> dict[int, TrialConfig]:
        trials = {seed: self._trial(family, [], self.search_clip, seed, steps, level="O0") for seed in seeds}
        self._run(list(trials.values()), store)
        return trials

    def _grow(self, family: SearchFamily, baselines: dict[int, TrialConfig]) -> list[str] | None:
        black: list[str] = []
        probe = self._probe(family, "grow", black, self.search_clip, baselines)
        while not self._stable(probe):
            classes = Counter(item.split(" (", 1)[1].split(",", 1)[0] for item in probe.localized)
            candidates = [name for name, _ in classes.most_common() if name not in black]
            if FAILED in probe.outcomes.values() and not candidates:
                probe.decision = "stop: trials failed with an exception (see the ranking's error column)"
                return None
            if not candidates:
                probe.decision = "stop: the replays named no Cell class that is not already in FP32"
                return None
            if len(black) >= self.spec.search_rounds:
                probe.decision = (
                    f"stop: {self.spec.search_rounds} classes added and still unstable (search_rounds)"
                )
                return None
            probe.decision = (
                f"add {candidates[0]} (named on {classes[candidates[0]]} of {len(probe.outcomes)} seeds)"
            )
            black = [*black, candidates[0]]
            probe = self._probe(family, "grow", black, self.search_clip, baselines)
        probe.decision = "stable on every seed"
        return black

    def _shrink(self, family: SearchFamily, black: list[str], baselines: dict[int, TrialConfig]) -> list[str]:
        if len(black) < 2:
            return black  # without its only class it is the default list, which already failed
        for name in list(black):
            candidate = [c for c in black if c != name]
            probe = self._probe(family, "shrink", candidate, self.search_clip, baselines)
            if self._stable(probe):
                probe.decision = f"drop {name}: stable on every seed without it"
                black = candidate
            else:
                probe.decision = f"keep {name}: needed"
        return black

    def _confirm(self, family: SearchFamily, black: list[str]) -> None:
        confirm = self.spec.confirm
        clips = self._best_clips(family, black, confirm.top)
        seeds = self.seeds + [max(self.seeds) + 1 + i for i in range(confirm.seeds)]
        steps = self.spec.steps * confirm.steps_factor
        store = SweepStore(self.store.root, CONFIRM_FOLDER)
        baselines = self._baselines(family, seeds, steps, store)
        held = []
        for clip in clips:
            probe = self._probe(family, "confirm", black, clip, baselines, seeds, steps, store)
            ok = self._stable(probe)
            probe.decision = "held" if ok else "did not hold"
            held.append(ok)
        family.confirmed = all(held)
        clip_text = ", ".join("off" if c is None else f"{c:g}" for c in clips)
        family.confirmation = f"clip {clip_text} on {len(seeds)} seeds × {steps} steps: " + (
            "stable on every seed"
            if family.confirmed
            else "not stable on every seed — see the confirm rounds"
        )

    def _best_clips(self, family: SearchFamily, black: list[str], top: int) -> list[float | None]:
        """The clip thresholds of the ``top`` best configurations on ``black``, by the analysis ranking."""
        from ampsweep.analysis import analyze

        ranking = analyze(self.store.root).ranking
        mine = ranking[
            (ranking["amp_level"] == family.amp_level)
            & (ranking["dtype"] == family.dtype)
            & (ranking["loss_scale"] == family.loss_scale)
            & (ranking["black_list"].map(tuple) == tuple(sorted(black)))
        ].sort_values("rank")
        clips = [None if c != c else float(c) for c in mine["clip"].head(top)]  # NaN is "no clip"
        return clips or [self.search_clip]

    def _save(self) -> None:
        self.log.trials_run = len(self.planned)
        self.store.write_text(SEARCH_FILE, encode_search(self.log))

    def run(self) -> SweepRun:
        grid = self.spec.grid
        own = list(self.workload.own_classes)
        self.log.candidate_classes = own
        families = [
            SearchFamily(level, dtype, scale, loss_placement=placement)
            for level in grid.amp_level
            if level != "O0"
            for dtype in grid.dtype
            for scale in grid.loss_scale
            for placement in grid.loss_placement
        ]
        self.log.grid_equivalent = (2 ** len(own)) * len(self.seeds) * len(grid.clip) * len(families)
        self.log.families = families
        for family in families:
            baselines = self._baselines(family, self.seeds)
            black = self._grow(family, baselines)
            if black is None:
                family.conclusion = "no stable black list found; the rounds below show why"
                self._save()
                continue
            black = self._shrink(family, black, baselines)
            family.minimal_black_list = black
            for clip in grid.clip:
                if clip != self.search_clip:
                    probe = self._probe(family, "clip", black, clip, baselines)
                    probe.decision = "stable on every seed" if self._stable(probe) else "unstable"
            listed = ", ".join(black) if black else "nothing beyond MindSpore's default list"
            family.conclusion = f"minimal FP32 set: {listed}"
            self._save()
            if self.spec.confirm.seeds or self.spec.confirm.steps_factor > 1:
                self._confirm(family, black)
            self._save()
        self.totals.total = len(self.planned) + self.confirmed_trials
        self.totals.skipped = max(self.totals.total - self.totals.ran, 0)
        return self.totals
