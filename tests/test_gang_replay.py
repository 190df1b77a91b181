"""A gang's localization replay, on one real gang of 2 CPU ranks (the short gang case of ``make test``).

The gang names the Cell and the rank whose part broke; a replay that raises on rank 1 alone fails the
localization on every rank at the same point (no rank waits in a collective the other skipped), the
trial's own result stands, and the gang is formed again before its next trial.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from ampsweep.contracts import INPUT, NOT_REPRODUCED, NUMERICS, UNKNOWN, Outcome
from tests._mindspore_versions import OLD_JIT_ATTENTION
from tests._trial import trial_config
from tests.conftest import answer

WORKLOADS = Path(__file__).parent / "workloads"
ROWS = f"{WORKLOADS / 'rows_overflow.py'}:make"
FAILS = f"{WORKLOADS / 'replay_fails.py'}:make"
FAULTS = f"{WORKLOADS / 'faults.py'}:make"


@OLD_JIT_ATTENTION
def test_a_gang_names_the_cell_and_the_rank_whose_part_broke(gang):
    actors, formed = gang
    config = trial_config(workload=ROWS, steps=12, devices=2)
    result = answer(actors, actors.run(formed, config, ROWS, None, None))
    (row,) = result.anomalies.to_pylist()
    assert (row["cell"], row["cell_class"], row["phase"]) == ("attn", "MultiheadAttention", "forward")
    assert (row["rank"], row["ranks_broken"], row["cause"]) == (1, 1, NUMERICS)


def test_a_bad_sample_in_rank_1s_part_is_an_input_fault_named_on_rank_1(gang):
    actors, formed = gang
    args = {"fault": "input", "fault_row": 11}  # row 3 of rank 1's half of the global batch of 16
    config = trial_config(workload=FAULTS, steps=30, seed=1, devices=2, workload_args=args)
    result = answer(actors, actors.run(formed, config, FAULTS, None, None))
    assert result.outcome == Outcome.DIVERGED
    (row,) = result.anomalies.to_pylist()
    assert (row["cause"], row["rank"], row["replay_step"], row["input_index"]) == (INPUT, 1, 20, "[3, 0]")
    assert row["cell"] is None


def test_a_nan_the_gangs_exact_rerun_does_not_bring_back_is_not_reproduced(gang, tmp_path):
    actors, formed = gang
    args = {"fault": "transient", "marker": str(tmp_path / "struck")}  # one rank's process, once
    config = trial_config(workload=FAULTS, steps=30, seed=1, devices=2, workload_args=args)
    result = answer(actors, actors.run(formed, config, FAULTS, None, None))
    assert result.outcome == Outcome.DIVERGED and result.first_nonfinite_step == 20
    (row,) = result.anomalies.to_pylist()
    assert (row["cause"], row["replay_step"], row["cell"]) == (NOT_REPRODUCED, 20, None)
    assert not formed.killed, "the ranks reran together and agree"


def test_a_replay_that_raises_on_rank_1_leaves_the_trial_standing_and_forms_the_gang_again(gang):
    """Last in the module: it ends the module's gang."""
    actors, formed = gang
    config = trial_config(workload=FAILS, steps=12, devices=2, workload_args={"token": uuid.uuid4().hex})
    result = answer(actors, actors.run(formed, config, FAILS, None, None))
    assert (result.outcome, result.error) == (Outcome.DIVERGED, None), (
        "the trial trained well: its result stands"
    )
    (row,) = result.anomalies.to_pylist()
    assert row["cause"] == UNKNOWN and row["cell"] is None and row["rank"] == 1
    assert row["note"] == (
        "localization failed on rank 1 of 2: RuntimeError: rank 1 cannot rebuild its workload for the replay"
    )
    assert formed.killed, "the gang is formed again before its next trial"
