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


def start_loss(loss: np.ndarray) -> float | None:
    """Mean of the finite losses among the first ``final_loss_rows`` steps: where a run starts from.

    The same number of rows as ``final_loss`` averages, so start and end carry
    the same noise.
    """
    loss = np.asarray(loss, dtype=np.float64)
    if not len(loss):
        return None
    head = loss[: final_loss_rows(len(loss))]
    head = head[np.isfinite(head)]
    return float(head.mean()) if len(head) else None


#: A finite trial "learns like FP32" when it achieves at least this share of the loss
#: decrease that FP32 achieves from the same start (``learning_share``). A ratio of
#: differences, so it holds for a loss of order 1 and one weighted by 1e-6 alike.
LEARNING_SHARE = 0.75
#: How many times the FP32 seeds' own spread (as a share of FP32's decrease) the
#: tolerance grows to when FP32 is noisier than ``1 - LEARNING_SHARE``.
SEED_NOISE_FACTOR = 2.0


def learning_share(start: float, final: float, fp32_final: float) -> float | None:
    """The share of FP32's loss decrease (``start - fp32_final``) that a run ending at ``final`` achieved.

    1 = as far as FP32, 0 = not at all, negative = worse than the start. None
    when FP32 did not decrease the loss: there is no decrease to share.
    """
    decrease = start - fp32_final
    if not (np.isfinite(decrease) and decrease > 0 and np.isfinite(final)):
        return None
    return float((start - final) / decrease)


def required_share(fp32_spread: float = 0.0) -> float:
    """The least ``learning_share`` that still counts as learning like FP32.

    ``fp32_spread``: how far the FP32 seeds' final losses lie apart, as a share of
    FP32's decrease. Seeds that differ by a lot among themselves in FP32 allow a
    mixed-precision trial the same latitude.
    """
    spread = fp32_spread if np.isfinite(fp32_spread) else 0.0
    return 1.0 - max(1.0 - LEARNING_SHARE, SEED_NOISE_FACTOR * max(spread, 0.0))


#: float16's smallest positive subnormal: a gradient value below it flushes to zero.
FLOAT16_TINY = 2.0**-24
#: float16's largest finite value.
FLOAT16_MAX = 65504.0
#: A Cell whose forward output (or input) is at least this many times FP32's at the same step
#: went wrong there, not merely drifted: float16 rounding moves a magnitude by well under 2x
#: (seed_repro's one-pass variance went to 461 against FP32's 2.2). Localization moves the blame
#: to such a Cell, and the report then shows its magnitude against FP32's, not an inner overflow.
FORWARD_BLOWUP = 10.0


def saturated(array: np.ndarray) -> bool:
    """Whether a float16 array holds a value at ±65504: an overflow on a chip that saturates.

    Ascend 910A-era chips, or later ones with INF/NaN mode off, turn an overflow
    into ±65504 and a NaN into 0, so a check for finite values sees nothing;
    detection and localization count a float16 value at the maximum as an overflow.
    """
    if array.dtype != np.float16 or array.size == 0:
        return False
    finite = array[np.isfinite(array)]
    return bool(finite.size) and bool((np.abs(finite) >= FLOAT16_MAX).any())


#: A silent failure is put down to underflow when at least this share of its gradient
#: values were lost to float16's range (``underflow_excess``).
UNDERFLOW_EVIDENCE = 0.25


def underflow_excess(underflow_fraction: float | None, fp32_zero_fraction: float | None) -> float | None:
    """The share of gradient values float16 lost: zero or below ``FLOAT16_TINY`` in this trial,
    less the share that is exactly zero in its seed's FP32 run (a ReLU's zeros are not underflow).

    Both are the ``trials`` table's fractions; for an FP32 trial this is the share
    of values that *would* flush to zero in float16.
    """
    if underflow_fraction is None or not np.isfinite(underflow_fraction):
        return None
    zeros = fp32_zero_fraction if fp32_zero_fraction is not None and np.isfinite(fp32_zero_fraction) else 0.0
    return float(max(0.0, underflow_fraction - zeros))


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
