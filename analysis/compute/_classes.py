"""The categorical verdicts a configuration gets before any score is compared.

*Stability tier* and *clip class* are exact classes (no seed noise to weigh):
they are the first ranking criteria and the words the report uses for them.
"""

from __future__ import annotations

import pandas as pd

from ampsweep.contracts import Verdict

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


def tier(row: pd.Series) -> tuple[int, str]:
    """The stability tier of a configuration row, from its verdict over seeds, and why it is silent.

    The verdict is ``ampsweep.contracts.configuration_verdict``: the adaptive
    search stops on the same verdict the ranking sorts by.
    """
    verdict = Verdict(row["verdict"])
    if verdict in (Verdict.DIVERGED, Verdict.FAILED):
        return TIER_UNSTABLE, ""
    if verdict is Verdict.SILENT:
        return TIER_SILENT, row["silent_reason"]
    return (TIER_FP32 if row["baseline"] else TIER_STABLE), ""
