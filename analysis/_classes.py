"""The categorical verdicts a configuration gets before any score is compared.

*Stability tier* and *clip class* are exact classes (no seed noise to weigh):
they are the first ranking criteria and the words the report uses for them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ampsweep.contracts import SILENT_LOSS_FACTOR, SILENT_LOSS_MARGIN, silent_loss_limit

from ._model import Fp32Reference

HEALTHY_CLIP_MAX = 0.3
TOO_SMALL_CLIP = 0.9

TIER_STABLE, TIER_FP32, TIER_SILENT, TIER_UNSTABLE = 0, 1, 2, 3
TIER_LABELS = {
    TIER_STABLE: "stable",
    TIER_FP32: "fp32 baseline",
    TIER_SILENT: "silent failure",
    TIER_UNSTABLE: "unstable",
}
CLIP_IN_BAND, CLIP_OFF, CLIP_NEVER, CLIP_UNKNOWN, CLIP_OFTEN, CLIP_TOO_SMALL = range(6)
CLIP_LABELS = {
    CLIP_IN_BAND: "in band",
    CLIP_OFF: "no clipping",
    CLIP_NEVER: "never fires",
    CLIP_UNKNOWN: "rate unknown",
    CLIP_OFTEN: "fires too often",
    CLIP_TOO_SMALL: "threshold too small",
}


def pct(rate: float) -> str:
    """A share as a percentage; '<1 %' rather than a misleading '0 %'."""
    if not np.isfinite(rate):
        return "-"
    if 0 < rate < 0.01:
        return "<1 %"
    return f"{rate * 100:.0f} %"


def num(value: float) -> str:
    return "-" if value is None or not np.isfinite(value) else f"{value:.3g}"


def clip_class(clip: float, rate: float) -> int:
    """Where a clip threshold's firing rate puts it."""
    if pd.isna(clip):
        return CLIP_OFF
    if pd.isna(rate):
        return CLIP_UNKNOWN
    if rate == 0:
        return CLIP_NEVER
    if rate <= HEALTHY_CLIP_MAX:
        return CLIP_IN_BAND
    if rate <= TOO_SMALL_CLIP:
        return CLIP_OFTEN
    return CLIP_TOO_SMALL


def clip_text(clip: float) -> str:
    """'1.0' rather than '1': reads as the threshold the user typed in the spec."""
    return "off" if pd.isna(clip) else str(float(clip))


def silent_reason(row: pd.Series, ref: Fp32Reference) -> str:
    """Why a configuration that stayed finite counts as failed ('' when it does not)."""
    final = row["final_loss_median"]
    if np.isfinite(final) and np.isfinite(ref.final_loss):
        if final > silent_loss_limit(ref.final_loss):
            return (
                f"median final loss {num(final)} > {SILENT_LOSS_FACTOR:g} x FP32 "
                f"{num(ref.final_loss)} + {SILENT_LOSS_MARGIN:g}"
            )
    if row["n_reached_target"] == 0 and ref.reached_target and pd.notna(row["target_median"]):
        return f"never reaches the target loss {num(row['target_median'])} while FP32 does"
    return ""


def tier(row: pd.Series, ref: Fp32Reference) -> tuple[int, str]:
    """The stability tier of a configuration row, and the silent-failure reason."""
    if row["n_diverged"] + row["n_failed"] > 0:
        return TIER_UNSTABLE, ""
    reason = silent_reason(row, ref)
    if reason:
        return TIER_SILENT, reason
    return (TIER_FP32 if row["baseline"] else TIER_STABLE), ""
