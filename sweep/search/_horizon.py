"""``horizon:``: continue the answer to the length of the user's training before it is final.

What is continued, in which order and when it stops: ``docs/late-divergence.md`` ("The horizon"); why a
round is short: ``docs/internals.md`` ("The horizon's rounds"). The analysis reads the continuations (a
configuration whose continuation broke is broken at that step). A configuration a break asks for is
added as ordinary trials of the sweep from each seed's own start, not as the broken one's end state with
the class switched to FP32: that would test a change made mid-training, while the answer is a
configuration the user trains from the start, judged like every other against FP32 from the same start.
The forecast orders the work; it never decides.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ampsweep.contracts import (
    HORIZON_FILE,
    HORIZON_FOLDER,
    PROFILE_FILE,
    Configuration,
    Continued,
    HorizonLog,
    encode_horizon,
    held_to,
    trial_snapshot,
)
from ampsweep.jobs import TrialConfig

from .._result import SweepResult
from ..planning._plan import SweepPlan
from ..planning._start import StartPoint
from ..store._store import SweepStore
from ._rounds import Batch

if TYPE_CHECKING:
    import pandas as pd

    from ..planning._spec import SweepSpec

#: runners-up continued beside the recommendation in one round, ranked between it and the evidence's favourite
AHEAD = 3
#: the profile's risk names: an overflow forecast, or gradients that underflow
_OVERFLOW, _UNDERFLOW = "overflow", "underflow"


def forecast_risks(profile: dict[str, Any] | None, horizon: int) -> tuple[dict[str, str], bool]:
    """From the FP32 profile: the classes at risk of overflow before ``horizon`` (class -> why, in
    words), and whether gradients underflow. Empty where there is no profile."""
    classes: dict[str, str] = {}
    underflow = False
    for cell in (profile or {}).get("cells", []):
        name = str(cell.get("class") or "")
        at = cell.get("passes_max_at")
        if isinstance(at, (int, float)) and at <= horizon and name:
            classes.setdefault(name, f"{name} (`{cell.get('cell')}`) passes 65504 near step {int(at):,}")
        elif cell.get("risk") == _OVERFLOW and name:
            classes.setdefault(name, f"{name} (`{cell.get('cell')}`) is within 2x of 65504 in FP32 already")
        elif cell.get("risk") == _UNDERFLOW:
            underflow = True
    return classes, underflow


def _config(row: Any) -> Configuration:
    """A ranking row's or a trial's configuration, without the device kind (a continuation keeps it)."""
    return Configuration.from_row(row).with_device_kind("")


#: a round's candidates: (configuration, why, the trial ids of its seeds)
_Candidates = list[tuple[Configuration, str, list[str]]]


class HorizonCheck:
    """The continuation of a finished grid to ``spec.horizon``, a ``RoundSearch``; it counts into ``totals``."""

    def __init__(
        self,
        spec: SweepSpec,
        plan: SweepPlan,
        resolved_yaml: str,
        out: str,
        profile: dict[str, Any] | None,
        totals: SweepResult,
    ) -> None:
        self.spec = spec
        self.plan = plan
        self.resolved_yaml = resolved_yaml
        self.out = out
        self.totals = totals
        self.store = SweepStore(out, plan.name)
        self.continuations = SweepStore(self.store.root, HORIZON_FOLDER)
        self.by_id = {t.trial_id: t for t in plan.trials}
        self.end = max(t.start_step + t.steps for t in plan.trials)
        self.horizon = int(spec.horizon or self.end)
        if profile is None:  # a resumed grid ran no trial, so no profile: the one the folder keeps
            try:
                text = self.store.read_text(PROFILE_FILE)
                profile = json.loads(text) if text else None
            except (OSError, ValueError):
                profile = None
        self.at_risk, self.underflow = forecast_risks(profile, self.horizon)
        self.log = HorizonLog(horizon=self.horizon, trials_end=self.end, forecast=list(self.at_risk.values()))
        if self.underflow:
            self.log.forecast.append("gradients underflow float16 in FP32 (a loss scale may be needed)")
        #: configuration -> what its continuation showed
        self.done: dict[Configuration, Continued] = {}
        #: the round in flight: what each of its configurations' continuation will show
        self._running: list[tuple[Configuration, Continued]] = []
        self._round = 0
        self._limit = len(plan.trials) + 1  # every round continues at least one new configuration

    # the round protocol ----------------------------------------------------------------------------
    def propose(self) -> Batch | None:
        """Configurations a break asked for, else the continuations of this round; None: the answer is final."""
        while self._round < self._limit:
            self._round += 1
            lacking = self._lacking()
            if lacking:
                return self._add(lacking)
            # the sweep's ranking, with every round so far: the continuations' breaks included
            batch = self._candidates(self.totals.analyze(figures=False).ranking)
            if not batch:
                break
            made = self._continue(batch)
            if made is not None:
                return made
            self._observed([])  # nothing to continue from (no end state): recorded, and on to the next
        self._save()
        return None

    def observe(self, batch: Batch, ran: SweepResult) -> None:
        self.totals.add_run(ran)
        if batch.out == self.store.root:  # the continuations, in horizon/
            self._observed(batch.plan.trials)
        else:  # configurations added to the sweep: the next round ranks them with the rest
            self.log.trials_run += ran.ran
            self._save()

    def _observed(self, trials: list[TrialConfig]) -> None:
        for config, entry in self._running:
            self._judge(entry, trials)
            self.done[config] = entry
            self.log.continued.append(entry)
        self._running = []
        self.log.trials_run += len(trials)
        self._save()

    # what to continue -------------------------------------------------------------------------
    def _favoured(self, row: Any) -> bool:
        """Whether the evidence favours this candidate: it keeps in FP32 a class the forecast puts at
        risk or a continuation's break named (as ``search: adaptive`` adds it), or scales the loss
        where FP32's gradients underflow."""
        config = _config(row)
        if config.fp32:
            return False
        return bool(set(config.black_list) & self._risky()) or (
            self.underflow and config.loss_scale != "none"
        )

    def _risky(self) -> set[str]:
        """The classes at risk: the forecast's, and those the breaks so far named."""
        named = {cell.cell_class for entry in self.done.values() for cell in entry.localized}
        return set(self.at_risk) | named

    def _candidates(self, ranking: pd.DataFrame) -> _Candidates:
        """What this round continues; empty when the answer is final. The recommendation; with evidence of
        what breaks, also the best runner-up that keeps it in FP32 and (at most :data:`AHEAD` of) those ranked
        between the two: should the recommendation break, each would replace it in turn, so they are checked
        in the same round instead of one round each."""
        recommended = ranking[ranking["recommended"]]
        if recommended.empty:
            return []
        top = recommended.iloc[0]
        config = _config(top)
        if config in self.done:
            if self.done[config].held:
                self.log.answer = str(top["label"])
            return []
        why = "the recommendation at the trials' end" if self._round == 1 else "the recommendation now"
        batch = [(config, why, str(top["trial_ids"]).split())]
        if self._favoured(top):
            return batch
        between: _Candidates = []
        stable = ranking[(ranking["stability"] == "stable") & ~ranking["recommended"]]
        for _, row in stable.sort_values("rank").iterrows():
            other = _config(row)
            if other in self.done or other == config:
                continue
            ids = str(row["trial_ids"]).split()
            if self._favoured(row):
                kept = ", ".join(sorted(set(other.black_list) & self._risky()))
                why = (
                    f"the evidence favours it (keeps {kept} in FP32)"
                    if kept
                    else "the forecast favours it (scales the loss)"
                )
                return [*batch, *between, (other, why, ids)]
            if len(between) < AHEAD:
                between.append((other, "a runner-up ranked above the evidence's favourite", ids))
        return batch

    # configurations the grid lacked -------------------------------------------------------------
    def _lacking(self) -> dict[Configuration, tuple[Continued, list[str]]]:
        """After the last round: each broken configuration plus the classes its break named, where the
        sweep has no such configuration yet (an FP32 break, or a class already in FP32, asks for none)."""
        known = {t.configuration for t in self.plan.trials}
        lacking: dict[Configuration, tuple[Continued, list[str]]] = {}
        for entry in self.log.continued:
            if entry.round != self._round - 1 or not entry.broke_at:
                continue
            broken = Configuration.from_row(entry.config)
            named = sorted({cell.cell_class for cell in entry.localized} - set(broken.black_list))
            wanted = broken.with_black_list([*broken.black_list, *named])
            if named and not broken.fp32 and wanted not in known:
                lacking.setdefault(wanted, (entry, named))
        return lacking

    def _add(self, lacking: dict[Configuration, tuple[Continued, list[str]]]) -> Batch:
        """The trials of each lacking configuration, planned in the sweep's folder: the grid's trials of
        the broken one (seeds, start, steps; each keeps its end state) with the classes in FP32."""
        added: list[TrialConfig] = []
        for config, (entry, named) in lacking.items():
            self.log.added[config.name()] = (
                f"added: {entry.label} broke in {', '.join(named)}, and the grid lacked it with "
                f"{'that class' if len(named) == 1 else 'those classes'} in FP32"
            )
            broken = Configuration.from_row(entry.config)
            parents = [t for t in self.plan.trials if t.configuration == broken]
            added += [replace(parent, black_list=config.black_list) for parent in parents]
        plan = self.plan
        self.plan = replace(plan, trials=[*plan.trials, *added])
        self.by_id.update((t.trial_id, t) for t in added)
        self._limit += 1
        return Batch(self.plan, self.out)

    # running ------------------------------------------------------------------------------------
    def _source(self, trial_id: str) -> str:
        """The trained trial whose end state a (possibly copied) trial shares."""
        seen = set()
        while trial_id not in seen:
            seen.add(trial_id)
            try:
                row = self.store.trial_row(trial_id, ["copied_from"])
            except (OSError, KeyError, ValueError):
                return trial_id
            source = row.get("copied_from")
            if not source:
                return trial_id
            trial_id = str(source)
        return trial_id

    def _continuation(self, config: Configuration, parent_id: str) -> tuple[TrialConfig, StartPoint] | None:
        """The trial that continues ``parent_id``'s seed of ``config`` to the horizon."""
        parent = self.by_id.get(parent_id)
        if parent is None:
            return None
        snapshot = trial_snapshot(self._source(parent_id))
        if self.store.read_snapshot(snapshot) is None:
            return None  # a trial that broke, or one run before the sweep had a horizon
        end = parent.start_step + parent.steps
        trial = replace(
            parent,
            amp_level=config.amp_level,
            black_list=config.black_list,
            clip=config.clip,
            start_step=end,
            start_from=snapshot,
            steps=self.horizon - end,
            save_snapshot=False,
        )
        return trial, StartPoint(step=end, snapshot=snapshot)

    def _continue(self, batch: _Candidates) -> Batch | None:
        """The round's continuations in ``horizon/``; None when none has an end state to start from."""
        trials: list[TrialConfig] = []
        starts: dict[str, StartPoint] = {}
        for config, why, parents in batch:
            added = self.log.added.get(config.name())
            as_row = {k: v for k, v in config.as_row().items() if k != "device_kind"}
            why = f"{why}; {added}" if added else why
            entry = Continued(label=config.name(), config=as_row, round=self._round, why=why)
            for parent_id in parents:
                made = self._continuation(config, parent_id)
                if made is None:
                    continue
                trial, point = made
                if entry.trial_ids:
                    # one seed's break names the class (the evidence the next round needs); replaying
                    # every seed's was a third of a round's work on the horizon benchmark
                    trial = replace(trial, localize=False)
                trials.append(trial)
                starts[point.snapshot] = point
                entry.trial_ids.append(trial.trial_id)
            self._running.append((config, entry))
        if not trials:
            return None
        # no profile per round: the grid's own is the forecast, and the report shows that one
        return Batch(
            replace(self.plan, name=HORIZON_FOLDER, trials=trials, equivalent_to={}, starts=starts),
            self.store.root,
        )

    def _judge(self, entry: Continued, trials: list[TrialConfig]) -> None:
        """Each seed's last finite step, and where it broke, from the committed continuations."""
        by_id = {t.trial_id: t for t in trials}
        for trial_id in entry.trial_ids:
            trial = by_id[trial_id]
            try:
                row = self.continuations.trial_row(trial_id, ["outcome", "first_nonfinite_step", "steps_run"])
            except (OSError, KeyError, ValueError):
                continue
            seed = str(trial.seed)
            broke = row.get("first_nonfinite_step")
            entry.held_to[seed] = held_to(trial.start_step, row.get("steps_run") or 0, broke)
            if row.get("outcome") == "completed" and broke is None:
                continue
            entry.broke_at[seed] = int(broke) if broke is not None else trial.start_step
            cell = self.continuations.localized_cell(trial_id)
            if cell is not None:
                entry.localized.append(cell)

    def _save(self) -> None:
        self.store.write_text(HORIZON_FILE, encode_horizon(self.log))
