"""A Cell that is finite in forward but whose input gradient overflows float16 in backward.

``Gain`` multiplies by 1000 after a first layer initialised ~1000x smaller,
so its forward output is O(1). In backward it multiplies the incoming
gradient by 1000 too; with a static loss scale of 8192 that gradient is a few
hundred, so under O2 the gradient w.r.t. ``Gain``'s input passes 65504 and is
inf, although the gradient arriving at its output is finite. Every step's
gradients are non-finite and the static scaler skips every update: the
"skipped for overflow" failure, which only a backward hook can place.
"""

from __future__ import annotations

import numpy as np
from mindspore import nn
from mindspore.common.initializer import Normal

from ampsweep.jobs import Workload


class Gain(nn.Cell):
    """A fixed gain, as a user might write to undo a small initialisation."""

    def __init__(self, factor: float = 1000.0) -> None:
        super().__init__()
        self.factor = factor

    def construct(self, x):
        return x * self.factor


class GainNet(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Dense(8, 16, weight_init=Normal(1e-3), bias_init="zeros")
        self.gain = Gain()
        self.act = nn.Tanh()
        self.fc2 = nn.Dense(16, 3)

    def construct(self, x):
        return self.fc2(self.act(self.gain(self.fc1(x))))


def _batches(seed: int):
    rng = np.random.default_rng(seed)
    while True:
        y = rng.integers(0, 3, 16)
        x = rng.normal(0, 1, (16, 8)).astype(np.float32)
        yield x, y.astype(np.int32)


def make(seed: int) -> Workload:
    return Workload(
        network=GainNet(),
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=lambda params: nn.SGD(params, learning_rate=1e-2),
        batches=_batches(seed),
    )
