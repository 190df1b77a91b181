"""Live progress of a sweep: a rich bar on a terminal; in a log (``ray job submit``, CI), where redraws
are noise and columns collapse to ``…``, one plain line every ``LOG_EVERY_S`` seconds."""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import Any, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

#: Seconds between two progress lines in a log.
LOG_EVERY_S = 10.0


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


class SweepProgress:
    """Counts outcomes and shows them, as a bar or as log lines; silent when disabled."""

    def __init__(
        self,
        total: int,
        already_done: int,
        enabled: bool,
        console: Console | None = None,
        log: TextIO | None = None,
    ) -> None:
        self.outcomes: Counter[str] = Counter()
        self.total = total
        self.already_done = already_done
        self.running = 0
        self.retried = 0
        self._started = time.monotonic()
        self._last_line = 0.0
        console = console or Console(stderr=True)
        self._log = log if log is not None else (None if console.is_terminal else sys.stderr)
        self._enabled = enabled
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[counts]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            disable=not enabled or self._log is not None,
            transient=False,
        )
        self._task = self._progress.add_task("trials", total=total, completed=already_done, counts="")

    def __enter__(self) -> SweepProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._refresh(force=True)
        self._progress.stop()

    @property
    def done(self) -> int:
        return self.already_done + sum(self.outcomes.values())

    def counts(self) -> str:
        text = (
            f"completed {self.outcomes['completed']} · diverged {self.outcomes['diverged']} · "
            f"failed {self.outcomes['failed']} · running {self.running}"
        )
        not_applicable = self.outcomes.get("not_applicable", 0)
        text += (
            f" · not applicable {not_applicable}" if not_applicable else ""
        )  # a black list that could not be applied
        return text + (f" · retried {self.retried}" if self.retried else "")

    def line(self) -> str:
        """The log form: ``12/72 trials · completed 10 · … · elapsed 0:00:45 · ETA 0:03:10``."""
        elapsed = time.monotonic() - self._started
        ran = sum(self.outcomes.values())
        left = self.total - self.done
        eta = _clock(elapsed / ran * left) if ran else "unknown"
        return f"[ampsweep] {self.done}/{self.total} trials · {self.counts()} · elapsed {_clock(elapsed)} · ETA {eta}"

    def _refresh(self, force: bool = False) -> None:
        self._progress.update(self._task, counts=self.counts())
        if not self._enabled or self._log is None:
            return
        now = time.monotonic()
        if force or now - self._last_line >= LOG_EVERY_S:
            self._last_line = now
            print(self.line(), file=self._log, flush=True)

    def set_running(self, running: int) -> None:
        self.running = running
        self._refresh()

    def finished(self, outcome: str) -> None:
        self.outcomes[outcome] += 1
        self._progress.advance(self._task)
        self._refresh()

    def retry(self) -> None:
        self.retried += 1
        self._refresh()
