"""What machine the numbers came from, read without importing the heavy libraries.

Benchmark figures mean little without the CPU, the core count and the library
versions next to them, and on a shared machine the load at the time matters
too; versions come from package metadata so the header costs no MindSpore or
Ray import.
"""

from __future__ import annotations

import os
import platform
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

_PACKAGES = ("mindspore", "ray", "pyarrow", "numpy")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _ram_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024**2
    except (OSError, ValueError, IndexError):
        pass
    return None


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def usable_cores() -> int:
    """Cores this process may run on (the affinity mask, not the host's total)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def load_average() -> str:
    """The 1-minute load average, so a reader can tell a quiet run from a busy one."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "n/a"


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies over all CPUs from ``/proc/stat``; None where there is none."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def wait_for_quiet(
    busy_below: float = 0.25, quiet_seconds: int = 3, max_wait: float = 60.0
) -> tuple[float, float | None]:
    """Wait until the CPUs are mostly idle for ``quiet_seconds`` in a row; return (waited s, last busy share).

    A benchmark that starts while the previous one's processes still wind down
    (a simulated Ray cluster takes a while to stop) measures that shutdown too.
    The load average cannot tell: it lags by a minute. The busy share of the
    CPUs, sampled each second, can. On a machine that never quiets (other
    users) the wait ends after ``max_wait`` and the section says so.
    """
    started = time.monotonic()
    previous = _cpu_times()
    if previous is None:
        return 0.0, None
    quiet, busy = 0, 1.0
    while quiet < quiet_seconds and time.monotonic() - started < max_wait:
        time.sleep(1.0)
        current = _cpu_times()
        assert current is not None
        spent = current[1] - previous[1]
        busy = (current[0] - previous[0]) / spent if spent > 0 else 0.0
        quiet = quiet + 1 if busy < busy_below else 0
        previous = current
    return time.monotonic() - started, busy


def now_utc() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def machine_rows() -> list[tuple[str, str]]:
    """The header of RESULTS.md as (field, value) pairs."""
    ram = _ram_gib()
    rows = [
        ("Date", now_utc()),
        ("CPU", _cpu_model()),
        ("Cores", f"{usable_cores()} usable ({os.cpu_count()} on the host)"),
        ("RAM", f"{ram:.1f} GiB" if ram is not None else "unknown"),
        ("OS", f"{platform.system()} {platform.release()}"),
        ("Python", platform.python_version()),
    ]
    rows += [(name if name != "mindspore" else "MindSpore", _version(name)) for name in _PACKAGES]
    return rows


def machine_markdown() -> str:
    lines = ["| Machine | |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in machine_rows()]
    return "\n".join(lines)
