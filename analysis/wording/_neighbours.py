"""The recommendation's neighbours in the grid, and the gaps they leave undecided.

The same configuration with the next smaller and larger clip threshold (off counts as the largest),
without each black-listed class, and with another value of each swept argument. One that breaks where the
recommendation holds is the reason for the choice; one just as good says that part is not needed; where
the two sides of an untried gap differ, the sweep could not decide where the boundary lies.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from ampsweep.contracts import clip_name, clip_value, num, pct

from ..compute import _classes as cls
from ..compute._criteria import CRITERIA
from ._labels import runs, unstable_phrase

#: the number the report's rules give the clip-rate criterion (they are numbered in CRITERIA order)
_CLIP_RULE = next(i for i, c in enumerate(CRITERIA, start=1) if c.name == "clip_class")

_WORKING = (cls.TIER_STABLE, cls.TIER_FP32)
_BROKEN = (cls.TIER_UNSTABLE, cls.TIER_SILENT)


def config_dict(row: pd.Series) -> dict[str, Any]:
    """The user-facing choice (``recommendation.json``'s ``config``)."""
    config = row["configuration"]
    return {
        **config.as_row(),
        "black_list": list(config.black_list),
        "workload_args": dict(config.workload_args),
        "devices": int(row.get("devices", 1)),  # a trial's devices (data parallel): the code sets them up
    }


def state(row: pd.Series) -> str:
    """'stable on 3/3 seeds' / 'diverged on 2/3 seeds (first non-finite step median 15)'."""
    n = int(row["n_trials"])
    if row["tier"] == cls.TIER_UNSTABLE:
        return unstable_phrase(row)
    if row["tier"] == cls.TIER_SILENT:
        return f"finite on {n}/{n} {runs(row)} but learns clearly worse than FP32 ({row['silent_reason']})"
    return f"stable on {n}/{n} {runs(row)}"


def summary(row: pd.Series) -> str:
    """One neighbour in words: state, clip, progress, rank."""
    bits = [state(row)]
    if row["clip_class"] != cls.CLIP_OFF and row["tier"] != cls.TIER_UNSTABLE:
        bits.append(f"clip fires on {pct(row['clip_rate_median'])} of steps ({row['clip_label']})")
    if row["tier"] in _WORKING:
        if np.isfinite(row["final_loss_median"]):
            bits.append(f"final loss {num(row['final_loss_median'])}")
        if np.isfinite(row["steps_to_target_median"]):
            bits.append(f"{row['steps_to_target_median']:.0f} steps to target")
    bits.append(f"rank {int(row['rank'])}")
    return ", ".join(bits)


def row_facts(row: pd.Series) -> dict[str, Any]:
    """The numbers of a ranking row that evidence entries repeat."""
    return {
        "config_id": row["config_id"],
        "label": row.get("label", ""),
        "config": config_dict(row),
        "rank": int(row["rank"]),
        "stability": row["stability"],
        "clip_label": row["clip_label"],
        "n_trials": int(row["n_trials"]),
        "n_seeds": int(row["n_seeds"]),
        "n_diverged": int(row["n_diverged"]),
        "n_failed": int(row["n_failed"]),
        "first_nonfinite_step_median": row["first_nonfinite_step_median"],
        "broke_at": row.get("broke_at", ""),
        "clip_rate_median": row["clip_rate_median"],
        "steps_to_target_median": row["steps_to_target_median"],
        "final_loss_median": row["final_loss_median"],
        "speed_vs_fp32_median": row["speed_vs_fp32_median"],
    }


def match(ranking: pd.DataFrame, base: pd.Series, **changes: Any) -> pd.Series | None:
    """The ranking row equal to ``base`` except for ``changes`` (``clip`` NaN = off, ``black_list``)."""
    want = replace(base["configuration"], **changes)  # normalized again: NaN is no clip
    for _, row in ranking.iterrows():
        if row["configuration"] == want:
            return row
    return None


def _clip_value(clip: float) -> float:
    return math.inf if pd.isna(clip) else float(clip)


def _clip_name(value: float) -> str:
    """A ladder value (+inf = off) as every output writes a clip threshold."""
    return clip_value(None if math.isinf(value) else value)


def _clip_ladder(ranking: pd.DataFrame, best: pd.Series) -> list[float]:
    """Clip values tried with everything else equal, ascending; off is +inf."""
    want = replace(best["configuration"], clip=None)
    values = set()
    for _, row in ranking.iterrows():
        if replace(row["configuration"], clip=None) == want:
            values.add(_clip_value(row["clip"]))
    return sorted(values)


def _versus(best: pd.Series, other: pd.Series) -> str:
    """Where both are stable, the figures side by side."""
    if other["tier"] not in _WORKING:
        return ""
    bits = []
    if np.isfinite(other["final_loss_median"]) and np.isfinite(best["final_loss_median"]):
        bits.append(f"final loss {num(other['final_loss_median'])} vs {num(best['final_loss_median'])}")
    if np.isfinite(other["speed_vs_fp32_median"]) and np.isfinite(best["speed_vs_fp32_median"]):
        bits.append(f"speed {other['speed_vs_fp32_median']:.2f}x vs {best['speed_vs_fp32_median']:.2f}x FP32")
    return "; ".join(bits)


def _row_at_clip(best: pd.Series, other: pd.Series, clip: float) -> pd.Series:
    """Whichever of the two rows has clip value ``clip`` (+inf = off)."""
    return best if _clip_value(best["clip"]) == clip else other


def _clip_gap(best: pd.Series, other: pd.Series, here: float, value: float) -> str | None:
    """What the untried thresholds between ``here`` and ``value`` leave open, if anything."""
    low, high = sorted((here, value))
    a, b = _row_at_clip(best, other, low), _row_at_clip(best, other, high)
    if other["tier"] != best["tier"]:
        if math.isinf(high):
            return (
                f"no clip threshold above {_clip_name(low)} was tried: at {_clip_name(low)} this "
                f"configuration is {state(a)}, without clipping it is {state(b)}; whether a larger threshold "
                "would also hold is unknown"
            )
        return (
            f"no clip threshold was tried between {_clip_name(low)} and {_clip_name(high)}: at "
            f"{_clip_name(low)} this configuration is {state(a)}, at {_clip_name(high)} {state(b)}; where it "
            "changes is unknown"
        )
    if other["clip_class"] != best["clip_class"] and not math.isinf(high):
        return (
            f"no clip threshold was tried between {_clip_name(low)} and {_clip_name(high)}: "
            f"{_clip_name(low)} fires on {pct(a['clip_rate_median'])} of steps ({a['clip_label']}), "
            f"{_clip_name(high)} on {pct(b['clip_rate_median'])} ({b['clip_label']}); a threshold in "
            "between may fit the healthy band better"
        )
    return None


def _clip_neighbours(ranking: pd.DataFrame, best: pd.Series) -> tuple[list[dict[str, Any]], list[str]]:
    out: list[dict[str, Any]] = []
    undecided: list[str] = []
    ladder = _clip_ladder(ranking, best)
    here = _clip_value(best["clip"])
    pos = ladder.index(here)
    sides = [("clip_smaller", ladder[pos - 1])] if pos > 0 else []
    if pos + 1 < len(ladder):
        sides.append(("clip_larger", ladder[pos + 1]))
    for relation, value in sides:
        other = match(ranking, best, clip=math.nan if math.isinf(value) else value)
        if other is None:  # pragma: no cover - the ladder comes from the ranking itself
            continue
        label = clip_name(None if math.isinf(value) else value)
        text = f"{label} instead of {clip_name(None if math.isinf(here) else here)}: {summary(other)}"
        versus = _versus(best, other)
        if versus:
            text += f" ({versus})"
        same_tier = other["tier"] == best["tier"]
        if same_tier and math.isinf(value):
            text += f"; clipping is not needed for stability here, it ranks lower on rule {_CLIP_RULE} (clip rate)"
        elif same_tier and math.isinf(here):
            text += "; clipping does not change stability here"
        elif not same_tier and other["tier"] in _BROKEN:
            text += f"; the threshold {_clip_name(here)} is what keeps this configuration stable"
        out.append(
            {
                "relation": relation,
                "label": label,
                "tried": True,
                "same_class": bool(same_tier and other["clip_class"] == best["clip_class"]),
                **row_facts(other),
                "text": text,
            }
        )
        gap = _clip_gap(best, other, here, value)
        if gap:
            undecided.append(gap)
    return out, undecided


def _black_list_neighbours(ranking: pd.DataFrame, best: pd.Series) -> tuple[list[dict[str, Any]], list[str]]:
    out: list[dict[str, Any]] = []
    undecided: list[str] = []
    for name in best["black_list"]:
        rest = tuple(c for c in best["black_list"] if c != name)
        other = match(ranking, best, black_list=rest)
        label = f"without {name} in float32"
        if other is None:
            smaller = best["configuration"].with_black_list(rest)
            config = {**config_dict(best), "black_list": list(smaller.black_list)}
            out.append(
                {
                    "relation": "black_list_without",
                    "class": name,
                    "label": label,
                    "tried": False,
                    "same_class": None,
                    "config": config,
                    "text": f"{label}: not tried",
                }
            )
            undecided.append(
                f"whether {name} needs float32 is undecided: {smaller.name()} (the same configuration "
                f"without {name} in FP32) was not tried"
            )
            continue
        text = f"{label}: {summary(other)}"
        if other["tier"] == best["tier"]:
            versus = _versus(best, other)
            text += f" ({versus})" if versus else ""
            text += f"; keeping {name} in float32 is not needed for stability here"
        elif other["tier"] in _BROKEN:
            text += f"; keeping {name} in float32 is what makes this configuration work"
        out.append(
            {
                "relation": "black_list_without",
                "class": name,
                "label": label,
                "tried": True,
                "same_class": bool(
                    other["tier"] == best["tier"] and other["clip_class"] == best["clip_class"]
                ),
                **row_facts(other),
                "text": text,
            }
        )
    return out, undecided


def _argument_neighbours(ranking: pd.DataFrame, best: pd.Series) -> list[dict[str, Any]]:
    """The recommendation with another value of one swept workload argument, as the user names it:
    'softmax_dtype=float16 instead of float32: diverged on 2/2 seeds ...; localized to softmax (KnobSoftmax)...'."""
    out: list[dict[str, Any]] = []
    mine = best["configuration"]
    for name, value in mine.workload_args:
        for _, other in ranking.iterrows():
            theirs = dict(other["configuration"].workload_args)
            if (
                theirs.get(name, value) == value
                or replace(mine, workload_args={**theirs, name: value}) != mine
            ):
                continue
            if replace(other["configuration"], workload_args={**theirs, name: value}) != mine:
                continue
            label = f"{name}={theirs[name]} instead of {value}"
            text = f"{label}: {summary(other)}"
            if other["tier"] == best["tier"]:
                text += f"; {name}={value} is not needed for stability here"
            out.append(
                {
                    "relation": "workload_arg",
                    "argument": name,
                    "label": label,
                    "tried": True,
                    **row_facts(other),
                    "text": text,
                }
            )
    return out


def neighbours(ranking: pd.DataFrame, best: pd.Series) -> tuple[list[dict[str, Any]], list[str]]:
    """Clip, black-list and swept-argument neighbours of ``best``, and the gaps they leave undecided."""
    clip_rows, clip_gaps = _clip_neighbours(ranking, best)
    bl_rows, bl_gaps = _black_list_neighbours(ranking, best)
    return clip_rows + bl_rows + _argument_neighbours(ranking, best), clip_gaps + bl_gaps
