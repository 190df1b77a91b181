"""Where a forked trial starts: a snapshot of network and optimizer, as a MindSpore checkpoint.

A snapshot is the file ``ModelCheckpoint`` writes (docs/late-divergence.md); the
FP32 prefix a sweep runs is saved in the same form, so one loader serves both.
Loading is by name (FACTS: ``load_param_into_net(net, d)`` then ``(opt, d)``).
Snapshots travel as bytes through Ray's object store, so a worker on another
node never needs the driver's disk; a trial's own end snapshot also carries
its loss scaler, so a continuation keeps the scale.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import numpy as np

from ampsweep.contracts import parse_loss_scale

from .._workload import Workload

#: Entries ``ModelCheckpoint`` may write beside the parameters; never a misfit.
CHECKPOINT_METADATA = frozenset(
    {"epoch_num", "step_num", "current_iterator_step", "last_overflow_iterator_step", "scale_sense"}
)


#: Prefix of the loss scaler's entries in a snapshot (``loss_scaler.scale_value``, ``loss_scaler.counter``)
SCALER_PREFIX = "loss_scaler."


class Snapshots:
    """Snapshots one worker has decoded, by id, the most recently used last.

    A worker's trials (and their replays) mostly start from one snapshot: it
    is decoded once, and its parameters are handed to each trial as an
    argument (``run_trial(start=...)``). The worker owns this object; nothing
    is kept per process.
    """

    def __init__(self, keep: int = 4) -> None:
        self.keep = keep
        self._read: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def read(self, snapshot: str, data: bytes) -> dict[str, Any]:
        """The parameters of ``data`` (snapshot ``snapshot``), decoded once."""
        params = self._read.pop(snapshot, None)
        self._read[snapshot] = read_checkpoint(data) if params is None else params
        while len(self._read) > self.keep:
            self._read.popitem(last=False)
        return self._read[snapshot]


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
    unexpected = sorted(n for n in set(params) - known if not n.startswith(SCALER_PREFIX))
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


def snapshot_names(state: Mapping[tuple[str, str], Any]) -> dict[str, Any]:
    """Training state keyed ``(owner, name)`` under a snapshot's names: ``ModelCheckpoint``'s plain ones,
    the loss scaler's under :data:`SCALER_PREFIX` (so a continuation keeps the scale it reached)."""
    return {(SCALER_PREFIX + name if owner == "scaler" else name): p for (owner, name), p in state.items()}


def continue_scaler(targets: Mapping[str, Any], start: Mapping[str, Any] | None, loss_scale: str) -> None:
    """Give a dynamic loss scaler the state its trial's snapshot carries: the scale and its count of good steps.

    A continuation (the horizon's) must compute what its trial would have
    computed next; a new scaler would restart the scale. A static scale is the
    configuration's own, and a snapshot without a scaler (an FP32 prefix, the
    user's checkpoint) starts a new one. ``targets``: :func:`snapshot_names`'s.
    """
    from mindspore import Tensor, ops

    if start is None or parse_loss_scale(loss_scale).kind != "dynamic":
        return
    names = [SCALER_PREFIX + "scale_value", SCALER_PREFIX + "counter"]
    if not all(name in start and name in targets for name in names):
        return
    for name in names:
        dtype = targets[name].asnumpy().dtype
        ops.assign(targets[name], Tensor(np.asarray(start[name].asnumpy()).astype(dtype)))
