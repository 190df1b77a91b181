"""A small classifier that reproduces the reported AMP failure.

Its hand-written batch norm's one-pass variance cancels in float16 once a raw
clock column's offset dwarfs the spread; what fails and why: docs/workloads.md (``seed_repro``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from mindspore import Parameter, Tensor, nn, ops

from ampsweep.jobs import Workload

FEATURES = 16
CLASSES = 10


class CustomNorm(nn.Cell):
    """Batch normalization written by hand, with the one-pass variance formula."""

    def __init__(self, width: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.gamma = Parameter(Tensor(np.ones(width, np.float32)), name="gamma")
        self.beta = Parameter(Tensor(np.zeros(width, np.float32)), name="beta")
        self.eps = eps

    def construct(self, x: Tensor) -> Tensor:
        mean = x.mean(0)
        var = (x * x).mean(0) - mean * mean
        return self.gamma * (x - mean) / ops.sqrt(var + self.eps) + self.beta


class Classifier(nn.Cell):
    """Two hidden layers, each Dense -> CustomNorm -> GELU."""

    def __init__(self, inputs: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.fc1 = nn.Dense(inputs, hidden)
        self.norm1 = CustomNorm(hidden)
        self.fc2 = nn.Dense(hidden, hidden)
        self.norm2 = CustomNorm(hidden)
        self.head = nn.Dense(hidden, classes)
        self.act = nn.GELU()

    def construct(self, x: Tensor) -> Tensor:
        x = self.act(self.norm1(self.fc1(x)))
        x = self.act(self.norm2(self.fc2(x)))
        return self.head(x)


def batches(
    seed: int, batch_size: int, feature_scale: float, clock_rate: float
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Endless deterministic stream: Gaussian classes plus a raw clock column."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 1.0, (CLASSES, FEATURES)).astype(np.float32)
    step = 0
    while True:
        labels = rng.integers(0, CLASSES, batch_size)
        features = (centers[labels] + rng.normal(0.0, 1.0, (batch_size, FEATURES))) * feature_scale
        # 64 events per step, spread over the batch: the clock the rows were logged at
        clock = (step * 64 + np.arange(batch_size) * (64 // batch_size)) * clock_rate
        x = np.concatenate([features, clock[:, None]], axis=1).astype(np.float32)
        yield x, labels.astype(np.int32)
        step += 1


def make(
    seed: int,
    hidden: int = 192,
    batch_size: int = 6,
    learning_rate: float = 3e-3,
    feature_scale: float = 3.0,
    clock_rate: float = 0.1,
) -> Workload:
    """The workload factory (docs/workloads.md says what fails and why)."""
    return Workload(
        network=Classifier(FEATURES + 1, hidden, CLASSES),
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=lambda params: nn.Adam(params, learning_rate=learning_rate),
        batches=batches(seed, batch_size, feature_scale, clock_rate),
        target_loss=1.0,
    )
