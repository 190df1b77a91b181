"""An attention whose softmax dtype is a factory argument, as mindformers' ``softmax_compute_type`` is.

``q = Dense(x)``, ``k = Dense(x)``, scores ``q k^T / 2``, then a hand-written
softmax, ``exp(s) / sum(exp(s))`` without subtracting the row max, computed in
``softmax_dtype``: the scores are cast to it before ``exp`` and the result cast
back, at every AMP level. The inputs are scaled so the scores reach 12-30 on
the first batches: ``exp`` passes float16's 65504 (``ln 65504 = 11.1``), and
stays far inside float32's range (``exp(88)``). So ``softmax_dtype=float16``
breaks at the first step under any AMP level, and ``float32`` trains under O0
and O2 alike: the knob, not a black list, is the fix.
"""

from __future__ import annotations

from collections.abc import Iterator

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from ampsweep.jobs import Workload

TOKENS, WIDTH, CLASSES = 6, 8, 4
DTYPES = {"float16": ms.float16, "float32": ms.float32}


class KnobSoftmax(nn.Cell):
    """``exp(z) / sum(exp(z))`` in the dtype the user's argument names."""

    def __init__(self, compute_type: ms.Type) -> None:
        super().__init__()
        self.compute_type = compute_type

    def construct(self, z: Tensor) -> Tensor:
        e = ops.exp(ops.cast(z, self.compute_type))
        return ops.cast(e / ops.sum(e, -1, keepdim=True), z.dtype)


class KnobAttention(nn.Cell):
    """One attention head over ``TOKENS`` tokens, mean-pooled into a classifier."""

    def __init__(self, softmax_dtype: ms.Type) -> None:
        super().__init__()
        self.query = nn.Dense(WIDTH, WIDTH)
        self.key = nn.Dense(WIDTH, WIDTH)
        self.value = nn.Dense(WIDTH, WIDTH)
        self.softmax = KnobSoftmax(softmax_dtype)
        self.head = nn.Dense(WIDTH, CLASSES)

    def construct(self, x: Tensor) -> Tensor:
        scores = ops.matmul(self.query(x), self.key(x).swapaxes(-1, -2)) * 0.5
        return self.head(ops.matmul(self.softmax(scores), self.value(x)).mean(1))


def batches(seed: int, batch_size: int, input_scale: float) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Noise plus the label's one-hot on every token, scaled: ``(x [batch, tokens, width], labels)``."""
    rng = np.random.default_rng(seed)
    signal = np.pad(np.eye(CLASSES), ((0, 0), (0, WIDTH - CLASSES)))
    while True:
        labels = rng.integers(0, CLASSES, batch_size).astype(np.int32)
        noise = rng.normal(0.0, 1.0, (batch_size, TOKENS, WIDTH))
        yield ((noise + signal[labels][:, None, :]) * input_scale).astype(np.float32), labels


def make(
    seed: int, softmax_dtype: str = "float16", input_scale: float = 3.0, batch_size: int = 16
) -> Workload:
    """The workload factory (see the module docstring)."""
    if softmax_dtype not in DTYPES:
        raise ValueError(f"softmax_dtype {softmax_dtype!r}: allowed {', '.join(DTYPES)}")
    return Workload(
        network=KnobAttention(DTYPES[softmax_dtype]),
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=lambda params: nn.Adam(params, learning_rate=1e-3),
        batches=batches(seed, batch_size, input_scale),
    )
