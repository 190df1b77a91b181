"""The FP32 final loss a mixed-precision trial is judged against, known at dispatch or still running.

The worker needs its seed's FP32 final loss only at the trial's end, to tell
a silent failure (finite, but far worse than FP32) from a healthy trial. A
trial handed out while its baseline still runs (a sweep with more actors
than FP32 trials) used to go without one, and its silent failure was never
replayed; now the driver sends a reference to the baseline that another
actor runs at that moment, and the worker waits for it only if the trial
ends finite.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PendingBaseline:
    """The baseline's call, running on another actor when the trial was sent.

    ``result`` holds the call's Ray object reference, inside a list: Ray then
    hands the trial the reference itself instead of waiting for its value
    before the trial may start.
    """

    result: list[Any]

    def final_loss(self) -> float | None:
        """The baseline's final loss, once it is done; None where its actor died or its call failed."""
        import ray

        try:
            return ray.get(self.result[0]).final_loss
        except Exception:  # noqa: BLE001 - no baseline then: the trial is judged as if it had none
            return None


#: what a trial is given of its baseline: the final loss, the running baseline, or nothing yet
Hint = float | PendingBaseline | None


def baseline_loss(hint: Hint) -> float | None:
    """The hint's final loss, waiting for a baseline that still runs."""
    return hint.final_loss() if isinstance(hint, PendingBaseline) else hint
