"""``ampsweep export --tensorboard`` and ``run --tensorboard``, read back with TensorBoard's own reader.

The fast tests export synthetic sweeps (``tests/test_analysis.py``'s, written as the store writes them);
the slow one runs a real sweep and checks its runs are there before its report. A test that waits for the
live exporter waits for what it writes, never for a time (a hang guard fails it after two minutes).
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer
from tensorboard.plugins.hparams import metadata

from ampsweep.analysis import analyze, export_tensorboard
from ampsweep.analysis._tensorboard import MANIFEST
from ampsweep.contracts import CONFIRM_FOLDER, HORIZON_FOLDER, part_path
from ampsweep.sweep import Sweep
from ampsweep.sweep._errors import SpecError
from ampsweep.sweep._tensorboard import exporting
from ampsweep.sweep.cli import main
from tests._wait import wait_until
from tests.test_analysis import CURVE, STEPS, build_ranked_sweep, write_anomaly, write_trial
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


def scalars(runs: EventMultiplexer, run: str, tag: str) -> list[float]:
    """A run's values of ``tag``; none where the run has no such tag."""
    return [e.value for e in runs.Scalars(run, tag)] if tag in runs.Runs()[run]["scalars"] else []


def recommended(runs: EventMultiplexer) -> dict[str, list[str]]:
    """The runs that show a recommendation, and the texts each shows."""
    tag = "recommendation/text_summary"
    return {
        run: texts(runs, run, "recommendation") for run in runs.Runs() if tag in runs.Runs()[run]["tensors"]
    }


def exported(logdir: Path, sweep: str = "unit-sweep") -> dict[str, str]:
    """The trials the manifest lists as exported (none before the first export)."""
    manifest = logdir / sweep / MANIFEST
    return json.loads(manifest.read_text())["runs"] if manifest.exists() else {}


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
        # live rounds export what is committed, and what commits later, before the sweep ends
        wait_until(lambda: len(exported(logdir)) == 21, 120, message="export the committed trials")
        write_trial(sweep, "late0", loss=CURVE, clip=5.0, seed=0)
        wait_until(
            lambda: "late0" in exported(logdir),
            120,
            message="export the trial committed after its first round",
        )
        live = read_back(logdir)
        assert len(live.Runs()) == 22 and live.Scalars(run_of(live, "late0"), "loss")
        # the rounds while it runs leave the recommendation (it ranks the whole sweep) to the last one
        assert not recommended(live)
    assert len(exported(logdir)) == 22
    runs = read_back(logdir)
    assert len(runs.Runs()) == 22
    shown = recommended(runs).values()
    assert shown and all(len(words) == 1 and words[0].startswith("Use O2") for words in shown)


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


def test_a_trial_committed_before_its_baseline_shows_the_reports_verdict_after_the_next_export(
    tmp_path: Path,
) -> None:
    root, logdir = tmp_path / "unit-sweep", tmp_path / "tb"
    write_trial(root, "flat0", loss=np.full(STEPS, 2.3), amp_level="O1", seed=0)
    write_trial(root, "inband0", loss=CURVE, black_list=["CustomNorm"], clip=1.0, seed=0)
    export_tensorboard(root, logdir, recommend=False)  # a live round: no FP32 yet, so no target
    runs = read_back(logdir)
    assert hparams(runs, run_of(runs, "flat0"))["verdict"] == "stable"
    assert scalars(runs, run_of(runs, "inband0"), "trial/steps_to_target") == []
    write_trial(root, "base0", loss=CURVE, amp_level="O0", seed=0)
    done = export_tensorboard(root, logdir)
    report = analyze(root, figures=False).scores.set_index("trial_id")
    runs = read_back(logdir)
    assert len(runs.Runs()) == 3
    for trial_id in ("flat0", "inband0", "base0"):
        run = run_of(runs, trial_id)
        assert hparams(runs, run)["verdict"] == report.loc[trial_id, "verdict"]
        reached = scalars(runs, run, "trial/steps_to_target")
        assert reached == ([] if np.isnan(report.loc[trial_id, "steps_to_target"]) else [136])
        assert len(runs.Scalars(run, "loss")) == STEPS  # rewritten in place: no step twice
    assert report.loc["flat0", "verdict"] == "silent"
    assert (done.written, done.rewritten, done.already) == (1, 2, 0)


def test_one_recommendation_the_current_one(sweep: Path, tmp_path: Path) -> None:
    logdir = tmp_path / "tb"
    export_tensorboard(sweep, logdir)
    assert sorted(recommended(read_back(logdir))) == [
        run_of(read_back(logdir), f"inband{s}") for s in range(3)
    ]
    for seed in range(3):  # the same learning without a black list or a clip: the new recommendation
        write_trial(sweep, f"plain{seed}", loss=CURVE, seed=seed, grad_norm=np.full(STEPS, 0.5))
    export_tensorboard(sweep, logdir)
    runs = read_back(logdir)
    shown = recommended(runs)
    assert sorted(shown) == sorted(run_of(runs, f"plain{seed}") for seed in range(3))
    assert all(len(words) == 1 and words[0].startswith("Use O2, no clip.") for words in shown.values())


def test_the_confirmation_and_the_continuations_are_runs_of_their_own(sweep: Path, tmp_path: Path) -> None:
    logdir = tmp_path / "tb"
    export_tensorboard(sweep, logdir)
    # the search's confirmation, and the continuation of inband0 to a horizon, where it broke
    write_trial(sweep / CONFIRM_FOLDER, "long0", loss=np.concatenate([CURVE, CURVE[-1:].repeat(50)]), seed=7)
    broke = np.where(np.arange(STEPS) < 120, CURVE, np.nan)[:130]
    write_trial(sweep / HORIZON_FOLDER, "cont0", loss=broke, black_list=["CustomNorm"], clip=1.0, seed=0)
    done = export_tensorboard(sweep, logdir)
    runs = read_back(logdir)
    assert len(runs.Runs()) == 23
    assert run_of(runs, "long0") == "unit-sweep/confirm/O2 · no clip · seed 7"
    assert run_of(runs, "cont0") == "unit-sweep/horizon/O2 · FP32: CustomNorm · clip 1.0 · seed 0"
    assert len(runs.Scalars(run_of(runs, "long0"), "loss")) == STEPS + 50
    # what the continuation found is the report's too: the trial it continued broke
    assert hparams(runs, run_of(runs, "inband0"))["verdict"] == "diverged"
    assert (done.written, done.rewritten) == (2, 1)
    assert export_tensorboard(sweep, logdir).written == 0


def test_a_gangs_localized_cell_names_the_rank_it_broke_on(tmp_path: Path) -> None:
    root = tmp_path / "unit-sweep"
    write_trial(root, "gang0", loss=np.where(np.arange(60) < 50, CURVE[:60], np.nan), devices=2)
    write_anomaly(root, "gang0", rank=1, ranks_broken=1)
    export_tensorboard(root, tmp_path / "tb")
    runs = read_back(tmp_path / "tb")
    [cell] = texts(runs, run_of(runs, "gang0"), "localized_cell")
    assert "seed 0 (on rank 1 of 2; " in cell, cell  # the report's words (``rank_phrase``)


@pytest.mark.parametrize("command", ["export", "run", "Sweep.run"])
@pytest.mark.parametrize("bad", ["a file", "below a file", "another sweep's"])
def test_a_bad_logdir_is_refused_before_anything_starts(
    command: str, bad: str, sweep: Path, tmp_path: Path, capsys, write_spec
) -> None:
    name, spec, out = ("unit-sweep" if command == "export" else "tiny"), write_spec(), tmp_path / "out"
    logdir = tmp_path / "tb"
    if bad == "another sweep's":  # a folder of the same name elsewhere: its runs must not merge with these
        (logdir / name).mkdir(parents=True)
        (logdir / name / MANIFEST).write_text(json.dumps({"sweep": f"/elsewhere/{name}", "runs": {}}))
    else:
        logdir.write_text("")
        logdir = logdir / "below" if bad == "below a file" else logdir
    before = sorted(tmp_path.rglob("*"))
    if command == "Sweep.run":
        with pytest.raises(SpecError, match="--tensorboard") as refused:
            Sweep.from_yaml(spec).run(out, tensorboard=str(logdir))
        err = f"ampsweep: error: {refused.value}\n"
    else:
        first = [str(sweep)] if command == "export" else [str(spec), "--out", str(out)]
        assert main([command, *first, "--tensorboard", str(logdir)]) == 2
        err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ampsweep: error: --tensorboard: "), err
    assert ("another sweep" in err) == (bad == "another sweep's") and ("file" in err) != (
        bad == "another sweep's"
    )
    assert sorted(tmp_path.rglob("*")) == before and not out.exists()


def test_a_live_round_that_fails_is_said_once_and_the_next_round_exports(sweep: Path, tmp_path: Path) -> None:
    logdir = tmp_path / "tb"
    logdir.mkdir()
    (logdir / "unit-sweep").write_text("")  # where the runs go is a file: each round fails, until it is gone
    command = [sys.executable, "-m", "ampsweep.analysis._tensorboard", str(sweep), str(logdir)]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stderr is not None
    try:
        assert select.select([child.stderr], [], [], 120)[0], (
            "the exporter neither said nor ended"
        )  # hang guard
        said = child.stderr.readline()
        assert said.startswith("ampsweep: the live TensorBoard export failed") and "unit-sweep" in said, said
        (logdir / "unit-sweep").unlink()
        wait_until(
            lambda: child.poll() is None and len(exported(logdir)) == 21,
            120,
            message="export in a later round",
        )
    finally:
        child.stdin.close()
        child.wait(120)
    assert child.returncode == 0 and child.stderr.read() == ""  # said once, however many rounds failed


def test_a_driver_that_stops_does_not_wait_for_its_exporter(sweep: Path, tmp_path: Path) -> None:
    folder = tmp_path / "tb" / "unit-sweep"
    folder.mkdir(parents=True)
    # the manifest as a pipe: reading it stalls while this test holds it open, as on a disk that hangs
    os.mkfifo(folder / MANIFEST)
    held: list[int] = []
    stopped: list[BaseException] = []

    def stop_while_the_exporter_is_stuck() -> None:
        try:
            with exporting(str(sweep), str(tmp_path / "tb")):
                while not held:  # the exporter's first round has opened the manifest
                    try:
                        held.append(os.open(folder / MANIFEST, os.O_WRONLY | os.O_NONBLOCK))
                    except OSError as exc:
                        assert exc.errno == errno.ENXIO
                        time.sleep(0.05)
                raise RuntimeError("the sweep stopped")
        except RuntimeError as exc:
            stopped.append(exc)

    driver = threading.Thread(target=stop_while_the_exporter_is_stuck)
    driver.start()
    driver.join(120)  # the hang guard: without a bound the driver waits as long as the pipe stays open
    still_waiting = driver.is_alive()
    for fd in held:
        os.close(fd)  # lets a waiting exporter end, so that a failure here does not hang the suite
    driver.join()
    assert not still_waiting and [str(e) for e in stopped] == ["the sweep stopped"]


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
