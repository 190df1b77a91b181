"""Attention whose hand-written softmax overflows float16 inside itself from the first step.

``q = Dense(x)``, ``k = Dense(x)``, scores ``q k^T``, then ``NaiveSoftmax``:
``exp(s) / sum(exp(s))`` without subtracting the row max. The inputs are
scaled (``input_scale``) so the scores pass 12 at once: ``exp`` passes 65504
(ln 65504 = 11.1) inside the softmax while its output stays <= 1 and every
Dense's output stays small. ``style`` picks how the softmax reaches ``exp``:
``function`` (``ops.exp``), ``method`` (``z.exp()``) or ``primitive``
(``self.exp = ops.Exp()``), so a profile must see the overflow in all three.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from mindspore import Tensor, nn, ops

from ampsweep.jobs import Workload

TOKENS, WIDTH, CLASSES = 6, 8, 4


class NaiveSoftmax(nn.Cell):
    """``exp(z) / sum(exp(z))`` as the formula reads (no max subtracted)."""

    def __init__(self, style: str = "function") -> None:
        super().__init__()
        self.style = style
        self.exp = ops.Exp()
        self.reduce_sum = ops.ReduceSum(keep_dims=True)

    def construct(self, z: Tensor) -> Tensor:
        if self.style == "primitive":
            e = self.exp(z)
            return e / self.reduce_sum(e, -1)
        if self.style == "method":
            e = z.exp()
            return e / e.sum(-1, keepdims=True)
        e = ops.exp(z)
        return e / ops.sum(e, -1, keepdim=True)


class TinyAttention(nn.Cell):
    """One attention head over ``TOKENS`` tokens, mean-pooled into a classifier."""

    def __init__(self, style: str) -> None:
        super().__init__()
        self.query = nn.Dense(WIDTH, WIDTH)
        self.key = nn.Dense(WIDTH, WIDTH)
        self.value = nn.Dense(WIDTH, WIDTH)
        self.softmax = NaiveSoftmax(style)
        self.head = nn.Dense(WIDTH, CLASSES)

    def construct(self, x: Tensor) -> Tensor:
        scores = ops.matmul(self.query(x), self.key(x).swapaxes(-1, -2))
        mixed = ops.matmul(self.softmax(scores), self.value(x))
        return self.head(mixed.mean(1))


def batches(seed: int, batch_size: int, input_scale: float) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    while True:
        labels = rng.integers(0, CLASSES, batch_size)
        x = rng.normal(0.0, 1.0, (batch_size, TOKENS, WIDTH)) * input_scale
        x[:, :, :CLASSES] += np.eye(CLASSES)[labels][:, None, :] * input_scale
        yield x.astype(np.float32), labels.astype(np.int32)


def make(seed: int, style: str = "function", input_scale: float = 2.0, batch_size: int = 16) -> Workload:
    """The workload factory (see the module docstring)."""
    return Workload(
        network=TinyAttention(style),
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=lambda params: nn.Adam(params, learning_rate=1e-3),
        batches=batches(seed, batch_size, input_scale),
    )
