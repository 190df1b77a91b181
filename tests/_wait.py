"""The one way a test waits for something: poll a predicate until it holds, or fail naming it.

A test never asserts how long something took (speed belongs in ``benchmarks/``);
the timeout here only keeps a hung run from hanging the suite, so it should be
generous: a slow or loaded machine must never reach it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T],
    timeout: float,
    *,
    interval: float = 0.2,
    message: str | Callable[[], str] | None = None,
) -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns something truthy; return that.

    It is called at least once, and once more at the deadline. An exception it
    raises (an ``assert`` that the process being watched is still alive, say)
    propagates at once. When ``timeout`` seconds pass with no truthy value,
    raises ``AssertionError`` naming what was awaited: ``message`` (a string, or
    a callable building one then, e.g. with the last output seen), else the
    predicate's name.
    """
    if timeout < 0 or interval <= 0:
        raise ValueError(f"timeout must be >= 0 and interval > 0, got {timeout} and {interval}")
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(interval, left))
    if callable(message):
        what = message()
    elif message is not None:
        what = message
    else:
        what = getattr(predicate, "__name__", repr(predicate))
    raise AssertionError(f"hung: waited {timeout:g} s for {what}")
