"""A regression whose float16 square overflows after a few dozen steps: a quick NaN for ``Watch`` tests.

``Magnitude`` computes ``sqrt(z * z + 1)``: its output is about ``|z|``, well
inside float16's range, but ``z * z`` overflows float16 (65504) once
``|z| > 256``. The target is 1,000, so Adam (lr 1.0, five parameters feeding
``z``) drives ``z`` up by about 5 per step: under O2 the loss turns inf at
about step 50, while FP32, and O2 with ``Magnitude`` kept in FP32, train on.
Batch ``n`` depends only on ``(seed, n)``, so ``start_step`` positions the data.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from mindspore import nn, ops

from ampsweep.jobs import Workload

TARGET = 1000.0


class Magnitude(nn.Cell):
    """``sqrt(z * z + 1)``: bounded output, an intermediate square that is not."""

    def construct(self, z):
        return ops.sqrt(z * z + 1.0)


class Regressor(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Dense(4, 1)
        self.magnitude = Magnitude()

    def construct(self, x):
        return self.magnitude(self.fc1(x))


def batch_at(seed: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([seed, step])
    x = (1.0 + 0.01 * rng.normal(size=(8, 4))).astype(np.float32)
    return x, np.full((8, 1), TARGET, np.float32)


def batches(seed: int, start_step: int = 0) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    step = start_step
    while True:
        yield batch_at(seed, step)
        step += 1


def make(seed: int, learning_rate: float = 1.0, start_step: int = 0) -> Workload:
    return Workload(
        network=Regressor(),
        loss_fn=nn.MSELoss(),
        optimizer=lambda params: nn.Adam(params, learning_rate=learning_rate),
        batches=batches(seed, start_step),
    )
