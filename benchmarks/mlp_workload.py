"""The benchmarks' small MLP, whose hand-written cross entropy overflows float16.

A three-layer ReLU classifier on well-separated Gaussian classes, trained with
Adam: as it learns, the right class's logit grows. The loss is the cross
entropy written the way it often is by hand, ``log(sum(exp(logits))) -
logits[label]``, without subtracting the row maximum first. In float32 that is
harmless at these logit sizes; in float16 ``exp`` overflows past about 11.1
(65504 is the largest finite value), the sum is ``inf``, the loss is ``inf``
and the softmax in its gradient is ``inf / inf = NaN``. With the loss cast
together with the network (``loss_placement: inside``, as a cast
``WithLossCell`` does), O2 with the default black list diverges once the logits pass ~11, and keeping
``NaiveCrossEntropy`` in FP32 (``black_list: [[NaiveCrossEntropy]]``) fixes
it. Nothing is injected and nothing branches on the AMP level.

Used by ``bench_vs_tune`` (the same grid through ampsweep and through Ray Tune)
and named by file path, the way users name their own workloads.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from mindspore import Tensor, nn, ops
from mindspore.common import dtype as mstype

from ampsweep.jobs import Workload

FEATURES = 16
CLASSES = 10


class NaiveCrossEntropy(nn.Cell):
    """Mean cross entropy over a batch, without the max-subtraction that keeps ``exp`` finite."""

    def __init__(self, classes: int = CLASSES) -> None:
        super().__init__()
        self.classes = classes
        self.on = Tensor(1.0, mstype.float32)
        self.off = Tensor(0.0, mstype.float32)

    def construct(self, logits: Tensor, label: Tensor) -> Tensor:
        onehot = ops.one_hot(label, self.classes, self.on, self.off).astype(logits.dtype)
        log_sum_exp = ops.log(ops.exp(logits).sum(-1))
        picked = (logits * onehot).sum(-1)
        return (log_sum_exp - picked).mean()


class MLP(nn.Cell):
    def __init__(self, inputs: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.fc1 = nn.Dense(inputs, hidden)
        self.fc2 = nn.Dense(hidden, hidden)
        self.head = nn.Dense(hidden, classes)
        self.act = nn.ReLU()

    def construct(self, x: Tensor) -> Tensor:
        return self.head(self.act(self.fc2(self.act(self.fc1(x)))))


def batches(seed: int, batch_size: int, scale: float) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Endless deterministic stream of Gaussian classes."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 1.0, (CLASSES, FEATURES)).astype(np.float32)
    while True:
        labels = rng.integers(0, CLASSES, batch_size)
        x = (centers[labels] + 0.5 * rng.normal(0.0, 1.0, (batch_size, FEATURES))) * scale
        yield x.astype(np.float32), labels.astype(np.int32)


def make(
    seed: int, hidden: int = 64, batch_size: int = 16, learning_rate: float = 1e-2, scale: float = 2.0
) -> Workload:
    """The factory a spec names as ``benchmarks/mlp_workload.py:make``."""
    return Workload(
        network=MLP(FEATURES, hidden, CLASSES),
        loss_fn=NaiveCrossEntropy(CLASSES),
        optimizer=lambda params: nn.Adam(params, learning_rate=learning_rate),
        batches=batches(seed, batch_size, scale),
        target_loss=0.1,
    )
