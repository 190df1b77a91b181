"""A classifier whose gradients underflow float16: the loss carries a tiny weight.

No black list helps, a loss scale does; what fails and why: docs/workloads.md (``tiny_loss``).
"""

from __future__ import annotations

import math

from mindspore import nn

from ampsweep.jobs import Workload

from .silent_norm import CLASSES, FEATURES, batches


class WeightedLoss(nn.Cell):
    """Softmax cross-entropy times a constant weight."""

    def __init__(self, weight: float) -> None:
        super().__init__()
        self.inner = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        self.weight = weight

    def construct(self, logits, labels):
        return self.inner(logits, labels) * self.weight


class Classifier(nn.Cell):
    """Dense -> GELU -> Dense -> GELU -> Dense."""

    def __init__(self, inputs: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.fc1 = nn.Dense(inputs, hidden)
        self.fc2 = nn.Dense(hidden, hidden)
        self.head = nn.Dense(hidden, classes)
        self.act = nn.GELU()

    def construct(self, x):
        return self.head(self.act(self.fc2(self.act(self.fc1(x)))))


def make(
    seed: int,
    hidden: int = 64,
    batch_size: int = 32,
    learning_rate: float = 3e-3,
    loss_weight: float = 1e-6,
) -> Workload:
    """The workload factory (docs/workloads.md says what fails and why)."""
    return Workload(
        network=Classifier(FEATURES, hidden, CLASSES),
        loss_fn=WeightedLoss(loss_weight),
        optimizer=lambda params: nn.Adam(params, learning_rate=learning_rate, eps=1e-12),
        batches=batches(seed, batch_size, feature_scale=1.0),  # silent_norm's classes, at unit scale
        target_loss=0.5 * math.log(CLASSES) * loss_weight,
    )
