"""A Cell whose float16 forward output overflows at the first step: ``exp`` of a sharpened score.

``Sharpen`` computes ``exp(3 * x)``; the first layer's outputs reach ~5, so
``exp`` sees ~15 and float16 (which ends at 65504, ``exp(11.09)``) returns
inf under O2, while float32 is fine. Used to check that localization names
``sharpen`` in the forward pass, with a finite FP32 magnitude next to it.

``saturate=True`` simulates a chip that saturates (Ascend 910A-era, or INF/NaN
mode off): every float16 result is clamped to ±65504 and a NaN becomes 0, so
nothing is ever non-finite and only the value at the maximum shows the overflow.
"""

from __future__ import annotations

import numpy as np
from mindspore import nn, ops
from mindspore.common import dtype as mstype

from ampsweep.jobs import Workload


def saturating(x, on: bool):
    """What a saturating chip returns for a float16 result: ±65504 for an overflow, 0 for a NaN."""
    if not on or x.dtype != mstype.float16:
        return x
    x = ops.select(ops.isnan(x), ops.zeros_like(x), x)
    return ops.clamp(x, -65504.0, 65504.0)


class Sharpen(nn.Cell):
    """``exp(temperature * x)``, with no max subtraction."""

    def __init__(self, temperature: float = 3.0, saturate: bool = False) -> None:
        super().__init__()
        self.temperature = temperature
        self.saturate = saturate

    def construct(self, x):
        return saturating(ops.exp(x * self.temperature), self.saturate)


class OverflowNet(nn.Cell):
    def __init__(self, saturate: bool = False) -> None:
        super().__init__()
        self.fc1 = nn.Dense(8, 16)
        self.sharpen = Sharpen(saturate=saturate)
        self.fc2 = nn.Dense(16, 3)
        self.saturate = saturate

    def construct(self, x):
        return saturating(self.fc2(self.sharpen(self.fc1(x))), self.saturate)


def _batches(seed: int):
    rng = np.random.default_rng(seed)
    while True:
        y = rng.integers(0, 3, 16)
        x = rng.normal(0, 4, (16, 8)).astype(np.float32)
        yield x, y.astype(np.int32)


def make(seed: int, saturate: bool = False) -> Workload:
    return Workload(
        network=OverflowNet(saturate),
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=lambda params: nn.SGD(params, learning_rate=1e-3),
        batches=_batches(seed),
    )
