"""A flaky device (slow): on a simulated cluster of two single-CPU Ray nodes, the workload breaks every
other run that reaches step 20 on the node holding the ``faulty_device`` resource
(``tests/workloads/faults.py``, ``fault="device"``).

Each trial that breaks there is ``not_reproduced`` (its exact rerun in place is clean), runs again on the
other node and trains to the end; the node is named as a suspect device in the report and by
``ampsweep status``; and the next run with ``avoid_devices`` leaves it out and gives the same answer.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow
FAULTS = Path(__file__).parent / "workloads" / "faults.py"
GRID = {"amp_level": ["O0", "O2"], "clip": [None, 1.0], "seed": [0, 1]}


def test_a_flaky_device_is_named_its_trials_rerun_elsewhere_and_avoid_devices_leaves_it_out(tmp_path):
    import ray
    from ray.cluster_utils import Cluster

    from ampsweep.analysis import analyze, render_markdown
    from ampsweep.sweep import RunConfig, Sweep
    from ampsweep.sweep.store._status import sweep_status

    def sweep(name: str, **fields) -> tuple[object, str]:
        spec = {
            "name": name,
            "workload": f"{FAULTS}:make",
            "workload_args": {"fault": "device", "marker": str(tmp_path / "device")},
            "steps": 40,
            "devices": "cpu",
            "grid": GRID,
            **fields,
        }
        Sweep(spec).run(tmp_path, RunConfig(progress=False, workers=2))
        analysis = analyze(tmp_path / name)
        return analysis, render_markdown(analysis)

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        cluster.add_node(num_cpus=1, resources={"faulty_device": 1})
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        (flaky,) = [n["NodeID"][:12] for n in ray.nodes() if "faulty_device" in n["Resources"]]
        faulty, text = sweep("flaky")
        avoided, _ = sweep("avoided", avoid_devices=[f"{flaky}:"])
    finally:
        ray.shutdown()
        cluster.shutdown()

    trials = pd.read_parquet(tmp_path / "flaky" / "trials").set_index("trial_id")
    anomalies = pd.read_parquet(tmp_path / "flaky" / "anomalies")
    assert set(trials["outcome"]) == {"completed"}, "every trial that broke on the flaky node was rerun"
    assert len(anomalies) >= 2 and set(anomalies["cause"]) == {"not_reproduced"}, anomalies
    assert set(anomalies["node"]) == {flaky} and set(anomalies["attempt"]) == {1}
    assert anomalies["cell"].isna().all(), "no Cell is blamed for a device's NaN"
    reruns = trials.loc[anomalies["trial_id"]]
    assert (reruns["attempts"] == 2).all() and flaky not in set(reruns["node"]), "each rerun ran elsewhere"
    assert f"Suspect device: node {flaky}: {len(anomalies)} NaNs there did not reproduce on replay" in text
    assert f"`avoid_devices: ['{flaky}:']`" in text
    (other,) = set(trials["node"]) - {flaky}
    assert (
        f"on node {flaky} did not reproduce on replay, and a rerun on node {other} trained to the end" in text
    )
    said = "\n".join(sweep_status(str(tmp_path / "flaky")).lines())
    assert f"suspect device: node {flaky}: {len(anomalies)} NaNs did not reproduce" in said

    clean = pd.read_parquet(tmp_path / "avoided" / "trials")
    assert flaky not in set(clean["node"]) and set(clean["outcome"]) == {"completed"}
    assert (
        not (tmp_path / "avoided" / "anomalies").exists()
        or pd.read_parquet(tmp_path / "avoided" / "anomalies").empty
    )
    assert faulty.kinds[0].recommendation.config == avoided.kinds[0].recommendation.config
