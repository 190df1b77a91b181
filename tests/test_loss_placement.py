"""Where the loss runs: ``outside`` (Model, a hand-written loop) versus ``inside`` (a cast WithLossCell)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from ampsweep.jobs import TrialConfig
from ampsweep.jobs.training._trainer import run_trial
from ampsweep.sweep import Sweep

NAIVE = "ampsweep.jobs.workloads.naive_loss:make"


def _run(placement: str, black: tuple[str, ...] = (), steps: int = 60):
    config = TrialConfig(
        workload=NAIVE,
        steps=steps,
        abort_after=3,
        amp_level="O2",
        black_list=black,
        clip=None,
        loss_scale="none",
        dtype="float16",
        seed=0,
        loss_placement=placement,
    )
    return run_trial(config, NAIVE)


def test_a_loss_that_overflows_float16_only_breaks_inside():
    outside = _run("outside")
    assert outside.outcome == "completed", outside.error
    assert np.isfinite(outside.steps.column("loss").to_numpy()).all()
    inside = _run("inside")
    assert inside.outcome == "diverged"
    fixed = _run("inside", ("LogSumExpLoss",))
    assert fixed.outcome == "completed"


def test_black_listing_a_loss_only_class_is_marked_equivalent_under_outside():
    sweep = Sweep(
        {
            "name": "placement",
            "workload": NAIVE,
            "steps": 10,
            "grid": {
                "amp_level": ["O2"],
                "black_list": [[], ["LogSumExpLoss"]],
                "loss_placement": ["outside", "inside"],
            },
        }
    )
    plan = sweep.plan()
    by_id = {t.trial_id: t for t in plan.trials}
    marked = [(by_id[a], by_id[b]) for a, b in plan.equivalent_to.items()]
    assert len(marked) == 1
    extra, base = marked[0]
    assert extra.loss_placement == base.loss_placement == "outside"
    assert extra.black_list == ("LogSumExpLoss",) and base.black_list == ()
    assert len({t.graph_id for t in plan.trials}) == 4, "placement is part of the graph"


@pytest.mark.slow
def test_the_report_says_where_the_overflow_is(tmp_path):
    spec = {
        "name": "placement",
        "workload": NAIVE,
        "steps": 150,
        "abort_after": 5,
        "grid": {
            "amp_level": ["O0", "O2"],
            "black_list": [[], ["LogSumExpLoss"]],
            "loss_placement": ["outside", "inside"],
            "seed": [0, 1],
        },
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "ampsweep",
            "run",
            str(path),
            "--out",
            str(tmp_path),
            "--workers",
            "2",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    root = Path(tmp_path) / "placement"
    trials = pd.read_parquet(root / "trials")
    o2 = trials[trials["amp_level"] == "O2"]
    outside = o2[(o2["loss_placement"] == "outside") & (o2["black_list"].map(len) == 0)]
    inside = o2[(o2["loss_placement"] == "inside") & (o2["black_list"].map(len) == 0)]
    fixed = o2[(o2["loss_placement"] == "inside") & (o2["black_list"].map(len) == 1)]
    assert set(outside["outcome"]) == {"completed"}
    assert set(inside["outcome"]) == {"diverged"}
    assert set(fixed["outcome"]) == {"completed"}
    assert set(trials["mindspore_version"]) and all(trials["mindspore_version"].str.match(r"^2\.\d+"))
    report = (root / "report" / "report.md").read_text()
    assert "diverges under `loss_placement: inside`" in report and "stable under `outside`" in report
    assert "black-listing LogSumExpLoss changes nothing under `loss_placement: outside`" in report
    localized = pd.read_parquet(root / "anomalies")
    assert set(localized["cell_class"]) == {"LogSumExpLoss"}, localized[["cell", "cell_class", "phase"]]
