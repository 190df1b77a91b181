"""A broken trial on a gang of 2 ranks is localized on every rank's part, as one device localizes it.

Each rank hooks its own forward and backward at the broken step, on its part of
the global batch; the driver merges the ranks' findings into the first (step,
rank). The one-device side localizes the same trial on the same global batch in
this process, so both sides run on this machine's kernels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ampsweep.contracts import FP32_LEVEL
from ampsweep.jobs import Baseline
from ampsweep.jobs.localization._diagnose import diagnose
from ampsweep.jobs.training._step import GraphCache
from ampsweep.jobs.training._trainer import run_trial
from tests._trial import trial_config
from tests.conftest import answer

ROWS = f"{Path(__file__).parent / 'workloads' / 'rows_overflow.py'}:make"
SILENT = "ampsweep.jobs.workloads.silent_norm:make"


def _on_one_device(config: Any, baseline: Any = None) -> dict[str, Any]:
    graphs = GraphCache()
    result = run_trial(config, config.workload, cache=graphs)
    rows = diagnose(result, config.workload, baseline, graphs).to_pylist()
    assert len(rows) == 1, rows
    return rows[0]


def _on_the_gang(gang: tuple[Any, Any], config: Any, baseline: Any = None) -> dict[str, Any]:
    actors, formed = gang
    result = answer(actors, actors.run(formed, config, config.workload, baseline, None))
    rows = result.anomalies.to_pylist()
    assert len(rows) == 1, (result.outcome, result.error, rows)
    return rows[0]


def _where(row: dict[str, Any]) -> tuple[Any, ...]:
    return row["kind"], row["cell"], row["cell_class"], row["phase"]


@pytest.mark.slow
def test_an_overflow_in_rank_1s_rows_is_named_on_rank_1_as_one_device_names_it(gang):
    config = trial_config(workload=ROWS, steps=20, devices=2)
    on_two = _on_the_gang(gang, config)
    on_one = _on_one_device(trial_config(workload=ROWS, steps=20))
    assert _where(on_two) == _where(on_one) == ("nonfinite", "attn", "MultiheadAttention", "forward")
    assert on_two["rank"] == 1 and on_two["ranks_broken"] == 1, "rank 0's part stayed finite"
    assert on_one["rank"] == 0 and on_one["ranks_broken"] == 1
    assert on_two["replay_step"] == on_one["replay_step"]
    assert on_two["fp32_max_abs"] is not None, "the FP32 twin ran on the ranks too"


@pytest.mark.slow
def test_an_overflow_in_every_rows_part_is_named_on_the_lowest_rank_with_every_rank_counted(gang):
    config = trial_config(workload=ROWS, steps=20, devices=2, workload_args={"hot": "all"})
    on_two = _on_the_gang(gang, config)
    assert _where(on_two) == ("nonfinite", "attn", "MultiheadAttention", "forward")
    assert (on_two["rank"], on_two["ranks_broken"]) == (0, 2)


@pytest.mark.slow
def test_a_silent_failure_on_a_gang_departs_where_it_departs_on_one_device(gang):
    fp32 = run_trial(trial_config(workload=SILENT, steps=200, amp_level=FP32_LEVEL, dtype="float32"), SILENT)
    baseline = Baseline(final_loss=fp32.final_loss, reached_target=True)
    config = trial_config(workload=SILENT, steps=200, devices=2)
    on_two = _on_the_gang(gang, config, baseline)
    on_one = _on_one_device(trial_config(workload=SILENT, steps=200), baseline)
    assert _where(on_two) == _where(on_one) == ("departure", "norm", "FeatureNorm", "forward")
