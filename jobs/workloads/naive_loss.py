"""A classifier whose *hand-written loss* overflows float16, where the loss runs decides.

Stable at O2 under ``loss_placement: outside``, diverging under ``inside``
unless ``LogSumExpLoss`` is black-listed: docs/workloads.md (``naive_loss``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from mindspore import Tensor, nn, ops
from mindspore.common import dtype as mstype

from ampsweep.jobs import Workload


class LogSumExpLoss(nn.Cell):
    """Mean cross entropy of integer labels, computed without the max-subtraction."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.classes = classes
        self.on = Tensor(1.0, mstype.float32)
        self.off = Tensor(0.0, mstype.float32)

    def construct(self, logits: Tensor, label: Tensor) -> Tensor:
        picked = (logits * ops.one_hot(label, self.classes, self.on, self.off).astype(logits.dtype)).sum(-1)
        return (ops.log(ops.exp(logits).sum(-1)) - picked).mean()


class Classifier(nn.Cell):
    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.fc1 = nn.Dense(features, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Dense(hidden, classes)

    def construct(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))


def _batches(seed: int, batch: int, features: int, classes: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 3.0, (classes, features)).astype(np.float32)
    while True:
        labels = rng.integers(0, classes, batch)
        x = centres[labels] + rng.normal(0.0, 0.5, (batch, features))
        yield x.astype(np.float32), labels.astype(np.int32)


def make(
    seed: int,
    features: int = 16,
    hidden: int = 64,
    classes: int = 8,
    batch: int = 16,
    learning_rate: float = 2e-2,
) -> Workload:
    return Workload(
        network=Classifier(features, hidden, classes),
        loss_fn=LogSumExpLoss(classes),
        optimizer=lambda params: nn.Adam(params, learning_rate=learning_rate),
        batches=_batches(seed, batch, features, classes),
        target_loss=0.05,
    )
