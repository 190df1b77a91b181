"""What the continuation to the horizon adds to a sweep's trials: how far each held, and where it broke.

The continuations in ``horizon/`` (docs/late-divergence.md) each extend one trial of the sweep; read here,
once, so the scores, the ranking, the search and the report judge a trial by how far it really held:
``held_to`` (:func:`ampsweep.contracts.held_to`), its continuation's outcome when that broke (a configuration
that breaks before the user's training ends is no answer) and ``continued_by`` (None: not continued).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ampsweep.contracts import Configuration, Continued, HorizonLog, held_to

from .._model import STATUS_RECOMMENDED, HeldTo, Recommendation

_BROKEN = ("diverged", "failed")


def _key(row: Any) -> tuple[Any, ...]:
    """A trial's configuration and seed (a continuation may have run on another device kind)."""
    return (Configuration.from_row(row).with_device_kind(""), int(row["seed"]))


def own_end(frame: pd.DataFrame) -> pd.Series:
    """The step each trial held to on its own (:func:`ampsweep.contracts.held_to`)."""
    start = frame["start_step"].fillna(0).astype(float)
    run = frame["steps_run"].astype(float).fillna(frame["steps"].astype(float))
    broke = frame["first_nonfinite_step"].astype(float)
    values = [
        float(held_to(s, r, b)) if np.isfinite(s + r) or pd.notna(b) else np.nan
        for s, r, b in zip(start, run, broke)
    ]
    return pd.Series(values, index=frame.index, dtype="float64")


def merge_continuations(frame: pd.DataFrame, continuations: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with ``held_to``, ``continued_by`` and the outcome of each continued trial's continuation."""
    frame = frame.copy()
    frame["held_to"] = own_end(frame) if len(frame) else pd.Series(dtype=float)
    frame["continued_by"] = pd.Series([None] * len(frame), index=frame.index, dtype="object")
    if continuations.empty or frame.empty:
        return frame
    by_key: dict[tuple[Any, ...], Any] = {}
    for index, row in frame.iterrows():
        by_key.setdefault(_key(row), index)
    ends = own_end(continuations)
    for position, (_, row) in enumerate(continuations.iterrows()):
        index = by_key.get(_key(row))
        if index is None or frame.at[index, "outcome"] in _BROKEN:
            continue
        frame.at[index, "continued_by"] = row["trial_id"]
        frame.at[index, "held_to"] = float(ends.iloc[position])
        if row["outcome"] in _BROKEN:
            frame.at[index, "outcome"] = row["outcome"]
            frame.at[index, "first_nonfinite_step"] = row["first_nonfinite_step"]
            if isinstance(row.get("error"), str) and row["error"]:
                frame.at[index, "error"] = row["error"]
    frame["held_to"] = frame["held_to"].astype(float).replace({np.inf: np.nan})
    return frame


def held_to_of(
    rec: Recommendation, ranking: pd.DataFrame, scores: pd.DataFrame, log: HorizonLog | None
) -> HeldTo | None:
    """How far the recommended configuration held, on how many seeds, and what that leaves open."""
    if rec.status != STATUS_RECOMMENDED or not rec.config_id or "held_to" not in scores.columns:
        return None
    row = ranking[ranking["config_id"] == rec.config_id]
    if row.empty:
        return None
    ids = str(row.iloc[0]["trial_ids"]).split()
    held = scores.loc[scores["trial_id"].isin(ids), "held_to"].astype(float).dropna()
    if held.empty:
        return None
    ends = (scores["start_step"].fillna(0).astype(float) + scores["steps"].astype(float)).dropna()
    trials_end = int(log.trials_end) if log is not None else int(ends.max())
    horizon = int(log.horizon) if log is not None else trials_end
    step = int(held.min())
    broke = tuple(
        _broke_words(entry) for entry in (log.continued if log is not None else []) if entry.broke_at
    )
    unchecked: tuple[str, ...] = ()
    if horizon > trials_end:
        continued = {str(name) for name in scores.loc[scores["continued_by"].notna(), "trial_id"]}
        stable = ranking[(ranking["stability"] == "stable") & (ranking["config_id"] != rec.config_id)]
        unchecked = tuple(
            str(other["label"])
            for _, other in stable.sort_values("rank").iterrows()
            if not set(str(other["trial_ids"]).split()) & continued
        )
    return HeldTo(
        step=step,
        seeds=int((held >= step).sum()),
        total=len(held),
        horizon=horizon,
        trials_end=trials_end,
        broke=broke,
        unchecked=unchecked,
    )


def _broke_words(entry: Continued) -> str:
    """'O2 · no clip broke at ~1,417 on 3/3 seeds (ExpSoftmax, forward)'."""
    steps = sorted(entry.broke_at.values())
    median = steps[len(steps) // 2]
    classes = sorted({f"{c.cell_class}, {c.phase}" for c in entry.localized})
    named = f" ({'; '.join(classes)})" if classes else ""
    return f"{entry.label} broke at ~{median:,} on {len(steps)}/{len(entry.held_to)} seeds{named}"
