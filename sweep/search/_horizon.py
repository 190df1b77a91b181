"""``horizon:``: continue the answer to the length of the user's training before it is final.

A sweep shorter than the user's training can recommend a configuration that
breaks later (the demo's 300-step answer goes NaN at ~1,126). With a
``horizon`` past the trials' end, every grid trial keeps its end state
(``TrialConfig.save_snapshot``), and after the grid:

1. the analysis ranks the sweep and names its recommendation;
2. that configuration continues on every seed from each seed's own snapshot
   to the horizon (the fork machinery of ``start_from``: a ``trial-<id>``
   snapshot instead of a prefix), in the sub-folder ``horizon/``; beside it,
   on the workers it would leave idle, the best runner-up that the FP32
   profile's forecast favours (one that keeps in FP32 a class forecast to pass
   65504 before the horizon, or scales the loss where gradients underflow);
3. the analysis reads the continuations (a configuration whose continuation
   broke is broken at that step, ``analysis.compute._load``) and ranks again.
   A break is localized like any trial's (``horizon.json`` keeps the Cell it
   named), and the recommendation moves to the next candidate, which is
   continued in turn, beside the best runner-up that keeps the named class in FP32.
4. It stops once the recommendation has held to the horizon on every seed, or
   nothing is left to continue.

The forecast orders the work; it never decides: every answer held, measured.
``horizon.json`` records what was continued, why, and how far each held.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ampsweep.contracts import (
    CONFIG_KEYS,
    FP32_LEVEL,
    HORIZON_FILE,
    HORIZON_FOLDER,
    PROFILE_FILE,
    Continued,
    HorizonLog,
    config_key,
    encode_horizon,
    name_of,
    trial_snapshot,
)
from ampsweep.jobs import TrialConfig

from .._config import RunConfig
from .._result import SweepResult
from ..cluster._launcher import run_sweep
from ..cluster._pool import WorkerPool
from ..planning._plan import SweepPlan
from ..planning._start import StartPoint
from ..store._store import SweepStore

if TYPE_CHECKING:
    import pandas as pd

    from ..planning._spec import SweepSpec

#: runners-up continued beside the recommendation in one round, ranked between it and the evidence's favourite
AHEAD = 3
#: the profile's risk names: an overflow forecast, or gradients that underflow
_OVERFLOW, _UNDERFLOW = "overflow", "underflow"


def _config_dict(key: tuple[Any, ...]) -> dict[str, Any]:
    config = dict(zip(CONFIG_KEYS, key, strict=True))
    config["black_list"] = list(config["black_list"])
    return config


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


def _read_profile(store: SweepStore) -> dict[str, Any] | None:
    try:
        text = store.read_text(PROFILE_FILE)
        return json.loads(text) if text else None
    except (OSError, ValueError):
        return None


class HorizonCheck:
    """The continuation of a finished grid to ``spec.horizon``; ``run`` adds its trials to ``totals``."""

    def __init__(
        self,
        spec: SweepSpec,
        plan: SweepPlan,
        resolved_yaml: str,
        out: str,
        config: RunConfig,
        profile: dict[str, Any] | None,
    ) -> None:
        self.spec = spec
        self.plan = plan
        self.resolved_yaml = resolved_yaml
        self.out = out
        self.config = config
        self.store = SweepStore(out, plan.name)
        self.continuations = SweepStore(self.store.root, HORIZON_FOLDER)
        self.by_id = {t.trial_id: t for t in plan.trials}
        self.end = max(t.start_step + t.steps for t in plan.trials)
        self.horizon = int(spec.horizon or self.end)
        if profile is None:  # a resumed grid ran no trial, so no profile: the one the folder keeps
            profile = _read_profile(self.store)
        self.at_risk, self.underflow = forecast_risks(profile, self.horizon)
        self.log = HorizonLog(horizon=self.horizon, trials_end=self.end, forecast=list(self.at_risk.values()))
        if self.underflow:
            self.log.forecast.append("gradients underflow float16 in FP32 (a loss scale may be needed)")
        #: configuration -> what its continuation showed
        self.done: dict[tuple[Any, ...], Continued] = {}
        self._round = 0

    # what to continue -------------------------------------------------------------------------
    def _favoured(self, row: Any) -> bool:
        """Whether the evidence favours this candidate: it keeps in FP32 a class the forecast puts at
        risk or a continuation's break named (as ``search: adaptive`` adds it), or scales the loss
        where FP32's gradients underflow."""
        if row["amp_level"] == FP32_LEVEL:
            return False
        kept = set(row["black_list"])
        return bool(kept & self._risky()) or (self.underflow and str(row["loss_scale"]) != "none")

    def _risky(self) -> set[str]:
        """The classes at risk: the forecast's, and those the breaks so far named."""
        named = {cell.cell_class for entry in self.done.values() for cell in entry.localized}
        return set(self.at_risk) | named

    def _next_batch(self, ranking: pd.DataFrame) -> list[tuple[Any, str, list[str]]]:
        """``(key, why, trial ids)`` of what this round continues; empty when the answer is final.

        The recommendation always; with evidence of what breaks (the forecast,
        or a class an earlier continuation's break named), also the best
        runner-up that keeps it in FP32 and (at most :data:`AHEAD` of) the ones
        ranked between the two, which the evidence expects to break: should the
        recommendation break, each would replace it in turn, so they are checked
        in the same round instead of one round each.
        """
        recommended = ranking[ranking["recommended"]]
        if recommended.empty:
            return []
        top = recommended.iloc[0]
        key = config_key(top)
        if key in self.done:
            if self.done[key].held:
                self.log.answer = str(top["label"])
            return []
        why = "the recommendation at the trials' end" if self._round == 1 else "the recommendation now"
        batch = [(key, why, str(top["trial_ids"]).split())]
        if self._favoured(top):
            return batch
        between: list[tuple[Any, str, list[str]]] = []
        stable = ranking[(ranking["stability"] == "stable") & ~ranking["recommended"]]
        for _, row in stable.sort_values("rank").iterrows():
            other = config_key(row)
            if other in self.done or other == key:
                continue
            ids = str(row["trial_ids"]).split()
            if self._favoured(row):
                kept = ", ".join(sorted(set(row["black_list"]) & self._risky()))
                why = (
                    f"the evidence favours it (keeps {kept} in FP32)"
                    if kept
                    else "the forecast favours it (scales the loss)"
                )
                return [*batch, *between, (other, why, ids)]
            if len(between) < AHEAD:
                between.append((other, "a runner-up ranked above the evidence's favourite", ids))
        return batch

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

    def _continuation(self, key: tuple[Any, ...], parent_id: str) -> tuple[TrialConfig, StartPoint] | None:
        """The trial that continues ``parent_id``'s seed of configuration ``key`` to the horizon."""
        parent = self.by_id.get(parent_id)
        if parent is None:
            return None
        snapshot = trial_snapshot(self._source(parent_id))
        if self.store.read_snapshot(snapshot) is None:
            return None  # a trial that broke, or one run before the sweep had a horizon
        config = _config_dict(key)
        end = parent.start_step + parent.steps
        trial = replace(
            parent,
            amp_level=config["amp_level"],
            black_list=tuple(config["black_list"]),
            clip=config["clip"],
            start_step=end,
            start_from=snapshot,
            steps=self.horizon - end,
            save_snapshot=False,
        )
        return trial, StartPoint(step=end, snapshot=snapshot)

    # running ------------------------------------------------------------------------------------
    def _run_round(
        self, batch: list[tuple[Any, str, list[str]]], totals: SweepResult, pool: WorkerPool | None
    ) -> None:
        trials: list[TrialConfig] = []
        starts: dict[str, StartPoint] = {}
        entries: list[Continued] = []
        for key, why, parents in batch:
            entry = Continued(
                label=name_of(_config_dict(key)), config=_config_dict(key), round=self._round, why=why
            )
            for parent_id in parents:
                made = self._continuation(key, parent_id)
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
            entries.append(entry)
        plan = SweepPlan(HORIZON_FOLDER, self.plan.workload_ref, self.plan.devices, trials, {}, starts)
        if trials:
            # no profile per round: the grid's own is the forecast, and the report shows that one
            config = replace(self.config, profile=False)
            totals.add_run(
                run_sweep(plan, self.resolved_yaml, self.store.root, config, self.store.snapshot_folder, pool)
            )
        for (key, _, _), entry in zip(batch, entries, strict=True):
            self._judge(entry, trials)
            self.done[key] = entry
            self.log.continued.append(entry)
        self.log.trials_run += len(trials)
        self._save()

    def _judge(self, entry: Continued, trials: list[TrialConfig]) -> None:
        """Each seed's last finite step, and where it broke, from the committed continuations."""
        by_id = {t.trial_id: t for t in trials}
        for trial_id in entry.trial_ids:
            trial = by_id[trial_id]
            try:
                row = self.continuations.trial_row(trial_id, ["outcome", "first_nonfinite_step"])
            except (OSError, KeyError, ValueError):
                continue
            seed = str(trial.seed)
            broke = row.get("first_nonfinite_step")
            if row.get("outcome") == "completed" and broke is None:
                entry.held_to[seed] = self.horizon
                continue
            at = int(broke) if broke is not None else trial.start_step
            entry.broke_at[seed] = at
            entry.held_to[seed] = max(at - 1, trial.start_step)
            cell = self.continuations.localized_cell(trial_id)
            if cell is not None:
                entry.localized.append(cell)

    def _save(self) -> None:
        self.store.write_text(HORIZON_FILE, encode_horizon(self.log))

    def run(self, totals: SweepResult, pool: WorkerPool | None = None) -> SweepResult:
        """Continue until the recommendation held (``pool``: the grid's workers, reused)."""
        from ampsweep.analysis import analyze

        limit = len(self.plan.trials) + 1  # every round continues at least one new configuration
        while self._round < limit:
            self._round += 1
            batch = self._next_batch(analyze(self.store.root, figures=False).ranking)
            if not batch:
                break
            self._run_round(batch, totals, pool)
        self._save()
        return totals
