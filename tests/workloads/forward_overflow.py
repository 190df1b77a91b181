"""A Cell whose float16 forward output overflows at the first step: ``exp`` of a sharpened score.

``Sharpen`` computes ``exp(3 * x)``; the first layer's outputs reach ~5, so
``exp`` sees ~15 and float16 (which ends at 65504, ``exp(11.09)``) returns
inf under O2, while float32 is fine. Used to check that localization names
``sharpen`` in the forward pass, with a finite FP32 magnitude next to it.
"""

from __future__ import annotations

import numpy as np
from mindspore import nn, ops

from ampsweep.jobs import Workload


class Sharpen(nn.Cell):
    """``exp(temperature * x)``, with no max subtraction."""

    def __init__(self, temperature: float = 3.0) -> None:
        super().__init__()
        self.temperature = temperature

    def construct(self, x):
        return ops.exp(x * self.temperature)


class OverflowNet(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Dense(8, 16)
        self.sharpen = Sharpen()
        self.fc2 = nn.Dense(16, 3)

    def construct(self, x):
        return self.fc2(self.sharpen(self.fc1(x)))


def _batches(seed: int):
    rng = np.random.default_rng(seed)
    while True:
        y = rng.integers(0, 3, 16)
        x = rng.normal(0, 4, (16, 8)).astype(np.float32)
        yield x, y.astype(np.int32)


def make(seed: int) -> Workload:
    return Workload(
        network=OverflowNet(),
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=lambda params: nn.SGD(params, learning_rate=1e-3),
        batches=_batches(seed),
    )
