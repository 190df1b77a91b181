"""A classifier whose gradients underflow float16: the loss carries a tiny weight.

The model is an ordinary ``Dense -> GELU -> Dense -> GELU -> Dense`` classifier;
what a user does to it is weight the loss: a sum over tokens divided by a
large token count, or a term mixed into a bigger objective with a small
coefficient (``loss_weight``, default 1e-6). Adam divides the scale out again,
so in FP32 the model learns as it would unweighted.

Why float16 fails, with no NaN anywhere: the gradient of the weighted loss
with respect to the logits is ``loss_weight * (softmax - onehot) / batch``,
around 1e-8, below float16's smallest subnormal (2^-24 = 6e-8). Under O2 the
backward pass runs in float16, those values flush to exactly zero, every
parameter's gradient is zero, and the network never moves: the loss stays at
chance, ``loss_weight * ln 10``. No black list helps (every Dense is cast, and
keeping one in FP32 still leaves the float16 gradients flowing into it zero).
A loss scale fixes it: ``static:65536`` lifts the gradients into float16's
range and the unscaled update is what FP32 does. The target loss is half of
chance, in the loss's own units.
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
    """The workload factory (see the module docstring for what fails and why)."""
    return Workload(
        network=Classifier(FEATURES, hidden, CLASSES),
        loss_fn=WeightedLoss(loss_weight),
        optimizer=lambda params: nn.Adam(params, learning_rate=learning_rate, eps=1e-12),
        batches=batches(seed, batch_size, feature_scale=1.0),  # silent_norm's classes, at unit scale
        target_loss=0.5 * math.log(CLASSES) * loss_weight,
    )
