"""Attention whose scores overflow float16 in a functional op, then pass through a child Cell.

As in mindcv's ``Attention`` (``q_matmul_k``, softmax, then its ``attn_drop``
Dropout): ``ScoredAttention`` computes ``q k^T`` with ``ops.matmul`` on
scaled inputs, so under O2 the scores pass 65504 and the softmax is NaN; the
first Cell to *report* a NaN is the child that merely received it
(``after``, an ``nn.Identity`` in the Dropout's place), then
``ScoredAttention`` itself. Keeping ``ScoredAttention`` in FP32 fixes it;
keeping ``Identity`` in FP32 cannot.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from mindspore import Tensor, nn, ops

from ampsweep.jobs import Workload

TOKENS, WIDTH, CLASSES = 6, 8, 4


class ScoredAttention(nn.Cell):
    """One head: Dense projections, functional scores and softmax, then a child Cell on the weights."""

    def __init__(self) -> None:
        super().__init__()
        self.query = nn.Dense(WIDTH, WIDTH)
        self.key = nn.Dense(WIDTH, WIDTH)
        self.value = nn.Dense(WIDTH, WIDTH)
        self.after = nn.Identity()

    def construct(self, x: Tensor) -> Tensor:
        scores = ops.matmul(self.query(x), self.key(x).swapaxes(-1, -2))
        weights = self.after(ops.softmax(scores.astype(np.float32), -1).astype(scores.dtype))
        return ops.matmul(weights, self.value(x))


class Classifier(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.attention = ScoredAttention()
        self.head = nn.Dense(WIDTH, CLASSES)

    def construct(self, x: Tensor) -> Tensor:
        return self.head(self.attention(x).mean(1))


def batches(seed: int, batch_size: int, input_scale: float) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    while True:
        labels = rng.integers(0, CLASSES, batch_size)
        x = rng.normal(0.0, 1.0, (batch_size, TOKENS, WIDTH)) * input_scale
        yield x.astype(np.float32), labels.astype(np.int32)


def make(seed: int, input_scale: float = 300.0, batch_size: int = 8) -> Workload:
    """The workload factory (see the module docstring)."""
    return Workload(
        network=Classifier(),
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=lambda params: nn.Adam(params, learning_rate=1e-3),
        batches=batches(seed, batch_size, input_scale),
    )
