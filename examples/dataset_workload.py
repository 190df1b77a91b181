"""A workload fed by a ``mindspore.dataset`` pipeline, the way most MindSpore users train.

The pipeline is a ``GeneratorDataset`` with a ``map`` (feature scaling) and
``batch``; one epoch holds ``rows // batch`` batches, and ampsweep repeats it
over as many epochs as the spec's ``steps`` needs, reshuffling each epoch.

    ampsweep run examples/dataset.yaml --out runs
"""

from __future__ import annotations

import numpy as np
from mindspore import dataset as ds
from mindspore import nn

from ampsweep.jobs import Workload


class Classifier(nn.Cell):
    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.fc1 = nn.Dense(features, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Dense(hidden, classes)

    def construct(self, x):
        return self.fc2(self.act(self.fc1(x)))


def _pipeline(seed: int, rows: int, batch: int, features: int, classes: int) -> ds.Dataset:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, rows).astype(np.int32)
    centres = rng.normal(0, 1, (classes, features)).astype(np.float32)
    inputs = (centres[labels] + rng.normal(0, 0.5, (rows, features))).astype(np.float32)

    def rows_of():
        yield from zip(inputs, labels)

    ds.config.set_seed(seed)  # the epoch shuffles are part of the trial's seed
    pipeline = ds.GeneratorDataset(
        rows_of, column_names=["x", "y"], shuffle=True, python_multiprocessing=False
    )
    pipeline = pipeline.map(operations=lambda x: (x * 0.5).astype(np.float32), input_columns=["x"])
    return pipeline.batch(batch, drop_remainder=True)


def make(seed: int, rows: int = 96, batch: int = 16, features: int = 8, hidden: int = 32) -> Workload:
    classes = 3
    return Workload(
        network=Classifier(features, hidden, classes),
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=lambda params: nn.Adam(params, learning_rate=1e-2),
        batches=_pipeline(seed, rows, batch, features, classes),
        target_loss=0.5,
    )
