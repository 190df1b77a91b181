"""A classifier that fails *silently* under O2: finite loss, stuck at chance.

The model is what a user writes for sensor data logged in raw units: the
features arrive in the thousands (pressures in Pa, counts, byte sizes), and a
hand-written layer normalization ``FeatureNorm`` after the first ``Dense`` is
meant to bring them to unit scale. It uses the careful two-pass formula,
``mean((x - mean(x))**2)``, not the one-pass ``E[x^2] - E[x]^2`` that breaks
seed_repro; then ``Dense -> GELU -> Dense`` and
``nn.SoftmaxCrossEntropyWithLogits``.

Why float16 fails, with no injected NaN and no branch on the AMP level: the
first layer's outputs spread over several hundred, so their squared deviations
are ~1e5 to 1e6. float16 ends at 65504: the squares overflow to ``inf``, the
variance of every row is ``inf``, ``sqrt(inf)`` is ``inf`` and ``x / inf`` is
exactly 0. ``FeatureNorm``'s output is ``0 * gamma + beta``, the same for
every example: no NaN anywhere, the loss stays finite, and the network can
only learn the class prior, so the loss sits at ``ln 10 = 2.30``. The
gradient through a division by ``inf`` is exactly 0 too, so the first layer
never moves to a range where the squares would fit. O2 casts ``FeatureNorm``
because MindSpore's default black list only knows ``nn.BatchNorm*`` and
``nn.LayerNorm``. In FP32 the squares are harmless and the model learns to a
loss well below 1 within ~100 steps.

Keeping ``FeatureNorm`` in FP32 (``black_list=[FeatureNorm]``) fixes it; its
output is unit-scale and float16 carries it fine from there. (In the model's
own code the fix is to use ``nn.LayerNorm``, which O2 keeps in FP32, or to
scale the inputs.)
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
    """The workload factory (see the module docstring for what fails and why)."""
    return Workload(
        network=SensorNet(FEATURES, hidden, CLASSES),
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=lambda params: nn.Adam(params, learning_rate=learning_rate),
        batches=batches(seed, batch_size, feature_scale),
        target_loss=1.0,
    )
