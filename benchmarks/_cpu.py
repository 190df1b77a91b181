"""CPU time beside a sweep's workers: what else kept this machine's cores busy while they trained.

A CPU sweep pins one worker per core, so whatever else runs meanwhile (the
driver committing results, Ray's daemons, the kernel, the VM's other tenants
through steal) takes turns on the workers' cores and slows their steps. The
limit of ``bench_limit`` is timed by the workers themselves, so it cannot
show this; this sampler measures it from ``/proc`` beside the sweep. Linux
only; elsewhere it reports nothing.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

#: the process title Ray gives an actor of ``jobs._worker.TrialWorker`` (``/proc/PID/cmdline``)
WORKER_TITLE = "ray::TrialWorker"
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class Beside:
    """CPU seconds over a window: the machine's busy time, the workers' part of it, and steal."""

    busy_s: float
    workers_s: float
    steal_s: float

    @property
    def others_s(self) -> float:
        """Busy CPU time that was not the workers'."""
        return max(0.0, self.busy_s - self.workers_s)


def _machine() -> tuple[float, float]:
    """(busy, steal) CPU seconds since boot, all cores: busy leaves out idle, iowait and steal."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal
    idle, iowait, steal = fields[3], fields[4], fields[7]
    return (total - idle - iowait - steal) / _TICK, steal / _TICK


def _process_cpu(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime


def _workers(title: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if cmdline.startswith(title.encode()):
                found.append(int(entry))
    return found


class CpuBeside:
    """Samples the machine's busy CPU and the sweep workers' CPU every ``interval`` seconds on a thread.

    A worker is a process whose command line starts with ``title``.
    ``with CpuBeside(workers) as cpu: ...`` then ``cpu.between(start, end)`` (wall-clock
    ``time.time()`` stamps, such as a sweep's first trial start and last trial
    end) interpolates between samples.
    """

    def __init__(self, workers: int, interval: float = 0.5, title: str = WORKER_TITLE) -> None:
        self.workers = workers
        self.title = title
        self.interval = interval
        self.available = Path("/proc/stat").exists()
        self._samples: list[tuple[float, float, float, float]] = []  # (time, busy, steal, workers)
        self._seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-beside", daemon=True)

    def __enter__(self) -> CpuBeside:
        if self.available:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        last_scan = 0.0
        while True:
            now = time.time()
            # a worker's CPU counts from its first sighting: look every time until all are seen (before
            # their first trial), then now and then for a restarted one
            if len(self._seen) < self.workers or now - last_scan > 2.0:
                for pid in _workers(self.title):
                    self._seen.setdefault(pid, 0.0)
                last_scan = now
            self._sample(now)
            if self._stop.wait(self.interval):
                self._sample(time.time())  # the last one after any window the caller measured
                return

    def _sample(self, now: float) -> None:
        for pid in list(self._seen):
            cpu = _process_cpu(pid)
            if cpu is not None:  # a worker that exited keeps its last reading
                self._seen[pid] = cpu
        busy, steal = _machine()
        self._samples.append((now, busy, steal, sum(self._seen.values())))

    def between(self, start: float, end: float) -> Beside | None:
        """CPU seconds from ``start`` to ``end``; None without samples around that window."""
        if len(self._samples) < 2 or start < self._samples[0][0] or end > self._samples[-1][0]:
            return None
        first, last = self._at(start), self._at(end)
        return Beside(busy_s=last[0] - first[0], steal_s=last[1] - first[1], workers_s=last[2] - first[2])

    def _at(self, moment: float) -> tuple[float, float, float]:
        for (t0, *a), (t1, *b) in zip(self._samples, self._samples[1:]):
            if t0 <= moment <= t1:
                share = 0.0 if t1 == t0 else (moment - t0) / (t1 - t0)
                return tuple(x + (y - x) * share for x, y in zip(a, b))  # type: ignore[return-value]
        raise ValueError(moment)
