"""When a tighter clip changes nothing: the trial a sweep may copy from the same run with a looser clip.

The compiled step scales the gradients by ``clip / norm`` only where the
global norm exceeds the clip (``norm > clip``, in float32); elsewhere the
factor is exactly 1. Two trials that differ only in their clip therefore
compute the same numbers, step for step, until the first step whose norm
lies between the two thresholds. A run with the looser clip (or none) whose
norm never exceeded the tighter one is exactly the tighter trial's run: the
same losses, norms, flags and snapshots, with nothing clipped in either.

Clip thresholds are the axis users sweep most, and a threshold above every
norm a configuration reaches is common (every threshold above the peak of a
healthy run): those trials need no training of their own.
"""

from __future__ import annotations

import numpy as np

from ampsweep.contracts import FP32_LEVEL

from .._config import TrialConfig
from .._result import Outcome, TrialResult
from ..localization._diagnose import localize_mode
from ._baseline import Hint, PendingBaseline
from ._capture import is_clipped


def clip_engages(grad_norm: np.ndarray, clip: float | None) -> bool:
    """Whether a run with these global norms would have been clipped at ``clip`` at some step.

    Both comparisons count: the compiled step's, in float32 (an infinite
    norm is above any clip there), and the steps table's (``is_clipped``).
    """
    if clip is None:
        return False
    norm = np.asarray(grad_norm)
    in_graph = np.asarray(norm, dtype=np.float32) > np.float32(clip)
    return bool(in_graph.any() or is_clipped(norm, clip).any())


def same_run_with_clip(result: TrialResult, config: TrialConfig, hint: Hint) -> bool:
    """Whether ``config`` (``result``'s configuration but a tighter clip) would end exactly as ``result``.

    Only a completed run with nothing localized: a replay is not part of the
    step-for-step argument. A mixed-precision trial is also judged against
    its own seed's FP32 baseline (``hint``, as it would be sent): a copy is
    made only where that baseline is known and would not call it a silent
    failure either, so the copy's empty ``anomalies`` is what its own run
    would have written.
    """
    if result.outcome != Outcome.COMPLETED or result.anomalies.num_rows:
        return False
    if clip_engages(result.steps.column("grad_norm").to_numpy(zero_copy_only=False), config.clip):
        return False
    if config.amp_level == FP32_LEVEL:
        return True
    if isinstance(hint, PendingBaseline):
        return False  # its baseline still runs: the check cannot be made yet, so it trains
    return localize_mode(result.copied_as(config, "clip_never_reached"), hint) is None
