"""A classifier built from MindSpore's own ``nn.TransformerEncoderLayer``, whose attention scores overflow float16.

The model is what a user writes for sequences of sensor readings: a
``nn.Dense`` embedding of each time step's features, one
``nn.TransformerEncoderLayer`` (post-norm, ``batch_first``, no dropout, with
``nn.MultiheadAttention`` inside), a mean over time and a ``nn.Dense`` head,
trained with ``nn.SoftmaxCrossEntropyWithLogits`` and Adam. The features are
fed unnormalised, in the hundreds (``scale``), as raw sensor readings often are.
Every Cell is MindSpore's; nothing of ours runs inside the network.

Why float16 breaks, with no injected NaN and no branch on the AMP level:
each layer before the attention is linear in the input's scale, so their
outputs stay far inside float16's range. The attention scores ``q·k`` are
products of two such projections: they grow with the square of the scale.
At ``scale=300`` they pass 65504 in float16 on the first batch, the softmax
of ``inf`` is NaN, and under O2 the loss is NaN from step 0 on every seed
(measured 2026-12-06, MindSpore 2.10, CPU: seeds 0, 1, 2; the threshold is
steep: at ``scale=170`` the first NaN came at steps 50 / 275 / 66, at 260
on step 0). FP32 trains (loss 1.2-1.5 → below 0.01 in 300 steps).

The minimal answer is one MindSpore class: keeping ``MultiheadAttention``
in FP32 trains under O2 and O3 on every seed. Keeping the whole
``TransformerEncoderLayer`` in FP32 trains too, but runs its feed-forward
Dense layers in FP32 for nothing. ``[Dense]`` does not help:
``MultiheadAttention`` computes its projections from ``in_proj_weight`` and
``out_proj.weight`` itself, without calling a Dense. ``[LayerNorm]`` does not
help either (it is on O2's default black list already). O1 trains, because
its rewrite casts only white-listed Cells and leaves the attention's
functional matmuls in float32.
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
    """The workload factory (see the module docstring for what fails and why)."""
    return Workload(
        network=EncoderClassifier(features, width, heads, feedforward, classes),
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=lambda params: nn.Adam(params, learning_rate=learning_rate),
        batches=batches(seed, batch_size, time_steps, features, classes, scale),
    )
