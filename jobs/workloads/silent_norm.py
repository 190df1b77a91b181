"""A classifier that fails *silently* under O2: finite loss, stuck at chance.

Its hand-written norm's squared deviations overflow float16, so it divides by
``inf`` and outputs a constant; what fails and why: docs/workloads.md (``silent_norm``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from mindspore import Parameter, Tensor, nn, ops

from ampsweep.jobs import Workload

FEATURES = 16
CLASSES = 10


class FeatureNorm(nn.Cell):
    """Layer normalization over features, written by hand with the two-pass variance."""

    def __init__(self, width: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.gamma = Parameter(Tensor(np.ones(width, np.float32)), name="gamma")
        self.beta = Parameter(Tensor(np.zeros(width, np.float32)), name="beta")
        self.eps = eps

    def construct(self, x: Tensor) -> Tensor:
        centered = x - x.mean(-1, keep_dims=True)
        var = (centered * centered).mean(-1, keep_dims=True)
        return self.gamma * centered / ops.sqrt(var + self.eps) + self.beta


class SensorNet(nn.Cell):
    """Dense -> FeatureNorm -> GELU -> Dense -> GELU -> Dense."""

    def __init__(self, inputs: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.fc1 = nn.Dense(inputs, hidden)
        self.norm = FeatureNorm(hidden)
        self.fc2 = nn.Dense(hidden, hidden)
        self.head = nn.Dense(hidden, classes)
        self.act = nn.GELU()

    def construct(self, x: Tensor) -> Tensor:
        x = self.act(self.norm(self.fc1(x)))
        return self.head(self.act(self.fc2(x)))


def batches(seed: int, batch_size: int, feature_scale: float) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Endless deterministic stream of Gaussian classes in raw units (``feature_scale``)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 1.0, (CLASSES, FEATURES))
    while True:
        labels = rng.integers(0, CLASSES, batch_size)
        x = (centers[labels] + rng.normal(0.0, 0.7, (batch_size, FEATURES))) * feature_scale
        yield x.astype(np.float32), labels.astype(np.int32)


def make(
    seed: int,
    hidden: int = 64,
    batch_size: int = 32,
    learning_rate: float = 3e-3,
    feature_scale: float = 1000.0,
) -> Workload:
    """The workload factory (docs/workloads.md says what fails and why)."""
    return Workload(
        network=SensorNet(FEATURES, hidden, CLASSES),
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=lambda params: nn.Adam(params, learning_rate=learning_rate),
        batches=batches(seed, batch_size, feature_scale),
        target_loss=1.0,
    )
