"""No one gets in: while ``ampsweep run`` runs a local sweep, its Ray lets no client in without the token.

A Ray port that takes any client lets anyone who reaches it run code as the
sweep's user. The local cluster is Ray's own authenticated start; a test
probes it from a second process the way an intruder would (another ``HOME``,
no ``RAY_AUTH_*`` variables), and, as a control that the probe itself works,
from a process that holds the token and says so (``RAY_AUTH_MODE=token``).
Ray writes the token readable by every user (644); the sweep makes it 600.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
import yaml

from ampsweep.sweep.cluster._ray_start import TOKEN_PATH_ENV, keep_token_private
from tests._wait import wait_until

TINY = Path(__file__).parent / "workloads" / "tiny_mlp.py"

#: connects to the GCS named on the command line and runs a task that writes a file
PROBE = textwrap.dedent(
    """
    import sys, ray
    address, marker = sys.argv[1], sys.argv[2]
    ray.init(address=address, logging_level="ERROR", log_to_driver=False)

    @ray.remote(num_cpus=0)
    def write():
        open(marker, "w").write("in")

    ray.get(write.remote(), timeout=60)
    print("ran a task")
    """
)


def _gcs_address(driver: psutil.Process) -> str | None:
    """``ip:port`` of the GCS the driver started: its node address and the port it listens on."""
    for child in driver.children(recursive=True):
        try:
            if child.name() != "gcs_server":
                continue
            ip = next(a.split("=", 1)[1] for a in child.cmdline() if a.startswith("--node-ip-address="))
            ports = sorted(
                c.laddr.port for c in child.net_connections("tcp") if c.status == psutil.CONN_LISTEN
            )
        except (psutil.NoSuchProcess, psutil.AccessDenied, StopIteration):
            continue
        if ports:
            return f"{ip}:{ports[0]}"
    return None


def _probe(address: str, marker: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            [sys.executable, "-c", PROBE, address, str(marker)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired as timeout:  # refused by hanging is refused too; say so
        return subprocess.CompletedProcess(timeout.cmd, -1, "", "timed out")


@pytest.mark.slow
def test_a_client_without_the_token_can_neither_connect_nor_run_a_task(tmp_path: Path) -> None:
    spec = tmp_path / "auth.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "auth",
                "workload": f"{TINY}:make",
                "workload_args": {"pause_s": 0.05},
                "steps": 2000,
                "grid": {"amp_level": ["O0"], "seed": [0, 1]},
            }
        )
    )
    driver = subprocess.Popen(
        [sys.executable, "-m", "ampsweep", "run", str(spec), "--out", str(tmp_path / "out")]
        + ["--workers", "1", "--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        process = psutil.Process(driver.pid)
        found: dict[str, str] = {}

        def started() -> bool:
            assert driver.poll() is None, "the sweep ended before it could be probed"
            address = _gcs_address(process)
            if address:
                found["address"] = address
            return bool(address)

        wait_until(started, 120, message="the sweep's local Ray head")
        address = found["address"]
        outsider = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        outsider["HOME"] = str(tmp_path / "another-home")
        refused = _probe(address, tmp_path / "outsider-was-here", outsider)
        holder = _probe(address, tmp_path / "holder-was-here", {**os.environ, "RAY_AUTH_MODE": "token"})
        assert driver.poll() is None, "the sweep ended while it was probed: the probes prove nothing"
    finally:
        driver.terminate()
        try:
            driver.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(driver.pid, 9)
            driver.wait()
    assert holder.returncode == 0 and (tmp_path / "holder-was-here").exists(), holder.stderr[-2000:]
    assert refused.returncode != 0, refused.stdout
    assert not (tmp_path / "outsider-was-here").exists()
    assert "ran a task" not in refused.stdout


def test_a_token_readable_by_others_is_made_600_and_said_once(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.delenv(TOKEN_PATH_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    token = tmp_path / ".ray" / "auth_token"
    keep_token_private()  # no token (authentication off): nothing to do, nothing said
    token.parent.mkdir()
    token.write_text("secret")
    token.chmod(0o644)
    keep_token_private()
    keep_token_private()
    assert token.stat().st_mode & 0o777 == 0o600
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ampsweep: "), lines
    assert str(token) in lines[0] and "600" in lines[0] and "644" in lines[0], lines[0]


def test_the_token_path_ray_is_told_is_the_one_checked(tmp_path: Path, monkeypatch, capsys) -> None:
    token = tmp_path / "elsewhere"
    token.write_text("secret")
    token.chmod(0o640)
    monkeypatch.setenv(TOKEN_PATH_ENV, str(token))
    keep_token_private()
    assert token.stat().st_mode & 0o777 == 0o600
    assert "mode 640" in capsys.readouterr().err


@pytest.mark.slow
def test_the_token_ray_writes_on_a_first_start_is_600_after_start_ray(tmp_path: Path) -> None:
    """A first local start in a fresh ``HOME``: Ray creates the token (644), ``start_ray`` makes it 600."""
    start = "from ampsweep.sweep import start_ray; import ray; start_ray(None, 1); ray.shutdown()"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env["HOME"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", start], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    token = tmp_path / ".ray" / "auth_token"
    assert token.stat().st_mode & 0o777 == 0o600
    said = [line for line in done.stderr.splitlines() if line.startswith("ampsweep: ")]
    assert len(said) == 1 and "made it 600" in said[0], done.stderr[-2000:]
