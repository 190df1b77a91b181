"""What the report says about what the configuration did not cause: a localization that failed.

A failed localization leaves its trial's result standing (jobs: ``diagnose``), with an ``anomalies``
row of cause ``unknown`` whose note says where and why; the report lists it under what the sweep
could not decide, never as a Cell to black-list.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ampsweep.contracts import Configuration


def trial_label(row: Any) -> str:
    """A trial as the report names it: 'O2 · no clip · seed 0'."""
    return Configuration.from_row(row).trial_name("unknown" if pd.isna(row["seed"]) else int(row["seed"]))


def unlocalized_lines(rows: pd.DataFrame, scores: pd.DataFrame) -> list[str]:
    """'O2 · no clip · seed 1: localization failed on rank 1 of 2: RuntimeError: ...', one per trial."""
    if rows.empty:
        return []
    trials = scores.set_index("trial_id")
    return [
        f"{trial_label(trials.loc[trial_id])}: {note}"
        for trial_id, note in zip(rows["trial_id"], rows["note"])
        if trial_id in trials.index
    ]
