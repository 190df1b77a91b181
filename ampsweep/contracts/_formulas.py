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


#: A finite trial "learns clearly worse than FP32" (a silent float16 failure) when its
#: final loss exceeds ``SILENT_LOSS_FACTOR * fp32 + SILENT_LOSS_MARGIN``: a loss stuck
#: near chance while FP32 converges, not the few percent two healthy runs differ by.
SILENT_LOSS_FACTOR = 2.0
SILENT_LOSS_MARGIN = 0.1


def silent_loss_limit(fp32_final_loss: float) -> float:
    """The final loss above which a finite trial counts as a silent failure."""
    return SILENT_LOSS_FACTOR * fp32_final_loss + SILENT_LOSS_MARGIN


#: A trial "reaches the target" at the step that completes the first window of this many
#: consecutive steps whose mean loss is at or below the target loss.
TARGET_WINDOW = 10
#: Without a workload ``target_loss``, the target is this multiple of FP32's final loss (same seed).
TARGET_FROM_FP32 = 1.1


def steps_to_target(loss: np.ndarray, target: float | None) -> int | None:
    """1-based step that completes the first ``TARGET_WINDOW``-step window with mean loss <= target.

    None when no window gets there (or there is no target). A non-finite loss
    makes every window that holds it fail, as it should. The analysis computes
    the same figure while streaming the steps table in batches.
    """
    loss = np.asarray(loss, dtype=np.float64)
    if target is None or not np.isfinite(target) or len(loss) < TARGET_WINDOW:
        return None
    with np.errstate(invalid="ignore", over="ignore"):
        mean = np.lib.stride_tricks.sliding_window_view(loss, TARGET_WINDOW).mean(axis=1)
    hits = np.flatnonzero(mean <= target)
    return int(hits[0]) + TARGET_WINDOW if hits.size else None
