"""Self-attention (``nn.MultiheadAttention``) whose float16 overflow starts only in some rows of each batch.

A classifier over ``TOKENS`` readings of ``WIDTH`` features: MindSpore's own
``nn.MultiheadAttention``, mean-pooled, normalized (``nn.LayerNorm``, so the
logits stay moderate however large the readings) into a ``Dense`` head. The readings of
the rows that ``hot`` names are ``scale`` times larger: their attention scores
pass float16's range inside the attention under O2, while the other rows stay
small. With ``hot="second_half"`` the overflow starts only in the second half
of each global batch: on a gang of 2 devices, only in rank 1's part. With
``ramp`` the hot rows grow from 1x to ``scale`` over that many steps, so the
overflow comes some steps in rather than at once.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from mindspore import Tensor, nn

from ampsweep.jobs import Workload

TOKENS, WIDTH, HEADS, CLASSES = 4, 8, 2, 4


class Classifier(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(WIDTH, HEADS, batch_first=True)
        self.norm = nn.LayerNorm((WIDTH,))
        self.head = nn.Dense(WIDTH, CLASSES)

    def construct(self, x: Tensor) -> Tensor:
        mixed, _ = self.attn(x, x, x)
        return self.head(self.norm(mixed.mean(1)))


def batches(
    seed: int, batch_size: int, scale: float, hot: str, ramp: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    rows = slice(batch_size // 2, None) if hot == "second_half" else slice(None)
    step = 0
    while True:
        labels = rng.integers(0, CLASSES, batch_size)
        x = rng.normal(0.0, 1.0, (batch_size, TOKENS, WIDTH))
        x[:, :, :CLASSES] += np.eye(CLASSES)[labels][:, None, :]
        x[rows] *= scale if step >= ramp else 1.0 + (scale - 1.0) * step / ramp
        step += 1
        yield x.astype(np.float32), labels.astype(np.int32)


def make(
    seed: int, scale: float = 300.0, hot: str = "second_half", batch_size: int = 8, ramp: int = 0
) -> Workload:
    """The workload factory (see the module docstring)."""
    return Workload(
        network=Classifier(),
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=lambda params: nn.Adam(params, learning_rate=1e-3),
        batches=batches(seed, batch_size, scale, hot, ramp),
    )
