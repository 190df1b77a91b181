"""``ampsweep export --tensorboard`` and ``run --tensorboard``, read back with TensorBoard's own reader.

The fast tests export synthetic sweeps (``tests/test_analysis.py``'s, written as the store writes them);
the slow one runs a real sweep and checks its runs are there before its report.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer
from tensorboard.plugins.hparams import metadata

from ampsweep.analysis import export_tensorboard
from ampsweep.contracts import part_path
from ampsweep.sweep._tensorboard import exporting
from ampsweep.sweep.cli import main
from tests.test_analysis import CURVE, build_ranked_sweep, write_trial
from tests.test_e2e import TINY, _ampsweep, _spec

#: the hparams every run has (the configuration's axes, the seed, the trial and what became of it)
AXES = {"amp_level", "black_list", "clip", "loss_scale", "dtype", "loss_placement", "devices", "seed"}


def read_back(folder: Path) -> EventMultiplexer:
    """Every run under ``folder``, every event kept (TensorBoard's reader samples by default)."""
    runs = EventMultiplexer(size_guidance={"scalars": 0, "tensors": 0})
    runs.AddRunsFromDirectory(str(folder))
    return runs.Reload()


def hparams(runs: EventMultiplexer, run: str) -> dict[str, object]:
    content = runs.SummaryMetadata(run, metadata.SESSION_START_INFO_TAG).plugin_data.content
    values = metadata.parse_session_start_info_plugin_data(content).hparams
    return {name: value.string_value or value.number_value for name, value in values.items()}


def texts(runs: EventMultiplexer, run: str, tag: str) -> list[str]:
    return [event.tensor_proto.string_val[0].decode() for event in runs.Tensors(run, f"{tag}/text_summary")]


def run_of(runs: EventMultiplexer, trial_id: str) -> str:
    return next(run for run in runs.Runs() if hparams(runs, run)["trial_id"] == trial_id)


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    root = tmp_path / "unit-sweep"
    build_ranked_sweep(root)
    return root


def test_one_run_per_trial_with_its_steps_hparams_scores_and_texts(sweep: Path, tmp_path: Path) -> None:
    done = export_tensorboard(sweep, tmp_path / "tb")
    assert (done.written, done.already) == (21, 0)
    runs = read_back(tmp_path / "tb")
    assert len(runs.Runs()) == 21
    run = run_of(runs, "inband1")
    assert run == "unit-sweep/O2 · FP32: CustomNorm · clip 1.0 · seed 1"
    steps = pq.read_table(sweep / part_path("steps", "inband1")).to_pandas()
    for column in ("loss", "grad_norm", "clipped", "nonfinite", "skipped", "loss_scale", "step_ms"):
        got = runs.Scalars(run, column)
        assert [e.step for e in got] == steps["step"].tolist()
        assert [e.value for e in got] == steps[column].astype("float32").tolist()
    found = hparams(runs, run)
    assert AXES <= found.keys()
    assert (found["amp_level"], found["black_list"], found["clip"], found["seed"]) == (
        "O2",
        "CustomNorm",
        "1.0",
        1,
    )
    assert (found["outcome"], found["verdict"]) == ("completed", "stable")
    assert runs.Scalars(run, "trial/clip_rate")[-1].value == pytest.approx(0.1)
    assert runs.Scalars(run, "trial/steps_to_target")[-1].value > 0
    assert texts(runs, run, "recommendation")[0].startswith("Use O2, keep CustomNorm in FP32, clip 1.0")
    broke = run_of(runs, "div0")
    assert runs.Scalars(broke, "trial/first_nonfinite_step")[-1].value == 50
    assert texts(runs, broke, "localized_cell") == [
        "norm1 (CustomNorm), forward, float16 max|x| 6.55e4 vs FP32 310, seed 0"
    ]
    # an O0 copy says what it ran with, and has its source's scores (the ranking scans only the source)
    copy = run_of(runs, "dup0")
    assert copy.endswith("FP32 · seed 0 · as run: float16, black list CustomNorm, loss inside")
    assert (
        runs.Scalars(copy, "trial/steps_to_target")[-1].value
        == runs.Scalars(run_of(runs, "base0"), "trial/steps_to_target")[-1].value
    )


def test_a_second_export_writes_only_new_trials_and_never_a_step_twice(sweep: Path, tmp_path: Path) -> None:
    logdir = tmp_path / "tb"
    export_tensorboard(sweep, logdir)
    before = {p: p.stat().st_mtime_ns for p in logdir.rglob("*")}
    assert export_tensorboard(sweep, logdir).written == 0
    assert {p: p.stat().st_mtime_ns for p in logdir.rglob("*")} == before
    write_trial(sweep, "late0", loss=CURVE, clip=5.0, seed=0)
    assert (export_tensorboard(sweep, logdir).written, len(read_back(logdir).Runs())) == (1, 22)
    # an export stopped before it saved its list of trials: the next one writes each trial again, in place
    (logdir / "unit-sweep" / "ampsweep-export.json").unlink()
    assert export_tensorboard(sweep, logdir).written == 22
    runs = read_back(logdir)
    assert len(runs.Runs()) == 22
    assert [e.step for e in runs.Scalars(run_of(runs, "base2"), "loss")] == list(range(len(CURVE)))


def test_the_source_may_be_a_pyarrow_fs_uri(sweep: Path, tmp_path: Path) -> None:
    assert export_tensorboard(sweep.as_uri(), tmp_path / "tb").written == 21
    assert len(read_back(tmp_path / "tb").Runs()) == 21


def test_a_running_sweep_is_exported_while_it_runs_and_whole_at_its_end(sweep: Path, tmp_path: Path) -> None:
    logdir = tmp_path / "tb"
    with exporting(str(sweep), str(logdir)):
        write_trial(sweep, "late0", loss=CURVE, clip=5.0, seed=0)
    manifest = json.loads((logdir / "unit-sweep" / "ampsweep-export.json").read_text())
    assert len(manifest["runs"]) == 22
    runs = read_back(logdir)
    assert len(runs.Runs()) == 22
    # the rounds while it runs leave the recommendation (it ranks the whole sweep) to the last one
    recommended = [run for run in runs.Runs() if "recommendation/text_summary" in runs.Runs()[run]["tensors"]]
    assert recommended and texts(runs, recommended[0], "recommendation")[-1].startswith("Use O2")


@pytest.mark.parametrize("command", ["export", "run"])
def test_without_the_extra_the_flag_is_one_line_and_exit_code_2(
    command: str, sweep: Path, tmp_path: Path, monkeypatch, capsys, write_spec
) -> None:
    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "tensorboardX" else found(name, *a)
    )
    first = [str(sweep)] if command == "export" else [str(write_spec()), "--out", str(tmp_path / "out")]
    assert main([command, *first, "--tensorboard", str(tmp_path / "tb")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'ampsweep[tensorboard]'" in err, err
    assert not (tmp_path / "tb").exists() and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_sweep_run_with_tensorboard_has_its_runs_before_its_report(tmp_path: Path) -> None:
    out, logdir = tmp_path / "out", tmp_path / "tb"
    spec = _spec(tmp_path, f"{TINY}:make")
    ran = _ampsweep("run", str(spec), "--out", str(out), "--workers", "2", "--tensorboard", str(logdir))
    assert ran.returncode == 0, ran.stderr[-3000:]
    runs = read_back(logdir)
    assert len(runs.Runs()) == 8
    report = (out / "e2e" / "report" / "report.md").stat().st_mtime_ns
    assert max(p.stat().st_mtime_ns for p in logdir.rglob("events.out.tfevents.*")) <= report
    run = run_of(runs, pq.read_table(out / "e2e" / "trials").column("trial_id")[0].as_py())
    steps = pq.read_table(out / "e2e" / part_path("steps", hparams(runs, run)["trial_id"])).to_pandas()
    assert [e.value for e in runs.Scalars(run, "loss")] == steps["loss"].astype(np.float32).tolist()
