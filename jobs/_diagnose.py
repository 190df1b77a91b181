"""After a trial: decide whether it needs a culprit, and find it by replay.

A trial that went non-finite (diverged, or completed with steps its loss
scaler skipped) is replayed up to its first non-finite step; a trial that
stayed finite but learned clearly worse than its FP32 baseline — the driver
passes that baseline's final loss when it has one — is replayed side by side
with FP32. A replay that itself fails never fails the trial: the trial's own
result stands, with no anomaly row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ampsweep.contracts import ANOMALIES_SCHEMA, learns_clearly_worse

from ._result import Outcome, TrialResult

if TYPE_CHECKING:
    from ._step import GraphCache


def localize_mode(result: TrialResult, fp32_final_loss: float | None) -> tuple[str, int | None] | None:
    """``(mode, until_step)`` for the replay this trial needs, or None."""
    if result.outcome == Outcome.FAILED or result.config.amp_level == "O0":
        return None
    nonfinite = result.steps.column("nonfinite").to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(nonfinite)
    if result.outcome == Outcome.DIVERGED or len(bad):
        return "nonfinite", int(bad[0]) if len(bad) else result.first_nonfinite_step
    if learns_clearly_worse(result.final_loss, fp32_final_loss):
        return "departure", None
    return None


def diagnose(
    result: TrialResult,
    workload_ref: str,
    fp32_final_loss: float | None,
    graphs: GraphCache | None = None,
) -> pa.Table:
    """The ``anomalies`` table of one finished trial: zero or one row.

    ``graphs``: the worker's compiled steps, so the replay can run the steps it
    need not look at on the trial's own graph instead of compiling one.
    """
    wanted = localize_mode(result, fp32_final_loss)
    if wanted is None:
        return ANOMALIES_SCHEMA.empty_table()
    from ._localize import localize

    mode, until_step = wanted
    try:
        return localize(
            result.config,
            workload_ref,
            mode=mode,
            device_target=result.placement.device_target,
            until_step=until_step,
            graphs=graphs,
        )
    except Exception:  # noqa: BLE001 - a replay is evidence, never a reason to lose the trial
        return ANOMALIES_SCHEMA.empty_table()
