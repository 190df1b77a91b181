"""A small, fast workload for tests; loaded by file path like a user's own model."""

from __future__ import annotations

import time

import numpy as np
from mindspore import nn

from ampsweep.jobs import Workload


class Scaler(nn.Cell):
    """A user-defined Cell, so black-list names from the network itself can be tested."""

    def __init__(self, factor: float = 1.0) -> None:
        super().__init__()
        self.factor = factor

    def construct(self, x):
        return x * self.factor


class TinyNet(nn.Cell):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Dense(8, hidden)
        self.scale = Scaler()
        self.act = nn.Tanh()
        self.fc2 = nn.Dense(hidden, 3)

    def construct(self, x):
        return self.fc2(self.act(self.scale(self.fc1(x))))


def _batches(seed: int, pause_s: float):
    rng = np.random.default_rng(seed)
    while True:
        if pause_s:  # a floor under each step, so a failure test outlasts Ray's failure detection
            time.sleep(pause_s)
        y = rng.integers(0, 3, 16)
        x = rng.normal(0, 1, (16, 8)).astype(np.float32) + y[:, None].astype(np.float32)
        yield x, y.astype(np.int32)


def make(seed: int, hidden: int = 16, lr: float = 0.05, pause_s: float = 0.0) -> Workload:
    return Workload(
        network=TinyNet(hidden),
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=lambda params: nn.SGD(params, learning_rate=lr),
        batches=_batches(seed, pause_s),
        target_loss=0.8,
    )
