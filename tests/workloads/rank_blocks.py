"""``tiny_mlp`` whose batches block forever on rank 1 of a gang at its fourth batch (seed 1 only): a rank
that stalls while the other waits for it in the step's all-reduce."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

from tiny_mlp import make as tiny_make

from ampsweep.jobs import Workload


def _blocking(batches: Iterator[Any]) -> Iterator[Any]:
    for index, batch in enumerate(batches):
        if index == 3:
            threading.Event().wait()  # a data loader that never answers
        yield batch


def make(seed: int, **kwargs: Any) -> Workload:
    from mindspore.communication import GlobalComm, get_rank

    workload = tiny_make(seed, **kwargs)
    if seed == 1 and GlobalComm.INITED and get_rank() == 1:
        workload = dataclasses.replace(workload, batches=_blocking(workload.batches))
    return workload
