"""A small classifier whose parameters, hence its gradients, are float16 (``nn.Dense(dtype=float16)``).

MindSpore's CPU ``AllReduce`` sums float32 only: on a gang of CPU ranks these
gradients are reduced in float32 and cast back (``jobs.training._data_parallel``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from mindspore import Tensor, nn
from mindspore.common import dtype as mstype

from ampsweep.jobs import Workload

FEATURES, HIDDEN, CLASSES = 8, 16, 4


class HalfNet(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Dense(FEATURES, HIDDEN, dtype=mstype.float16)
        self.act = nn.ReLU()
        self.fc2 = nn.Dense(HIDDEN, CLASSES, dtype=mstype.float16)

    def construct(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x.astype(mstype.float16)))).astype(mstype.float32)


def batches(seed: int, batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 2.0, (CLASSES, FEATURES))
    while True:
        labels = rng.integers(0, CLASSES, batch_size)
        x = centers[labels] + rng.normal(0.0, 0.5, (batch_size, FEATURES))
        yield x.astype(np.float32), labels.astype(np.int32)


def make(seed: int, batch_size: int = 8) -> Workload:
    """The workload factory (see the module docstring)."""
    return Workload(
        network=HalfNet(),
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=lambda params: nn.SGD(params, learning_rate=0.05),
        batches=batches(seed, batch_size),
    )
