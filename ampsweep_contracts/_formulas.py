"""Per-trial numbers that the trainer writes and the analysis recomputes.

Defined once so the ``trials`` row and the report can never disagree.
"""

from __future__ import annotations

import numpy as np

#: ``final_loss`` is the mean finite loss over this share of the trial's steps.
FINAL_FRACTION = 0.10


def final_loss_rows(n_steps: int) -> int:
    """How many trailing steps ``final_loss`` averages: ``n // 10``, at least one."""
    return max(1, n_steps // 10)


def final_loss(loss: np.ndarray) -> float | None:
    """Mean of the finite losses among the last ``final_loss_rows`` steps; None if none."""
    loss = np.asarray(loss, dtype=np.float64)
    if not len(loss):
        return None
    tail = loss[-final_loss_rows(len(loss)) :]
    tail = tail[np.isfinite(tail)]
    return float(tail.mean()) if len(tail) else None


def first_nonfinite_step(loss: np.ndarray) -> int | None:
    """Index of the first step whose *loss* was inf/NaN (gradients do not count)."""
    bad = np.flatnonzero(~np.isfinite(np.asarray(loss, dtype=np.float64)))
    return int(bad[0]) if len(bad) else None
