"""``--tensorboard LOGDIR``: a sweep's trials as TensorBoard runs, during ``run`` and after (``export``).

While a sweep runs, a process of its own beside the driver exports each trial the driver commits
(``ampsweep.analysis._tensorboard``, which reads the folder like ``ampsweep export``), and once more when
the sweep ends, before the report. A process, not a thread: the dispatch loop never waits for the
export's share of the interpreter, and the export keeps protobuf's fast backend, which the driver gives up
for MindSpore's (2.7 needs the pure-Python one).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from .cluster._ray_start import _CHOSEN_PROTOBUF, PROTOBUF_ENV


@contextmanager
def exporting(sweep_dir: str, logdir: str | None) -> Iterator[None]:
    """Export ``sweep_dir``'s trials to ``logdir`` while the body runs, and all of them when it ends."""
    if logdir is None:
        yield
        return
    env = {name: value for name, value in os.environ.items() if name != PROTOBUF_ENV}
    env.update({PROTOBUF_ENV: _CHOSEN_PROTOBUF} if _CHOSEN_PROTOBUF else {})
    command = [sys.executable, "-m", "ampsweep.analysis._tensorboard", sweep_dir, str(logdir)]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, env=env)
    try:
        yield
    finally:
        assert child.stdin is not None
        child.stdin.close()  # the sweep is over: the exporter writes what is left, and ends
        if child.wait() not in (0, 130):
            print(
                f"ampsweep: the TensorBoard export stopped; `ampsweep export {sweep_dir} --tensorboard "
                f"{logdir}` writes the rest",
                file=sys.stderr,
                flush=True,
            )
