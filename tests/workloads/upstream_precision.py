"""A float16 normalization that stays finite but wrong, and a float32 loss that overflows on its output.

``OnePassNorm`` normalizes each row with the one-pass variance ``E[x^2] -
E[x]^2`` and clamps it at zero, as hand-written code often does. The inputs
sit near 64 with a spread of 0.5: ``x^2`` is about 4096, where float16's
spacing is 4, so in float16 the variance cancels to rounding noise, mostly 0
after the clamp, and the rows come out divided by ``sqrt(eps)``: hundreds of
times FP32's unit-scale output, yet finite. The Dense after it turns that into
logits in the hundreds, and the loss (``loss_placement: outside``, so float32)
returns inf on them: the first non-finite output is the loss's, but precision
was lost in ``OnePassNorm``, which is what localization must name.
"""

from __future__ import annotations

import numpy as np
from mindspore import nn, ops

from ampsweep.jobs import Workload

FEATURES = 16
CLASSES = 4


class OnePassNorm(nn.Cell):
    def __init__(self, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps

    def construct(self, x):
        mean = x.mean(-1, keep_dims=True)
        variance = ops.maximum((x * x).mean(-1, keep_dims=True) - mean * mean, 0.0)
        return (x - mean) / ops.sqrt(variance + self.eps)


class NormNet(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.norm = OnePassNorm()
        self.head = nn.Dense(FEATURES, CLASSES)

    def construct(self, x):
        return self.head(self.norm(x))


def _batches(seed: int):
    rng = np.random.default_rng(seed)
    while True:
        y = rng.integers(0, CLASSES, 16)
        x = 64.0 + 0.5 * rng.standard_normal((16, FEATURES))
        yield x.astype(np.float32), y.astype(np.int32)


def make(seed: int) -> Workload:
    return Workload(
        network=NormNet(),
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=lambda params: nn.SGD(params, learning_rate=0.01),
        batches=_batches(seed),
        target_loss=0.5,
    )
