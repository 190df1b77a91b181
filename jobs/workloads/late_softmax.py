"""A classifier that trains normally, then turns NaN late under O2.

Its hand-written softmax's ``exp`` overflows float16 once the slowly growing logits
pass 11.09, after about 1,400 steps; what fails, why, and the measurements:
docs/workloads.md (``late_softmax``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from mindspore import Tensor, nn, ops

from ampsweep.jobs import Workload

FEATURES = 16
CLASSES = 10
# distinct entropy for the two streams a seed draws: the cluster centres and each step's batch
_CENTRES, _BATCH = 0, 1


class ExpSoftmax(nn.Cell):
    """Softmax as the formula reads: ``exp(z) / sum(exp(z))``, without subtracting the max."""

    def construct(self, z: Tensor) -> Tensor:
        e = ops.exp(z)
        return e / e.sum(-1, keepdims=True)


class NLLLoss(nn.Cell):
    """Negative log-likelihood of the label's probability: ``mean(-log(p[label] + eps))``."""

    def __init__(self, eps: float = 1e-7) -> None:
        super().__init__()
        self.eps = eps

    def construct(self, probs: Tensor, label: Tensor) -> Tensor:
        picked = ops.gather_elements(probs, 1, label.reshape(-1, 1))
        return -ops.log(picked + self.eps).mean()


class SoftmaxClassifier(nn.Cell):
    """Dense -> LayerNorm -> ReLU -> Dense -> ExpSoftmax: it outputs probabilities."""

    def __init__(self, inputs: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.fc1 = nn.Dense(inputs, hidden)
        self.norm = nn.LayerNorm((hidden,))
        self.act = nn.ReLU()
        self.head = nn.Dense(hidden, classes)
        self.softmax = ExpSoftmax()

    def construct(self, x: Tensor) -> Tensor:
        return self.softmax(self.head(self.act(self.norm(self.fc1(x)))))


def centres(seed: int, separation: float) -> np.ndarray:
    """The seed's class centres: orthonormal directions times ``separation`` (a random rotation per seed)."""
    rng = np.random.default_rng([_CENTRES, seed])
    q, _ = np.linalg.qr(rng.normal(0.0, 1.0, (FEATURES, CLASSES)))
    return (q.T * separation).astype(np.float32)


def batch_at(seed: int, step: int, centre: np.ndarray, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The batch of global step ``step``: drawn from its own generator, so any step is O(1) to reach."""
    rng = np.random.default_rng([_BATCH, seed, step])
    labels = rng.integers(0, CLASSES, batch_size)
    x = centre[labels] + rng.normal(0.0, 1.0, (batch_size, FEATURES))
    return x.astype(np.float32), labels.astype(np.int32)


def batches(
    seed: int, batch_size: int, separation: float, start_step: int = 0
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Endless deterministic stream of Gaussian clusters, from global step ``start_step`` on."""
    centre = centres(seed, separation)
    step = start_step
    while True:
        yield batch_at(seed, step, centre, batch_size)
        step += 1


def make(
    seed: int,
    hidden: int = 256,
    batch_size: int = 32,
    learning_rate: float = 1e-3,
    separation: float = 5.25,
    start_step: int = 0,
) -> Workload:
    """The workload factory (docs/workloads.md says what fails and why)."""
    return Workload(
        network=SoftmaxClassifier(FEATURES, hidden, CLASSES),
        loss_fn=NLLLoss(),
        optimizer=lambda params: nn.Adam(params, learning_rate=learning_rate),
        batches=batches(seed, batch_size, separation, start_step),
        target_loss=0.05,
    )
