"""A linear model with a closed-form gradient, for checking the trainer's arithmetic against NumPy."""

from __future__ import annotations

import numpy as np
from mindspore import nn

from ampsweep.jobs import Workload

RNG_SEED = 7


def batch(n: int = 8) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(RNG_SEED)
    return rng.normal(size=(n, 4)).astype(np.float32), rng.normal(size=(n, 3)).astype(np.float32) * 5


def make(seed: int, lr: float = 1.0) -> Workload:
    x, y = batch()
    return Workload(
        network=nn.Dense(4, 3, has_bias=False),
        loss_fn=nn.MSELoss(),
        optimizer=lambda params: nn.SGD(params, learning_rate=lr),
        batches=iter([(x, y)] * 1000),
    )


def numpy_gradient(weight: np.ndarray) -> np.ndarray:
    """d/dW of mean((x W^T - y)^2) over all elements."""
    x, y = batch()
    x64, y64, w64 = x.astype(np.float64), y.astype(np.float64), weight.astype(np.float64)
    residual = x64 @ w64.T - y64
    return 2.0 / residual.size * residual.T @ x64
