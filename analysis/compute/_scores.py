"""Per-trial scores, including the two relative to FP32: the target loss and the speed.

The step scan runs in two phases: the O0 trials first, whose final losses give the fallback target, then
every other trial with its target known. The FP32 reference, the target and the speed are docs/ranking.md's
"Per-trial figures"; with swept workload arguments "the same workload" means the same *model*
(:func:`_model`): a reference shares a trial's swept arguments, except precision knobs, at float32.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ampsweep.contracts import (
    FP32_LEVEL,
    TARGET_FROM_FP32,
    LearningEvidence,
    Outcome,
    TrialVerdict,
    Verdict,
    arg_column,
    is_float32,
    is_precision_knob,
    number,
    reference_value,
    trial_verdict,
    underflow_excess,
)

from .._model import Fp32Reference
from ._faults import Fault, input_trials, read_faults
from ._fp32_break import BROKE_AT, cut_at_fp32_break
from ._load import arg_columns, load_trials
from ._side_files import swept_values
from ._steps import aggregate_steps

UNSTABLE_OUTCOMES = (Outcome.DIVERGED.value, Outcome.FAILED.value)
#: the scores' column naming what a trial's FP32 reference must share: the workload and its swept
#: arguments other than precision knobs (:func:`_model`)
MODEL = "model"
#: the scores' column of a trial's swept-argument values as positions in the spec's lists (``_args_preference``)
ARGS_PREFERENCE = "args_preference"


def ranked_trials(trials: pd.DataFrame) -> pd.Series:
    """Which trials count in the ranking: not one ``equivalent_to`` a committed trial (an equivalent of a
    trial not committed stays, or a partial sweep would lose the configuration altogether)."""
    committed = set(trials["trial_id"])
    duplicate = trials["equivalent_to"].notna() & trials["equivalent_to"].isin(committed)
    return ~duplicate


def _model(trials: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Each trial's model (the workload with its swept arguments that are not precision knobs), and
    whether its precision knobs are at float32: what makes an O0 trial the FP32 reference of a trial.

    A swept ``lr`` or ``hidden`` changes what FP32 learns, so a trial is held to the O0 run with the
    same values; a swept ``softmax_dtype`` is what mixed precision changes, so the reference has it at
    float32 (where the sweep ran float32 at all).
    """
    model = trials["workload"].astype(str)
    at_fp32 = pd.Series(True, index=trials.index)
    for column in arg_columns(trials):
        values = trials[column]
        known = sorted(set(values.dropna()))
        if not is_precision_knob(known):
            model = model + f"|{column}=" + values.fillna("").astype(str)
        elif reference_value(known) is not None:
            at_fp32 &= values.isna() | values.map(is_float32)
    return model, at_fp32


def _args_preference(trials: pd.DataFrame, order: dict[str, list[str]]) -> pd.Series:
    """Each trial's swept workload arguments as positions in the spec's lists ('000.001'): the values are
    listed cheapest first, so between configurations that tie, the lower text wins. '' with none swept."""
    if not order:
        return pd.Series("", index=trials.index, dtype="object")
    parts = []
    for name, values in order.items():
        column = arg_column(name)
        got = trials[column] if column in trials.columns else pd.Series(None, index=trials.index)
        position = {value: i for i, value in enumerate(values)}
        parts.append(got.map(lambda v, p=position: f"{p.get(v, len(p)):03d}"))
    return pd.concat(parts, axis=1).agg(".".join, axis=1)


def _reference_mask(trials: pd.DataFrame, at_fp32: pd.Series) -> pd.Series:
    o0 = (trials["amp_level"] == FP32_LEVEL) & trials["ranked"] & at_fp32
    plain = o0 & trials["clip"].isna() & (trials["black_list"].map(len) == 0)
    keys = [MODEL, "device_kind", "seed"]
    has_plain = plain.groupby([trials[k] for k in keys], dropna=False).transform("any")
    return plain | (o0 & ~has_plain)


def _baseline_finals(trials: pd.DataFrame, final: pd.Series) -> pd.Series:
    """FP32 final loss per trial, NaN where unknown.

    Numerics differ between backends, so the FP32 run of the same workload,
    device kind and seed is used first, then the median over that kind's
    seeds; only a kind with no FP32 run at all borrows another kind's
    (same seed, then any seed).
    """
    ref = trials["reference"] & np.isfinite(final)
    completed = ref & (trials["outcome"] == "completed")
    use = completed if completed.any() else ref
    refs = trials.loc[use, [MODEL, "device_kind", "seed"]].assign(final=final[use])
    lookups = [
        (
            (MODEL, "device_kind", "seed"),
            refs.groupby([MODEL, "device_kind", "seed"], dropna=False),
        ),
        ((MODEL, "device_kind"), refs.groupby([MODEL, "device_kind"], dropna=False)),
        ((MODEL, "seed"), refs.groupby([MODEL, "seed"], dropna=False)),
        ((MODEL,), refs.groupby([MODEL], dropna=False)),
    ]
    tables = [(keys, group["final"].median().to_dict()) for keys, group in lookups]
    out = []
    for row in trials[[MODEL, "device_kind", "seed"]].itertuples(index=False):
        value = np.nan
        for keys, table in tables:
            key = tuple(getattr(row, k) for k in keys)
            value = table.get(key if len(key) > 1 else key[0], table.get(key, np.nan))
            if np.isfinite(value):
                break
        out.append(value)
    return pd.Series(out, index=trials.index, dtype="float64")


def _fp32_spread(scores: pd.DataFrame, level: pd.Series, start: pd.Series) -> pd.Series:
    """The FP32 seeds' seed noise per trial: how far their levels lie apart, as a share of FP32's median
    decrease, for the same workload and device kind (0 with fewer than two seeds).

    The seeds whose FP32 run broke are a group of their own (their level is the best they reached before
    the break, :mod:`analysis.compute._fp32_break`): a run cut short is no sample of a whole run's noise.
    """
    cut = scores[BROKE_AT].notna()
    ref = scores["reference"] & np.isfinite(level) & np.isfinite(start)
    keys = [scores.loc[ref, MODEL], scores.loc[ref, "device_kind"], cut[ref]]
    groups = pd.DataFrame({"final": level[ref], "start": start[ref]}).groupby(keys, dropna=False)
    spread: dict[object, float] = {}
    for key, group in groups:
        decrease = float(group["start"].median() - group["final"].median())
        if len(group) > 1 and decrease > 0:
            spread[key] = float(group["final"].max() - group["final"].min()) / decrease
    out = [spread.get(key, 0.0) for key in zip(scores[MODEL], scores["device_kind"], cut)]
    return pd.Series(out, index=scores.index, dtype="float64")


def _own_seed(scores: pd.DataFrame, values: pd.Series, baseline: pd.Series) -> pd.Series:
    """``baseline``, except on the seeds whose FP32 run broke: there, the median of that seed's own
    FP32 runs over the steps before the break (another seed's whole run is no measure of them)."""
    cut = scores[BROKE_AT].notna()
    keys = [MODEL, "device_kind", "seed"]
    ref = scores["reference"] & cut & np.isfinite(values)
    own = values[ref].groupby([scores.loc[ref, k] for k in keys], dropna=False).median().to_dict()
    mine = [
        own.get(tuple(row), np.nan) if c else np.nan
        for row, c in zip(scores[keys].itertuples(index=False), cut)
    ]
    return pd.Series(mine, index=scores.index, dtype="float64").fillna(baseline.where(~cut))


def _final_loss(trials: pd.DataFrame, steps: pd.DataFrame) -> pd.Series:
    """Prefer the figure recomputed from steps; fall back to the trainer's own."""
    return steps["final_loss_steps"].fillna(trials["final_loss"])


def trial_scores(
    sweep_dir: str | Path, trials: pd.DataFrame | None = None, faults: list[Fault] | None = None
) -> pd.DataFrame:
    """The trials table with every per-trial score added (``ranked``, ``reference``, ``target``, ``final``,
    ``first_nonfinite``, ``clip_rate``, ``speed_vs_fp32``, the step aggregates, ``verdict``, ...). The one
    scoring pass: on a seed whose FP32 run broke, every trial is scored and judged on its steps before that
    step (:mod:`analysis.compute._fp32_break`). Trials not ranked (equivalents) keep NaN scores.
    """
    trials = load_trials(sweep_dir) if trials is None else trials.copy()
    trials = trials.reset_index(drop=True)
    # a trial that broke on a bad batch is reported, not ranked: every configuration of its seed saw it
    faults = read_faults(sweep_dir, list(trials["trial_id"])) if faults is None else faults
    bad_batch = input_trials(faults)
    trials["ranked"] = ranked_trials(trials) & ~trials["trial_id"].isin(list(bad_batch))
    trials[MODEL], at_fp32 = _model(trials)
    trials[ARGS_PREFERENCE] = _args_preference(trials, swept_values(sweep_dir))
    trials["reference"] = _reference_mask(trials, at_fp32)

    is_o0 = (trials["amp_level"] == FP32_LEVEL) & trials["ranked"]
    given = trials["target_loss"]
    phase1 = {t: g for t, g, o in zip(trials["trial_id"], given, is_o0) if o}
    steps = aggregate_steps(sweep_dir, phase1)
    steps = steps.set_index("trial_id").reindex(trials["trial_id"]).reset_index(drop=True)
    baseline_final = _baseline_finals(trials, _final_loss(trials, steps))

    derived = TARGET_FROM_FP32 * baseline_final
    target = given.where(given.notna(), derived)
    trials["target"] = target
    trials["target_source"] = np.where(
        given.notna(),
        "workload target_loss",
        np.where(derived.notna(), f"{TARGET_FROM_FP32} x FP32 final loss", "none"),
    )

    rescan = trials["ranked"] & (~is_o0 | (given.isna() & target.notna()))
    phase2 = {t: g for t, g, r in zip(trials["trial_id"], target, rescan) if r}
    if phase2:
        again = aggregate_steps(sweep_dir, phase2).set_index("trial_id")
        positions = trials.index[trials["trial_id"].isin(again.index)]
        for column in again.columns:
            steps.loc[positions, column] = again.loc[trials.loc[positions, "trial_id"], column].to_numpy()

    scores = pd.concat([trials, steps], axis=1)
    scores["final"] = _final_loss(trials, steps)
    scores["first_nonfinite"] = trials["first_nonfinite_step"].fillna(steps["first_nonfinite_step_seen"])
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = steps["clipped_steps"] / steps["finite_steps"].where(steps["finite_steps"] > 0)
        scores["clip_rate"] = rate.where(trials["clip"].notna())
        scores["steps_per_s"] = 1000.0 / steps["median_step_ms"].where(steps["median_step_ms"] > 0)
    scores["speed_vs_fp32"] = _speed_vs_fp32(scores)
    scores["unstable"] = scores["outcome"].isin(UNSTABLE_OUTCOMES)
    scores["underflow"] = _underflow(scores, _baseline_finals(trials, _column(trials, "zero_fraction")))
    # where a seed's FP32 run broke, its trials are scored on their steps before the break (once, here)
    scores, level = cut_at_fp32_break(sweep_dir, scores)
    scores["fp32_start"] = _own_seed(
        scores, scores["start_loss_steps"], _baseline_finals(trials, steps["start_loss_steps"])
    )
    scores["fp32_spread"] = _fp32_spread(scores, level, scores["start_loss_steps"])
    verdicts = _verdicts(scores, _own_seed(scores, level, baseline_final))
    scores["verdict"] = [v.verdict.value for v in verdicts]
    broke = [f" (before step {int(b):,}, where FP32 broke)" if pd.notna(b) else "" for b in scores[BROKE_AT]]
    scores["verdict_reason"] = [f"{v.reason}{b}" if v.reason else "" for v, b in zip(verdicts, broke)]
    return scores


def _fp32_reached(scores: pd.DataFrame) -> pd.Series:
    """Whether the FP32 reference of each trial's seed reached its target (None = unknown).

    The same workload, device kind and seed first; a seed without an FP32 run
    takes the majority of its kind's FP32 runs.
    """
    ref = scores[scores["reference"] & scores["target"].notna()]
    reached = ref["steps_to_target"].notna()
    keys = [MODEL, "device_kind", "seed"]
    by_seed = reached.groupby([ref[k] for k in keys], dropna=False).any().to_dict()
    by_kind = (reached.groupby([ref[MODEL], ref["device_kind"]], dropna=False).mean() >= 0.5).to_dict()
    out = []
    for row in scores[keys].itertuples(index=False):
        value = by_seed.get(tuple(row), by_kind.get((row.model, row.device_kind)))
        out.append(None if value is None else bool(value))
    return pd.Series(out, index=scores.index, dtype="object")


def _column(trials: pd.DataFrame, name: str) -> pd.Series:
    """A float column of the trials table; NaN where a sweep written before it existed has none."""
    if name not in trials.columns:
        return pd.Series(np.nan, index=trials.index, dtype="float64")
    return trials[name].astype("float64")


def _underflow(scores: pd.DataFrame, fp32_zero: pd.Series) -> pd.Series:
    """Each trial's ``underflow_excess``: gradient values float16 lost, beyond its FP32 run's own zeros."""
    values = [
        underflow_excess(number(mine), number(zeros))
        for mine, zeros in zip(_column(scores, "underflow_fraction"), fp32_zero)
    ]
    return pd.Series([np.nan if v is None else v for v in values], index=scores.index, dtype="float64")


def _verdicts(scores: pd.DataFrame, baseline_final: pd.Series) -> list[TrialVerdict]:
    """Each trial's verdict (``ampsweep.contracts.trial_verdict``) against its seed's FP32 run."""
    fp32_reached = _fp32_reached(scores)
    out = []
    for outcome, rows, final, start, to_target, target, fp32_final, fp32_start, spread, reached in zip(
        scores["outcome"],
        scores["step_rows"],
        scores["final"],
        scores["start_loss_steps"],
        scores["steps_to_target"],
        scores["target"],
        baseline_final,
        scores["fp32_start"],
        scores["fp32_spread"],
        fp32_reached,
    ):
        trial = LearningEvidence(
            final_loss=number(final),
            # a trial whose steps were not scanned (an equivalent duplicate) has no steps_to_target
            reached_target=None if pd.isna(target) or pd.isna(rows) else bool(pd.notna(to_target)),
            start_loss=number(start),
        )
        fp32 = (
            None
            if pd.isna(fp32_final) and reached is None
            else LearningEvidence(number(fp32_final), reached, number(fp32_start), float(spread))
        )
        out.append(trial_verdict(outcome, trial, fp32))
    return out


def trial_verdicts(sweep_dir: str | Path) -> dict[str, TrialVerdict]:
    """The verdict of every committed trial of a sweep folder, by trial id, as the report gives it.

    What the adaptive search decides from: the same verdicts the ranking and
    the report use, FP32's breaking step included.
    """
    scores = trial_scores(sweep_dir)
    return {
        trial_id: TrialVerdict(Verdict(verdict), reason)
        for trial_id, verdict, reason in zip(scores["trial_id"], scores["verdict"], scores["verdict_reason"])
    }


def _speed_vs_fp32(scores: pd.DataFrame) -> pd.Series:
    ref = scores["reference"] & scores["median_step_ms"].gt(0)
    base = scores.loc[ref].groupby([MODEL, "device_kind"], dropna=False)["median_step_ms"].median()
    out = []
    for model, kind, ms in zip(scores[MODEL], scores["device_kind"], scores["median_step_ms"]):
        base_ms = base.get((model, kind), np.nan)
        out.append(base_ms / ms if ms and ms > 0 else np.nan)
    return pd.Series(out, index=scores.index, dtype="float64")


def fp32_reference(scores: pd.DataFrame) -> Fp32Reference:
    """Summarise the FP32 reference trials for the silent-failure rule."""
    ref = scores[scores["reference"]]
    finals = ref["final"][np.isfinite(ref["final"])]
    with_target = ref[ref["target"].notna()]
    reached = bool(len(with_target)) and with_target["steps_to_target"].notna().mean() >= 0.5
    return Fp32Reference(
        final_loss=float(finals.median()) if len(finals) else float("nan"),
        reached_target=reached,
        n_trials=len(ref),
    )
