"""``ampsweep.Watch`` inside a data-parallel job launched with ``msrun`` (issue 47, item 5).

Two CPU ranks train ``watch_overflow`` under O2 with a ``DistributedGradReducer``
and a Watch each. Both must stop at the same step (a rank left in the next
all-reduce would wait forever); only rank 0 keeps snapshots and writes
``watch.json`` and the spec, whose ``devices_per_trial`` is the job's group size.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

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
    assert sorted(p.name for p in (out / "snapshots").iterdir()) == ["step-20.ckpt", "step-40.ckpt"]


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
