"""A NaN that is not numerics, end to end (slow): a sweep on 2 CPU workers of a stable classifier whose
faults the workload injects itself (``tests/workloads/faults.py``).

A transient fault in one trial (an exact replay does not bring it back) is run again, and the answer is
the one the same grid gives without the fault; the report names the fault and the device it happened on.
A batch holding an ``inf`` is named as input with its step; no Cell is blamed and FP32 is not said to break.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow
FAULTS = Path(__file__).parent / "workloads" / "faults.py"
GRID = {"amp_level": ["O0", "O2"], "clip": [None, 1.0], "seed": [0, 1, 2]}


def _sweep(root: Path, name: str, **args) -> tuple[object, str]:
    from ampsweep.analysis import analyze, render_markdown
    from ampsweep.sweep import RunConfig, Sweep

    spec = {"name": name, "workload": f"{FAULTS}:make", "workload_args": args, "steps": 40, "grid": GRID}
    Sweep(spec).run(root, RunConfig(progress=False, workers=2))
    analysis = analyze(root / name)
    return analysis, render_markdown(analysis)


@pytest.fixture(scope="module")
def ray_local():
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield
    ray.shutdown()


def test_a_transient_fault_is_rerun_and_the_answer_is_the_clean_grids(tmp_path, ray_local):
    clean, _ = _sweep(tmp_path, "clean")
    faulty, text = _sweep(tmp_path, "transient", fault="transient", marker=str(tmp_path / "struck"))
    assert (tmp_path / "struck").exists(), "the fault struck one trial"
    assert faulty.kinds[0].recommendation.config == clean.kinds[0].recommendation.config
    anomalies = pd.read_parquet(tmp_path / "transient" / "anomalies")
    first = anomalies[anomalies["cause"] == "not_reproduced"]
    assert len(first) == 1 and first["attempt"].tolist() == [1] and first["replay_step"].tolist() == [20]
    trials = pd.read_parquet(tmp_path / "transient" / "trials").set_index("trial_id")
    rerun = trials.loc[first["trial_id"].iloc[0]]
    assert rerun["outcome"] == "completed" and rerun["attempts"] == 2
    assert "did not reproduce on replay, and a rerun on the same device trained to the end" in text, (
        "one CPU node is one device"
    )
    assert "trained to the end: a device or transfer fault, not numerics. The ranking uses the rerun." in text


def test_a_bad_batch_is_named_as_input_with_its_step_and_blames_no_cell(tmp_path, ray_local):
    analysis, text = _sweep(tmp_path, "input", fault="input")
    head = "\n".join(text.splitlines()[:40])
    assert "FP32 itself breaks" not in text and "lower the learning rate" not in text.lower(), head
    assert "A bad batch, not the precision: item 0 of the batch at step 20, index [3, 0]" in text
    assert "Every trial of seed 1 saw it: fix the data, not the precision." in text
    anomalies = pd.read_parquet(tmp_path / "input" / "anomalies")
    assert set(anomalies["cause"]) == {"input"} and anomalies["cell"].isna().all()
    assert analysis.kinds[0].recommendation.status == "recommended"
