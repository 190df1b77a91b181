"""A small classifier that reproduces the reported AMP failure.

The model is what many users write for tabular data: two hidden layers, each
followed by a hand-written batch normalization ``CustomNorm``, GELU, and
``nn.SoftmaxCrossEntropyWithLogits``. One input column is a clock (a counter
that grows while the data stream runs, as timestamps and cumulative counts do
in real tables), fed in raw.

Why float16 breaks, with no injected NaN and no branch on the AMP level:
``CustomNorm`` computes the variance in one pass, ``E[x^2] - E[x]^2``. The
clock gives every hidden unit a large common offset across the batch that
grows with the step. In float32 the subtraction keeps about seven digits and
the variance stays right. In float16 (O2 casts ``CustomNorm`` because it is
not on MindSpore's default black list, which only knows ``nn.BatchNorm*`` and
``nn.LayerNorm``), ``E[x^2]`` keeps three digits: once the offset is ~45x the
spread the difference is rounding noise, often negative, and ``sqrt`` of it
is NaN; past an offset of 256 the squares overflow 65504 and ``inf - inf`` is
NaN as well. GELU passes the NaN on (ReLU would hide it as zeros), the loss
turns NaN after a few dozen steps and stays there.

Keeping ``CustomNorm`` in FP32 (``black_list=[CustomNorm]``) fixes it. The
gradient norm then sits mostly between 1 and 5, so a clip threshold of 1.0
fires on nearly every step and 5.0 almost never.
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
    """The workload factory (see the module docstring for what fails and why)."""
    return Workload(
        network=Classifier(FEATURES + 1, hidden, CLASSES),
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=lambda params: nn.Adam(params, learning_rate=learning_rate),
        batches=batches(seed, batch_size, feature_scale, clock_rate),
        target_loss=1.0,
    )
