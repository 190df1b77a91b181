"""``ampsweep.Watch`` inside a data-parallel job launched with ``msrun`` (issue 47, item 5).

Two CPU ranks train ``watch_overflow`` under O2 with a ``DistributedGradReducer``
and a Watch each. Both must stop at the same step (a rank left in the next
all-reduce would wait forever); only rank 0 writes ``watch.json`` and the spec,
whose ``devices_per_trial`` is the job's group size. A snapshot folder that fills
or cannot be written never stops the job, and nothing stays in it (issue 58).
The merge of the ranks' findings is tested without a collective.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "workloads" / "dp_watch_job.py"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _msrun(out: Path, logs: Path, *job_args: str) -> dict[str, str]:
    """Run the Watch job (``JOB``) as a 2-rank msrun job on CPU; each worker's log text by file name."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    ran = subprocess.run(
        [
            str(Path(sys.executable).parent / "msrun"),
            "--worker_num=2",
            "--local_worker_num=2",
            f"--master_port={_free_port()}",
            f"--log_dir={logs}",
            "--join=True",
            str(JOB),
            str(out),
            str(ROOT),
            *job_args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    texts = {p.name: p.read_text(errors="replace") for p in logs.glob("worker_*.log")}
    assert ran.returncode == 0, "\n".join(t[-2000:] for t in texts.values())
    return texts


def _stops_and_lines(texts: dict[str, str]) -> tuple[list[str], list[str]]:
    stops = [line for t in texts.values() for line in t.splitlines() if " stopped at " in line]
    assert len(stops) == 2 and len({line.rsplit(" ", 1)[1] for line in stops}) == 1, stops
    said = [line for t in texts.values() for line in t.splitlines() if line.startswith("ampsweep.Watch:")]
    assert len(said) == 1 and "worker_0.log" in [n for n, t in texts.items() if "ampsweep.Watch:" in t]
    return stops, said


@pytest.mark.slow
def test_rank_0_writes_the_spec_for_the_jobs_group_and_every_rank_stops_together(tmp_path):
    out = tmp_path / "watch"
    _stops_and_lines(_msrun(out, tmp_path / "logs"))
    spec = yaml.safe_load((out / "spec.yaml").read_text())
    assert spec["devices_per_trial"] == 2
    assert (out / "watch.json").is_file()
    assert [p.name for p in (out / "snapshots").iterdir()] == [f"step-{spec['start_from']['step']}.ckpt"]


@pytest.mark.slow
def test_a_failure_that_starts_in_rank_1s_rows_is_named_on_rank_1(tmp_path):
    """Every rank replays its own part: a rank-0-only replay would find nothing here."""
    out = tmp_path / "watch"
    _, said = _stops_and_lines(_msrun(out, tmp_path / "logs", "rows"))
    report = json.loads((out / "watch.json").read_text())
    assert (report["class"], report["cell"], report["rank"]) == ("MultiheadAttention", "attn", 1), report
    assert report["ranks_broken"] == 1
    assert "on rank 1's part" in said[0]
    spec = yaml.safe_load((out / "spec.yaml").read_text())
    assert spec["devices_per_trial"] == 2 and spec["grid"]["black_list"] == [[], ["MultiheadAttention"]]
    assert spec["start_from"]["step"] > 0, "replayed from a snapshot before the failure"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["budget", "unwritable"])
def test_a_snapshot_folder_that_fills_or_fails_never_stops_the_job_and_is_left_empty(tmp_path, mode):
    """Every snapshot is written when taken. ``budget``: each rank's budget holds one, so the second fills
    the folder; the ranks warn once each and still localize, from the one kept. ``unwritable``: rank 1's
    folder cannot be made; at the next look both ranks' Watches turn off together (neither waits in a
    collective the other skips), each warns once, and the training runs on."""
    out, scratch = tmp_path / "watch", tmp_path / "scratch"
    texts = _msrun(out, tmp_path / "logs", mode, str(scratch))
    said = "disk_budget reached" if mode == "budget" else "ampsweep.Watch stopped watching"
    assert [text.count(said) for text in texts.values()] == [1, 1], texts
    if mode == "budget":
        _stops_and_lines(texts)
        report = json.loads((out / "watch.json").read_text())
        assert report["snapshot_step"] == 20 and Path(report["snapshot"]).is_file()
    else:
        assert all("stopped at None" in text for text in texts.values()) and not out.exists()
    assert list(scratch.iterdir()) == []


@pytest.mark.slow
def test_a_replay_that_fails_on_rank_1_is_written_by_rank_0_and_the_job_finishes(tmp_path):
    """Rank 1 cannot build the workload for the replay: every rank's replay raises at the same point, both
    still meet in the exchange of findings, and rank 0 writes the failure as rank 1 tells it."""
    out = tmp_path / "watch"
    _, said = _stops_and_lines(_msrun(out, tmp_path / "logs", "replay_fails"))
    report = json.loads((out / "watch.json").read_text())
    assert report["note"].startswith("localization failed on rank 1 of 2: ") and report["class"] is None
    assert "localization failed on rank 1 of 2" in said[0]


def _found(rank: int, step: int, phase: str) -> Any:
    from ampsweep.jobs.watch._watch_report import Finding

    return Finding(cell="c", cell_class="C", phase=phase, replay_step=step, rank=rank, ranks_broken=1)


@pytest.mark.parametrize(
    ("phases", "dynamic", "first", "broken"),
    [
        ([(5, "backward"), (5, "forward")], False, 1, 1),  # one device looks at the forward first
        ([(5, "forward"), (5, "forward")], False, 0, 2),  # a tie: the lowest rank; both broke there
        ([(5, "backward"), (7, "forward")], False, 0, 1),  # a static scale: the earlier step
        ([(5, "backward"), (7, "forward")], True, 1, 1),  # a dynamic scaler's fallback comes last
        ([(5, "backward"), (5, "backward"), None], True, 0, 2),  # two fallbacks tie; rank 2 found none
    ],
)
def test_the_ranks_findings_merge_as_one_device_orders_them(phases, dynamic, first, broken):
    from ampsweep.jobs.watch._watch_report import Finding, first_found

    found = [Finding() if p is None else _found(rank, *p) for rank, p in enumerate(phases)]
    merged = first_found(found, 0, dynamic)
    assert (merged.rank, merged.ranks_broken) == (first, broken)


def test_a_failed_localization_on_any_rank_is_what_rank_0_writes():
    """Every rank raises where one rank's replay failed (``agree``); the failing rank's finding tells it."""
    from ampsweep.jobs.training._data_parallel import PeerFailed, RankGroup
    from ampsweep.jobs.watch._watch_report import Finding, failure, first_found

    agreed = [failure(None, PeerFailed(1, 2, None)), failure(None, PeerFailed(1, 2, RuntimeError("boom")))]
    merged = first_found(agreed, 0, False)
    assert merged.failed and merged.note == "localization failed on rank 1 of 2: RuntimeError: boom"
    alone = first_found([_found(0, 5, "forward"), failure(RankGroup(1, 2), OSError("disk full"))], 0, False)
    assert alone.rank == 1 and alone.note == "localization failed on rank 1 of 2: OSError: disk full"
    assert first_found([Finding(note="a"), Finding(note="b")], 1, False).note == "b"


def test_a_data_parallel_jobs_spec_without_a_named_cell_searches_as_one_devices_does():
    """No Cell named: the spec searches adaptively, on one device and on a gang alike (a gang's trials are
    replayed on every rank's part)."""
    from ampsweep.jobs.watch._watch_report import Finding, spec_for
    from ampsweep.jobs.watch._watch_snapshots import Policy
    from ampsweep.sweep import parse_spec

    alone = spec_for("x.py:make", {}, 0, Policy("O2"), None, 50, Finding(), Path("/tmp"))
    gang = spec_for("x.py:make", {}, 0, Policy("O2"), None, 50, Finding(), Path("/tmp"), devices=2)
    assert parse_spec(alone).search == "adaptive"
    parsed = parse_spec(gang)
    assert parsed.search == "adaptive" and parsed.devices_per_trial == 2
