"""Turning a workload's ``batches`` into exactly ``steps`` training batches.

Users train from plain Python iterables *and* from ``mindspore.dataset``
pipelines. A pipeline is one epoch per iteration (``iter(dataset)`` stops at
the end of the epoch), so a trial longer than an epoch starts another one, as
``Model.train`` over several epochs would. A plain iterator cannot be
restarted: it must be at least ``steps`` long.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np


def is_dataset(batches: Any) -> bool:
    """A ``mindspore.dataset`` pipeline (checked without importing MindSpore)."""
    return callable(getattr(batches, "create_tuple_iterator", None)) and callable(
        getattr(batches, "get_dataset_size", None)
    )


def _dataset_epochs(dataset: Any, steps: int) -> Iterator[Any]:
    produced = 0
    while produced < steps:
        epoch_rows = 0
        # num_epochs=1: a fresh one-epoch iterator each time, so the pipeline
        # reshuffles per epoch exactly as a user's own epoch loop would
        for row in dataset.create_tuple_iterator(num_epochs=1, output_numpy=False):
            yield tuple(row)
            epoch_rows += 1
            produced += 1
            if produced == steps:
                return
        if epoch_rows == 0:
            raise RuntimeError("the workload's mindspore.dataset pipeline yielded no batches")


def batch_stream(batches: Any, steps: int, skip: int = 0) -> Iterator[tuple[Any, ...]]:
    """``steps`` batches as tuples ``(*inputs, label)`` of Tensors, after passing over ``skip``.

    ``skip`` is where a forked trial's data continues: the batches its prefix
    consumed are drawn and dropped (a dataset pipeline runs its epochs, so
    its per-epoch shuffle stays the one a from-zero run sees), never
    converted. Raises ``RuntimeError`` naming the shortfall when a plain
    iterable ends early.
    """
    source = _dataset_epochs(batches, skip + steps) if is_dataset(batches) else iter(batches)
    for index in range(skip):
        try:
            next(source)
        except StopIteration:
            raise RuntimeError(
                f"workload batches ended after {index} batches; the trial starts at step {skip} "
                "and skips the batches before it (yield more, or accept start_step in the factory)"
            ) from None
    for index in range(steps):
        try:
            batch = next(source)
        except StopIteration:
            raise RuntimeError(
                f"workload batches ended after {index} steps; the spec asks for {steps} "
                "(yield more, or return a mindspore.dataset pipeline, which is repeated over epochs)"
            ) from None
        yield to_tensors(batch)


def to_tensors(batch: Any) -> tuple[Any, ...]:
    """One batch as a tuple of Tensors (NumPy arrays and scalars are converted)."""
    import mindspore as ms

    items = batch if isinstance(batch, (tuple, list)) else (batch,)
    return tuple(x if isinstance(x, ms.Tensor) else ms.Tensor(np.asarray(x)) for x in items)
