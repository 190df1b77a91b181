"""``--tensorboard LOGDIR`` (``docs/tensorboard.md``): a sweep's trials as TensorBoard runs, while it runs.

A process beside the driver exports each trial the driver commits, and once more at the end. A
process, not a thread: the dispatch loop never waits for the export's share of the interpreter, and the
export keeps protobuf's fast backend, which the driver gives up for MindSpore's. A sweep that stops has
no last round: the exporter is stopped, and killed after ``STOP_S``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from ._errors import SpecError
from .cluster._ray_start import CHOSEN_PROTOBUF, PROTOBUF_ENV

#: how long a sweep that stops waits for its exporter to end before it kills it (a scheduler's grace period
#: after SIGTERM is short; each run is written whole or not at all, and the next export writes the rest)
STOP_S = 5.0


def check_logdir(sweep_dir: str, logdir: str | None) -> None:
    """A ``--tensorboard LOGDIR`` that cannot take ``sweep_dir``'s runs is a usage error, before anything
    starts (``logdir_problem``), not a traceback after the sweep or the analysis."""
    if logdir is not None:
        from ampsweep.analysis._tensorboard import logdir_problem

        problem = logdir_problem(sweep_dir, logdir)
        if problem is not None:
            raise SpecError("--tensorboard", logdir, problem)


@contextmanager
def exporting(sweep_dir: str, logdir: str | None) -> Iterator[None]:
    """Export ``sweep_dir``'s trials to ``logdir`` while the body runs, and all of them when it ends."""
    if logdir is None:
        yield
        return
    env = {name: value for name, value in os.environ.items() if name != PROTOBUF_ENV}
    env.update({PROTOBUF_ENV: CHOSEN_PROTOBUF} if CHOSEN_PROTOBUF else {})
    command = [sys.executable, "-m", "ampsweep.analysis._tensorboard", sweep_dir, str(logdir)]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, env=env)
    assert child.stdin is not None
    try:
        yield
        child.stdin.close()  # the sweep is over: the exporter writes what is left, and ends
        ended = child.wait()
    except BaseException:
        child.stdin.close()
        child.terminate()  # it ends as on Ctrl-C
        try:
            child.wait(STOP_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        raise
    if ended not in (0, 130):
        print(
            f"ampsweep: the TensorBoard export stopped; `ampsweep export {sweep_dir} --tensorboard "
            f"{logdir}` writes the rest",
            file=sys.stderr,
            flush=True,
        )
