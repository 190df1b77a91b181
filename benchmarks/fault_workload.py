"""The benchmarks' classifier with a transient fault: one NaN, once, where the benchmark arms it.

An MLP on Gaussian classes (``nn.Dense``, ``nn.LayerNorm``, ``nn.Tanh``: stable in float16) whose first hidden
activation passes through a ``Custom`` op of type ``pyfunc``: a Python function MindSpore runs on
every step, under ``jit`` too. It returns its input unchanged, except once after ``arm`` was called:
the call of step ``fault_step`` (counted from the arming) gets a NaN in its first element, like a
flipped bit on a device. The NaN reaches the loss (no ReLU on the way, whose max with 0 would
drop it) and, through Adam, every parameter: the trial diverges at that step. The trial's exact rerun from its start and its rerun as a whole are clean,
so ampsweep calls it ``not_reproduced``. Nothing branches on the AMP level and ampsweep has no hook
for it: the fault is the workload's own, as in ``tests/workloads/faults.py`` (``fault="transient"``).

The arming lives in the process's environment, which outlives the module: a workload file is loaded
afresh for each trial, and a worker's held graph keeps the ``Custom`` op of the first build.
Used by ``bench_faults``, named by file path.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
from mindspore import nn, ops

from ampsweep.jobs import Workload

FEATURES, HIDDEN, CLASSES = 32, 128, 10
#: the environment variable that holds how many calls are left before the fault strikes
ARMED = "AMPSWEEP_BENCH_FAULT_IN"
#: ... and the one that counts the op's calls: the steps run, whichever build of the op ran them
CALLS = "AMPSWEEP_BENCH_FAULT_CALLS"


def arm(fault_step: int) -> None:
    """Make the next run's step ``fault_step`` (from its start) get one NaN; every later call is clean."""
    os.environ[ARMED] = str(fault_step)


def armed() -> bool:
    """Whether the armed fault has not struck yet."""
    return ARMED in os.environ


def calls() -> int:
    """How many steps (forward passes through the op) this process has run."""
    return int(os.environ.get(CALLS, "0"))


def _same(value: Any) -> Any:
    return value


def _through(x: Any, out: Any, dout: Any) -> tuple[Any]:
    return (dout,)


def _hit(x: np.ndarray) -> np.ndarray:
    """What the ``Custom`` op runs each step: its input, NaN in one element where the armed fault strikes."""
    os.environ[CALLS] = str(calls() + 1)
    out = x.copy()
    left = os.environ.get(ARMED)
    if left is None:
        return out
    if int(left) == 0:
        del os.environ[ARMED]
        out.flat[0] = np.nan
    else:
        os.environ[ARMED] = str(int(left) - 1)
    return out


class Fault(nn.Cell):
    """Passes its input through, but for the one call an armed fault picks."""

    def __init__(self) -> None:
        super().__init__()
        self.op = ops.Custom(_hit, out_shape=_same, out_dtype=_same, func_type="pyfunc", bprop=_through)

    def construct(self, x: Any) -> Any:
        return self.op(x)


class Classifier(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Dense(FEATURES, HIDDEN)
        self.fault = Fault()
        self.norm = nn.LayerNorm((HIDDEN,))
        self.act = nn.Tanh()
        self.fc2 = nn.Dense(HIDDEN, HIDDEN)
        self.head = nn.Dense(HIDDEN, CLASSES)

    def construct(self, x: Any) -> Any:
        hidden = self.act(self.norm(self.fault(self.fc1(x))))
        return self.head(self.act(self.fc2(hidden)))


def batches(seed: int, batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Endless deterministic stream of Gaussian classes."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 1.0, (CLASSES, FEATURES)).astype(np.float32)
    while True:
        labels = rng.integers(0, CLASSES, batch_size)
        x = centers[labels] + 0.5 * rng.normal(0.0, 1.0, (batch_size, FEATURES))
        yield x.astype(np.float32), labels.astype(np.int32)


def make(seed: int, batch_size: int = 64) -> Workload:
    """The factory ``bench_faults`` names as ``benchmarks/fault_workload.py:make``."""
    return Workload(
        network=Classifier(),
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=lambda params: nn.Adam(params, learning_rate=1e-3),
        batches=batches(seed, batch_size),
        target_loss=0.1,
    )
