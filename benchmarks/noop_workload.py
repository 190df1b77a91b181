"""A workload that does as good as nothing, so a sweep of it measures the launcher alone.

One Dense(2, 1) layer, one fixed batch of four rows: a trial of it is a graph
compile and a step, both of which the trial reports in its own ``wall_s`` and
the launcher benchmark subtracts. It is a file (not a test fixture) so the
spec can name it by path, the way users name their own workloads.
"""

from __future__ import annotations

import itertools

import numpy as np
from mindspore import nn

from ampsweep.jobs import Workload


def make(seed: int) -> Workload:
    """The factory a spec names as ``benchmarks/noop_workload.py:make``."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(4, 2)).astype(np.float32)
    y = rng.normal(size=(4, 1)).astype(np.float32)
    return Workload(
        network=nn.Dense(2, 1),
        loss_fn=nn.MSELoss(),
        optimizer=lambda params: nn.SGD(params, learning_rate=0.01),
        batches=itertools.repeat((x, y)),
    )
