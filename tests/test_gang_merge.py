"""A gang's finding is the one a single device would give, and ampsweep's own bound on a stalled rank.

Fast: no MindSpore, no Ray. ``merge_ranks`` (the driver's merge of the ranks' anomalies rows) orders
as one device looks (the step, forward before backward, a dynamic loss scaler's backward-only
fallback after any forward culprit, then the rank); the report's rank phrase says what
``ranks_broken`` counts; ``StallClock`` names a rank that stopped coming before the collective's
own timeout would.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from ampsweep.analysis._model import Localization
from ampsweep.analysis.wording._localization import rank_phrase
from ampsweep.contracts import ANOMALIES_SCHEMA, NUMERICS, UNKNOWN
from ampsweep.jobs import LOCALIZING, merge_ranks
from ampsweep.sweep.cluster._gang import GangLost, RankCallFailed, StallClock


def _row(rank: int, step: int | None, phase: str | None, cell: str | None = "attn", **more: Any) -> pa.Table:
    row = {"kind": "nonfinite", "replay_step": step, "cell": cell, "phase": phase, "rank": rank}
    row |= {"ranks_broken": 1, "cause": NUMERICS, **more}
    return pa.Table.from_pylist([row], schema=ANOMALIES_SCHEMA)


def _merged(tables: list[pa.Table], dynamic: bool = False) -> dict[str, Any]:
    rows = merge_ranks(tables, dynamic).to_pylist()
    assert len(rows) == 1, rows
    return rows[0]


def test_a_forward_culprit_on_rank_1_beats_a_backward_finding_on_rank_0_at_the_same_step():
    merged = _merged([_row(0, 7, "backward", "head"), _row(1, 7, "forward", "attn")])
    assert (merged["rank"], merged["cell"], merged["phase"], merged["ranks_broken"]) == (
        1,
        "attn",
        "forward",
        1,
    )


def test_an_earlier_step_wins_whatever_its_phase_without_a_dynamic_scaler():
    merged = _merged([_row(0, 6, "backward", "head"), _row(1, 7, "forward", "attn")])
    assert (merged["rank"], merged["cell"], merged["replay_step"]) == (0, "head", 6)


def test_a_dynamic_scalers_backward_fallback_loses_to_a_later_forward_culprit():
    """Under a dynamic scaler one device skips backward-only overflows and names the first forward one."""
    merged = _merged([_row(0, 3, "backward", "head"), _row(1, 9, "forward", "attn")], dynamic=True)
    assert (merged["rank"], merged["cell"], merged["replay_step"]) == (1, "attn", 9)
    fallback = _merged([_row(0, 3, "backward", "head"), _row(1, 4, "backward", "attn")], dynamic=True)
    assert (fallback["rank"], fallback["cell"], fallback["replay_step"]) == (0, "head", 3)


def test_ranks_broken_counts_the_ranks_at_that_step_in_that_phase():
    tie = _merged(
        [_row(1, 5, "forward"), _row(0, 5, "forward"), _row(2, 5, "backward"), _row(3, 6, "forward")]
    )
    assert (tie["rank"], tie["ranks_broken"]) == (0, 2)


def test_no_finding_on_any_rank_merges_to_no_row():
    assert merge_ranks([ANOMALIES_SCHEMA.empty_table()] * 2, False).num_rows == 0


def test_a_failed_localization_keeps_the_failing_ranks_reason():
    note = "localization failed on rank 1 of 2: RuntimeError: no replay here"
    failed = [
        _row(1, None, None, None, cause=UNKNOWN, note="localization failed on rank 1 of 2"),
        _row(1, None, None, None, cause=UNKNOWN, note=note),
    ]
    merged = _merged(failed)
    assert (merged["cause"], merged["note"], merged["rank"], merged["cell"]) == (UNKNOWN, note, 1, None)


def _loc(rank: int, broken: int, devices: int, phase: str = "forward") -> Localization:
    return Localization(
        kind="nonfinite",
        cell="attn",
        cell_class="MultiheadAttention",
        phase=phase,
        seeds=(0,),
        n_trials=1,
        replay_step=5.0,
        input_dtype="float16",
        output_dtype="float16",
        max_abs=None,
        fp32_max_abs=None,
        rel_error=None,
        zero_fraction=None,
        rank=rank,
        ranks_broken=broken,
        devices=devices,
    )


@pytest.mark.parametrize(
    ("loc", "phrase"),
    [
        (_loc(1, 1, 2), "on rank 1 of 2; rank 0's forward pass stayed finite at that step"),
        (_loc(0, 1, 2, "backward"), "on rank 0 of 2; rank 1's backward pass stayed finite at that step"),
        (_loc(0, 2, 2), "on rank 0 of 2; every rank's forward pass broke at that step"),
        (_loc(2, 1, 4), "on rank 2 of 4; 3 of the 4 ranks' forward passes stayed finite at that step"),
        (_loc(0, 1, 1), ""),
    ],
)
def test_the_rank_phrase_says_what_ranks_broken_counts(loc, phrase):
    assert rank_phrase(loc) == phrase


def test_a_rank_that_does_not_move_while_its_peer_waits_stalls_after_the_bound():
    clock = StallClock(2, stall_timeout_s=5.0)
    assert clock.read([(1, 0, 3, 0.1), (1, 0, 3, 0.1)], now=0.0) is None
    assert clock.read([(1, 0, 4, 0.1), (1, 0, 3, 0.1)], now=1.0) is None  # a step behind: normal
    assert clock.read([(1, 0, 4, 0.1), (1, 0, 3, 0.1)], now=5.9) is None
    stalled = clock.read(None, now=6.5)  # the ranks could not answer: nobody moved
    assert isinstance(stalled, RankCallFailed)
    assert str(stalled) == "rank 1 of 2 stalled before step 4 (its peers waited 6 s)"


def test_a_slow_rank_that_keeps_moving_never_stalls():
    clock = StallClock(2, stall_timeout_s=2.0)
    for second in range(20):
        assert clock.read([(1, 0, second + 1, 0.1), (1, 0, second, 0.1)], now=float(second)) is None


def test_the_default_bound_is_twenty_median_steps_and_at_least_a_minute():
    clock = StallClock(2, stall_timeout_s=None)
    clock.read([(1, 0, 1, 0.5), (1, 0, 1, 0.5)], now=0.0)
    assert clock.bound_s() == 60.0
    clock.read([(1, 0, 2, 10.0), (1, 0, 2, 10.0)], now=1.0)
    assert clock.bound_s() == 200.0


def test_a_stall_in_the_localization_replay_runs_the_trial_again():
    clock = StallClock(2, stall_timeout_s=1.0)
    clock.read([(1, LOCALIZING, 7, None), (1, LOCALIZING, 6, None)], now=0.0)
    stalled = clock.read([(1, LOCALIZING, 7, None), (1, LOCALIZING, 6, None)], now=2.0)
    assert isinstance(stalled, GangLost) and "rank 1 of 2 stalled in the localization replay" in str(stalled)
