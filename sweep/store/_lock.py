"""One driver per sweep folder: a lock file (``.driver.lock``) that names its holder and proves it is alive.

A second ``run`` refuses while the holder is alive. A stale lock is taken over, so a killed driver never
blocks its own resume: its process is gone (same host), or its heartbeat is older than ``STALE_AFTER_S``
(another host, where the pid cannot be checked). ``status`` reads the running trials from it.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from ampsweep.contracts import LOCK_FILE

from .._errors import SpecError
from ._store import SweepStore

#: Seconds between two heartbeats of a running driver.
HEARTBEAT_S = 5.0
#: A heartbeat older than this means the driver is gone.
STALE_AFTER_S = 60.0


@dataclass
class LockInfo:
    host: str
    pid: int
    started_at: str
    heartbeat: float
    running: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}, started {self.started_at}"


def read_lock(store: SweepStore) -> LockInfo | None:
    text = store.read_text(LOCK_FILE)
    if not text:
        return None
    try:
        return LockInfo(**json.loads(text))
    except (TypeError, ValueError):
        return None  # a torn or foreign file: treat as no lock


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_live(lock: LockInfo) -> bool:
    """Whether the driver that wrote ``lock`` is still running."""
    if lock.host == socket.gethostname():
        return lock.pid != os.getpid() and _pid_alive(lock.pid)
    return time.time() - lock.heartbeat < STALE_AFTER_S


class DriverLock:
    """Held by the one driver of a sweep folder while it runs."""

    def __init__(self, store: SweepStore) -> None:
        self.store = store
        self.info = LockInfo(
            host=socket.gethostname(),
            pid=os.getpid(),
            started_at=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
            heartbeat=time.time(),
        )
        self._last_beat = 0.0

    def check(self) -> None:
        """Raise ``SpecError`` naming the live driver that holds the lock, if any (writes nothing)."""
        held = read_lock(self.store)
        if held is not None and is_live(held):
            raise SpecError(
                "out",
                self.store.root,
                f"another ampsweep run is using this sweep folder ({held.describe()}); "
                "wait for it, or stop it and run the same command again to resume",
            )

    def acquire(self) -> None:
        """Take the lock (a stale one from a dead driver is taken over)."""
        self.check()
        self._write()

    def beat(self, running: list[str], force: bool = False) -> None:
        """Refresh the heartbeat (at most every ``HEARTBEAT_S``) and the running trial ids."""
        now = time.time()
        if force or now - self._last_beat >= HEARTBEAT_S or running != self.info.running:
            self.info.heartbeat = now
            self.info.running = list(running)
            self._write()

    def release(self) -> None:
        """Remove the lock file when this driver holds it. It runs on the way out of a stopped run
        (a full disk among the reasons), so a failure to read or delete is left to staleness."""
        try:
            held = read_lock(self.store)
            if held is not None and held.pid == self.info.pid and held.host == self.info.host:
                self.store.fs.delete_file(self.store.path(LOCK_FILE))
        except OSError:
            pass

    def _write(self) -> None:
        self._last_beat = time.time()
        # vars, not asdict: asdict deep-copies the running ids (one per device) on every beat
        self.store.write_text(LOCK_FILE, json.dumps(vars(self.info)))
