"""A stable classifier (MindSpore's ``nn.Dense``, ``nn.LayerNorm``) that suffers a fault numerics did not
cause, injected by the workload itself (no hook in ampsweep):

- ``fault="input"``: seed ``fault_seed``'s batch at step ``fault_step`` holds one ``inf`` in row
  ``fault_row`` (a corrupted sample; on a gang of 2, rows 8-15 are rank 1's): every configuration sees it;
- ``fault="transient"``: the first trial of seed ``fault_seed`` to reach step ``fault_step`` gets one NaN
  in a hidden activation, once in the whole sweep (``marker``: a file that says it happened), like a
  flipped bit on a device: the trial's own replay and its rerun elsewhere are clean;
- ``fault="device"``: a flaky device. On the Ray node that holds the custom resource ``fault_resource``,
  every other run that reaches step ``fault_step`` gets one NaN there, whatever its seed: a trial breaks,
  its exact rerun in the same process is clean, its rerun on another node is clean, and the next trial on
  that node breaks again.

The NaN comes from a Python function run as a MindSpore ``Custom`` op (``pyfunc``), which runs on every
step even under ``jit``. Its counts live in the process's environment, which outlives the module (a
workload file is loaded afresh for each trial).
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from mindspore import nn, ops

from ampsweep.jobs import Workload

FEATURES, HIDDEN, CLASSES, BATCH = 8, 32, 3, 16


def _same(value: Any) -> Any:
    return value


def _through(x: Any, out: Any, dout: Any) -> tuple[Any]:
    return (dout,)


class Fault(nn.Cell):
    """Passes its input through, but for the one call the fault picks."""

    def __init__(self, hit: Any) -> None:
        super().__init__()
        self.op = ops.Custom(hit, out_shape=_same, out_dtype=_same, func_type="pyfunc", bprop=_through)

    def construct(self, x: Any) -> Any:
        return self.op(x)


class Classifier(nn.Cell):
    def __init__(self, hit: Any) -> None:
        super().__init__()
        self.fc1 = nn.Dense(FEATURES, HIDDEN)
        self.fault = Fault(hit)
        self.norm = nn.LayerNorm((HIDDEN,))
        self.act = nn.Tanh()
        self.head = nn.Dense(HIDDEN, CLASSES)

    def construct(self, x: Any) -> Any:
        return self.head(self.act(self.norm(self.fault(self.fc1(x)))))


def _key(fault: str, seed: int, marker: str) -> str:
    """The environment variable that counts the op's calls: per process and per marker (a Ray worker
    inherits the environment of the test that started Ray); a device fault's counts every seed's."""
    return f"AMPSWEEP_TEST_FAULT_{fault}_{'any' if fault == 'device' else seed}_{zlib.crc32(marker.encode())}"


def _on_node_with(resource: str) -> bool:
    """Whether this process runs on a live Ray node that holds ``resource``."""
    import ray

    here = ray.get_runtime_context().get_node_id()
    return any(
        node["Alive"] and node["NodeID"] == here and resource in node["Resources"] for node in ray.nodes()
    )


def _hit(fault: str, seed: int, fault_seed: int, fault_step: int, marker: str) -> Any:
    """The Python function the ``Custom`` op runs: the step's activations, NaN where the fault strikes."""
    key = _key(fault, seed, marker)

    def hit(x: np.ndarray) -> np.ndarray:
        calls = int(os.environ.get(key, "0")) + 1
        os.environ[key] = str(calls)
        strike = fault != "none" and seed == fault_seed and calls == fault_step + 1
        if fault == "device" and calls == fault_step + 1:  # this run reached the step: every other one breaks
            arrivals = int(os.environ.get(f"{key}_arrivals", "0")) + 1
            os.environ[f"{key}_arrivals"] = str(arrivals)
            strike = arrivals % 2 == 1
        if fault == "transient":
            strike = strike and not Path(marker).exists()
            if strike:
                Path(marker).touch()
        out = x.copy()
        if strike:
            out.flat[0] = np.nan
        return out

    return hit


def _batches(seed: int, poisoned: int | None, row: int):
    rng = np.random.default_rng(seed)
    step = 0
    while True:
        y = rng.integers(0, CLASSES, BATCH)
        x = rng.normal(0, 1, (BATCH, FEATURES)).astype(np.float32) + y[:, None].astype(np.float32)
        if step == poisoned:
            x[row, 0] = np.inf
        step += 1
        yield x, y.astype(np.int32)


def make(
    seed: int,
    fault: str = "none",
    fault_seed: int = 1,
    fault_step: int = 20,
    marker: str = "",
    fault_row: int = 3,
    fault_resource: str = "faulty_device",
) -> Workload:
    if fault == "device":
        os.environ[_key(fault, seed, marker)] = "0"  # a run starts: the trial or a rerun of it
        if not _on_node_with(fault_resource):
            fault = "none"
    hit = _hit(fault, seed, fault_seed, fault_step, marker)
    poisoned = fault_step if fault == "input" and seed == fault_seed else None
    return Workload(
        network=Classifier(hit),
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=lambda params: nn.Adam(params, learning_rate=1e-2),
        batches=_batches(seed, poisoned, fault_row),
        target_loss=0.6,
    )
