"""``search: adaptive``: find the smallest black list instead of testing guesses.

Its steps (FP32 baselines, grow, shrink, clip, confirm) and ``search.json``: ``docs/localization.md``
("Adaptive search"). A probe is stable by ``configuration_verdict`` over its seeds, the ranking's verdict.
Every probe is an ordinary trial with an ordinary id, so a resumed search finds its earlier rounds
committed and takes the same decisions again without rerunning them. The search is one generator (a
``RoundSearch``) that yields each round's batch where it needs results: the steps read in order while
``run_rounds`` runs every batch on the sweep's worker pool.
"""

from __future__ import annotations

import itertools
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, TypeVar

from ampsweep.contracts import (
    CONFIRM_FOLDER,
    FP32_LEVEL,
    SEARCH_FILE,
    Configuration,
    SearchFamily,
    SearchLog,
    SearchRound,
    arg_text,
    encode_search,
    reference_value,
    static_scale_for,
    underflow_excess,
    workload_args_of,
)
from ampsweep.jobs import TrialConfig

from .._result import SweepResult
from ..planning._grid import sweep_trial
from ..planning._plan import SweepPlan
from ..planning._start import reference_or
from ..store._store import SweepStore
from ._rounds import Batch
from ._search_rules import (
    SeedEvidence,
    is_stable,
    needs_loss_scaling,
    next_class,
    not_applicable,
    shrink_decision,
    shrinkable,
    stability_phrase,
)

if TYPE_CHECKING:
    from ..planning._spec import SweepSpec
    from ..planning._workload_check import WorkloadFacts

T = TypeVar("T")
#: a step of the search: yields the batches it needs run, returns what it found
Steps = Generator[Batch, None, T]


class AdaptiveSearch:
    """One adaptive search over a validated sweep (a ``RoundSearch``); ``totals`` is what ``Sweep.run`` returns."""

    def __init__(self, spec: SweepSpec, workload: WorkloadFacts, resolved_yaml: str, out: str) -> None:
        self.spec = spec
        self.workload = workload
        self.resolved_yaml = resolved_yaml
        self.out = out
        self.store = SweepStore(out, self.spec.name)
        self.planned: dict[str, TrialConfig] = {}
        self.log = SearchLog(sweep=self.spec.name)
        self.totals = SweepResult(root=self.store.root, total=0, skipped=0, ran=0)
        self.ran = self.totals  # the last round, as ``observe`` got it
        self.confirmed_trials = 0  # trials planned in the confirm/ sub-folder
        grid = self.spec.grid
        self.seeds = list(grid.seed)
        self.search_clip = None if None in grid.clip else grid.clip[0]
        self._steps = self._search()

    def propose(self) -> Batch | None:
        try:
            return next(self._steps)
        except StopIteration:
            self.totals.total = len(self.planned) + self.confirmed_trials
            self.totals.skipped = max(self.totals.total - self.totals.ran, 0)
            return None

    def observe(self, batch: Batch, ran: SweepResult) -> None:
        self.totals.add_run(ran)
        self.ran = ran  # what the step the batch was for decides from

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
        """A probe of ``family`` (or, with ``level=FP32_LEVEL``, its FP32 baseline)."""
        level = level or family.amp_level
        fp32 = level == FP32_LEVEL
        swept = self._reference_arguments(family) if fp32 else family.arguments
        scale = "none" if fp32 else family.effective_loss_scale
        chosen = Configuration(
            level,
            tuple(black),
            clip,
            scale,
            family.dtype,
            family.loss_placement,
            workload_args=workload_args_of(swept),
        )
        return sweep_trial(self.spec, chosen, seed, swept, self.workload.starts, steps)

    def _run(self, trials: list[TrialConfig], store: SweepStore | None = None) -> Steps[None]:
        """Run what is not committed yet; the plan written is every trial of the search so far
        (in the ``confirm/`` sub-folder, a ``store`` of its own: the trials given)."""
        if store is None or store is self.store:
            for trial in trials:
                self.planned.setdefault(trial.trial_id, trial)
            name, planned, out = self.spec.name, list(self.planned.values()), self.out
        else:
            self.confirmed_trials += len(trials)
            name, planned, out = CONFIRM_FOLDER, trials, self.store.root
        workload = self.workload
        plan = SweepPlan.from_spec(
            self.spec, workload.reference, workload.loss_only_classes, workload.starts, planned, name
        )
        yield Batch(plan, out)

    def _evidence(
        self, store: SweepStore, family: SearchFamily, trials: list[TrialConfig]
    ) -> list[SeedEvidence]:
        """Each seed's verdict (the report's), localized Cell and underflow (the share of gradient values
        float16 lost, against the seed's FP32 run), from the round that ran ``trials``."""
        verdicts = self.ran.verdicts()
        evidence = []
        for trial in trials:
            verdict = verdicts[trial.trial_id]
            cell = None if verdict.learns_like_fp32 else store.localized_cell(trial.trial_id)
            evidence.append(SeedEvidence(trial.seed, verdict, cell, self._underflow(store, family, trial)))
        return evidence

    def _reference_arguments(self, family: SearchFamily) -> dict[str, Any]:
        """The swept arguments of a family's FP32 baseline: its own values, a precision knob at float32
        (the reference the analysis judges every probe against); a remedy only where it sets float32."""
        axes = self.spec.grid.workload_args
        swept = {name: reference_or(axes[name], value) for name, value in family.workload_args.items()}
        # a remedy that sets a precision to float32 is what FP32 computes anyway
        at_fp32 = {name: v for name, v in self.spec.remedies.items() if reference_value([v]) is not None}
        return {**at_fp32, **swept}

    def _fp32_of(self, family: SearchFamily, seed: int, steps: int | None = None) -> TrialConfig:
        """The FP32 baseline a probe is judged against: what the search runs for that seed before its probes."""
        return self._trial(family, [], self.search_clip, seed, steps, level=FP32_LEVEL)

    def _underflow(self, store: SweepStore, family: SearchFamily, trial: TrialConfig) -> float | None:
        fp32_id = self._fp32_of(family, trial.seed, trial.steps).trial_id
        try:
            mine = store.trial_row(trial.trial_id, ["underflow_fraction"])["underflow_fraction"]
            fp32 = store.trial_row(fp32_id, ["zero_fraction"])["zero_fraction"]
        except (OSError, KeyError, ValueError):
            return None
        return underflow_excess(mine, fp32)

    def _probe(
        self,
        family: SearchFamily,
        phase: str,
        black: list[str],
        clip: float | None,
        seeds: list[int] | None = None,
        steps: int | None = None,
        store: SweepStore | None = None,
    ) -> Steps[tuple[SearchRound, list[SeedEvidence]]]:
        store = store or self.store
        seeds = seeds or self.seeds
        trials = [self._trial(family, black, clip, seed, steps) for seed in seeds]
        yield from self._run(trials, store)
        probe = SearchRound(
            round=len(family.rounds) + 1,
            phase=phase,
            black_list=list(black),
            clip=clip,
            outcomes={},
            trial_ids=[t.trial_id for t in trials],
            loss_scale=family.effective_loss_scale,
            workload_args=dict(family.arguments),
        )
        evidence = self._evidence(store, family, trials)
        for seed in evidence:
            probe.outcomes[str(seed.seed)] = seed.verdict.verdict.value
            if seed.underflow is not None:
                probe.underflow[str(seed.seed)] = round(seed.underflow, 4)
            if seed.localized is not None:
                probe.localized.append(seed.localized)
        family.rounds.append(probe)
        self._save()
        return probe, evidence

    # the search ---------------------------------------------------------------
    def _scale_remedies(self, family: SearchFamily) -> list[str]:
        """The loss scales to try when gradients underflow: dynamic, and a static 2^k that lifts the
        FP32 baseline's largest gradient to just below float16's maximum."""
        absmax = [self.store.gradient_absmax(self._fp32_of(family, seed).trial_id) for seed in self.seeds]
        known = [a for a in absmax if a is not None]
        return ["dynamic", static_scale_for(max(known) if known else None)]

    def _try_loss_scaling(
        self, family: SearchFamily, black: list[str]
    ) -> Steps[tuple[SearchRound, list[SeedEvidence]]]:
        """Probe each loss scale on ``black``; the family keeps the first that is stable (else the first)."""
        tried = []
        for scale in self._scale_remedies(family):
            family.loss_scale_added = scale
            probe, evidence = yield from self._probe(family, "loss scale", black, self.search_clip)
            probe.decision = f"loss scale {scale}: {stability_phrase(evidence)}"
            if is_stable(evidence):
                return probe, evidence
            tried.append((scale, probe, evidence))
        family.loss_scale_added, probe, evidence = tried[0]
        return probe, evidence

    def _try_remedy(
        self, family: SearchFamily, black: list[str], untried: list[str]
    ) -> Steps[tuple[SearchRound, list[SeedEvidence]] | None]:
        """Probe the next remedy of the spec not tried yet (``remedies``); the family keeps it when that
        makes every seed stable. None when every remedy was tried."""
        if not untried:
            return None
        name = untried.pop(0)
        value = self.spec.remedies[name]
        family.remedies_added[name] = value
        probe, evidence = yield from self._probe(family, "remedy", black, self.search_clip)
        stable = is_stable(evidence)
        probe.decision = f"remedy {name}={arg_text(value)}: {stability_phrase(evidence)}" + (
            "" if stable else "; dropped"
        )
        if not stable:
            del family.remedies_added[name]
        return probe, evidence

    def _grow(self, family: SearchFamily) -> Steps[list[str] | None]:
        black: list[str] = []
        refused: list[str] = []  # classes whose probe was not_applicable
        untried = list(self.spec.remedies)  # tried where a class would be added, before the classes
        probe, evidence = yield from self._probe(family, "grow", black, self.search_clip)
        while not is_stable(evidence):
            scaling = needs_loss_scaling(evidence, family.effective_loss_scale != "none")
            if scaling is not None:
                probe.decision = scaling
                probe, evidence = yield from self._try_loss_scaling(family, black)
                continue
            remedy = yield from self._try_remedy(family, black, untried)
            if remedy is not None:
                tried, tried_evidence = remedy
                if is_stable(tried_evidence):
                    probe, evidence = tried, tried_evidence
                continue
            step = next_class(black, evidence, self.spec.search_rounds, refused)
            probe.decision = step.decision
            if step.add is None:
                return None
            grown = [*black, step.add]
            tried, tried_evidence = yield from self._probe(family, "grow", grown, self.search_clip)
            why = not_applicable(tried_evidence)
            if why is not None:
                # the class could not be kept in FP32: that says nothing about whether it would
                # help, so go back to the list before it and try the next class the replays named
                tried.decision = f"not applicable ({why}): back to the list without {step.add}"
                refused.append(step.add)
                continue
            black, probe, evidence = grown, tried, tried_evidence
        probe.decision = probe.decision or stability_phrase(evidence)  # a loss-scale probe said its own
        return black

    def _shrink(self, family: SearchFamily, black: list[str]) -> Steps[list[str]]:
        if not shrinkable(black):
            return black
        for name in list(black):
            candidate = [c for c in black if c != name]
            probe, evidence = yield from self._probe(family, "shrink", candidate, self.search_clip)
            stable = is_stable(evidence)
            probe.decision = shrink_decision(name, stable, not_applicable(evidence) is None)
            if stable:
                black = candidate
        return black

    def _confirm(self, family: SearchFamily, black: list[str]) -> Steps[None]:
        confirm = self.spec.confirm
        clips = self._best_clips(family, black, confirm.top)
        seeds = self.seeds + [max(self.seeds) + 1 + i for i in range(confirm.seeds)]
        steps = self.spec.steps * confirm.steps_factor
        store = SweepStore(self.store.root, CONFIRM_FOLDER)
        yield from self._run([self._fp32_of(family, seed, steps) for seed in seeds], store)
        held = []
        for clip in clips:
            probe, evidence = yield from self._probe(family, "confirm", black, clip, seeds, steps, store)
            ok = is_stable(evidence)
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
        """The clip thresholds of the ``top`` best configurations on ``black``, by the ranking after the
        family's last round (in the sweep's folder)."""
        ranking = self.ran.analyze(figures=False).ranking
        mine = ranking[
            (ranking["amp_level"] == family.amp_level)
            & (ranking["dtype"] == family.dtype)
            & (ranking["loss_scale"] == family.loss_scale)
            & (ranking["black_list"].map(tuple) == tuple(sorted(black)))
            & (ranking["workload_args"].map(tuple) == workload_args_of(family.arguments))
        ].sort_values("rank")
        clips = [None if c != c else float(c) for c in mine["clip"].head(top)]  # NaN is "no clip"
        return clips or [self.search_clip]

    def _save(self) -> None:
        self.log.trials_run = len(self.planned)
        self.store.write_text(SEARCH_FILE, encode_search(self.log))

    def _search(self) -> Steps[None]:
        """The search, from the baselines to the confirmation, family by family."""
        grid = self.spec.grid
        own = list(self.workload.own_classes)
        self.log.candidate_classes = own
        families = [
            SearchFamily(
                level,
                dtype,
                scale,
                loss_placement=placement,
                workload_args=dict(zip(grid.workload_args, args)),
            )
            for level in grid.amp_level
            if level != FP32_LEVEL
            for dtype in grid.dtype
            for scale in grid.loss_scale
            for placement in grid.loss_placement
            for args in itertools.product(*grid.workload_args.values())
        ]
        self.log.grid_equivalent = (2 ** len(own)) * len(self.seeds) * len(grid.clip) * len(families)
        self.log.families = families
        for family in families:
            # FP32 runs of every seed: what each probe's verdict is measured against
            yield from self._run([self._fp32_of(family, seed) for seed in self.seeds])
            black = yield from self._grow(family)
            if black is None:
                family.conclusion = "no stable black list found; the rounds below show why"
                self._save()
                continue
            black = yield from self._shrink(family, black)
            family.minimal_black_list = black
            for clip in grid.clip:
                if clip != self.search_clip:
                    probe, evidence = yield from self._probe(family, "clip", black, clip)
                    probe.decision = stability_phrase(evidence)
            listed = ", ".join(black) if black else "nothing beyond MindSpore's default list"
            family.conclusion = f"minimal FP32 set: {listed}"
            if family.loss_scale_added:
                family.conclusion += (
                    f"; with loss scale {family.loss_scale_added} (gradients underflow without it)"
                )
            if family.remedies_added:
                set_ = ", ".join(f"{n}={arg_text(v)}" for n, v in family.remedies_added.items())
                family.conclusion += f"; with {set_} (a remedy of the spec)"
            self._save()
            if self.spec.confirm.seeds or self.spec.confirm.steps_factor > 1:
                yield from self._confirm(family, black)
            self._save()
