"""A rank of a data-parallel trial: its part of each global batch, and what the ranks share.

What a trial on N devices computes (each rank's part of the global batch,
gradients averaged before the clip, one rank's overflow skipping the step on
all): docs/large-models.md. The process joins its group once
(``communication.init()`` runs once per process) and hands it on as an
argument; without one no collective enters the step, so devices == 1
computes the same bits.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

#: The variable MindSpore's dynamic cluster reads to know a process's role (``MS_WORKER``, ``MS_SCHED``).
ROLE_ENV = "MS_ROLE"
WORKER_ROLE = "MS_WORKER"


_T = TypeVar("_T")

#: the phases of a rank's call that ``Progress`` tells apart, in the order a call runs them
TRAINING, LOCALIZING = 0, 1


class Progress:
    """How far this rank is in its gang's current call, readable from another thread while it trains.

    The actor answers ``TrialWorker.progress`` from a Ray concurrency group of its own, so the driver
    can tell a rank that stopped coming (a loader that blocks, a hung device) from one that is slow,
    without waiting for the collective's own timeout (``sweep.cluster._gang``).
    """

    def __init__(self) -> None:
        self.call = 0
        self.phase = TRAINING
        self.step = -1
        self._at = time.monotonic()
        self._intervals: deque[float] = deque(maxlen=64)

    def begin_call(self) -> None:
        self.call, self.phase, self.step, self._at = self.call + 1, TRAINING, -1, time.monotonic()

    def reached(self, step: int, phase: int = TRAINING) -> None:
        """This rank entered global ``step`` of ``phase`` (before the step's collectives)."""
        now = time.monotonic()
        if phase == self.phase == TRAINING and step == self.step + 1 and self.step >= 0:
            self._intervals.append(now - self._at)
        self.phase, self.step, self._at = phase, step, now

    def reading(self) -> tuple[int, int, int, float | None]:
        """(call, phase, step, the median seconds of this rank's recent training steps)."""
        intervals = list(self._intervals)
        return self.call, self.phase, self.step, statistics.median(intervals) if intervals else None


@dataclass(frozen=True)
class RankGroup:
    """This process's place in its data-parallel group, and how far it is (``Progress``)."""

    rank: int
    size: int
    progress: Progress = field(default_factory=Progress, compare=False, repr=False)


class PeerFailed(RuntimeError):
    """A rank's local work failed, and every rank of its group knows it (``agree``): they all stop
    together, so none waits in a collective that the failed one will not enter."""

    def __init__(self, rank: int, size: int, error: BaseException | None) -> None:
        what = f": {type(error).__name__}: {error}".splitlines()[0] if error is not None else ""
        super().__init__(f"rank {rank} of {size}{what}")
        self.rank = rank


def flagged(group: RankGroup, flag: bool) -> list[int]:
    """The ranks whose ``flag`` is set, known to every rank: one all-reduce of a flag per rank, which
    every rank enters after its own local work so that all take the same branch after it."""
    import mindspore as ms
    from mindspore import ops

    flags = np.zeros(group.size, np.float32)
    flags[group.rank] = 1.0 if flag else 0.0
    return [int(rank) for rank in np.flatnonzero(ops.AllReduce()(ms.Tensor(flags)).asnumpy() > 0.5)]


def together(group: RankGroup | None, work: Callable[[], _T], step: int = -1) -> _T:
    """``work()``, this rank's own part of a collective act (on one device: just that); then every rank
    learns whether any rank's part raised, and all raise together (``agree``) or all go on. ``step``:
    where the rank is, for its ``progress`` (a localization's replay step)."""
    if group is None:
        return work()
    group.progress.reached(step, LOCALIZING)
    try:
        value = work()
    except Exception as exc:  # noqa: BLE001 - handed to every rank by ``agree``, which raises it
        agree(group, exc)
        raise
    agree(group, None)
    return value


def agree(group: RankGroup, error: BaseException | None) -> None:
    """Raise ``PeerFailed`` on every rank when any rank's ``error`` is set; return on every rank otherwise
    (entered by every rank after its local work: a replay's hooked step, drawing a batch)."""
    failed = flagged(group, error is not None)
    if failed:
        raise PeerFailed(failed[0], group.size, error if failed[0] == group.rank else None)


def join_group() -> RankGroup | None:
    """Join the data-parallel group the environment names (``MS_ROLE=MS_WORKER``); None: a single device.

    Called once per process (the actor's start), after ``mindspore.set_device``:
    ``communication.init()`` blocks until every rank and the scheduler have
    connected, then the process trains in MindSpore's data-parallel mode with
    gradients averaged.
    """
    if os.environ.get(ROLE_ENV) != WORKER_ROLE:
        return None
    import mindspore as ms
    from mindspore import communication

    communication.init()
    size = communication.get_group_size()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    return RankGroup(rank=communication.get_rank(), size=size)


class UnevenBatch(ValueError):
    """A global batch whose first axis the devices do not divide."""


def shard(batch: tuple[Any, ...], group: RankGroup) -> tuple[Any, ...]:
    """This rank's part of one global batch: each array's rows ``[r*B/N, (r+1)*B/N)``.

    Every item is split along its first axis; one that does not split evenly
    is a one-line failure naming the batch size and the device count, never a
    silently dropped remainder (the ranks would then train on less than the
    user's run does).
    """
    parts = []
    for item in batch:
        rows = int(item.shape[0]) if len(item.shape) else 0
        if rows == 0 or rows % group.size:
            raise UnevenBatch(
                f"a global batch of {rows} does not split evenly across {group.size} devices "
                f"(devices_per_trial must divide the batch size)"
            )
        each = rows // group.size
        parts.append(item[group.rank * each : (group.rank + 1) * each])
    return tuple(parts)


def shard_stream(batches: Any, group: RankGroup) -> Any:
    """``shard`` over a stream of global batches."""
    for batch in batches:
        yield shard(batch, group)


def collectives(params: Any, group: RankGroup) -> tuple[Any, Any]:
    """What a rank's compiled step calls: a gradient averager and an all-reduce (sum) for the loss.

    Built once per compiled step, outside the jit function, and captured by it.
    The loss's mean is the sum divided by N: on the CPU backend AllReduce sums only.
    MindSpore's CPU AllReduce also sums float32 only: there, gradients of
    float16 or bfloat16 parameters are averaged in float32 and cast back to
    their dtype (on Ascend and GPU each is averaged in its own dtype).
    """
    import mindspore as ms
    from mindspore import nn, ops
    from mindspore.common import dtype as mstype

    reducer = nn.DistributedGradReducer(params, mean=True, degree=group.size)
    if ms.get_context("device_target") != "CPU" or all(p.dtype == mstype.float32 for p in params):
        return reducer, ops.AllReduce()

    def in_float32(grads: Any) -> Any:
        averaged = reducer(tuple(g.astype(mstype.float32) for g in grads))
        return tuple(a.astype(g.dtype) for a, g in zip(averaged, grads))

    return in_float32, ops.AllReduce()


def parameter_checksum(named_state: dict[str, Any]) -> str:
    """A digest of a rank's training state at the end of a trial; the ranks' must be equal.

    Data parallel keeps every rank's weights identical (each applies the same
    averaged gradients): a difference means the ranks trained apart.
    """
    digest = hashlib.sha256()
    for name in sorted(named_state):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(named_state[name].asnumpy()).tobytes())
    return digest.hexdigest()[:16]
