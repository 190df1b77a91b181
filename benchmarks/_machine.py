"""What machine the numbers came from, read without importing the heavy libraries.

Benchmark figures mean little without the CPU, the core count and the library
versions next to them, and on a shared machine the load at the time matters
too; versions come from package metadata so the header costs no MindSpore or
Ray import.
"""

from __future__ import annotations

import os
import platform
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
