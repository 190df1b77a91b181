"""A tiny workload with a Cell that refuses float32: black-listing it cannot be applied.

``Stubborn.to_float`` raises, as a Cell built on an op with only a float16
kernel might: the name resolves and an instance exists, so the plan accepts
it, and only the cast (``keep_in_float32``) finds out.
"""

from __future__ import annotations

import numpy as np
from mindspore import nn
from mindspore.common import dtype as mstype

from ampsweep.jobs import Workload


class Stubborn(nn.Cell):
    """Scales its input; cannot be kept in float32."""

    def construct(self, x):
        return x * 1.0

    def to_float(self, dst_type):
        if dst_type == mstype.float32:
            raise RuntimeError("Stubborn has a float16 kernel only")
        return super().to_float(dst_type)


class StubbornNet(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Dense(8, 16)
        self.odd = Stubborn()
        self.act = nn.Tanh()
        self.fc2 = nn.Dense(16, 3)

    def construct(self, x):
        return self.fc2(self.act(self.odd(self.fc1(x))))


def _batches(seed: int):
    rng = np.random.default_rng(seed)
    while True:
        y = rng.integers(0, 3, 16)
        x = rng.normal(0, 1, (16, 8)).astype(np.float32) + y[:, None].astype(np.float32)
        yield x, y.astype(np.int32)


def make(seed: int) -> Workload:
    return Workload(
        network=StubbornNet(),
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=lambda params: nn.SGD(params, learning_rate=0.05),
        batches=_batches(seed),
    )
