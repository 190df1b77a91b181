"""Cluster behaviour on one machine: fake NPUs/GPUs, a running head, `ray job submit` (slow)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests._ray_processes import private_temp_dir, stop_processes_under
from tests._wait import wait_until

pytestmark = pytest.mark.slow
TINY = Path(__file__).parent / "workloads" / "tiny_mlp.py"
BIN = Path(sys.executable).parent


def _spec_dict(workload: str, **extra) -> dict:
    spec = {
        "name": "cluster",
        "workload": workload,
        "steps": 15,
        "grid": {
            "amp_level": ["O0", "O2"],
            "black_list": [[], ["Scaler"]],
            "clip": [None, 1.0, 2.0],
            "seed": [0],
        },
    }
    spec.update(extra)
    return spec


def test_simulated_cluster_pins_one_actor_per_fake_device(tmp_path):
    import ray
    from ray.cluster_utils import Cluster

    from ampsweep.sweep import RunConfig, Sweep

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1, resources={"NPU": 2})
        cluster.add_node(num_cpus=1, num_gpus=2)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        sweep = Sweep(_spec_dict(f"{TINY}:make", devices=["ascend", "gpu"]))
        result = sweep.run(tmp_path, RunConfig(address=cluster.address, compute_on="cpu", progress=False))
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert result.ran == 12 and result.outcomes == {"completed": 12}
    trials = pd.read_parquet(tmp_path / "cluster" / "trials")
    devices = trials[["device_kind", "node", "device_id"]].drop_duplicates()
    # 4 NPUs on two nodes and 2 GPUs on a third: six distinct (node, visible device) pairs, all used
    assert len(devices) == 6
    assert sorted(devices["device_kind"]) == ["ascend"] * 4 + ["gpu"] * 2
    assert devices[devices["device_kind"] == "ascend"]["node"].nunique() == 2
    assert set(devices["device_id"]) == {"0", "1"}
    from ampsweep.analysis import write_report

    write_report(tmp_path / "cluster")
    ranking = pd.read_csv(tmp_path / "cluster" / "report" / "ranking.csv")
    # numerics differ between backends: each kind is ranked on its own
    assert set(ranking["device_kind"]) == {"ascend", "gpu"}


@pytest.fixture
def ray_head(tmp_path):
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PATH": f"{BIN}:{os.environ['PATH']}"}
    temp_dir = private_temp_dir()
    started = subprocess.run(
        [
            str(BIN / "ray"),
            "start",
            "--head",
            "--num-cpus",
            "2",
            "--port",
            "6391",
            "--dashboard-port",
            "8271",
            "--include-dashboard",
            "true",
            "--disable-usage-stats",
            "--temp-dir",
            temp_dir,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        assert started.returncode == 0, started.stderr
        yield env
    finally:
        # never `ray stop --force`: it would end every Ray cluster on the machine, not only this one
        stop_processes_under(temp_dir)


def test_run_against_a_running_head_and_through_ray_job_submit(ray_head, tmp_path):
    env = ray_head
    outside = tmp_path / "project"
    outside.mkdir()
    shutil.copy(TINY, outside / "my_model.py")
    (outside / "spec.yaml").write_text(yaml.safe_dump(_spec_dict("my_model.py:make")))

    direct = subprocess.run(
        [
            sys.executable,
            "-m",
            "ampsweep",
            "run",
            str(outside / "spec.yaml"),
            "--address",
            "127.0.0.1:6391",
            "--out",
            str(tmp_path / "direct"),
            "--no-progress",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd="/",
    )
    assert direct.returncode == 0, direct.stderr[-3000:]
    assert len(pd.read_parquet(tmp_path / "direct" / "cluster" / "trials")) == 12

    # no shared storage: pull the results from the head node's disk through Ray
    pulled = subprocess.run(
        [
            sys.executable,
            "-m",
            "ampsweep",
            "pull",
            str(tmp_path / "direct" / "cluster"),
            str(tmp_path / "pulled"),
            "--address",
            "127.0.0.1:6391",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
    )
    assert pulled.returncode == 0, pulled.stderr[-3000:]
    assert "pulled 12 new trials" in pulled.stdout
    assert len(pd.read_parquet(tmp_path / "pulled" / "cluster" / "steps")) == 12 * 15

    submit = [
        str(BIN / "ray"),
        "job",
        "submit",
        "--address",
        "http://127.0.0.1:8271",
        "--working-dir",
        str(outside),
        "--",
        sys.executable,
        "-m",
        "ampsweep",
        "run",
        "spec.yaml",
        "--out",
        str(tmp_path / "job"),
        "--no-progress",
    ]
    tries: list[subprocess.CompletedProcess] = []

    def submitted_to_an_agent() -> subprocess.CompletedProcess | None:
        tries.append(subprocess.run(submit, env=env, capture_output=True, text=True, timeout=600))
        # the head's job agent starts a little after `ray start` returns, later on a loaded machine
        busy = "No available agent" in tries[-1].stdout + tries[-1].stderr
        return None if busy and tries[-1].returncode != 0 else tries[-1]

    submitted = wait_until(
        submitted_to_an_agent,
        300,  # a hang guard: the agent comes up in seconds on a quiet machine, minutes on a loaded one
        interval=5,
        message=lambda: (
            "the head's job agent to take `ray job submit`; last answer:\n"
            + (tries[-1].stdout + tries[-1].stderr)[-3000:]
        ),
    )
    assert submitted.returncode == 0, (submitted.stdout + submitted.stderr)[-3000:]
    trials = pd.read_parquet(tmp_path / "job" / "cluster" / "trials")
    assert len(trials) == 12 and set(trials["outcome"]) == {"completed"}
