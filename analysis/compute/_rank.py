"""Order one device kind's configurations by :data:`analysis.compute._criteria.CRITERIA`.

Classifies each configuration (stability tier, clip class), blanks a broken row's convergence figures
before anything compares them (:func:`hide_broken_scores`), sorts by the criteria with the FP32 part
compared by its size, makes the recommendation minimal, puts no stable row above one whose FP32 part it
contains, and says why each rank is below the row above as data (``rank_reason``; wording words it). The
rules: docs/ranking.md, "The criteria" (rule 6: minimal by construction, containment).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from ampsweep.contracts import number

from .._model import CONVERGENCE_COLUMNS, PER_SEED_CONVERGENCE, Fp32Reference
from . import _classes as cls
from ._criteria import (
    AFTER_SCORES,
    BY_NAME,
    FIRST,
    MINIMAL_LEVEL,
    Comparison,
    Containment,
    RankContext,
    RankReason,
    adopt_rank,
    order_paths,
    rank_reason,
    ties_above_minimal,
)

#: the criterion whose comparison is the FP32 part's size (its ``decided_by`` value)
FP32_PART = BY_NAME["n_black_listed"]


def _make_minimal(records: list[dict[str, Any]], paths: list[tuple], ctx: RankContext) -> list[tuple]:
    """Let a stable configuration with one FP32 class less take the lead when it ties (rule 6)."""
    index = {r["configuration"]: i for i, r in enumerate(records)}
    while True:
        order = sorted(range(len(records)), key=lambda i: paths[i])
        best = next((i for i in order if records[i]["tier"] == cls.TIER_STABLE), None)
        if best is None:
            return paths
        for name in records[best]["black_list"]:
            rest = tuple(c for c in records[best]["black_list"] if c != name)
            smaller = index.get(records[best]["configuration"].with_black_list(rest))
            if (
                smaller is not None
                and records[smaller]["tier"] == cls.TIER_STABLE
                and ties_above_minimal(records[best], records[smaller], ctx)
            ):
                adopt_rank(paths, best, smaller)
                break
        else:
            return paths


def _params(row: Mapping[str, Any]) -> float | None:
    value = number(row.get("fp32_params"))
    return value if value is not None and math.isfinite(value) else None


def _paths(row: Mapping[str, Any]) -> tuple[str, ...] | None:
    value = row.get("fp32_cell_paths")
    return tuple(value) if isinstance(value, (list, tuple, np.ndarray)) else None


def _inside(path: str, outer: str) -> bool:
    """``path`` is ``outer`` or a Cell inside it (``""`` is the network itself)."""
    return outer == "" or path == outer or path.startswith(f"{outer}.")


def contains(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether stable ``a``'s FP32 part strictly contains stable ``b``'s, the rest of the two alike.

    Every Cell path ``b`` keeps in FP32 lies inside (or is) one of ``a``'s, and
    the two differ. Unknown paths (a sweep written before the column) contain
    nothing.
    """
    if a.get("tier") != cls.TIER_STABLE or b.get("tier") != cls.TIER_STABLE:
        return False
    if a["configuration"].with_black_list(()) != b["configuration"].with_black_list(()):
        return False  # they differ in more than the black list
    mine, theirs = _paths(a), _paths(b)
    if mine is None or theirs is None or set(mine) == set(theirs):
        return False
    return all(any(_inside(p, outer) for outer in mine) for p in theirs)


def _fp32_key(row: Mapping[str, Any]) -> tuple[float, int]:
    """The FP32 part's size, smaller first: parameter elements (0 where unknown), then classes.

    O0 with a low-precision workload argument (``O0 · softmax_dtype=float16``) casts nothing itself: all
    but what its arguments lower stays in FP32, so it comes after every AMP level it ties with.
    """
    if row["configuration"].fp32:
        return (math.inf, int(row["n_black_listed"]))
    return (_params(row) or 0.0, int(row["n_black_listed"]))


def _containment_order(records: list[dict[str, Any]], order: list[int]) -> list[int]:
    """``order`` changed only so that no stable configuration precedes one whose FP32 part it contains.

    A stable topological sort: each time, the first row in ``order`` whose
    contained rows are all placed already. Containment is a strict partial
    order (outermost paths), so some row is always free.
    """
    stable = [i for i in order if records[i].get("tier") == cls.TIER_STABLE]
    after = {i: [j for j in stable if j != i and contains(records[i], records[j])] for i in stable}
    if not any(after.values()):
        return order
    out: list[int] = []
    placed: set[int] = set()
    left = list(order)
    while left:
        pick = next((i for i in left if all(j in placed for j in after.get(i, ()))), left[0])
        out.append(pick)
        placed.add(pick)
        left.remove(pick)
    return out


def hide_broken_scores(ranking: pd.DataFrame) -> pd.DataFrame:
    """Blank the convergence figures of every configuration with a diverged or failed seed, before the order
    is decided: its losses before the NaN never decide its rank (it ranks by where it broke), and it has no
    final loss or steps to target anywhere (CSV, JSON, report), only ``broke_at``.
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


def _classify(configs: pd.DataFrame, reference: Fp32Reference) -> pd.DataFrame:
    frame = configs.copy()
    tiers = [cls.tier(row) for _, row in frame.iterrows()]
    frame["tier"] = [t for t, _ in tiers]
    frame["silent_reason"] = [r for _, r in tiers]
    frame["stability"] = frame["tier"].map(cls.TIER_LABELS)
    frame["clip_class"] = [cls.clip_class(c, r) for c, r in zip(frame["clip"], frame["clip_rate_median"])]
    frame["clip_label"] = frame["clip_class"].map(cls.CLIP_LABELS)
    return frame


def ordered(frame: pd.DataFrame, ctx: RankContext, minimal: bool = True) -> tuple[pd.DataFrame, list[tuple]]:
    """``frame`` sorted by the criteria, and each row's sort key (same order)."""
    records = frame.to_dict("records")
    # the "FP32 classes" entry of each key is the FP32 part's size (:func:`_fp32_key`)
    paths = [
        p[:MINIMAL_LEVEL] + (_fp32_key(r),) + p[MINIMAL_LEVEL + 1 :]
        for r, p in zip(records, order_paths(records, ctx))
    ]
    if minimal:
        paths = _make_minimal(records, paths, ctx)
    order = _containment_order(records, sorted(range(len(records)), key=lambda i: paths[i]))
    return frame.iloc[order].reset_index(drop=True), [paths[i] for i in order]


def rank_configs(
    configs: pd.DataFrame, reference: Fp32Reference, ctx: RankContext | None = None
) -> pd.DataFrame:
    """Return ``configs`` sorted by the criteria with ``rank``, ``recommended``, the classification columns and
    why each rank is what it is: ``rank_reason`` (a :class:`RankReason`, which ``wording._labels`` words),
    ``decided_by``, ``tied_on`` (criterion names), ``tied_with_above`` and ``fp32_contains`` (the rank of a
    stable configuration above whose FP32 part this row's contains; 0: none). ``recommended`` is true for at
    most one row, the best stable mixed-precision one: never FP32 or an unstable one in its place.
    """
    ctx = ctx or RankContext()
    if configs.empty:
        return configs.assign(rank=[], stability=[], recommended=[], rank_reason=[], label=[])
    frame, paths = ordered(hide_broken_scores(_classify(configs, reference)), ctx)
    frame["rank"] = np.arange(1, len(frame) + 1)
    any_stable_mp = bool((frame["tier"] == cls.TIER_STABLE).any())
    frame["recommended"] = False
    if any_stable_mp:
        frame.loc[int(np.flatnonzero(frame["tier"] == cls.TIER_STABLE)[0]), "recommended"] = True
    records = frame.to_dict("records")
    reasons = [FIRST] + [_fp32_reason(records, paths, i, ctx) for i in range(1, len(records))]
    frame["rank_reason"] = reasons
    frame["decided_by"] = [r.decided_by for r in reasons]
    frame["tied_on"] = [tuple(c.criterion for c in r.tied_on) for r in reasons]
    frame["tied_with_above"] = [r.tied_with_above for r in reasons]
    frame["fp32_contains"] = [0 if r.contains is None else r.contains.rank for r in reasons]
    return frame


def _size_text(row: Mapping[str, Any]) -> str:
    params = _params(row)
    return "-" if params is None else f"{params:,.0f}"


def _fp32_reason(records: list[dict[str, Any]], paths: list[tuple], i: int, ctx: RankContext) -> RankReason:
    """Why row ``i`` is below row ``i - 1``, its FP32 part compared by size, and the stable row above whose
    FP32 part it contains (containment, rule 6), if any."""
    row, above = records[i], records[i - 1]
    reason = rank_reason(row, above, paths[i], paths[i - 1], i, ctx)
    if reason.decided_by == FP32_PART.name and _params(row) is not None:
        size = Comparison(FP32_PART.name, _size_text(row), _size_text(above), unit="parameters")
        reason = replace(reason, decided=size)
    inner = next((k for k in range(i) if contains(row, records[k])), None)
    if inner is None:
        return reason
    sizes = None
    if _params(row) is not None and _params(records[inner]) is not None:
        sizes = (_size_text(row), _size_text(records[inner]))
    held = Containment(inner + 1, tuple(row["black_list"]), tuple(records[inner]["black_list"]), sizes)
    if paths[i] < paths[i - 1]:  # ahead on the keys, below by containment
        return RankReason(FP32_PART.name, i, contains=held, by_containment=True)
    decided_by = reason.decided_by if reason.decided_by not in AFTER_SCORES else FP32_PART.name
    return replace(reason, decided_by=decided_by, contains=held)


def seed_picks(candidates: pd.DataFrame, ctx: RankContext) -> list[dict[str, Any]]:
    """For each seed, the candidate that seed's own trials rank first, by the same criteria.

    ``candidates`` are ranking rows stable on every seed. Each becomes one row
    per seed whose figures are that seed's alone, so the tie rule reduces to
    an exact comparison (one seed has no spread) and no class is minimised away.
    """
    if candidates.empty:
        return []
    per_seed: dict[Any, list[dict[str, Any]]] = {}
    for row in candidates.to_dict("records"):
        for seed, final in row["per_seed"]["final"].items():
            one = {fig: {seed: values.get(seed, np.nan)} for fig, values in row["per_seed"].items()}
            rate = one["clip_rate"][seed]
            per_seed.setdefault(seed, []).append(
                {
                    **row,
                    "per_seed": one,
                    "clip_class": cls.clip_class(row["clip"], rate),
                    "steps_to_target_median": one["steps_to_target"][seed],
                    "final_loss_median": final,
                    "speed_vs_fp32_median": one["speed_vs_fp32"][seed],
                }
            )
    picks = []
    for seed in sorted(per_seed, key=lambda s: (s is None, 0 if s is None else s)):
        rows = pd.DataFrame(per_seed[seed])
        first, _ = ordered(rows, ctx, minimal=False)
        picks.append({"seed": seed, "config_id": first.iloc[0]["config_id"]})
    return picks
