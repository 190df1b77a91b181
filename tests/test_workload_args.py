"""The workload's own arguments as axes (``grid.workload_args``), asked and answered in the user's words.

The end-to-end test is issue 48's: a factory whose attention takes ``softmax_dtype``
(float16 overflows in ``exp``, float32 trains) swept over O0/O2 × clip × two seeds
recommends O2 with ``softmax_dtype=float32``, and the report's first line says so.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ampsweep.contracts import Configuration, arg_column
from ampsweep.sweep import SpecError, Sweep

KNOB = Path(__file__).parent / "workloads" / "softmax_knob.py"
ROOT = Path(__file__).parent.parent


def _spec(**top) -> dict:
    grid = {
        "amp_level": ["O0", "O2"],
        "clip": [None, 1.0],
        "seed": [0, 1],
        "workload_args": {"softmax_dtype": ["float16", "float32"]},
        **top.pop("grid", {}),
    }
    return {"name": "knob", "workload": f"{KNOB}:make", "steps": 80, "grid": grid, **top}


def _run(folder: Path, spec: dict, *flags: str) -> Path:
    """``ampsweep run`` on ``spec`` as a user runs it; the sweep's folder."""
    path = folder / "knob.yaml"
    path.write_text(yaml.safe_dump(spec))
    command = [sys.executable, "-m", "ampsweep", "run", str(path), "--out", str(folder / "runs"), *flags]
    ran = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return folder / "runs" / spec["name"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"grid": {"workload_args": {"softmax_type": ["float16"]}}},
            "grid.workload_args.softmax_type: 'softmax_type' is not allowed; a keyword argument of",
        ),
        (
            {"grid": {"workload_args": {"softmax_dtype": []}}},
            "grid.workload_args.softmax_dtype: [] is not allowed",
        ),
        (
            {"grid": {"workload_args": {"softmax_dtype": ["float16", "float16"]}}},
            "grid.workload_args.softmax_dtype: ['float16', 'float16'] is not allowed; distinct values",
        ),
        (
            {"grid": {"workload_args": {"softmax_dtype": [{"a": 1}]}}},
            "grid.workload_args.softmax_dtype: {'a': 1} is not allowed; a plain YAML value",
        ),
        (
            {"workload_args": {"softmax_dtype": "float32"}},
            "grid.workload_args.softmax_dtype: 'softmax_dtype' is not allowed; an argument is either fixed",
        ),
        (
            {"remedies": {"input_scale": 1.0}},
            "remedies: {'input_scale': 1.0} is not allowed; remedies are tried",
        ),
    ],
)
def test_a_bad_workload_argument_axis_is_one_line_before_anything_runs(change, message):
    with pytest.raises(SpecError) as error:
        Sweep(_spec(**change))
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


@pytest.mark.slow  # starts a local Ray; tests/test_bad_specs.py's workload-args-unknown stays fast
def test_the_cli_refuses_it_with_exit_2_and_writes_nothing(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(_spec(grid={"workload_args": {"sofmax_dtype": ["float32"]}})))
    ran = subprocess.run(
        [sys.executable, "-m", "ampsweep", "run", str(spec), "--out", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 2, ran.stderr
    assert "grid.workload_args.sofmax_dtype" in ran.stderr and "softmax_dtype" in ran.stderr
    assert not (tmp_path / "runs").exists()


def test_each_value_is_part_of_the_trial_and_its_name():
    plan = Sweep(_spec()).plan()
    assert len(plan.trials) == 16
    by_value = {t.workload_args["softmax_dtype"] for t in plan.trials}
    assert by_value == {"float16", "float32"}
    assert len({t.trial_id for t in plan.trials}) == 16
    names = {t.configuration.name() for t in plan.trials if t.amp_level == "O2" and t.clip is None}
    assert names == {"O2 · softmax_dtype=float16 · no clip", "O2 · softmax_dtype=float32 · no clip"}
    # O0 with a low-precision value is not FP32: the workload computes its softmax in float16 itself
    assert (
        Configuration("O0", workload_args={"softmax_dtype": "float16"}).name() == "O0 · softmax_dtype=float16"
    )
    assert (
        Configuration("O0", workload_args={"softmax_dtype": "float32"}).name()
        == "FP32 · softmax_dtype=float32"
    )


def test_a_sweep_without_swept_arguments_keeps_its_trial_ids():
    spec = _spec(grid={"workload_args": {}})
    spec["workload_args"] = {"softmax_dtype": "float32"}
    fixed = {t.trial_id for t in Sweep(spec).plan().trials}
    swept = _spec(grid={"workload_args": {"softmax_dtype": ["float32"]}})
    # the id holds every argument's value: fixed or swept, the same trial is the same trial
    assert fixed == {t.trial_id for t in Sweep(swept).plan().trials}


@pytest.mark.slow
def test_the_knob_is_the_answer_in_the_users_words(tmp_path):
    sweep = _run(tmp_path, _spec(), "--workers", "2")
    trials = pd.read_parquet(sweep / "trials")
    assert set(trials[arg_column("softmax_dtype")]) == {"float16", "float32"}
    report = (sweep / "report" / "report.md").read_text()
    answer = next(line for line in report.splitlines() if line.startswith(("Use ", "**Use ")))
    assert answer.lstrip("*").startswith("Use O2, set softmax_dtype=float32"), answer
    broken = trials[(trials["amp_level"] == "O2") & (trials[arg_column("softmax_dtype")] == "float16")]
    assert set(broken["outcome"]) == {"diverged"}


@pytest.mark.slow
def test_the_adaptive_search_tries_a_remedy_before_a_class(tmp_path):
    spec = _spec(
        grid={"workload_args": {}, "clip": [None], "seed": [0, 1]},
        search="adaptive",
        remedies={"softmax_dtype": "float32"},
        confirm={"seeds": 0, "steps_factor": 1},
        steps=60,
    )
    result = Sweep(spec).run(tmp_path / "runs", workers=2, progress=False)
    assert result.ran > 0
    sweep = tmp_path / "runs" / "knob"
    log = yaml.safe_load((sweep / "search.json").read_text())
    family = log["families"][0]
    assert family["remedies_added"] == {"softmax_dtype": "float32"}
    assert family["minimal_black_list"] == []
    assert [r["phase"] for r in family["rounds"]][:2] == ["grow", "remedy"]
    from ampsweep import analysis

    written = analysis.write_report(sweep)
    first = next(line for line in written.read_text().splitlines() if line.startswith("Use "))
    assert first.startswith("Use O2, set softmax_dtype=float32"), first


def test_when_fp32_breaks_the_next_spec_sweeps_the_factorys_learning_rate(tmp_path):
    from ampsweep import analysis
    from ampsweep.contracts import SPEC_FILE
    from tests.test_fp32_breaks import FP32_LR, build_fp32_breaks

    build_fp32_breaks(tmp_path, clip_holds=False)
    spec = {
        "name": "lr",
        "workload": FP32_LR,
        "steps": 200,
        "grid": {"amp_level": ["O0", "O2"], "clip": [None, 1.0]},
    }
    (tmp_path / SPEC_FILE).write_text(yaml.safe_dump(spec))
    analysis.write_report(tmp_path)
    following = yaml.safe_load((tmp_path / "report" / "next-spec.yaml").read_text())
    # fp32_lr's factory: make(seed, lr=0.1); the next sweep keeps 0.1 first (cheapest: no change)
    assert following["grid"]["workload_args"] == {"lr": [0.1, 0.033, 0.01]}
    assert "lr" not in (following.get("workload_args") or {})
    Sweep(following, base_dir=tmp_path)  # and it validates: a spec the user can run as it is


@pytest.mark.slow
def test_workload_arguments_with_gangs_a_prefix_and_a_horizon(tmp_path):
    """Issue 48 item 5 on issue 47's gangs: a swept argument, devices_per_trial 2, start_from and horizon
    in one sweep; the answer names the argument and says how the trials ran, and the broken trials are
    localized on their gang: the report names the Cell and the rank."""
    spec = _spec(
        steps=30,
        horizon=60,
        start_from={"steps": 10},
        devices_per_trial=2,
        grid={"clip": [None], "seed": [0]},
    )
    sweep = _run(tmp_path, spec, "--no-progress")
    trials = pd.read_parquet(sweep / "trials")
    assert set(trials["devices"]) == {2} and set(trials["global_batch"]) == {16}
    assert set(trials["start_step"]) == {10}
    report = (sweep / "report" / "report.md").read_text()
    assert "Use O2, set softmax_dtype=float32, no clip." in report
    assert "on 2 devices per trial: data parallel, global batch 16" in report
    assert "Held to step 60" in report
    # a trial on a gang is localized on its ranks (issue 53): the broken configuration's Cell, the op
    # inside it that overflowed and the rank whose part broke first, as one device's report names the Cell
    where = next((line for line in report.splitlines() if line.startswith("Where it breaks:")), None)
    assert where is not None, report
    assert "the `exp` inside KnobSoftmax overflowed float16" in where and "in `softmax`" in where, where
    assert "on rank 0 of 2; every rank's forward pass broke at that step" in where, where
    assert "step ~10, seed 0" in where, where  # the first step after the prefix, where it went NaN
    anomalies = pd.read_parquet(sweep / "anomalies")
    diverged = trials[trials["outcome"] == "diverged"]
    assert set(diverged[arg_column("softmax_dtype")]) == {"float16"}
    assert sorted(anomalies["trial_id"]) == sorted(diverged["trial_id"])  # each broken trial, once
    assert set(anomalies["cell"]) == {"softmax"} and set(anomalies["inner_op"]) == {"exp"}
    assert set(anomalies["rank"]) == {0} and set(anomalies["ranks_broken"]) == {2}
    assert "is not replayed" not in report
