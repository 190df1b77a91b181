"""The figures' captions: the same words under a figure in report.html and its table in report.md.

Kept apart from the report's sections (:mod:`analysis.wording._text`) and free
of imports, so the drawing (:mod:`analysis.render._figures`) can take its
captions without importing anything that reads or computes.
"""

from __future__ import annotations

HEATMAP_CAPTION = (
    "Share of trials that diverged or failed, per AMP level and black list (rows) and clip threshold "
    "(columns). * finite on every seed but learns clearly worse than FP32 (silent failure)."
)
FAILURE_CAPTION = (
    "The failure: loss and global gradient norm of the top broken configuration around its first non-finite "
    "step, with FP32 from the same start, and the localized Cell's largest |x| against 65504."
)
