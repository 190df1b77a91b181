"""What the two loss placements say when both were run: is the overflow in the loss?

A configuration stable ``outside`` but not ``inside`` overflows in its loss, which a user who trains the
``outside`` way never sees (docs/spec.md, "Where the loss runs").
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from ampsweep.contracts import FP32_LEVEL, LOSS_INSIDE, LOSS_OUTSIDE, Configuration

from ..compute._classes import TIER_UNSTABLE

_OUTSIDE_WORDS = "the loss runs in float32 on the network's output, as with `Model(net, loss_fn, opt)`"


def _what(row: pd.Series) -> str:
    """The configuration's name without where the loss runs (what the note compares)."""
    return row["configuration"].name()


def loss_class_notes(scores: pd.DataFrame) -> list[str]:
    """One sentence per class that ``outside`` makes pointless to black-list (the driver marked it)."""
    marked = scores[
        scores["equivalent_to"].notna()
        & (scores["loss_placement"] == LOSS_OUTSIDE)
        & (scores["amp_level"] != FP32_LEVEL)
    ]
    if marked.empty:
        return []
    lists = scores.set_index("trial_id")["black_list"]
    classes: set[str] = set()
    for _, row in marked.iterrows():
        target = lists.get(row["equivalent_to"])
        if target is not None:
            classes |= set(row["black_list"]) - set(target)
    return [
        f"black-listing {name} changes nothing under `loss_placement: outside`: it already computes in float32 "
        "there (the loss runs on the network's float32 output), so those trials are marked `equivalent_to` the "
        "same configuration without it"
        for name in sorted(classes)
    ]


def loss_placement_notes(ranking: pd.DataFrame, scores: pd.DataFrame | None = None) -> list[str]:
    """One sentence per configuration whose verdict depends on where the loss runs."""
    extra = loss_class_notes(scores) if scores is not None and "loss_placement" in scores else []
    if "loss_placement" not in ranking or ranking["loss_placement"].nunique() < 2:
        return extra
    rows = ranking[~ranking["baseline"]]
    by_key: dict[Configuration, dict[str, pd.Series]] = {}
    for _, row in rows.iterrows():  # paired by everything but where the loss runs
        by_key.setdefault(replace(row["configuration"], loss_placement=LOSS_OUTSIDE), {})[
            str(row["loss_placement"])
        ] = row
    notes = []
    for pair in by_key.values():
        outside, inside = pair.get(LOSS_OUTSIDE), pair.get(LOSS_INSIDE)
        if outside is None or inside is None:
            continue
        if outside["tier"] < TIER_UNSTABLE and inside["tier"] == TIER_UNSTABLE:
            rate = f"{int(inside['n_diverged'] + inside['n_failed'])}/{int(inside['n_trials'])}"
            notes.append(
                f"{_what(inside)} diverges under `loss_placement: inside` ({rate} runs) but is stable under "
                f"`outside` ({_OUTSIDE_WORDS}): the overflow is in the loss, which only a cast `WithLossCell` "
                "computes in low precision"
            )
        elif inside["tier"] < TIER_UNSTABLE and outside["tier"] == TIER_UNSTABLE:
            notes.append(
                f"{_what(outside)} is stable under `loss_placement: inside` but not under `outside`: "
                "computing the loss in float32 does not save it here"
            )
    return extra + notes
