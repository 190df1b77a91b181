"""The private local head: no processes a sweep never uses, ended by ``ray.shutdown``, and a fallback."""

from __future__ import annotations

import psutil
import pytest

from ampsweep.sweep import _local_head
from ampsweep.sweep._launcher import start_ray

#: the scripts of what Ray's own local start adds and a sweep never talks to
UNUSED_SCRIPTS = ("autoscaler/_private/monitor.py", "_private/log_monitor.py", "dashboard/dashboard.py")


def _ray_children() -> list[list[str]]:
    """The command lines of this process's descendants (Ray's head processes when it started one)."""
    lines = []
    for child in psutil.Process().children(recursive=True):
        try:
            lines.append(child.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return lines


def _unused(line: list[str]) -> bool:
    """An autoscaler monitor, a log monitor, the API server, or an idle prestarted worker."""
    return (
        bool(line) and line[0].startswith("ray::IDLE") or any(part.endswith(UNUSED_SCRIPTS) for part in line)
    )


def _remote_pid() -> int:
    import os

    import ray

    @ray.remote(num_cpus=1)
    class Probe:
        def pid(self) -> int:
            return os.getpid()

    return ray.get(Probe.remote().pid.remote(), timeout=120)


@pytest.fixture
def no_ray_yet():
    import ray

    if ray.is_initialized():
        pytest.skip("Ray is already up in this process")
    yield
    if ray.is_initialized():
        ray.shutdown()


def test_the_local_head_starts_only_what_a_sweep_uses_and_shutdown_ends_it(no_ray_yet):
    import ray

    start_ray(None, 2)
    assert ray.is_initialized()
    assert ray.cluster_resources().get("CPU", 0) >= 2
    actor_pid = _remote_pid()
    running = _ray_children()
    assert any(line[0].endswith("gcs_server") for line in running)
    assert any(line[0].endswith("raylet") for line in running)
    unused = [" ".join(line)[:120] for line in running if _unused(line)]
    assert not unused, unused
    head = [psutil.Process(child.pid) for child in psutil.Process().children(recursive=True)]
    assert psutil.pid_exists(actor_pid)

    ray.shutdown()  # as a user ends it after Sweep.run: the head goes too, not only the connection
    _, alive = psutil.wait_procs(head, timeout=30)
    still = [" ".join(p.cmdline()) for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not still, still


def test_when_the_lean_start_fails_ray_starts_the_usual_way(no_ray_yet, monkeypatch):
    import ray

    def moved(num_cpus: int):
        raise TypeError("RayParams got an unexpected keyword argument 'no_monitor'")

    monkeypatch.setattr(_local_head, "_lean_head", moved)
    start_ray(None, 1)
    assert ray.is_initialized()
    assert _remote_pid() > 0
