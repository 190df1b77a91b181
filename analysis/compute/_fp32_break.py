"""When FP32 itself breaks: judge every trial against FP32 only on the steps before it broke.

For every seed whose FP32 reference diverged, each trial of that seed (the FP32 one included) is scored
again on its own steps before FP32's first non-finite step: final loss, start loss and steps to target over
that window, and the verdict from those. FP32's own level there is the best it reached (:func:`best_level`),
not its last steps on their way to inf. :func:`analysis.compute._scores.trial_scores` applies it in its one
scoring pass, for the report and the adaptive search alike (docs/remedies.md, "When FP32 itself breaks").
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

from ampsweep.contracts import TARGET_FROM_FP32, TARGET_WINDOW, final_loss, start_loss, steps_to_target

from ._steps import read_trial_tables

#: Column added to the scores: the global step at which this trial's seed's FP32 run broke (NaN: it did not).
BROKE_AT = "fp32_broke_at"
_KEYS = ("model", "device_kind", "seed")  # the model: the workload and its swept non-precision arguments

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
    """The lowest ``TARGET_WINDOW``-step mean loss of a run: the best FP32 reached before it broke (a run
    that blows up spends its last steps on a loss growing by orders of magnitude: no level to learn like)."""
    finite = loss[np.isfinite(loss)]
    if len(finite) < TARGET_WINDOW:
        return final_loss(finite)
    return float(sliding_window_view(finite, TARGET_WINDOW).mean(axis=1).min())


def _number(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def cut_at_fp32_break(sweep_dir: str | Path, scores: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """``scores`` with every trial of a seed whose FP32 run diverged scored before that step, and each
    trial's level: its final loss, but for those FP32 runs the best they reached (:func:`best_level`).

    Changed columns, for those trials only: ``final``, ``start_loss_steps``,
    ``steps_to_target`` and ``target`` (when it came from FP32). Added for
    every trial: :data:`BROKE_AT`. The outcome and the first non-finite step
    never change: a trial that diverged stays diverged. The verdict is the
    caller's, from these.
    """
    scores = scores.copy()
    breaks = fp32_break_steps(scores)
    keys = [_key(row) for row in scores[list(_KEYS)].itertuples(index=False, name=None)]
    scores[BROKE_AT] = [float(breaks[k]) if k in breaks else np.nan for k in keys]
    level = scores["final"].astype("float64").copy()
    hit = scores.index[scores[BROKE_AT].notna() & scores["ranked"]]
    if not len(hit):
        return scores, level
    tables = read_trial_tables(sweep_dir, "steps", list(scores.loc[hit, "trial_id"]), ("step", "loss"))
    windows: dict[int, np.ndarray] = {}
    for i in hit:
        window = _window(tables.get(scores.at[i, "trial_id"]), int(scores.at[i, BROKE_AT]))
        if window is not None:
            windows[i] = window
    # FP32 over the same window, per seed: the best it reached there, which the target derives from
    reached: dict[Key, list[float]] = {}
    for i, loss in windows.items():
        if scores.at[i, "reference"]:
            level.at[i] = _number(best_level(loss))
            reached.setdefault(keys[i], []).append(level.at[i])
    fp32_level = {k: float(np.nanmedian(v)) if np.isfinite(v).any() else np.nan for k, v in reached.items()}
    for i, loss in windows.items():
        given = scores.at[i, "target_loss"]
        target = float(given) if pd.notna(given) else TARGET_FROM_FP32 * fp32_level.get(keys[i], np.nan)
        to_target = steps_to_target(loss, target)
        scores.at[i, "final"] = _number(final_loss(loss))
        scores.at[i, "start_loss_steps"] = _number(start_loss(loss))
        scores.at[i, "steps_to_target"] = np.nan if to_target is None else float(to_target)
        if pd.isna(given):
            scores.at[i, "target"] = target
        if not scores.at[i, "reference"]:
            level.at[i] = scores.at[i, "final"]
    return scores, level
