"""What the continuation to the horizon adds to a sweep's trials: how far each held, and where it broke.

A sweep with ``horizon:`` past its trials' end continues its answer (and the
runners-up that would replace it) from each seed's snapshot, in the
sub-folder ``horizon/`` (``ampsweep.contracts._horizon``). Those trials are
not configurations of their own: each extends one trial of the sweep. Read
here, once, so the scores, the ranking, the search and the report all judge a
trial by how far it really held:

- ``held_to``: the global step the trial's configuration was finite to on
  that seed (its end, or its continuation's end; where it broke, the step it
  broke at);
- a trial whose continuation broke is ``diverged`` (or ``failed``) at the
  continuation's first non-finite step: a configuration that breaks before the
  user's training ends is no answer, however well its first steps went;
- ``continued_by``: the continuation's trial id (None: not continued).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ampsweep.contracts._horizon import CONFIG_KEYS

_BROKEN = ("diverged", "failed")


def _key(row: Any) -> tuple[Any, ...]:
    values: list[Any] = []
    for key in CONFIG_KEYS:
        value = row[key]
        if key == "black_list":
            value = tuple(sorted(value))
        elif key == "clip":
            value = (
                None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)
            )
        values.append(value)
    values.append(int(row["seed"]))
    return tuple(values)


def own_end(frame: pd.DataFrame) -> pd.Series:
    """The step each trial was finite to on its own: its end, or the step it broke at."""
    start = frame["start_step"].fillna(0).astype(float)
    run = frame["steps_run"].astype(float).fillna(frame["steps"].astype(float))
    end = start + run
    broke = frame["first_nonfinite_step"].astype(float)
    return broke.where(broke.notna(), end)


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
