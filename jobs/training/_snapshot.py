"""Where a forked trial starts: a snapshot of network and optimizer, as a MindSpore checkpoint.

A snapshot is the file ``ModelCheckpoint`` writes during ``Model.train``: the
network's parameters and the optimizer's state under their plain names (for
Adam ``fc1.weight``, ``moment1.fc1.weight``, ``moment2.fc1.weight``,
``beta1_power``, ``beta2_power``, ``global_step``, ...). The FP32 prefix a
sweep runs itself is saved in the same form, so one loader serves both: the
user's own checkpoint and ``start_from: {steps: N}``.

Loading is by name into the workload's freshly built network and optimizer
(FACTS: ``load_param_into_net(net, d)`` then ``load_param_into_net(opt, d)``).
Snapshots travel as bytes (the driver puts them in Ray's object store), so a
worker on another node never needs the driver's disk.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
from collections.abc import Mapping
from typing import Any

from .._workload import Workload

#: Entries ``ModelCheckpoint`` may write beside the parameters; never a misfit.
CHECKPOINT_METADATA = frozenset(
    {"epoch_num", "step_num", "current_iterator_step", "last_overflow_iterator_step", "scale_sense"}
)


#: Snapshots this process has read, by id: a worker's trials (and their replays) mostly share one.
_READ: dict[str, dict[str, Any]] = {}
_KEEP = 4


def remember(snapshot: str, data: bytes) -> None:
    """Read a snapshot's bytes once for this process; ``recall`` then hands its parameters out."""
    if snapshot in _READ:
        return
    while len(_READ) >= _KEEP:
        _READ.pop(next(iter(_READ)))
    _READ[snapshot] = read_checkpoint(data)


def recall(snapshot: str) -> dict[str, Any]:
    """The parameters of a snapshot ``remember`` read; ``RuntimeError`` when this process has none."""
    try:
        return _READ[snapshot]
    except KeyError:
        raise RuntimeError(
            f"the trial starts from snapshot {snapshot}, which this worker was not given"
        ) from None


def snapshot_id(data: bytes) -> str:
    """The content id of a snapshot's bytes: what ``trials.start_from`` records."""
    return hashlib.sha256(data).hexdigest()[:12]


def read_checkpoint(data: bytes) -> dict[str, Any]:
    """The parameters of a checkpoint file's bytes, by name (``mindspore.load_checkpoint``)."""
    import mindspore as ms

    with tempfile.TemporaryDirectory(prefix="ampsweep-ckpt-") as folder:
        path = os.path.join(folder, "start.ckpt")
        with open(path, "wb") as handle:
            handle.write(data)
        return dict(ms.load_checkpoint(path))


def checkpoint_bytes(named: Mapping[str, Any]) -> bytes:
    """A MindSpore checkpoint of ``name -> Parameter/Tensor``, as bytes."""
    import mindspore as ms

    entries = [{"name": name, "data": ms.Tensor(value.asnumpy())} for name, value in named.items()]
    with tempfile.TemporaryDirectory(prefix="ampsweep-ckpt-") as folder:
        path = os.path.join(folder, "snapshot.ckpt")
        ms.save_checkpoint(entries, path)
        with open(path, "rb") as handle:
            return handle.read()


def checkpoint_step(params: Mapping[str, Any]) -> int | None:
    """The step a checkpoint was taken at, from its ``global_step``; None when it has none."""
    value = params.get("global_step")
    if value is None:
        return None
    return int(value.asnumpy().reshape(-1)[0])


def _named(cell: Any) -> dict[str, Any]:
    return {param.name: param for _, param in cell.parameters_and_names()}


def misfits(workload: Workload, params: Mapping[str, Any]) -> list[str]:
    """Why ``params`` cannot start this workload: missing, unexpected and wrong-shape names.

    Every network parameter must be in the checkpoint with its shape; every
    entry must belong to the network or the optimizer (or be checkpoint
    metadata). Optimizer slots missing from the file are allowed: a
    checkpoint saved without the optimizer starts it fresh.
    """
    network = _named(workload.network)
    optimizer = _named(workload.optimizer(workload.network.trainable_params()))
    problems = []
    missing = sorted(set(network) - set(params))
    if missing:
        problems.append("missing " + _few(missing))
    known = set(network) | set(optimizer) | CHECKPOINT_METADATA
    unexpected = sorted(set(params) - known)
    if unexpected:
        problems.append("unexpected " + _few(unexpected))
    # the network's own shapes first: an optimizer slot only mirrors its parameter's
    shapes = [
        f"{name} (checkpoint {list(params[name].shape)}, workload {list(target.shape)})"
        for cells in (network, optimizer)
        for name, target in sorted(cells.items())
        if name in params and tuple(params[name].shape) != tuple(target.shape)
    ]
    if shapes:
        problems.append("wrong shape " + _few(shapes))
    return problems


def _few(names: list[str], shown: int = 3) -> str:
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def starting_from(workload: Workload, params: Mapping[str, Any]) -> Workload:
    """The workload with the snapshot loaded: its network now, its optimizer when it is built.

    The optimizer is built by the trainer over the network *after* AMP has
    cast it, so its factory is wrapped: every optimizer it builds (the trial's,
    a graph reset's, a replay's) gets the snapshot's slots.
    """
    import mindspore as ms

    def load(cell: Any) -> None:
        own = _named(cell)  # only its own names: MindSpore warns about every other one
        # Copies: ``load_param_into_net`` shares the given tensors' memory with the cell, so
        # training would write into the snapshot this process keeps for its next trial.
        fresh = {
            name: ms.Parameter(ms.Tensor(value.asnumpy()), name=name)
            for name, value in params.items()
            if name in own
        }
        ms.load_param_into_net(cell, fresh)

    load(workload.network)
    build = workload.optimizer

    def optimizer(parameters: list[Any]) -> Any:
        built = build(parameters)
        load(built)
        return built

    return dataclasses.replace(workload, optimizer=optimizer)


def snapshot_of(state: Mapping[str, Any]) -> bytes:
    """The training state after a prefix (``CompiledStep.named_state``), in the ``ModelCheckpoint`` form."""
    return checkpoint_bytes(state)
