"""The ``anomalies`` rows whose ``cause`` is not ``numerics``: what went non-finite without being the
configuration's doing (docs/faults.md), and the devices where such NaNs did not reproduce more than once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ampsweep.contracts import INPUT, NOT_REPRODUCED, NUMERICS

from ._anomalies import anomaly_rows

#: a device with more ``not_reproduced`` runs than this is named as a suspect
SUSPECT_AFTER = 1


@dataclass(frozen=True)
class Fault:
    """One run's non-numerics finding (an ``anomalies`` row), and where it ran."""

    trial_id: str
    cause: str
    step: int | None
    note: str
    node: str
    device_id: str
    rank: int | None
    attempt: int


@dataclass(frozen=True)
class SuspectDevice:
    node: str
    device_id: str
    faults: int


def read_faults(sweep_dir: str | Path, trial_ids: list[str]) -> list[Fault]:
    """The non-numerics rows of the given trials, first runs before reruns."""
    rows = anomaly_rows(sweep_dir, trial_ids)
    rows = rows[rows["cause"].notna() & (rows["cause"] != NUMERICS)]
    return [
        Fault(
            trial_id=str(row["trial_id"]),
            cause=str(row["cause"]),
            step=None if pd.isna(row["replay_step"]) else int(row["replay_step"]),
            note="" if pd.isna(row["note"]) else str(row["note"]),
            node="" if pd.isna(row["node"]) else str(row["node"]),
            device_id="" if pd.isna(row["device_id"]) else str(row["device_id"]),
            rank=None if pd.isna(row["rank"]) else int(row["rank"]),
            attempt=1 if pd.isna(row["attempt"]) else int(row["attempt"]),
        )
        for row in rows.sort_values(["trial_id", "attempt"], kind="stable").to_dict("records")
    ]


def input_trials(faults: list[Fault]) -> set[str]:
    """Trials whose last run broke on a batch that already held a non-finite value: reported, not ranked."""
    last: dict[str, Fault] = {}
    for fault in faults:
        last[fault.trial_id] = fault
    return {trial for trial, fault in last.items() if fault.cause == INPUT}


def suspect_devices(faults: list[Fault]) -> list[SuspectDevice]:
    """Devices (node, device id) with more than ``SUSPECT_AFTER`` runs an exact replay did not reproduce."""
    counts: dict[tuple[str, str], int] = {}
    for fault in faults:
        if fault.cause == NOT_REPRODUCED:
            counts[(fault.node, fault.device_id)] = counts.get((fault.node, fault.device_id), 0) + 1
    return [
        SuspectDevice(node, device, n) for (node, device), n in sorted(counts.items()) if n > SUSPECT_AFTER
    ]
