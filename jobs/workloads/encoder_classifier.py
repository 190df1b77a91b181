"""A classifier built from MindSpore's own ``nn.TransformerEncoderLayer``, whose attention scores overflow float16.

The scores grow with the square of the unnormalised input's scale; what fails,
why, and the measurements: docs/workloads.md (``encoder_classifier``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from mindspore import Tensor, nn

from ampsweep.jobs import Workload


class EncoderClassifier(nn.Cell):
    """Features ``[batch, time, features]`` -> class logits ``[batch, classes]``."""

    def __init__(self, features: int, width: int, heads: int, feedforward: int, classes: int) -> None:
        super().__init__()
        self.embed = nn.Dense(features, width)
        self.encoder = nn.TransformerEncoderLayer(
            d_model=width, nhead=heads, dim_feedforward=feedforward, dropout=0.0, batch_first=True
        )
        self.head = nn.Dense(width, classes)

    def construct(self, x: Tensor) -> Tensor:
        return self.head(self.encoder(self.embed(x)).mean(1))


def batches(
    seed: int, batch_size: int, time_steps: int, features: int, classes: int, scale: float
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Endless deterministic stream of ``(readings [batch, time, features], labels)``.

    Each class has its own mean reading; every time step adds unit Gaussian
    noise; everything is multiplied by ``scale``, the raw unit of the sensors.
    """
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 1.0, (classes, features)).astype(np.float32)
    while True:
        labels = rng.integers(0, classes, batch_size)
        readings = centres[labels][:, None, :] + rng.normal(0.0, 1.0, (batch_size, time_steps, features))
        yield (scale * readings).astype(np.float32), labels.astype(np.int32)


def make(
    seed: int,
    features: int = 16,
    width: int = 32,
    heads: int = 2,
    feedforward: int = 64,
    classes: int = 4,
    time_steps: int = 8,
    batch_size: int = 16,
    scale: float = 300.0,
    learning_rate: float = 1e-3,
) -> Workload:
    """The workload factory (docs/workloads.md says what fails and why)."""
    return Workload(
        network=EncoderClassifier(features, width, heads, feedforward, classes),
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=lambda params: nn.Adam(params, learning_rate=learning_rate),
        batches=batches(seed, batch_size, time_steps, features, classes, scale),
    )
