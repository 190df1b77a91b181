"""Honest short labels of a ranking row: what every renderer shows in a narrow space.

Why one module: the terminal, report.md, report.html, ranking.csv and
recommendation.json must call a row by the same words, and two rules are easy
to break one renderer at a time:

* **O0 is FP32.** Under O0 nothing is cast, so there is no black list at all:
  an O0 row is labelled "FP32", never "default black list".
* **A broken configuration shows where it broke.** A configuration with a
  diverged seed has finite losses only *before* its NaN, so its "final loss"
  and "steps to target" read like a healthy run's. Such a row shows
  "NaN at ~1,367" instead (:func:`broke_at`), and :func:`hide_broken_scores`
  blanks its convergence figures once, after ranking, so no renderer can show
  them.

Everything here reads ranking columns only (no file).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ampsweep.contracts import FP32_LEVEL

from ..compute import _classes as cls

Row = Mapping[str, Any]

#: Ranking columns that describe convergence; a broken configuration gets none of them.
CONVERGENCE_COLUMNS = (
    "steps_to_target_median",
    "steps_to_target_min",
    "steps_to_target_max",
    "final_loss_median",
    "final_loss_min",
    "final_loss_max",
)
#: ``per_seed`` figures that describe convergence (see ``analysis.compute._configs.PER_SEED_FIGURES``).
PER_SEED_CONVERGENCE = ("steps_to_target", "final")
#: Columns :func:`label_columns` adds to a ranking.
LABEL_COLUMNS = ("label", "outcome_text", "broke_at", "reason")


def _clip(clip: Any) -> str:
    return "no clip" if clip is None or pd.isna(clip) else f"clip {float(clip)!r}"


def is_fp32(row: Row) -> bool:
    return str(row["amp_level"]) == FP32_LEVEL


def config_short(row: Row, varies: frozenset[str] = frozenset()) -> str:
    """'FP32', 'FP32 · scale dynamic', 'O2 · FP32: ExpSoftmax · clip 1.0', 'O2 · no clip · loss inside'.

    ``varies`` names the ranking columns that differ between rows (dtype, loss
    placement, device kind): only those are spelled out, so a sweep that never
    varied them gets short labels.
    """
    parts = []
    if is_fp32(row):
        parts.append("FP32")
        if row["clip"] is not None and not pd.isna(row["clip"]):
            parts.append(_clip(row["clip"]))
    else:
        level = str(row["amp_level"])
        if "dtype" in varies or str(row["dtype"]) != "float16":
            level += f" {row['dtype']}"
        parts.append(level)
        black_list = list(row.get("black_list") or [])
        if black_list:
            parts.append("FP32: " + ", ".join(str(c) for c in black_list))
        parts.append(_clip(row["clip"]))
    # a scaled FP32 run is a different run (the scaler may skip steps): two FP32 rows never share a label
    if str(row["loss_scale"]) not in ("none", ""):
        parts.append(f"scale {row['loss_scale']}")
    if "loss_placement" in varies:
        parts.append(f"loss {row.get('loss_placement', 'inside')}")
    if "device_kind" in varies:
        parts.append(f"on {row['device_kind']}")
    return " · ".join(parts)


def step_text(step: float) -> str:
    """'1,367'."""
    return f"{step:,.0f}"


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
        where = f"NaN at ~{step_text(step)}" if step is not None and np.isfinite(step) else "NaN"
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
    "tier": "",
    "divergence_rate": "more seeds broke",
    "broke_at": "broke earlier",
    "clip_class": "",
    "steps_to_target": "slower to target",
    "final_loss": "higher final loss",
    "speed": "slower steps",
    "n_black_listed": "more FP32 classes",
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
    words = _DECIDED.get(decided, decided.replace("_", " "))
    if row.get("tied_on") and decided not in ("config_id",):
        return f"tied; {words}" if words else "tied"
    return words


def varying(ranking: pd.DataFrame) -> frozenset[str]:
    """Which of dtype, loss placement and device kind differ between the ranking's rows."""
    out = set()
    for column in ("dtype", "loss_placement", "device_kind"):
        if column in ranking.columns and ranking[column].nunique(dropna=False) > 1:
            out.add(column)
    mixed = ranking[ranking["amp_level"] != FP32_LEVEL] if "amp_level" in ranking.columns else ranking
    if "dtype" in out and len(mixed) and mixed["dtype"].nunique() == 1:
        out.discard("dtype")  # O0 rows carry a dtype they never use
    return frozenset(out)


def label_columns(ranking: pd.DataFrame, varies: frozenset[str] | None = None) -> pd.DataFrame:
    """``ranking`` with :data:`LABEL_COLUMNS` added (computed once; every renderer reads them)."""
    if ranking.empty:
        return ranking.assign(**{c: pd.Series([], dtype="object") for c in LABEL_COLUMNS})
    varies = varying(ranking) if varies is None else varies
    records = ranking.to_dict("records")
    return ranking.assign(
        label=[config_short(r, varies) for r in records],
        outcome_text=[outcome_text(r) for r in records],
        broke_at=[broke_at(r) for r in records],
        reason=[reason(r) for r in records],
    )


def hide_broken_scores(ranking: pd.DataFrame) -> pd.DataFrame:
    """Blank the convergence figures of every configuration with a diverged or failed seed.

    Called before the order is decided: a broken row's losses before its NaN
    never decide its place (:data:`analysis.compute._criteria.CRITERIA` orders broken
    rows by where they broke), and from here on it has no final loss or steps
    to target anywhere (CSV, JSON, report), only ``broke_at``.
    """
    if ranking.empty or "tier" not in ranking.columns:
        return ranking
    broken = (ranking["tier"] == cls.TIER_UNSTABLE).to_numpy()
    if not broken.any():
        return ranking
    out = ranking.copy()
    for column in CONVERGENCE_COLUMNS:
        if column in out.columns:
            out.loc[broken, column] = math.nan
    if "per_seed" in out.columns:
        # the tie rule compares seeds: a broken row's per-seed losses must not decide either
        out["per_seed"] = [
            {k: ({} if k in PER_SEED_CONVERGENCE else v) for k, v in p.items()}
            if bad and isinstance(p, dict)
            else p
            for p, bad in zip(out["per_seed"], broken)
        ]
    return out
