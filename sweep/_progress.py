"""Live progress of a sweep: done, diverged, failed, running, ETA."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class SweepProgress:
    """A rich progress bar whose text counts outcomes; silent when disabled."""

    def __init__(self, total: int, already_done: int, enabled: bool, console: Console | None = None) -> None:
        self.outcomes: Counter[str] = Counter()
        self.running = 0
        self.retried = 0
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[counts]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console or Console(stderr=True),
            disable=not enabled,
            transient=False,
        )
        self._task = self._progress.add_task("trials", total=total, completed=already_done, counts="")

    def __enter__(self) -> SweepProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._refresh()
        self._progress.stop()

    def _refresh(self) -> None:
        counts = (
            f"completed {self.outcomes['completed']} · diverged {self.outcomes['diverged']} · "
            f"failed {self.outcomes['failed']} · running {self.running}"
        )
        if self.retried:
            counts += f" · retried {self.retried}"
        self._progress.update(self._task, counts=counts)

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
