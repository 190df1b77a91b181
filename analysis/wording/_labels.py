"""The short words of a ranking row every output shows: what it is, its seeds, where it broke, why here.

Worded once (:func:`label_columns`) so the terminal, report.md, report.html, ranking.csv and
recommendation.json call a row by the same words: an O0 row is "FP32", a broken row shows "NaN at ~1,367"
in place of its convergence figures (docs/ranking.md, "What a person sees first"). Ranking columns only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ampsweep.contracts import clip_name, num, pct

from ..compute import _classes as cls
from ..compute._criteria import Comparison, Containment, RankReason
from ._localization import localizations_phrase

Row = Mapping[str, Any]

#: Columns :func:`label_columns` adds to a ranking (its ``label`` is the ranking's own).
LABEL_COLUMNS = ("description", "outcome_text", "broke_at", "reason", "localized", "phrase", "rule")
#: words of a score measured but never deciding
_SHOWN = "(measured on CPU: shown, never decides)"


def runs(row: Row) -> str:
    """'seeds' normally; 'trials' if a seed was run more than once in one configuration."""
    return "seeds" if row["n_trials"] == row["n_seeds"] else "trials"


def clip_phrase(row: Row) -> str:
    """The clip figure in words, e.g. 'clip 1.0 fires on 97 % of steps: threshold too small'."""
    kind = row["clip_class"]
    if kind == cls.CLIP_OFF:
        return "no clipping"
    head = clip_name(row["clip"])
    if kind == cls.CLIP_UNKNOWN:
        return f"{head}: clip rate unknown (no finite steps recorded)"
    if kind == cls.CLIP_NEVER:
        return f"{head} never fires (inert)"
    spread = ""
    low, high = pct(row["clip_rate_min"]), pct(row["clip_rate_max"])
    if low != high:
        spread = f", {low}-{high} over {runs(row)}"
    text = f"{head} fires on {pct(row['clip_rate_median'])} of steps{spread}"
    if kind == cls.CLIP_IN_BAND:
        return f"{text} (healthy band: up to {pct(cls.HEALTHY_CLIP_MAX)})"
    if kind == cls.CLIP_OFTEN:
        return f"{text}: too often (healthy band: up to {pct(cls.HEALTHY_CLIP_MAX)})"
    return f"{text}: threshold too small"


def unstable_phrase(row: Row) -> str:
    """'diverged on 2/3 seeds (first non-finite step median 15); localized to ...'."""
    n = row["n_trials"]
    parts = []
    if row["n_diverged"]:
        part = f"diverged on {row['n_diverged']}/{n} {runs(row)}"
        if np.isfinite(row["first_nonfinite_step_median"]):
            part += f" (first non-finite step median {row['first_nonfinite_step_median']:.0f})"
        parts.append(part)
    if row["n_failed"]:
        part = f"failed on {row['n_failed']}/{n} {runs(row)}"
        if row["error"]:
            part += f" ({row['error']})"
        parts.append(part)
    text = "; ".join(parts)
    if row.get("localizations"):
        text += f"; localized to {localizations_phrase(row['localizations'])}"
    return text


def progress_phrase(row: Row) -> str:
    """Steps to target, final loss and speed of a stable row, in words."""
    bits = []
    if np.isfinite(row["steps_to_target_median"]):
        spread = ""
        if row["steps_to_target_min"] != row["steps_to_target_max"]:
            spread = f", {row['steps_to_target_min']:.0f}-{row['steps_to_target_max']:.0f}"
        bits.append(
            f"reaches target {num(row['target_median'])} in {row['steps_to_target_median']:.0f} steps "
            f"(median{spread})"
        )
    elif pd.notna(row["target_median"]):
        bits.append(
            f"reaches target {num(row['target_median'])} on only "
            f"{row['n_reached_target']}/{row['n_trials']} {runs(row)}"
        )
    if np.isfinite(row["final_loss_median"]):
        bits.append(f"final loss {num(row['final_loss_median'])}")
    if np.isfinite(row["speed_vs_fp32_median"]):
        bits.append(f"{row['speed_vs_fp32_median']:.2f}x FP32 speed")
    return ", ".join(bits)


def _with_bad_clip(row: Row, text: str) -> str:
    if row["clip_class"] in (cls.CLIP_OFTEN, cls.CLIP_TOO_SMALL):
        return f"{text}; {clip_phrase(row)}"
    return text


def description(row: Row, any_stable_mp: bool) -> str:
    """What a ranking row is, in one sentence (before why it has its rank)."""
    tier = row["tier"]
    if tier == cls.TIER_UNSTABLE:
        return _with_bad_clip(row, unstable_phrase(row))
    if tier == cls.TIER_SILENT:
        text = f"finite on all {row['n_trials']} {runs(row)} but {row['silent_reason']} (silent failure)"
        if row.get("localizations"):
            text += f"; localized to {localizations_phrase(row['localizations'])}"
        return _with_bad_clip(row, text)
    progress = progress_phrase(row)
    head = f"stable on {row['n_trials']}/{row['n_trials']} {runs(row)}; {clip_phrase(row)}"
    if progress:
        head += f"; {progress}"
    if tier == cls.TIER_FP32:
        why = (
            "not recommended because a stable mixed-precision configuration exists"
            if any_stable_mp
            else "no mixed-precision configuration is stable, so this is the fallback"
        )
        return f"FP32 baseline (O0), {why}; {head}"
    return head


def _values(c: Comparison) -> str:
    """'82 vs 96', '9,000 vs 3,000 parameters'."""
    return f"{c.mine} vs {c.theirs}" + (f" {c.unit}" if c.unit else "")


def _compared(c: Comparison, tied: bool) -> str:
    """Tied: 'steps to target (82 vs 96, seeds 70-190 vs 65-101)'; else 'steps to target: 121 vs 61 (seeds ...)'."""
    seeds = f"seeds {c.seeds[0]} vs {c.seeds[1]}" if c.seeds else ""
    if tied:
        return f"{c.label} ({_values(c)}{', ' + seeds if seeds else ''})"
    return f"{c.label}: {_values(c)}{f' ({seeds})' if seeds else ''}"


def _contained(c: Containment) -> str:
    """'keeps more in FP32 than #1 (TransformerEncoderLayer contains MultiheadAttention: 8,544 vs 4,224
    parameters in FP32)'."""
    sizes = f": {c.sizes[0]} vs {c.sizes[1]} parameters in FP32" if c.sizes else ""
    mine, theirs = ", ".join(c.mine) or "nothing", ", ".join(c.theirs) or "nothing"
    return f"keeps more in FP32 than #{c.rank} ({mine} contains {theirs}{sizes})"


def phrase(reason: RankReason) -> str:
    """Why a row ranks below the one above it, in words: 'tied with #1 on final loss (...); below it on ...'."""
    if not reason.decided_by:
        return "ranked first"
    if reason.by_containment and reason.contains is not None:
        return f"below #{reason.contains.rank} whatever the scores: {_contained(reason.contains)}"
    head = [f"tied with #{reason.above} on " + " and ".join(_compared(c, tied=True) for c in reason.tied_on)]
    if not reason.tied_on:
        head = [f"tied with #{reason.above} on every score"] if reason.tied_with_above else []
    shown = [f"{c.label} {_values(c)} {_SHOWN}" for c in reason.shown]
    if reason.contains is not None and reason.tied_with_above:  # tied on every score: the containment decides
        where = "below it" if head else f"below #{reason.above}"
        return "; ".join([*head, f"{where}: {_contained(reason.contains)}", *shown])
    if reason.decided_by == "config_id":
        parts = [
            *(head if reason.tied_on else []),
            f"tied with #{reason.above} on every criterion; ordered by name",
        ]
    else:
        where = "below it" if head else f"below #{reason.above}"
        parts = [*head, f"{where} on {_compared(reason.decided, tied=False)}" if reason.decided else where]
    if reason.contains is not None:
        parts[-1] += f"; it also {_contained(reason.contains)}"
    return "; ".join([*parts, *shown])


def rule(row: Row) -> str:
    """What the row is and why it has its rank: the ``rule`` column."""
    reason = row["rank_reason"]
    if not reason.decided_by:
        return f"{row['description']}; ranked first" + (" (recommended)" if row["recommended"] else "")
    return f"{row['description']}; {phrase(reason)}"


def broke_at(row: Row) -> str:
    """'NaN at ~1,367' (median first non-finite step over the broken seeds); '' for a working row.

    Seeds that broke are counted when not all did ('NaN at ~1,367 on 1/3'); a
    configuration whose trials failed with an exception says 'failed'.
    """
    n = int(row["n_trials"])
    diverged, failed = int(row["n_diverged"]), int(row["n_failed"])
    if not diverged and not failed:
        return ""
    step = row.get("first_nonfinite_step_median")
    if diverged:
        where = f"NaN at ~{step:,.0f}" if step is not None and np.isfinite(step) else "NaN"
        return where if diverged == n else f"{where} on {diverged}/{n}"
    return "failed" if failed == n else f"failed on {failed}/{n}"


def outcome_text(row: Row) -> str:
    """'3/3 ok', '3/3 NaN', '2/3 NaN', '1/3 failed', '3/3 silent': the seeds column."""
    n = int(row["n_trials"])
    if row["tier"] == cls.TIER_UNSTABLE:
        if int(row["n_diverged"]):
            return f"{int(row['n_diverged'])}/{n} NaN"
        return f"{int(row['n_failed'])}/{n} failed"
    if row["tier"] == cls.TIER_SILENT:
        return f"{int(row.get('n_silent', n) or n)}/{n} silent"
    return f"{n}/{n} ok"


#: decided_by -> short words for "why it sits below the row above"
_DECIDED = {
    "divergence_rate": "more seeds broke",
    "broke_at": "broke earlier",
    "steps_to_target": "slower to target",
    "final_loss": "higher final loss",
    "speed": "slower steps",
    "n_black_listed": "more in FP32",
    "loss_inside": "loss inside the cast",
    "loss_scaling": "more loss scaling",
    "config_id": "tied: by name",
}
_CLIP_SHORT = {
    cls.CLIP_IN_BAND: "clip in band",
    cls.CLIP_OFF: "no clipping",
    cls.CLIP_NEVER: "clip never fires",
    cls.CLIP_UNKNOWN: "clip rate unknown",
    cls.CLIP_OFTEN: "clip out of band",
    cls.CLIP_TOO_SMALL: "clip out of band",
}


def reason(row: Row) -> str:
    """Why the row sits where it does, in a few words ('clip out of band'); the long rule stays in the files."""
    if row.get("recommended"):
        return "recommended"
    tier = row["tier"]
    if tier == cls.TIER_UNSTABLE:
        return "diverged" if int(row["n_diverged"]) else "failed"
    if tier == cls.TIER_SILENT:
        return "learns worse than FP32"
    if tier == cls.TIER_FP32:
        return "FP32 baseline"
    decided = str(row.get("decided_by") or "")
    if not decided:
        return "ranked first"
    if decided == "clip_class":
        return _CLIP_SHORT.get(int(row["clip_class"]), "clipping")
    words = _DECIDED.get(decided, "")
    if decided == "n_black_listed" and int(row.get("fp32_contains") or 0):
        # its FP32 part contains a stable configuration's above it (``analysis.compute._rank``)
        words = f"more in FP32 than #{int(row['fp32_contains'])}"
    if row.get("tied_on") and decided not in ("config_id",):
        return f"tied; {words}" if words else "tied"
    return words


def _localized(locs: object) -> str:
    return localizations_phrase(locs) if isinstance(locs, list) and locs else ""


def label_columns(ranking: pd.DataFrame) -> pd.DataFrame:
    """``ranking`` with :data:`LABEL_COLUMNS` added (worded once; every renderer reads them)."""
    if ranking.empty:
        return ranking.assign(**{c: pd.Series([], dtype="object") for c in LABEL_COLUMNS})
    any_stable_mp = bool((ranking["tier"] == cls.TIER_STABLE).any())
    ranking = ranking.assign(description=[description(r, any_stable_mp) for r in ranking.to_dict("records")])
    records = ranking.to_dict("records")
    return ranking.assign(
        outcome_text=[outcome_text(r) for r in records],
        broke_at=[broke_at(r) for r in records],
        reason=[reason(r) for r in records],
        localized=[_localized(r.get("localizations")) for r in records],
        phrase=[phrase(r["rank_reason"]) for r in records],
        rule=[rule(r) for r in records],
    )
