"""``tiny_mlp`` whose batches break on rank 1 of a gang at its fourth batch (seed 1 only): one rank's
part of a trial fails (``stall``: blocks forever, a data loader that never answers) while the other rank
waits for it in the step's all-reduce."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

from tiny_mlp import make as tiny_make

from ampsweep.jobs import Workload


def _breaking(batches: Iterator[Any], stall: bool) -> Iterator[Any]:
    for index, batch in enumerate(batches):
        if index == 3:
            if stall:
                threading.Event().wait()
            raise RuntimeError("rank 1's fourth batch is broken")
        yield batch


def make(seed: int, stall: bool = False, **kwargs: Any) -> Workload:
    from mindspore.communication import GlobalComm, get_rank

    workload = tiny_make(seed, **kwargs)
    if seed == 1 and GlobalComm.INITED and get_rank() == 1:
        workload = dataclasses.replace(workload, batches=_breaking(workload.batches, stall))
    return workload
