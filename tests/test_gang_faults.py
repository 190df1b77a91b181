"""A gang's failure paths, end to end on real Ray: a killed rank and a lost node (slow).

A rank that dies ends its gang (the other rank waits in a collective that will
never complete): the gang is formed again and the trial runs again, counted in
``attempts``. A rank whose part of a trial fails fails that trial, and ends its
gang too. A node lost under a gang ends the run as under a single actor:
exit 3 with the resume line and nothing half-committed (a resume is then a
plain run, which ``test_reliability`` covers). Each test starts and ends only
its own Ray.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import psutil
import pytest
import yaml

from tests._killer import killer_workload
from tests._wait import wait_until

pytestmark = pytest.mark.slow
TINY = Path(__file__).parent / "workloads" / "tiny_mlp.py"
ATTENTION = Path(__file__).parent / "workloads" / "attention_overflow.py"
RANK_FAILS = Path(__file__).parent / "workloads" / "rank_fails.py"


def _each_trial_once(root: Path) -> pd.DataFrame:
    trials = pd.read_parquet(root / "trials")
    assert trials["trial_id"].is_unique
    steps = pd.read_parquet(root / "steps")
    for trial_id, run in trials.set_index("trial_id")["steps_run"].items():
        assert sorted(steps.loc[steps["trial_id"] == trial_id, "step"]) == list(range(run)), trial_id
    return trials


def test_a_killed_rank_forms_the_gang_again_and_the_sweep_answers_as_on_one_device(tmp_path):
    """On the hand-written attention that overflows float16, a sweep on gangs of 2 whose rank is
    killed mid-trial completes, and recommends the black list a sweep on single devices does."""
    import ray

    from ampsweep.analysis import analyze
    from ampsweep.sweep import RunConfig, Sweep

    killer, marker = killer_workload(tmp_path, ATTENTION)
    grid = {"amp_level": ["O0", "O2"], "black_list": [[], ["NaiveSoftmax"]], "clip": [None], "seed": [0, 1]}
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        on_gangs = {"name": "gang", "workload": f"{killer}:make", "steps": 60, "grid": grid}
        result = Sweep({**on_gangs, "devices_per_trial": 2}).run(tmp_path, RunConfig(progress=False))
        single = {**on_gangs, "name": "single", "workload": f"{ATTENTION}:make"}
        Sweep(single).run(tmp_path, RunConfig(progress=False))
        assert _placement_groups_left() == [], "every gang's placement group was removed"
    finally:
        ray.shutdown()
    assert marker.exists(), "a rank really was SIGKILLed mid-trial"
    assert result.ran == 8 and sum(result.outcomes.values()) == 8
    trials = _each_trial_once(tmp_path / "gang")
    assert len(trials) == 8
    assert (trials["devices"] == 2).all()
    assert (trials["outcome"] != "failed").all(), trials["error"].tolist()
    assert (trials.loc[trials["seed"] == 1, "attempts"] > 1).any(), "the killed trial ran again"
    assert (trials["attempts"] > 1).sum() == 1, "only the trial on the killed rank ran again"
    on_two = analyze(tmp_path / "gang", figures=False).recommended
    on_one = analyze(tmp_path / "single", figures=False).recommended
    assert on_two is not None and on_one is not None
    assert (on_two["amp_level"], tuple(on_two["black_list"])) == ("O2", ("NaiveSoftmax",))
    assert (on_two["amp_level"], tuple(on_two["black_list"])) == (
        on_one["amp_level"],
        tuple(on_one["black_list"]),
    )
    # the broken configurations were localized on the gang's ranks, and the report names the Cell and rank
    anomalies = pd.read_parquet(tmp_path / "gang" / "anomalies")
    shown = anomalies[["trial_id", "cause", "cell_class", "replay_step", "rank", "note"]].to_dict("records")
    named = anomalies[anomalies["cause"] == "numerics"]
    assert set(named["cell_class"]) == {"NaiveSoftmax"} and named["rank"].notna().all(), shown
    from ampsweep.analysis import render_markdown

    opening = "\n".join(render_markdown(analyze(tmp_path / "gang", figures=False)).splitlines()[:12])
    assert "NaiveSoftmax" in opening and "on rank 0 of 2" in opening, opening


def _placement_groups_left() -> list[str]:
    """The placement groups of this Ray that are not removed (a gang that outlived its sweep)."""
    from ray.util import placement_group_table

    return [pg_id for pg_id, pg in placement_group_table().items() if pg["state"] != "REMOVED"]


def test_losing_the_node_under_a_gang_ends_the_run_with_a_resume_line(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "lost",
                "workload": f"{TINY}:make",
                # each trial takes >= 20 s, 3 of them on one gang: the GCS needs ~15 s to call
                # the node dead, and a sweep that finishes before that rightly exits 0
                "workload_args": {"pause_s": 0.005},
                "steps": 4000,
                "devices_per_trial": 2,
                "grid": {"amp_level": ["O0"], "clip": [None], "seed": [0, 1, 2]},
            }
        )
    )
    out = tmp_path / "out"
    command = [sys.executable, "-m", "ampsweep", "run", str(spec), "--out", str(out), "--workers", "2"]
    # --keep-going: the fail-fast gate would hold the first 3 results back and commit them together
    command += ["--no-progress", "--keep-going"]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        trials = out / "lost" / "trials"

        def first_committed() -> bool:
            assert proc.poll() is None, proc.communicate()
            return len(list(trials.glob("[!.]*.parquet"))) >= 1

        wait_until(first_committed, 400, message=f"a committed trial under {trials}")
        raylets = [p for p in psutil.Process(proc.pid).children(recursive=True) if p.name() == "raylet"]
        assert raylets, "the driver started a private local Ray"
        for raylet in raylets:
            raylet.kill()
        try:
            stderr = proc.communicate(timeout=180)[1]
        except subprocess.TimeoutExpired:
            pytest.fail("hung: the run was still going 180 s after its Ray node died")
    finally:
        try:  # what is left of that private cluster shares the driver's session
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode == 3, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("ampsweep: stopped: ") and "resume with: ampsweep run" in last, stderr[-2000:]
    # nothing half-committed: each committed trial has all its rows, and the run stopped early
    committed = _each_trial_once(out / "lost")
    assert 1 <= len(committed) < 3 and (committed["devices"] == 2).all()


def _once_on_rank(folder: Path, name: str, rank: int, action: str) -> pd.DataFrame:
    """``_gang_sweep`` of ``tiny_mlp`` wrapped so that its first build of seed 1 on ``rank`` runs ``action``
    (Python source, with ``os``, ``signal`` and ``psutil`` imported) in that rank's process, once."""
    marker = folder / f"{name}.done"
    wrapper = folder / f"{name}.py"
    wrapper.write_text(
        "import os, signal, sys\nfrom pathlib import Path\nimport psutil\n"
        f"sys.path.insert(0, {str(TINY.parent)!r})\nfrom tiny_mlp import make as tiny_make\n"
        "def make(seed, **kw):\n"
        "    from mindspore.communication import GlobalComm, get_rank\n"
        f"    if seed == 1 and GlobalComm.INITED and get_rank() == {rank} and not Path({str(marker)!r}).exists():\n"
        f"        Path({str(marker)!r}).touch()\n"
        + "".join(f"        {line}\n" for line in action.splitlines())
        + "    return tiny_make(seed, **kw)\n"
    )
    _, trials = _gang_sweep(folder, name, wrapper)
    assert marker.exists(), "the action ran"
    return trials


def _gang_sweep(
    tmp_path: Path, name: str, workload: Path, fields: dict[str, Any] | None = None, **args: Any
) -> tuple[dict[str, Any], pd.DataFrame]:
    """A sweep of 3 FP32 trials on gangs of 2 in a Ray of its own (``fields``: more of its spec); no
    placement group may outlive it. Returns its spec and its trials by seed."""
    import ray

    from ampsweep.sweep import RunConfig, Sweep

    spec = {
        "name": name,
        "workload": f"{workload}:make",
        "workload_args": args,
        "steps": 20,
        "grid": {"amp_level": ["O0"], "clip": [None], "seed": [0, 1, 2]},
        "devices_per_trial": 2,
        **(fields or {}),
    }
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        result = Sweep(spec).run(tmp_path, RunConfig(progress=False, keep_going=True))
        assert _placement_groups_left() == [], "every gang's placement group was removed"
    finally:
        ray.shutdown()
    assert result.ran == 3
    return spec, _each_trial_once(tmp_path / name).set_index("seed")


def test_a_rank_that_raises_outside_its_trial_fails_that_trial_naming_the_rank(tmp_path):
    """Rank 1's call raises once after its part of a trial (reading its parameters' checksum, patched in
    rank 1's process while it builds seed 1): that trial fails with a line naming rank 1, the gang is
    formed again, and the other trials complete."""
    action = (
        "import ampsweep.jobs.training._data_parallel as dp\n"
        "original = dp.parameter_checksum\n"
        "def broken(state):\n"
        "    dp.parameter_checksum = original\n"
        "    raise RuntimeError('the checksum could not be read')\n"
        "dp.parameter_checksum = broken"
    )
    trials = _once_on_rank(tmp_path, "raises", 1, action)
    failed = trials[trials["outcome"] == "failed"]
    assert len(failed) == 1, trials[["outcome", "error"]]
    error = failed["error"].iloc[0]
    assert error.startswith("rank 1 of 2 failed outside its trial: ") and "could not be read" in error, error
    assert (trials["outcome"] != "failed").sum() == 2


def test_a_rank_that_blocks_forever_fails_its_trial_naming_the_rank_and_the_step(tmp_path):
    """Rank 1's data loader blocks at its fourth batch (seed 1; the trainer draws a trial's batches before
    its first step): rank 0 waits in step 0's all-reduce until it gives up; the trial fails naming rank 1
    and the step, the gang is formed again, and the other trials complete."""
    _, trials = _gang_sweep(tmp_path, "blocks", RANK_FAILS, stall=True)
    assert trials.loc[1, "outcome"] == "failed"
    error = trials.loc[1, "error"]
    assert error.startswith("rank 1 of 2 stalled before step 0: rank 0 waited for it in a collective"), error
    assert (trials.loc[[0, 2], "outcome"] == "completed").all(), trials["error"].tolist()


def test_ampsweeps_own_stall_bound_fires_before_the_collectives_timeout(tmp_path):
    """The same blocked loader with ``stall_timeout_s: 5``, below the CPU all-reduce's own ~30 s: the driver
    reads the ranks' progress while they train and fails the trial naming rank 1, the step its peer
    reached and how long it waited; the gang is formed again at once, so the trial queued behind the
    stalled one never counts an attempt."""
    _, trials = _gang_sweep(tmp_path, "bound", RANK_FAILS, {"stall_timeout_s": 5}, stall=True)
    assert trials.loc[1, "outcome"] == "failed"
    error = trials.loc[1, "error"]
    assert re.fullmatch(r"rank 1 of 2 stalled before step 0 \(its peers waited \d+ s\)", error), error
    assert (trials.loc[[0, 2], "outcome"] == "completed").all(), trials["error"].tolist()
    assert trials["attempts"].tolist() == [1, 1, 1]


def test_a_killed_scheduler_ends_its_gang_and_the_trial_runs_again_on_a_new_one(tmp_path):
    """Rank 0 kills the gang's MindSpore scheduler process while it builds seed 1's trial: the gang is ended
    (its scheduler's death is watched), formed again, and the trial runs again and completes."""
    action = (
        "port = int(os.environ['MS_SCHED_PORT'])\n"
        "for c in psutil.net_connections('tcp'):\n"
        "    if c.status == 'LISTEN' and c.laddr.port == port and c.pid:\n"
        "        os.kill(c.pid, signal.SIGKILL)"
    )
    trials = _once_on_rank(tmp_path, "scheduler", 0, action)
    assert (trials["outcome"] == "completed").all(), trials["error"].tolist()
    assert trials.loc[1, "attempts"] == 2, trials["attempts"].tolist()


def test_a_rank_whose_part_fails_fails_its_trial_and_the_next_trial_trains_on_a_new_gang(tmp_path):
    """Rank 1's batches break mid-trial (seed 1) while rank 0 waits for it in the step's all-reduce: that
    trial fails naming rank 1, and the trial behind it on the same gang trains what it trains on one
    device. Before the gang was ended on such a failure, the next trial's collectives paired with the
    waiting rank's and it failed too."""
    from ampsweep.jobs.training._trainer import run_trial
    from ampsweep.sweep import Sweep

    spec, trials = _gang_sweep(tmp_path, "rank", RANK_FAILS)
    assert trials.loc[1, "outcome"] == "failed"
    assert trials.loc[1, "error"] == "rank 1 of 2 failed: RuntimeError: rank 1's fourth batch is broken"
    for seed in (0, 2):
        assert trials.loc[seed, "outcome"] == "completed", trials.loc[seed, "error"]
        config = next(t for t in Sweep({**spec, "devices_per_trial": 1}).plan().trials if t.seed == seed)
        single = run_trial(config, f"{TINY}:make")
        # two halves averaged across ranks against one mean: float32 rounding apart, nothing more
        assert trials.loc[seed, "final_loss"] == pytest.approx(single.final_loss, rel=0.01)
