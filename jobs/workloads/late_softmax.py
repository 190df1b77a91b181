"""A classifier that trains normally, then turns NaN late under O2.

This is the report "trains normally, then after a few epochs the loss suddenly
turns NaN". The model is a small classifier: ``Dense -> nn.LayerNorm -> ReLU
-> Dense``, ending in a hand-written softmax ``ExpSoftmax`` that computes
``exp(z) / sum(exp(z))`` as the formula reads, without subtracting the row max.
The network outputs probabilities. The loss is a hand-written ``NLLLoss``,
``mean(-log(p[label] + eps))``. It lives outside the network, so with the
default ``loss_placement: outside`` it runs in float32. Training uses Adam at
lr 1e-3. The data are 10 Gaussian clusters in 16 dimensions with unit noise.
Each seed's centres are orthonormal directions scaled by ``separation``, so
every seed gets the same geometry up to a rotation.

Why float16 breaks late, with no injected NaN and no branch on the AMP level:
the clusters are nearly separable. The loss falls below 0.05 within ~150
steps, and after that cross-entropy still rewards larger margins. Adam's
normalised steps do not shrink with the gradient, so the logits keep growing,
slowly. In a plain FP32 training loop the largest logit in a batch (the
maximum over each 100-step window) is about 6 at step 100, 9 at step 600, 10
to 11 at step 1,000 and 12 at step 1,900. O2 casts ``ExpSoftmax`` to float16 because it is not on
MindSpore's default black list (``nn.LayerNorm`` is). In float16 ``exp``
overflows past ln(65504) = 11.09, so ``exp(z)`` is ``inf``, ``inf / inf`` is
NaN, and the loss is NaN from then on. FP32's ``exp`` only overflows past
88.7, so FP32 trains on. The softmax's output is at most 1 all along: its
maximum never shows the danger coming.

Measured with ``run_trial`` (MindSpore 2.10, CPU; O2, float16, no loss
scaling, ``abort_after`` 10):

- O2, no black list, no clip: first NaN at step 1,417 / 1,506 / 1,582 for
  seeds 0 / 1 / 2 (seeds 3 / 4 / 5: 1,615 / 1,716 / 1,552).
- O0, and O2 with ``black_list=[ExpSoftmax]``: finite through 2,000 steps
  for seeds 0-2, final loss 0.003 to 0.005. O0's windowed loss reaches
  ``target_loss`` (0.05) at steps 124 to 143.
- O2 with ``black_list=[ExpSoftmax, LayerNorm]``: the same as
  ``[ExpSoftmax]``, because LayerNorm is already in FP32 at O2.
- O2 with ``clip=1.0`` and no black list: NaN *earlier*, at steps 1,029 /
  1,105 / 1,002. Clipping scales the gradient, and Adam's normalised update
  mostly undoes that; it does not bound the logits.

So the answer is the black list. (In the model's own code the fix is
``ops.softmax``, which subtracts the row max.) With the default sizes a step
takes a few milliseconds on a CPU.

``start_step``: batch ``n`` is drawn from its own generator, seeded with
``(seed, n)``. A factory called with ``start_step=N`` therefore yields, first,
the batch that a run from step 0 trains on at step N. A trial forked from an
FP32 prefix at step N sees the same data as a run from step 0 from then on.
Every seed's first NaN is past step 1,400, so a fork at step 1,200 comes
before it.
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
    """The workload factory (see the module docstring for what fails and why)."""
    return Workload(
        network=SoftmaxClassifier(FEATURES, hidden, CLASSES),
        loss_fn=NLLLoss(),
        optimizer=lambda params: nn.Adam(params, learning_rate=learning_rate),
        batches=batches(seed, batch_size, separation, start_step),
        target_loss=0.05,
    )
