"""No one gets in: while ``ampsweep run`` runs a local sweep, its Ray lets no client in without the token (slow).

A Ray port that takes any client lets anyone who reaches it run code as the
sweep's user. The local cluster is Ray's own authenticated start; this test
probes it from a second process the way an intruder would (another ``HOME``,
no ``RAY_AUTH_*`` variables), and, as a control that the probe itself works,
from a process that holds the token and says so (``RAY_AUTH_MODE=token``).
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

from tests._wait import wait_until

pytestmark = pytest.mark.slow
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
