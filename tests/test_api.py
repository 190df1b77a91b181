"""The Python entry point: the README's example runs, validates like the CLI, and writes what the CLI writes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
import yaml

from ampsweep.contracts import PLAN_FILE, SPEC_FILE, decode_plan
from ampsweep.sweep import FailurePolicy, RunConfig, SpecError, Sweep

ROOT = Path(__file__).parent.parent
TINY = Path(__file__).parent / "workloads" / "tiny_mlp.py"


def _readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- python-api-example:start -->\n```python\n(.*?)```", text, re.S)
    assert block, "README has a marked Python API example"
    return block.group(1)


def _spec_dict(**grid) -> dict:
    return {"name": "api", "workload": f"{TINY}:make", "steps": 10, "grid": {"seed": [0], **grid}}


def test_a_misspelled_black_list_name_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(SpecError) as error:
        Sweep(_spec_dict(black_list=[["Scalar"]]))
    message = str(error.value)
    assert message.startswith("grid.black_list[0][0]: 'Scalar' is not allowed; known layer types:")
    assert "Scaler" in message and "\n" not in message


def test_the_plan_counts_default_axes():
    plan = Sweep(_spec_dict()).plan()  # amp_level left at its default [O0, O2]
    assert len(plan) == 2 and plan.graphs == 2
    assert [t.amp_level for t in plan.trials] == ["O0", "O2"]


def test_run_options_are_validated_quoting_the_bad_value():
    with pytest.raises(SpecError, match=r"^workers: 0 is not allowed"):
        RunConfig(workers=0)
    with pytest.raises(SpecError, match=r"^devices: 'tpu' is not allowed; allowed: auto, ascend, gpu, cpu"):
        RunConfig(devices="tpu")
    with pytest.raises(SpecError, match=r"^max_attempts: 0 is not allowed"):
        FailurePolicy(max_attempts=0)


def test_the_resolved_spec_fills_every_default():
    resolved = yaml.safe_load(Sweep(_spec_dict()).resolved_yaml())
    assert resolved["grid"]["amp_level"] == ["O0", "O2"]
    assert resolved["grid"]["loss_scale"] == ["none"] and resolved["abort_after"] == 10
    assert resolved["max_attempts"] == 3 and resolved["devices"] == "auto"


def _tables(root: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    keep = ["trial_id", "graph_id", "outcome", "steps_run", "first_nonfinite_step", "final_loss"]
    trials = pd.read_parquet(root / "trials")[keep].sort_values("trial_id").reset_index(drop=True)
    part = ds.partitioning(pa.schema([("trial_id", pa.string())]), flavor="hive")
    steps = ds.dataset(root / "steps", format="parquet", partitioning=part).to_table().to_pandas()
    steps = steps[["trial_id", "step", "loss", "grad_norm", "clipped", "nonfinite"]]
    return trials, steps.sort_values(["trial_id", "step"]).reset_index(drop=True)


@pytest.mark.slow
def test_readme_example_runs_and_matches_the_cli(tmp_path):
    api_dir = tmp_path / "api"
    api_dir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ran = subprocess.run(
        [sys.executable, "-c", _readme_example()], cwd=api_dir, env=env, capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    # O0 is one FP32 graph whatever the black list; O2 gives one per black list
    assert "8 trials, 3 compiled graphs" in ran.stdout
    api_root = api_dir / "runs" / "api-demo"
    assert (api_root / "report" / "report.md").is_file()

    namespace: dict = {}
    exec(_readme_example().split("plan = ")[0].replace("sweep = Sweep(", "spec = ("), namespace)
    spec_file = tmp_path / "api-demo.yaml"
    spec_file.write_text(yaml.safe_dump(namespace["spec"]))
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "ampsweep",
            "run",
            str(spec_file),
            "--out",
            str(tmp_path / "cli"),
            "--workers",
            "2",
            "--no-progress",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert cli.returncode == 0, cli.stderr[-3000:]
    cli_root = tmp_path / "cli" / "api-demo"
    for left, right in zip(_tables(api_root), _tables(cli_root)):
        pd.testing.assert_frame_equal(left, right)
    assert (api_root / SPEC_FILE).read_text() == (cli_root / SPEC_FILE).read_text()
    plan = decode_plan((api_root / PLAN_FILE).read_text())
    assert sorted(e.trial_id for e in plan) == sorted(_tables(api_root)[0]["trial_id"])
