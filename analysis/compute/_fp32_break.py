"""When FP32 itself breaks: judge every trial against FP32 only on the steps before it broke.

A trial is judged against its seed's FP32 run (``ampsweep.contracts.trial_verdict``).
When that run diverged, its "final loss" is the mean of whatever finite losses
it had just before the NaN, and its steps to target end where it broke: a
mixed-precision run that went on for thousands of steps more would be compared
with a number from another point of training, or with a loss on its way to
inf. So for every seed whose FP32 reference diverged, each trial of that seed
(the FP32 one included) is re-scored on its own steps *before* FP32's first
non-finite step: final loss, start loss and steps to target over that window,
and the verdict from those. FP32's own level is the best it reached in that
window (:func:`best_level`), not the mean of its last steps, which for a run
that blows up are on their way to inf; the target derives from it. Seeds
whose FP32 run stayed finite keep the scores :func:`trial_scores` gave them.

This is applied once, by :func:`judged_scores`, for both the report
(:mod:`analysis._analyze`) and the adaptive search (:func:`trial_verdicts`):
the two must call every trial by the same name.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

from ampsweep.contracts import (
    TARGET_FROM_FP32,
    TARGET_WINDOW,
    LearningEvidence,
    TrialVerdict,
    Verdict,
    final_loss,
    start_loss,
    steps_to_target,
    trial_verdict,
)

from ._scores import trial_scores
from ._steps import read_trial_tables

__all__ = ["BROKE_AT", "fp32_break_steps", "judge_before_fp32_break", "judged_scores", "trial_verdicts"]

#: Column added to the scores: the global step at which this trial's seed's FP32 run broke (NaN: it did not).
BROKE_AT = "fp32_broke_at"
_KEYS = ("workload", "device_kind", "seed")

Key = tuple[Hashable, ...]


def _key(row: tuple[Hashable, ...]) -> Key:
    return tuple("" if pd.isna(v) else v for v in row)


def fp32_break_steps(scores: pd.DataFrame) -> dict[Key, int]:
    """(workload, device kind, seed) -> the first non-finite step of that seed's FP32 reference, where it diverged.

    Only a *diverged* FP32 reference counts (FP32 itself broke); with several
    (loss scales, dtypes an uncast network ignores) the earliest.
    """
    ref = scores[scores["reference"] & (scores["outcome"] == "diverged") & scores["first_nonfinite"].notna()]
    out: dict[Key, int] = {}
    for row, step in zip(ref[list(_KEYS)].itertuples(index=False, name=None), ref["first_nonfinite"]):
        key = _key(row)
        out[key] = min(out.get(key, int(step)), int(step))
    return out


def _window(frame: pd.DataFrame | None, cut: int) -> np.ndarray | None:
    """A trial's losses on its steps before ``cut`` (global steps), or None without step data."""
    if frame is None or "loss" not in frame.columns:
        return None
    return frame.loc[frame["step"] < cut, "loss"].to_numpy(dtype="float64")


def best_level(loss: np.ndarray) -> float | None:
    """The lowest ``TARGET_WINDOW``-step mean loss of a run: the best FP32 reached before it broke.

    A run that breaks by blowing up (a learning rate past the stability limit)
    spends its last steps before the NaN on a loss that grows by orders of
    magnitude; the mean of those steps (its "final loss") is no level to learn
    like. Its best level is: what FP32 did reach, from the same start.
    """
    finite = loss[np.isfinite(loss)]
    if len(finite) < TARGET_WINDOW:
        return final_loss(finite)
    return float(sliding_window_view(finite, TARGET_WINDOW).mean(axis=1).min())


def _number(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def judge_before_fp32_break(sweep_dir: str | Path, scores: pd.DataFrame) -> pd.DataFrame:
    """``scores`` with every trial of a seed whose FP32 run diverged re-scored before that step.

    Changed columns, for those trials only: ``final``, ``start_loss_steps``,
    ``steps_to_target``, ``target`` (when it came from FP32), ``fp32_start``,
    ``fp32_spread``, ``verdict`` and ``verdict_reason``. Added for every trial:
    :data:`BROKE_AT`. The outcome and the first non-finite step never change:
    a trial that diverged stays diverged.
    """
    scores = scores.copy()
    breaks = fp32_break_steps(scores)
    keys = [_key(row) for row in scores[list(_KEYS)].itertuples(index=False, name=None)]
    scores[BROKE_AT] = [float(breaks[k]) if k in breaks else np.nan for k in keys]
    hit = scores.index[scores[BROKE_AT].notna() & scores["ranked"]]
    if not len(hit):
        return scores
    tables = read_trial_tables(sweep_dir, "steps", list(scores.loc[hit, "trial_id"]), ("step", "loss"))
    windows: dict[int, np.ndarray] = {}
    for i in hit:
        window = _window(tables.get(scores.at[i, "trial_id"]), int(scores.at[i, BROKE_AT]))
        if window is not None:
            windows[i] = window

    # FP32 over the same window, per seed: where the decrease is measured from and what it reached
    fp32_final: dict[Key, list[float]] = {}
    fp32_start: dict[Key, list[float]] = {}
    for i, loss in windows.items():
        if scores.at[i, "reference"]:
            fp32_final.setdefault(keys[i], []).append(_number(best_level(loss)))
            fp32_start.setdefault(keys[i], []).append(_number(start_loss(loss)))
    final_of = {k: float(np.nanmedian(v)) if np.isfinite(v).any() else np.nan for k, v in fp32_final.items()}
    start_of = {k: float(np.nanmedian(v)) if np.isfinite(v).any() else np.nan for k, v in fp32_start.items()}
    spread_of = _spread(final_of, start_of)

    targets: dict[int, float] = {}
    for i in windows:
        given = scores.at[i, "target_loss"]
        targets[i] = float(given) if pd.notna(given) else TARGET_FROM_FP32 * final_of.get(keys[i], np.nan)
    reached = {
        k: any(
            steps_to_target(windows[i], targets[i]) is not None
            for i in windows
            if keys[i] == k and scores.at[i, "reference"]
        )
        for k in final_of
    }
    for i, loss in windows.items():
        key, target = keys[i], targets[i]
        to_target = steps_to_target(loss, target)
        scores.at[i, "final"] = _number(final_loss(loss))
        scores.at[i, "start_loss_steps"] = _number(start_loss(loss))
        scores.at[i, "steps_to_target"] = np.nan if to_target is None else float(to_target)
        if pd.isna(scores.at[i, "target_loss"]):
            scores.at[i, "target"] = target
        scores.at[i, "fp32_start"] = start_of.get(key, np.nan)
        scores.at[i, "fp32_spread"] = spread_of.get(key[:2], 0.0)
        trial = LearningEvidence(
            final_loss=None if not np.isfinite(scores.at[i, "final"]) else float(scores.at[i, "final"]),
            reached_target=None if not np.isfinite(target) else to_target is not None,
            start_loss=None
            if not np.isfinite(scores.at[i, "start_loss_steps"])
            else float(scores.at[i, "start_loss_steps"]),
        )
        fp32 = None
        if key in final_of:
            fp32 = LearningEvidence(
                None if not np.isfinite(final_of[key]) else final_of[key],
                reached.get(key),
                None if not np.isfinite(start_of[key]) else start_of[key],
                spread_of.get(key[:2], 0.0),
            )
        verdict = trial_verdict(scores.at[i, "outcome"], trial, fp32)
        scores.at[i, "verdict"] = verdict.verdict.value
        scores.at[i, "verdict_reason"] = (
            f"{verdict.reason} (before step {int(scores.at[i, BROKE_AT]):,}, where FP32 broke)"
            if verdict.reason
            else ""
        )
    return scores


def _spread(final_of: dict[Key, float], start_of: dict[Key, float]) -> dict[Key, float]:
    """The FP32 seeds' noise per (workload, device kind), over the windows before each broke.

    The same measure as :func:`analysis.compute._scores` uses (final losses'
    range as a share of the median decrease), over the seeds whose FP32 broke.
    """
    groups: dict[Key, list[Key]] = {}
    for key in final_of:
        groups.setdefault(key[:2], []).append(key)
    out: dict[Key, float] = {}
    for group, members in groups.items():
        finals = np.array([final_of[k] for k in members])
        starts = np.array([start_of[k] for k in members])
        ok = np.isfinite(finals) & np.isfinite(starts)
        if ok.sum() < 2:
            continue
        decrease = float(np.median(starts[ok]) - np.median(finals[ok]))
        if decrease > 0:
            out[group] = float(finals[ok].max() - finals[ok].min()) / decrease
    return out


def judged_scores(sweep_dir: str | Path, trials: pd.DataFrame | None = None) -> pd.DataFrame:
    """:func:`analysis.compute._scores.trial_scores`, judged against FP32 only before FP32 broke."""
    return judge_before_fp32_break(sweep_dir, trial_scores(sweep_dir, trials))


def trial_verdicts(sweep_dir: str | Path) -> dict[str, TrialVerdict]:
    """The verdict of every committed trial of a sweep folder, by trial id, as the report gives it.

    What the adaptive search decides from: the same verdicts the ranking and
    the report use, FP32's breaking step included.
    """
    scores = judged_scores(sweep_dir)
    return {
        trial_id: TrialVerdict(Verdict(verdict), reason)
        for trial_id, verdict, reason in zip(scores["trial_id"], scores["verdict"], scores["verdict_reason"])
    }
