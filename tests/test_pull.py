"""``ampsweep pull``: committed trials only, incrementally, from a local folder or S3."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ampsweep.contracts import part_path
from ampsweep.sweep import SweepStore
from ampsweep.sweep.cli import main
from tests._wait import wait_until
from tests.test_store import _record


def _sweep_with_debris(out: str) -> tuple[SweepStore, set[str]]:
    store = SweepStore(out, "s")
    committed = set()
    for seed in (0, 1):
        _, record = _record(seed=seed)
        store.commit(record)
        committed.add(record.trial_id)
    store.write_text("sweep.yaml", "name: s\n")
    # an unfinished trial: its steps exist, its trials/ row does not
    _, unfinished = _record(seed=2)
    store.write_table(store.path(part_path("steps", unfinished.trial_id)), unfinished.steps)
    return store, committed


def _check_pulled(destination: Path, committed: set[str]) -> None:
    trials = pd.read_parquet(destination / "s" / "trials")
    assert set(trials["trial_id"]) == committed
    steps = pd.read_parquet(destination / "s" / "steps")
    assert set(steps["trial_id"].astype(str)) == committed, "debris of unfinished trials is never copied"
    assert (destination / "s" / "sweep.yaml").read_text() == "name: s\n"


def test_pull_from_a_local_folder_is_incremental(tmp_path, capsys):
    store, committed = _sweep_with_debris(str(tmp_path / "remote"))
    destination = tmp_path / "local"
    assert main(["pull", store.root, str(destination)]) == 0
    assert "pulled 2 new trials" in capsys.readouterr().out
    _check_pulled(destination, committed)
    assert main(["pull", store.root, str(destination)]) == 0
    second = capsys.readouterr().out
    assert "pulled 0 new trials" in second and "2 were already there" in second
    _, third = _record(seed=3)
    store.commit(third)
    assert main(["pull", store.root, str(destination)]) == 0
    assert "pulled 1 new trials" in capsys.readouterr().out


def test_pull_from_something_that_is_not_a_sweep(tmp_path, capsys):
    assert main(["pull", str(tmp_path), str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ampsweep: error: source: ")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def s3_server(monkeypatch):
    """A local S3-compatible server (moto), with a bucket, for this test only."""
    port = _free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)

    def listening() -> bool:
        assert server.poll() is None, f"moto_server exited ({server.returncode})"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    try:
        wait_until(listening, 30, message=f"moto_server to listen on port {port}")
        import boto3

        boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1").create_bucket(
            Bucket="sweeps"
        )
        yield f"endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_pull_from_s3_copies_only_what_is_new(s3_server, tmp_path, capsys):
    store, committed = _sweep_with_debris(f"s3://sweeps/out?{s3_server}")
    source = f"s3://sweeps/out/s?{s3_server}"
    assert main(["pull", source, str(tmp_path)]) == 0
    assert "pulled 2 new trials" in capsys.readouterr().out
    _check_pulled(tmp_path, committed)
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "s").rglob("*.parquet")}
    assert main(["pull", source, str(tmp_path)]) == 0
    assert "pulled 0 new trials" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "s").rglob("*.parquet")} == before
