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


def _fault(root, trial_id: str, rows: list[dict]) -> None:
    from tests.test_analysis import write_table

    write_table(root, "anomalies", trial_id, {k: [row.get(k) for row in rows] for k in rows[0]})


def test_the_report_names_a_bad_batch_a_rerun_and_a_suspect_device_and_ranks_no_bad_batch(tmp_path):
    """Synthetic tables: seed 1's diverging trial broke on a bad batch (not ranked, named with its step and
    place); two completed trials had a NaN that did not reproduce on node n7, device 3, and their reruns
    trained to the end (named, with the device as a suspect)."""
    from ampsweep import analysis
    from tests.test_analysis import build_ranked_sweep

    root = tmp_path / "unit-sweep"
    build_ranked_sweep(root)
    note = "item 0 of the batch at step 50, index [3, 0] held a non-finite value before the network saw it"
    _fault(
        root, "div1", [{"kind": "nonfinite", "cause": INPUT, "replay_step": 50, "note": note, "attempt": 1}]
    )
    for trial in ("inband0", "tiny2"):
        first = {
            "kind": "nonfinite",
            "cause": NOT_REPRODUCED,
            "replay_step": 20,
            "note": "exact rerun finite",
        }
        _fault(root, trial, [{**first, "attempt": 1, "node": "n7", "device_id": "3"}])
    a = analysis.analyze(root)
    scores = a.scores.set_index("trial_id")
    assert not scores.loc["div1", "ranked"] and scores.loc["div0", "ranked"], (
        "a bad batch is reported, not ranked"
    )
    text = analysis.render_markdown(a)
    evidence = text.split("### Evidence")[1].split("\n### ")[0]
    assert f"A bad batch, not the precision: {note}, in O3 · no clip · seed 1" in evidence, evidence
    assert (
        "The NaN of O2 · FP32: CustomNorm · clip 1.0 · seed 0 at step 20 on node n7, device 3 did not reproduce on "
        "replay, and a rerun on node n0, device 0 trained to the end: a device or transfer fault, not numerics. "
        "The ranking uses the rerun."
    ) in evidence, evidence
    assert "Suspect device: node n7, device 3: 2 NaNs there did not reproduce on replay" in evidence
    assert "avoid_devices: ['n7:3']" in evidence
