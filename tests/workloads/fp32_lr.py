"""A regression whose learning rate is past SGD's stability limit: FP32 itself diverges.

Plain SGD on a quadratic loss is stable only while the learning rate is below
2 / (the largest curvature of the loss). Here the curvature of the mean squared
error on unit-variance inputs is about 2 to 3, so ``lr=0.1`` (the default)
learns and ``lr=1.0`` overshoots: each step multiplies the error along the
steepest direction by about ``|1 - lr x curvature|`` > 1, the weights and the
prediction grow geometrically, and after about a hundred steps the squared
error inside ``nn.MSELoss`` passes float32's 3.4e38. No float16 is involved:
FP32 breaks, and mixed precision only breaks sooner (a float16 Dense output
passes 65504 first). Clipping the global gradient norm bounds every step to
``lr x clip``, so a clipped run stays finite where the unclipped one breaks.
"""

from __future__ import annotations

import numpy as np
from mindspore import nn

from ampsweep.jobs import Workload

FEATURES = 8


def _batches(seed: int):
    rng = np.random.default_rng(seed)
    w = rng.normal(0.0, 1.0, (FEATURES, 1))
    while True:
        x = rng.normal(0.0, 1.0, (32, FEATURES))
        y = x @ w + 0.1 * rng.normal(0.0, 1.0, (32, 1))
        yield x.astype(np.float32), y.astype(np.float32)


def make(seed: int, lr: float = 0.1) -> Workload:
    return Workload(
        network=nn.Dense(FEATURES, 1),
        loss_fn=nn.MSELoss(),
        optimizer=lambda params: nn.SGD(params, learning_rate=lr),
        batches=_batches(seed),
    )
