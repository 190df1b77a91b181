"""End to end on local Ray: the CLI, real actors, real MindSpore, real Parquet (slow)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pytest
import yaml

from ampsweep.jobs import TrialConfig
from ampsweep.jobs.training._trainer import run_trial
from tests._wait import wait_until

pytestmark = pytest.mark.slow
TINY = Path(__file__).parent / "workloads" / "tiny_mlp.py"


def _ampsweep(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ampsweep", *args], capture_output=True, text=True, timeout=timeout
    )


def _spec(tmp_path: Path, workload: str, **grid) -> Path:
    spec = {
        "name": "e2e",
        "workload": workload,
        "steps": 20,
        "abort_after": 3,
        "grid": {
            "amp_level": ["O0", "O2"],
            "black_list": [[], ["Scaler"]],
            "clip": [None, 1.0],
            "seed": [0],
            **grid,
        },
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_sweep_with_a_workload_file_outside_the_repository(tmp_path):
    model_dir = tmp_path / "elsewhere"
    model_dir.mkdir()
    shutil.copy(TINY, model_dir / "my_model.py")
    spec = _spec(tmp_path, "elsewhere/my_model.py:make")  # relative to the spec's folder
    out = tmp_path / "out"
    result = _ampsweep("run", str(spec), "--out", str(out), "--workers", "2", "--no-progress")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "e2e: 8 trials run" in result.stdout
    root = out / "e2e"
    trials = pd.read_parquet(root / "trials")
    assert len(trials) == 8 and trials["trial_id"].is_unique
    assert set(trials["outcome"]) == {"completed"}
    assert set(trials["worker_index"]) == {0, 1}, "both actors ran trials"
    assert (trials["device_kind"] == "cpu").all()
    compiles = (
        trials.assign(compiled=trials["compile_s"] > 0)
        .groupby(["worker_index", "graph_id"])["compiled"]
        .sum()
    )
    assert (compiles == 1).all(), "each actor compiles each graph it runs exactly once"
    # the worker's own clock: a trial's span holds its training, and one worker's trials never overlap
    span = (trials["finished_at"] - trials["started_at"]).dt.total_seconds()
    assert (span >= trials["wall_s"] - 0.002).all()
    for _, own in trials.sort_values("started_at").groupby("worker_index"):
        assert (own["started_at"].iloc[1:].to_numpy() >= own["finished_at"].iloc[:-1].to_numpy()).all()
    steps = ds.dataset(root / "steps", format="parquet", partitioning="hive").to_table().to_pandas()
    for _, group in steps.groupby("trial_id"):
        assert sorted(group["step"]) == list(range(20))
    assert set(steps["trial_id"].astype(str)) == set(trials["trial_id"])
    assert (root / "report" / "ranking.csv").is_file() and (root / "report" / "report.md").is_file()
    assert (root / "sweep.yaml").is_file()
    # one FP32 run with hooks after the trials: the report's float16 headroom section
    profile = json.loads((root / "profile.json").read_text())
    assert profile["cells"] and {"cell", "class", "forward_max", "risk"} <= set(profile["cells"][0])
    assert "float16 headroom of the FP32 run" in (root / "report" / "report.md").read_text()

    again = _ampsweep("run", str(spec), "--out", str(out), "--workers", "2", "--no-progress")
    assert again.returncode == 0
    assert "0 trials run (nothing new), 8 already done" in again.stdout
    assert pd.read_parquet(root / "trials")["finished_at"].equals(trials["finished_at"])


def test_a_killed_worker_loses_no_trial(tmp_path):
    marker = tmp_path / "killed-once"
    crashing = tmp_path / "crashing.py"
    crashing.write_text(
        f"import os, signal\nfrom pathlib import Path\n"
        f"import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('tiny_for_crash', {str(TINY)!r})\n"
        f"tiny = importlib.util.module_from_spec(spec); sys.modules['tiny_for_crash'] = tiny\n"
        f"spec.loader.exec_module(tiny)\n"
        f"def make(seed, **kw):\n"
        f"    if seed == 1 and not Path({str(marker)!r}).exists():\n"
        f"        Path({str(marker)!r}).touch()\n"
        f"        os.kill(os.getpid(), signal.SIGKILL)\n"
        f"    return tiny.make(seed, **kw)\n"
    )
    spec = _spec(tmp_path, f"{crashing}:make", amp_level=["O2"], black_list=[[]], seed=[0, 1, 2])
    result = _ampsweep("run", str(spec), "--out", str(tmp_path / "out"), "--workers", "2", "--no-progress")
    assert result.returncode == 0, result.stderr[-3000:]
    assert marker.exists(), "the worker really died once"
    trials = pd.read_parquet(tmp_path / "out" / "e2e" / "trials")
    assert len(trials) == 6 and set(trials["outcome"]) == {"completed"}


def test_a_killed_driver_loses_no_finished_trial(tmp_path):
    spec = _spec(tmp_path, f"{TINY}:make", seed=[0, 1, 2, 3])
    spec.write_text(spec.read_text().replace("steps: 20", "steps: 150"))
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ampsweep",
            "run",
            str(spec),
            "--out",
            str(out),
            "--workers",
            "2",
            "--no-progress",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    trials_dir = out / "e2e" / "trials"

    def three_committed() -> bool:
        assert proc.poll() is None, f"the driver exited ({proc.returncode}) before it was killed"
        return len(list(trials_dir.glob("[!.]*.parquet"))) >= 3

    try:
        wait_until(three_committed, 300, message=f"3 committed trial rows under {trials_dir}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # [!.]: not a temporary the killed driver left mid-write (the store skips those; pathlib matches them)
    before = {p.name: p.stat().st_mtime_ns for p in trials_dir.glob("[!.]*.parquet")}
    assert 3 <= len(before) < 32
    result = _ampsweep("run", str(spec), "--out", str(out), "--workers", "2", "--no-progress")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"{32 - len(before)} trials run" in result.stdout
    after = {p.name: p.stat().st_mtime_ns for p in trials_dir.glob("[!.]*.parquet")}
    assert len(after) == 32
    assert all(after[name] == mtime for name, mtime in before.items()), "finished trials are not rerun"
    steps = ds.dataset(out / "e2e" / "steps", format="parquet", partitioning="hive").to_table().to_pandas()
    counts = steps.groupby("trial_id", observed=True)["step"].agg(["count", "nunique", "max"])
    assert (counts["count"] == 150).all() and (counts["nunique"] == 150).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_seed_repro_reproduces_the_reported_failure(seed):
    def run(level: str, black: tuple[str, ...], clip: float | None):
        config = TrialConfig(
            workload="ampsweep.jobs.workloads.seed_repro:make",
            steps=300,
            abort_after=10,
            amp_level=level,
            black_list=black,
            clip=clip,
            loss_scale="none",
            dtype="float16",
            seed=seed,
        )
        return run_trial(config, config.workload)

    fp32 = run("O0", (), None)
    assert fp32.outcome == "completed" and np.isfinite(fp32.final_loss)
    assert run("O2", (), None).outcome == "diverged"
    fixed = run("O2", ("CustomNorm",), None)
    assert fixed.outcome == "completed"
    tight = run("O2", ("CustomNorm",), 1.0)
    loose = run("O2", ("CustomNorm",), 5.0)
    assert tight.outcome == loose.outcome == "completed"
    assert tight.steps.column("clipped").to_numpy().mean() >= 0.9
    assert loose.steps.column("clipped").to_numpy().mean() <= 0.2
    # every step of the fixed run was timed (how fast it is belongs in benchmarks/)
    ms = fixed.steps.column("step_ms").to_numpy()
    assert len(ms) == 300 and np.isfinite(ms).all() and (ms > 0).all()
