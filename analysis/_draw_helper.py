"""A second process that draws every other figure of a report while this one draws the rest.

Drawing is most of a report's time, all of it on one core (matplotlib's
layout and Agg). At the end of a local ``ampsweep run`` it sat between the
last trial and the exit while the second core had little to do: on
bench_vs_tune's grid (2 cores) the five figures took about 2.2 s one after
the other.

The process is forked at the start of the command, while the driver is still
single-threaded (before Ray and the workload check start their threads):
forking later would copy the locks of Ray's threads in whatever state they
were. It loads matplotlib there, beside Ray's start, so it is ready long
before the report. Where it cannot start (no ``fork``, threads already
running) or fails, the figures are drawn here as before: the same pixels
either way, since both processes read the same matplotlib settings.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: how often the helper checks that the process that started it is still there
_PARENT_CHECK_S = 1.0
#: how long one figure may take there before the helper counts as broken (one takes about a second)
RESULT_TIMEOUT_S = 120.0


class HelperFailed(Exception):
    """The helper did not draw a figure: it died, hung, or the drawing raised there."""


def _leave_with_parent(parent: int) -> None:
    """End the helper once its parent is gone: a killed driver leaves no process behind."""
    while os.getppid() == parent:
        time.sleep(_PARENT_CHECK_S)
    os._exit(0)


def _serve(connection: Any, parent: int) -> None:
    """The helper's body: load matplotlib, then draw each request in order until told to stop."""
    threading.Thread(target=_leave_with_parent, args=(parent,), name="ampsweep-parent", daemon=True).start()
    with _idle_priority():
        from ._plot import warm_up

        warm_up()
    while True:
        try:
            request = connection.recv()
        except EOFError:
            return
        if request is None:
            return
        draw, args = request
        try:
            connection.send((True, draw(*args)))
        except Exception as exc:  # noqa: BLE001 - reported to the driver, which draws it itself
            connection.send((False, f"{type(exc).__name__}: {exc}"))


@contextmanager
def _idle_priority() -> Iterator[None]:
    """Run the block only on CPU time nobody else wants (Linux ``SCHED_IDLE``), then as before.

    The helper loads matplotlib (about a CPU-second) while Ray starts and the
    workers load MindSpore, which decide when the first trial starts: it must
    only fill their waits. Drawing, later, runs at the usual priority again.
    Where the scheduler cannot be changed, or changed back, it stays as it is.
    """
    before = None
    if hasattr(os, "SCHED_IDLE"):
        try:
            before = os.sched_getscheduler(0), os.sched_getparam(0)
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except OSError:
            before = None
    try:
        yield
    finally:
        if before is not None:
            try:
                os.sched_setscheduler(0, *before)
            except OSError:
                pass


class DrawHelper:
    """One forked process that draws figures in the order they were sent."""

    def __init__(self, process: Any, connection: Any) -> None:
        self._process = process
        self._connection = connection
        self._sent = 0
        self._answers: list[tuple[bool, Any]] = []
        self._broken = False

    @classmethod
    def start(cls) -> DrawHelper | None:
        """Fork the helper now; None where forking is not safe or not possible here."""
        import multiprocessing

        if "fork" not in multiprocessing.get_all_start_methods() or threading.active_count() > 1:
            return None
        context = multiprocessing.get_context("fork")
        here, there = context.Pipe()
        process = context.Process(target=_serve, args=(there, os.getpid()), name="ampsweep-draw", daemon=True)
        # The child starts with Ctrl-C ignored (it reaches the whole process group; the driver
        # handles it) and SIGTERM at its default: the driver's handler turns SIGTERM into
        # KeyboardInterrupt, which would print a traceback when the driver's exit terminates it.
        handlers = signal.signal(signal.SIGINT, signal.SIG_IGN), signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            process.start()
        except OSError:
            return None
        finally:
            signal.signal(signal.SIGINT, handlers[0])
            signal.signal(signal.SIGTERM, handlers[1])
        there.close()
        return cls(process, here)

    def submit(self, draw: Callable[..., Any], *args: Any) -> int | None:
        """Send ``draw(*args)`` to the helper; its ticket for ``result``, or None (draw it here then)."""
        if self._broken:
            return None
        try:
            self._connection.send((draw, args))
        except Exception:  # noqa: BLE001 - a dead helper or an argument that does not pickle
            self._broken = True
            return None
        self._sent += 1
        return self._sent - 1

    def result(self, ticket: int, timeout: float = RESULT_TIMEOUT_S) -> Any:
        """What the request ``ticket`` drew; raises ``HelperFailed`` where the helper did not draw it."""
        while len(self._answers) <= ticket:
            try:
                if self._broken or not self._connection.poll(timeout):
                    raise HelperFailed("no answer")
                self._answers.append(self._connection.recv())
            except (OSError, EOFError) as exc:
                self._broken = True
                raise HelperFailed(str(exc)) from None
            except HelperFailed:
                self._broken = True
                raise
        drawn, value = self._answers[ticket]
        if not drawn:
            raise HelperFailed(value)
        return value

    def close(self) -> None:
        """End the helper: asked first, killed if it does not go (a forked child exits without teardown)."""
        try:
            self._connection.send(None)
        except Exception:  # noqa: BLE001, S110 - already gone
            pass
        self._process.join(timeout=1.0)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._connection.close()
