"""A bad sweep file: exit code 2, one line naming field, value and allowed values, nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ampsweep.sweep.cli import main

#: refused by the workload check, which runs while a local Ray starts (seconds on 2 cores):
#: ``make test-slow``; tests/test_bad_specs.py keeps one such refusal in the fast suite
RAY_STARTED = pytest.mark.slow

BAD_SPECS = [
    pytest.param(
        {"workload_args": {"nonsense": 1}},
        "workload_args",
        "{'nonsense': 1}",
        "the factory rejected them",
        marks=RAY_STARTED,
    ),
    ({"grid": {"amp_level": ["O2", "O5"]}}, "grid.amp_level[1]", "'O5'", "'O0', 'O1', 'O2' or 'O3'"),
    ({"grid": {"clip": [1.0, -3]}}, "grid.clip", "-3", "> 0 or null"),
    ({"grid": {"clip": ["big"]}}, "grid.clip[0]", "'big'", "number"),
    ({"grid": {"loss_scale": ["static"]}}, "grid.loss_scale", "static", "static:<value>"),
    ({"grid": {"dtype": ["float8"]}}, "grid.dtype[0]", "'float8'", "'float16' or 'bfloat16'"),
    ({"grid": {"seed": []}}, "grid.seed", "[]", "at least one value"),
    pytest.param(
        {"grid": {"black_list": [["NoSuchNorm"]]}},
        "grid.black_list[0][0]",
        "'NoSuchNorm'",
        "Scaler",
        marks=RAY_STARTED,
    ),
    ({"steps": 0}, "steps", "0", "greater than 0"),
    ({"devices": "tpu"}, "devices", "'tpu'", "auto, ascend, gpu, cpu"),
    ({"devices": ["gpu", "tpu"]}, "devices", "['gpu', 'tpu']", "auto, ascend, gpu, cpu"),
    ({"learning_rate": 0.1}, "learning_rate", "0.1", "unknown key"),
    ({"grid": {"amp_levels": ["O2"]}}, "grid.amp_levels", "['O2']", "unknown key"),
    ({"workload": "no_colon"}, "workload", "'no_colon'", "package.module:make"),
    ({"workload": "missing_file.py:make"}, "workload", "'missing_file.py:make'", "does not exist"),
    pytest.param({"workload": "json:make"}, "workload", "'json'", "no callable 'make'", marks=RAY_STARTED),
    ({"name": "../escape"}, "name", "'../escape'", "letters, digits"),
    ({"horizon": 10}, "horizon", "10", "a global step >="),
    ({"horizon": -5}, "horizon", "-5", "greater than 0"),
]


@pytest.mark.parametrize(("overrides", "field", "value", "allowed"), BAD_SPECS)
def test_bad_spec_is_one_line_with_field_value_and_allowed(
    write_spec, tmp_path, capsys, overrides, field, value, allowed
):
    out = tmp_path / "out"
    code = main(["run", str(write_spec(overrides)), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"ampsweep: error: {field}: ")
    assert value in lines[0] and allowed in lines[0], lines[0]
    assert not out.exists(), "nothing may be written for a spec that does not validate"


def test_missing_required_field(write_spec, capsys):
    path = write_spec(raw="name: x\nworkload: ampsweep.jobs.workloads.seed_repro:make\n")
    assert main(["plan", str(path)]) == 2
    assert "steps: None is not allowed; this field is required" in capsys.readouterr().err


def test_not_yaml_and_not_mapping(write_spec, capsys):
    assert main(["plan", str(write_spec(raw="name: [unclosed\n"))]) == 2
    assert "not valid YAML at line" in capsys.readouterr().err
    assert main(["plan", str(write_spec(raw="- just\n- a list\n"))]) == 2
    assert "must be a YAML mapping" in capsys.readouterr().err


def test_missing_spec_file(tmp_path, capsys):
    assert main(["plan", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot be read" in capsys.readouterr().err


def test_bad_cli_flag_exits_2(write_spec):
    result = subprocess.run(
        [sys.executable, "-m", "ampsweep", "run", str(write_spec()), "--out", "x", "--workers", "0"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "--workers" in result.stderr and "'0'" in result.stderr


def test_real_process_exit_code_and_no_traceback(write_spec, tmp_path):
    out = tmp_path / "out"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ampsweep",
            "run",
            str(write_spec({"grid": {"amp_level": ["O9"]}})),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("ampsweep:")] == [
        "ampsweep: error: grid.amp_level[0]: 'O9' is not allowed; input should be 'O0', 'O1', 'O2' or 'O3'"
    ]
    assert not Path(out).exists()


def test_plan_counts_trials_and_graphs(write_spec, capsys):
    assert main(["plan", str(write_spec())]) == 0
    out = capsys.readouterr().out
    # 2 levels x 2 black lists x 2 clips; graphs: O2 with each black list, and one O0
    # (O0 casts nothing, so its black lists share one FP32 graph)
    assert out.splitlines()[0].startswith("tiny: 8 trials, 3 distinct compiled graphs, 2 equivalent")
    assert len(out.splitlines()) == 9


def test_a_factory_that_raises_is_a_one_line_spec_error(write_spec, tmp_path, capsys):
    model = tmp_path / "raising.py"
    model.write_text("def make(seed):\n    raise ValueError('no data here\\nsecond line')\n")
    assert main(["plan", str(write_spec({"workload": f"{model}:make"}))]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "failed: ValueError: no data here second line" in lines[0]


def test_avoid_devices_holds_the_node_as_the_trials_table_does():
    from ampsweep.sweep.planning._spec import parse_spec

    given = {"name": "a", "workload": "m:make", "steps": 1, "avoid_devices": ["3f2a9c01b7de5a6b0c:3", "n7:"]}
    assert parse_spec(given).avoid_devices == ["3f2a9c01b7de:3", "n7:"]  # the whole Ray node id works too
