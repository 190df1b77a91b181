"""Text shared by report.md and report.html, so the two never disagree.

Cells and sentences are plain (unescaped) strings; each renderer escapes
them for its own format.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from . import _rank
from ._rank import clip_text
from ._scores import TARGET_FROM_FP32
from ._steps import FINAL_FRACTION, SPIKE_FACTOR, SPIKE_WINDOW, TARGET_WINDOW

if TYPE_CHECKING:
    from ._report import SweepAnalysis

RANKING_HEADERS = (
    "#",
    "AMP",
    "black list",
    "clip",
    "loss scale",
    "dtype",
    "device",
    "seeds",
    "diverged",
    "clip rate",
    "steps to target",
    "final loss",
    "speed vs FP32",
    "rule",
)


def _num(value: float, digits: str = ".3g") -> str:
    return "-" if pd.isna(value) else format(float(value), digits)


def ranking_cells(ranking: pd.DataFrame) -> tuple[tuple[str, ...], list[list[str]]]:
    """Headers and one list of cell strings per ranking row."""
    rows = []
    for _, r in ranking.iterrows():
        flag = " (recommended)" if r["recommended"] else (" (FP32 baseline)" if r["baseline"] else "")
        rows.append(
            [
                f"{r['rank']}{flag}",
                str(r["amp_level"]),
                str(r["black_list_key"]),
                clip_text(r["clip"]),
                str(r["loss_scale"]),
                str(r["dtype"]),
                str(r["device_kind"]),
                str(r["n_trials"]),
                f"{r['n_diverged'] + r['n_failed']}/{r['n_trials']}",
                "-" if pd.isna(r["clip_rate_median"]) else f"{r['clip_rate_median'] * 100:.0f} %",
                _num(r["steps_to_target_median"], ".0f"),
                _num(r["final_loss_median"]),
                "-" if pd.isna(r["speed_vs_fp32_median"]) else f"{r['speed_vs_fp32_median']:.2f}x",
                str(r["rule"]),
            ]
        )
    return RANKING_HEADERS, rows


#: Equivalent trials listed by name in the reports; the rest are counted.
EQUIVALENT_EXAMPLES = 3


def equivalents_summary(scores: pd.DataFrame) -> tuple[int, list[str]]:
    """How many trials were not counted twice, and a few of them as examples."""
    dup = scores[~scores["ranked"]]
    examples = [
        f"{row.trial_id} ({row.amp_level} bl={row.black_list_key}) = {row.equivalent_to}"
        for row in dup.head(EQUIVALENT_EXAMPLES).itertuples(index=False)
    ]
    return len(dup), examples


def rules_text() -> list[str]:
    """The ranking rules as numbered sentences (shared by report.md and report.html)."""
    return [
        (
            "Stable mixed precision (no diverged or failed seed) first, then the FP32 baseline (O0, never "
            "recommended while a stable mixed-precision configuration exists), then silent failures (finite but "
            f"median final loss > {_rank.SILENT_LOSS_FACTOR:g} x FP32 + {_rank.SILENT_LOSS_MARGIN:g}, or never "
            "reaching the target while FP32 does), then configurations with diverged or failed seeds."
        ),
        "Fewer diverged or failed seeds.",
        (
            f"Clip rate (clipped / finite steps, median over seeds): in band (0, {_rank.HEALTHY_CLIP_MAX:g}] < "
            "no clipping < never fires < unknown < fires too often < above "
            f"{_rank.TOO_SMALL_CLIP:g} (threshold too small)."
        ),
        (
            f"Fewer steps to target: first step where the {TARGET_WINDOW}-step moving average of the loss is at "
            "or below the target (the workload's `target_loss`, else "
            f"{TARGET_FROM_FP32:g} x the FP32 final loss of the same seed); a seed that never gets there counts as "
            "infinitely slow."
        ),
        f"Lower final loss (mean finite loss over the last {FINAL_FRACTION:.0%} of steps).",
        "Higher speed vs FP32 (FP32 median step time / this median step time, same device kind).",
        "Fewer layer types kept in FP32.",
    ]


def rules_notes() -> list[str]:
    return [
        "Each device kind is ranked on its own, against the FP32 trials of the same kind.",
        (
            f"Loss spikes (reported, not ranked): a finite loss above {SPIKE_FACTOR:g} x the median of the previous "
            f"{SPIKE_WINDOW} finite losses."
        ),
    ]


def counts_items(a: SweepAnalysis) -> list[str]:
    """The "Trials" list: what was committed, expected, ignored, and the FP32 reference.

    Plain sentences; text between backticks is code in both renderers.
    """
    inv = a.inventory
    scores = a.scores
    outcome = scores["outcome"].value_counts()
    items = []
    if not inv.has_trials_dir:
        items.append("No `trials/` folder: no trial has been committed yet.")
    items.append(
        f"committed: {len(scores)} (completed {int(outcome.get('completed', 0))}, "
        f"diverged {int(outcome.get('diverged', 0))}, failed {int(outcome.get('failed', 0))})"
    )
    if inv.expected_trials is None:
        items.append("expected: unknown (no readable `sweep.yaml`), so missing trials cannot be counted")
    else:
        items.append(f"expected from `sweep.yaml`: {inv.expected_trials}; missing: {inv.missing_trials}")
    if inv.debris_ids:
        items.append(
            f"step data without a `trials/` row (interrupted or still running, ignored): {len(inv.debris_ids)}"
        )
    if not inv.has_steps_dir:
        items.append(
            "No `steps/` folder: per-step scores are unavailable; ranking uses outcomes and trial rows only."
        )
    elif inv.trials_without_steps:
        shown = ", ".join(inv.trials_without_steps[:10])
        more = "" if len(inv.trials_without_steps) <= 10 else ", ..."
        items.append(f"committed trials without step data: {len(inv.trials_without_steps)} ({shown}{more})")
    n_dup, examples = equivalents_summary(scores)
    if n_dup:
        shown = "; ".join(examples)
        more = f"; and {n_dup - len(examples)} more" if n_dup > len(examples) else ""
        items.append(
            f"equivalent configurations not counted twice: {n_dup} (e.g. a black list under O0, which casts "
            f"nothing), such as {shown}{more}; all are in `trials/`, column `equivalent_to`"
        )
    kinds = a.kinds or []
    if len(kinds) > 1:
        items.append(
            f"device kinds: {', '.join(k.device_kind or '(unknown)' for k in kinds)}; numerics differ between "
            "backends, so each kind is ranked on its own against its own FP32 baseline"
        )
    refs = [(k.device_kind, k.reference) for k in kinds] or [("", a.reference)]
    for kind, ref in refs:
        where = f" on {kind}" if len(kinds) > 1 else ""
        if np.isfinite(ref.final_loss):
            items.append(
                f"FP32 reference{where}: {ref.n_trials} O0 trials, median final loss {ref.final_loss:.3g}"
            )
        else:
            items.append(
                f"FP32 reference{where}: none (no finite O0 trial), so no relative target or silent-failure check"
            )
    return items
