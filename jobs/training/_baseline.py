"""What a mixed-precision trial is judged against: its seed's FP32 run, known at dispatch or still running.

The worker needs it only at the trial's end, to tell a silent failure from a
healthy trial, so it waits for a running one only then: docs/internals.md
(Waiting for the FP32 run).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ampsweep.contracts import TARGET_FROM_FP32, steps_to_target

if TYPE_CHECKING:
    from .._result import TrialResult


@dataclass(frozen=True)
class Baseline:
    """What a seed's FP32 trial showed: its final loss, and whether it reached the target loss.

    ``reached_target`` None (not known) counts as reached, the cautious side. Without the flag, a
    short run whose FP32 ended above the target would replay every finite mixed-precision trial as a
    possible silent failure (tiny_transformer, 60 steps: 8-10 s each, for nothing).
    """

    final_loss: float
    reached_target: bool | None = None

    @classmethod
    def of_run(cls, final_loss: float | None, target_loss: float | None, loss: Any) -> Baseline | None:
        """The baseline of an FP32 run with these losses; None without a final loss.

        The target is the workload's, else ``TARGET_FROM_FP32`` x the final
        loss: what the analysis measures every run against.
        """
        if final_loss is None or not np.isfinite(final_loss):
            return None
        target = target_loss if target_loss is not None else TARGET_FROM_FP32 * final_loss
        reached = (
            None if loss is None else steps_to_target(np.asarray(loss, dtype=np.float64), target) is not None
        )
        return cls(float(final_loss), reached)

    @classmethod
    def of(cls, result: TrialResult) -> Baseline | None:
        """The baseline an FP32 trial's result gives its seed."""
        loss = result.steps.column("loss").to_numpy(zero_copy_only=False)
        return cls.of_run(result.final_loss, result.target_loss, loss)


@dataclass(frozen=True)
class PendingBaseline:
    """The baseline's call, running on another actor when the trial was sent.

    ``result`` holds the call's Ray object reference, inside a list: Ray then
    hands the trial the reference itself instead of waiting for its value
    before the trial may start.
    """

    result: list[Any]

    def baseline(self) -> Baseline | None:
        """The baseline, once its call is done; None where its actor died or its call failed."""
        import ray

        try:
            return Baseline.of(ray.get(self.result[0]))
        except Exception:  # noqa: BLE001 - no baseline then: the trial is judged as if it had none
            return None


#: what a trial is given of its FP32 baseline: the baseline, the running baseline, or nothing yet
Hint = Baseline | PendingBaseline | None


def resolve_baseline(hint: Hint) -> Baseline | None:
    """The hint's baseline, waiting for one that still runs."""
    return hint.baseline() if isinstance(hint, PendingBaseline) else hint
