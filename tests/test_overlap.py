"""The report written while Ray shuts down (``sweep._overlap``)."""

from __future__ import annotations

import threading
import time

import pytest

from ampsweep.sweep._overlap import _beside


def test_work_and_main_run_at_the_same_time_and_work_returns_its_value():
    started = threading.Event()

    def work() -> str:
        started.set()
        time.sleep(0.2)
        return "report"

    seen = []
    # main waits for work to have started: they overlap, or this would time out
    value = _beside(work, lambda: seen.append(started.wait(timeout=10)))
    assert value == "report" and seen == [True]


def test_an_error_in_work_reaches_the_caller_after_main_finished():
    finished = []

    def work() -> None:
        raise ValueError("bad workload")

    with pytest.raises(ValueError, match="bad workload"):
        _beside(work, lambda: finished.append(True))
    assert finished == [True]


def test_an_error_in_main_waits_for_work_to_end():
    ended = []

    def work() -> None:
        time.sleep(0.2)
        ended.append(True)

    def main() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _beside(work, main)
    assert ended == [True], "the helper thread is not left running"
