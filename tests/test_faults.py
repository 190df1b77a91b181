"""A NaN that is not numerics is named for what it is, on one device (fast: in this process).

The workloads inject their own faults (``tests/workloads/faults.py``): a batch that holds an ``inf``
is an ``input`` fault, with its step, item and index, and no Cell is blamed; a NaN that an exact rerun
from the trial's start does not reproduce (the rerun matches the trial's loss bit for bit up to the
step before) is ``not_reproduced``; a real float16 overflow is still ``numerics``.
"""

from __future__ import annotations

from pathlib import Path

from ampsweep.contracts import INPUT, NOT_REPRODUCED, NUMERICS, Outcome
from ampsweep.jobs.localization._diagnose import diagnose
from ampsweep.jobs.training._step import GraphCache
from ampsweep.jobs.training._trainer import run_trial
from tests._trial import trial_config

FAULTS = f"{Path(__file__).parent / 'workloads' / 'faults.py'}:make"


def _diagnosed(**overrides) -> tuple[object, list[dict]]:
    config = trial_config(workload=FAULTS, steps=40, seed=1, **overrides)
    graphs = GraphCache()
    result = run_trial(config, FAULTS, cache=graphs)
    return result, diagnose(result, FAULTS, None, graphs).to_pylist()


def test_a_batch_holding_an_inf_is_an_input_fault_with_its_step_item_and_index():
    for level, dtype in (("O0", "float32"), ("O2", "float16")):
        result, rows = _diagnosed(amp_level=level, dtype=dtype, workload_args={"fault": "input"})
        assert result.outcome == Outcome.DIVERGED and result.first_nonfinite_step == 20
        (row,) = rows
        assert (row["cause"], row["replay_step"], row["input_position"], row["input_index"]) == (
            INPUT,
            20,
            0,
            "[3, 0]",
        )
        assert row["cell"] is None, "no Cell is blamed for a bad batch"


def test_a_nan_an_exact_rerun_does_not_reproduce_is_not_reproduced(tmp_path):
    args = {"fault": "transient", "marker": str(tmp_path / "struck")}
    result, rows = _diagnosed(amp_level="O2", workload_args=args)
    assert result.outcome == Outcome.DIVERGED and result.first_nonfinite_step == 20
    (row,) = rows
    assert (row["cause"], row["replay_step"], row["cell"], row["attempt"]) == (NOT_REPRODUCED, 20, None, 1)
    assert "loss bit for bit to step 19" in row["note"]
    clean, rows = _diagnosed(amp_level="O2", workload_args=args)  # the fault struck once: the rerun is clean
    assert clean.outcome == Outcome.COMPLETED and rows == []


def test_a_real_overflow_is_still_numerics_and_names_its_cell():
    workload = f"{Path(__file__).parent / 'workloads' / 'forward_overflow.py'}:make"
    config = trial_config(workload=workload, steps=30)
    graphs = GraphCache()
    result = run_trial(config, workload, cache=graphs)
    (row,) = diagnose(result, workload, None, graphs).to_pylist()
    assert row["cause"] == NUMERICS and row["cell"] is not None
