"""What the recommendation's evidence is drawn from: the FP32 row to compare with, whether FP32 itself
broke (and what held past it), and the localized Cell nearest the answer; wording words them
(:mod:`analysis.wording._evidence`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ampsweep.contracts import FP32_LEVEL

from .._model import BrokeToo, Fp32Break, HeldPast, Localization
from . import _classes as cls


def fp32_row(ranking: pd.DataFrame, best: pd.Series | None = None) -> pd.Series | None:
    """The FP32 baseline row to compare with: O0, no clipping, empty black list.

    Prefers the loss scale and dtype of ``best`` (they do not change an uncast
    network, but the step times were measured with them), then any O0 row.
    """
    o0 = ranking[ranking["baseline"]]
    if o0.empty:
        return None
    plain = o0[o0["clip"].isna() & (o0["n_black_listed"] == 0)]
    pool = plain if len(plain) else o0
    if best is not None:
        same = pool[(pool["loss_scale"] == best["loss_scale"]) & (pool["dtype"] == best["dtype"])]
        if len(same):
            pool = same
    return pool.sort_values("rank").iloc[0]


def _trials_of(row: pd.Series, scores: pd.DataFrame) -> pd.DataFrame:
    return scores[scores["trial_id"].isin(str(row["trial_ids"]).split())]


def _seed_steps(trials: pd.DataFrame) -> dict[Any, float]:
    """Seed -> first non-finite step, for the trials that diverged."""
    broke = trials[(trials["outcome"] == "diverged") & trials["first_nonfinite"].notna()]
    return {seed: float(step) for seed, step in zip(broke["seed"], broke["first_nonfinite"])}


def _held_past(row: pd.Series, scores: pd.DataFrame, breaks: dict[Any, float]) -> HeldPast | None:
    """How ``row`` did on the seeds where FP32 broke: stayed finite past that step on how many."""
    trials = _trials_of(row, scores)
    trials = trials[trials["seed"].isin(list(breaks))]
    if trials.empty:
        return None
    finite = trials[(trials["outcome"] == "completed") & trials["first_nonfinite"].isna()]
    held = finite["held_to"].astype("float64")  # ``ampsweep.contracts.held_to``: every step before it finite
    past = finite[held.to_numpy() > np.array([breaks[s] for s in finite["seed"]])]
    if past.empty:
        return None
    return HeldPast(
        label=str(row["label"]),
        config_id=str(row["config_id"]),
        amp_level=str(row["amp_level"]),
        clip=None if pd.isna(row["clip"]) else float(row["clip"]),
        n_held=int(past["seed"].nunique()),
        n_seeds=int(trials["seed"].nunique()),
        held_to=int(past["held_to"].astype("float64").min()),
    )


def fp32_break(ranking: pd.DataFrame, scores: pd.DataFrame) -> Fp32Break | None:
    """Whether FP32 itself broke on some seed, with what the sweep says about it; None when it did not.

    The FP32 baseline is :func:`fp32_row` (O0, no clip, empty black list when
    the grid has it). ``held``: every configuration that stayed finite past
    FP32's first non-finite step on the seeds where FP32 broke (FP32 ones, a
    clip say, first: they are the direct evidence for a fix in FP32).
    ``broke_too``: the other FP32 configurations that broke as well.
    """
    fp32 = fp32_row(ranking)
    if fp32 is None or not int(fp32["n_diverged"]):
        return None
    steps = _seed_steps(_trials_of(fp32, scores))
    held = [
        h
        for _, row in ranking.iterrows()
        if row["config_id"] != fp32["config_id"]
        for h in [_held_past(row, scores, steps)]
        if h is not None
    ]
    held.sort(key=lambda h: (h.amp_level != FP32_LEVEL, -h.n_held / max(h.n_seeds, 1), -h.held_to))
    broke_too = []
    for _, row in ranking[ranking["baseline"]].iterrows():
        if row["config_id"] == fp32["config_id"] or not int(row["n_diverged"]):
            continue
        median = row["first_nonfinite_step_median"]
        broke_too.append(
            BrokeToo(
                label=str(row["label"]),
                config_id=str(row["config_id"]),
                clip=None if pd.isna(row["clip"]) else float(row["clip"]),
                n_broken=int(row["n_diverged"]),
                n_seeds=int(row["n_trials"]),
                step=float(median) if np.isfinite(median) else None,
            )
        )
    median = fp32["first_nonfinite_step_median"]
    locs = fp32.get("localizations") or []
    return Fp32Break(
        label=str(fp32["label"]),
        config_id=str(fp32["config_id"]),
        step=float(median) if np.isfinite(median) else None,
        steps=steps,
        n_broken=int(fp32["n_diverged"]),
        n_seeds=int(fp32["n_trials"]),
        localization=locs[0] if locs else None,
        held=tuple(held),
        broke_too=tuple(broke_too),
    )


def culprit(ranking: pd.DataFrame, best: pd.Series | None) -> Localization | None:
    """The localized Cell to show next to the answer.

    Taken from the failing configurations nearest the recommendation: first
    those whose black list is a subset of its own (what goes wrong without the
    change), then the same AMP level, then any; within them, the best-ranked.
    """
    failing = ranking[ranking["tier"].isin((cls.TIER_UNSTABLE, cls.TIER_SILENT))]
    rows = [r for _, r in failing.iterrows() if r.get("localizations")]
    if not rows:
        return None

    def nearness(row: pd.Series) -> tuple[bool, bool, int]:
        if best is None:
            return (False, False, int(row["rank"]))
        subset = set(row["black_list"]) < set(best["black_list"])
        return (not subset, row["amp_level"] != best["amp_level"], int(row["rank"]))

    return min(rows, key=nearness)["localizations"][0]
