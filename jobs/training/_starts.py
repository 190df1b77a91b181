"""What a trial starts from, kept per seed by a worker: the initial values and the converted batches.

Building them per trial (the factory, a second network and optimizer to read
the values from, the batches converted step by step) costs ~30 ms a seed_repro
trial on one CPU core, a twentieth of its steps. The factory is deterministic
in its seed and arguments (the trial id and ``GraphCache`` rely on it), so
each start is built once; the kept batches are the very Tensors a fresh build
would convert (the jit step only reads its inputs). Only plain iterables are
kept: a ``mindspore.dataset`` pipeline may reshuffle per epoch from state
outside the factory.
"""

from __future__ import annotations

import itertools
import json
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._config import TrialConfig

#: Bytes of starts one worker keeps: seed_repro needs ~150 KB per seed.
STARTS_BUDGET = 256 * 2**20

Batch = tuple[Any, ...]


@dataclass(frozen=True)
class TrialStart:
    """One seed's start: ``batches`` (after any skip, ``steps`` long) and ``state`` may be missing."""

    target_loss: float | None
    batches: tuple[Batch, ...] | None
    #: network and optimizer values, keyed as ``jobs.training._step.initial_state``; the loss scaler's
    #: depend on the trial's ``loss_scale`` and are made per trial
    state: dict[tuple[str, str], np.ndarray] | None

    @property
    def nbytes(self) -> int:
        batches = sum(int(t.nbytes) for batch in self.batches or () for t in batch)
        return batches + sum(int(v.nbytes) for v in (self.state or {}).values())


def start_key(config: TrialConfig, workload_ref: str) -> tuple[Any, ...]:
    """Everything that decides what a trial starts from: the factory call, the snapshot, the steps."""
    args = json.dumps(config.workload_args, sort_keys=True, default=str)
    return (workload_ref, config.seed, args, config.start_step, config.start_from, config.steps)


class StartCache:
    """Starts by ``start_key``, least recently used first out, within ``budget`` bytes."""

    def __init__(self, budget: int = STARTS_BUDGET) -> None:
        self.budget = budget
        self._starts: OrderedDict[tuple[Any, ...], TrialStart] = OrderedDict()
        self._sizes: dict[tuple[Any, ...], int] = {}

    def get(self, key: tuple[Any, ...]) -> TrialStart | None:
        start = self._starts.get(key)
        if start is not None:
            self._starts.move_to_end(key)
        return start

    def put(self, key: tuple[Any, ...], start: TrialStart) -> None:
        self.forget(key)
        size = start.nbytes
        if size > self.budget:
            return
        while self._starts and sum(self._sizes.values()) + size > self.budget:
            self.forget(next(iter(self._starts)))
        self._starts[key] = start
        self._sizes[key] = size

    def forget(self, key: tuple[Any, ...]) -> None:
        self._starts.pop(key, None)
        self._sizes.pop(key, None)

    def __len__(self) -> int:
        return len(self._starts)


def draw(stream: Iterator[Batch], limit: int) -> tuple[tuple[Batch, ...] | None, Iterable[Batch]]:
    """Draw a trial's batches now, to keep them: ``(kept, what the trial trains on)``.

    Past ``limit`` bytes nothing is kept and the rest of ``stream`` is drawn
    while the trial trains, as without a cache. An iterable that ends early
    raises ``batch_stream``'s error here, before the first step, instead of at
    the step it runs out at; the trial fails with the same message.
    """
    drawn: list[Batch] = []
    size = 0
    for batch in stream:
        drawn.append(batch)
        size += sum(int(t.nbytes) for t in batch)
        if size > limit:
            return None, itertools.chain(drawn, stream)
    return tuple(drawn), drawn
