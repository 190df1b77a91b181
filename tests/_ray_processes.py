"""Ending only the Ray processes a test started itself.

``ray stop --force`` ends every Ray process on the machine, including other
users' clusters; a test must not. A head started with its own ``--temp-dir``
is recognised by that folder on each of its processes' command lines.
"""

from __future__ import annotations

import tempfile

import psutil


def private_temp_dir() -> str:
    """A short folder for ``ray start --temp-dir`` (Ray's socket paths must stay under ~107 bytes)."""
    return tempfile.mkdtemp(prefix="rt-", dir="/tmp")


def stop_processes_under(temp_dir: str, timeout: float = 30.0) -> int:
    """Terminate (then kill) every process whose command line names ``temp_dir``; returns how many."""
    mine = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if any(temp_dir in part for part in process.info["cmdline"] or []):
                mine.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    for process in mine:
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(mine, timeout=timeout)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    return len(mine)
