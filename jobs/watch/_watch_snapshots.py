"""What ``Watch`` keeps while the user's training is healthy: a ring of snapshots, and the AMP policy.

A snapshot is the file ``ModelCheckpoint`` writes during ``Model.train``: the
network's parameters and the optimizer's state (Adam's moments,
``beta1_power``, ``global_step``, ...) under their plain names, so the
sweep's ``start_from: {checkpoint: PATH}`` loader (``jobs.training._snapshot``) reads it
as it reads the user's own checkpoint. Only the last ``keep`` are kept: the
one that matters is the last healthy one before the failure, and a second
one covers a snapshot taken on the very step whose weights already broke.

The AMP policy in use (level, dtype, loss scale) is read off the cast network
itself, because neither ``Model`` nor ``amp.auto_mixed_precision`` record it
anywhere a callback can see.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SNAPSHOT_FOLDER = "snapshots"


@dataclass(frozen=True)
class Snapshot:
    """One snapshot file and the global step it was taken at (after that many steps)."""

    path: Path
    step: int


def named_state(network: Any, optimizer: Any | None) -> dict[str, Any]:
    """Network parameters, then the optimizer's own state, by ``Parameter.name`` (no duplicates).

    The optimizer holds the network's parameters too; taking names once gives
    the same entries ``ModelCheckpoint`` saves from a ``TrainOneStepCell``.
    """
    state = {param.name: param for param in network.get_parameters()}
    if optimizer is not None:
        for param in optimizer.get_parameters():
            state.setdefault(param.name, param)
    return state


#: a snapshot up to this size stays in host memory until it is needed; a larger one is written at once
IN_MEMORY_BYTES = 64 * 2**20


@dataclass
class _Held:
    """A snapshot in the ring: its file, and its host copy until the file is written."""

    snapshot: Snapshot
    arrays: list[tuple[str, np.ndarray]] | None


class SnapshotRing:
    """The last ``keep`` snapshots, as checkpoint files ``OUT/snapshots/step-N.ckpt``.

    Taking a snapshot copies the state to the host, which is all the training
    waits for (a fraction of a millisecond for a small network). Serializing
    a checkpoint costs a few milliseconds more, and a Python thread would take
    them from the training anyway (it holds the GIL), so a small snapshot is
    written only when it is needed: at the first non-finite loss, and when
    the training ends (``flush``). A large one (over ``IN_MEMORY_BYTES``),
    whose steps are long enough to pay for it, is written at once.

    Only files this ring wrote are ever deleted: a snapshot from an earlier run
    in the same folder, that an earlier ``spec.yaml`` may name, is left alone.
    """

    def __init__(self, out: Path, keep: int) -> None:
        self.folder = out / SNAPSHOT_FOLDER
        self.keep = keep
        self._held: list[_Held] = []
        self._state: list[tuple[str, Any]] = []
        self._owners: tuple[int, int] | None = None

    @property
    def snapshots(self) -> list[Snapshot]:
        return [held.snapshot for held in self._held]

    def save(self, step: int, network: Any, optimizer: Any | None) -> Snapshot:
        """Copy the state after ``step`` steps to the host; the oldest beyond ``keep`` goes."""
        owners = (id(network), id(optimizer))
        if owners != self._owners:  # walking the Cells costs more than the copy: once per network
            self._state = list(named_state(network, optimizer).items())
            self._owners = owners
        # copies: on CPU ``asnumpy`` can share the parameter's memory, which the next step overwrites
        arrays = [(name, np.array(param.asnumpy(), copy=True)) for name, param in self._state]
        held = _Held(Snapshot(self.folder / f"step-{step}.ckpt", step), arrays)
        self._held = [h for h in self._held if h.snapshot.step != step]
        self._held.append(held)
        if sum(array.nbytes for _, array in arrays) > IN_MEMORY_BYTES:
            self._write(held)
        while len(self._held) > self.keep:
            old = self._held.pop(0)
            if old.arrays is None:
                try:
                    os.remove(old.snapshot.path)
                except FileNotFoundError:
                    pass
        return held.snapshot

    def flush(self) -> None:
        """Write every snapshot still held only in memory."""
        for held in self._held:
            if held.arrays is not None:
                self._write(held)

    def _write(self, held: _Held) -> None:
        assert held.arrays is not None
        self.folder.mkdir(parents=True, exist_ok=True)
        _write(held.arrays, held.snapshot.path)
        held.arrays = None

    def last_healthy(self, before: int) -> Snapshot | None:
        """The newest snapshot taken at or before step ``before`` whose values are all finite, on disk.

        A snapshot taken right after a step whose gradients overflowed while
        its loss stayed finite already holds inf/NaN weights; the older one
        is the start then.
        """
        import mindspore as ms

        for held in reversed(self._held):
            if held.snapshot.step > before:
                continue
            if held.arrays is not None:
                values = [array for _, array in held.arrays]
                if all(_finite_array(array) for array in values):
                    self._write(held)
                    return held.snapshot
                continue
            if not held.snapshot.path.is_file():
                continue
            params = ms.load_checkpoint(str(held.snapshot.path))
            if all(_finite_array(np.asarray(value.asnumpy())) for value in params.values()):
                return held.snapshot
        return None


def _write(arrays: list[tuple[str, np.ndarray]], path: Path) -> None:
    """``mindspore.save_checkpoint`` of host copies, to a temporary name first: a file is whole or absent."""
    import mindspore as ms

    partial = path.with_suffix(".partial.ckpt")  # save_checkpoint adds .ckpt to any other name
    ms.save_checkpoint([{"name": name, "data": ms.Tensor(array)} for name, array in arrays], str(partial))
    os.replace(partial, path)


def _finite_array(array: np.ndarray) -> bool:
    return not np.issubdtype(array.dtype, np.floating) or bool(np.isfinite(array).all())


# --- the AMP policy the user's network runs under ------------------------------------------------

#: mindspore's ``MixedPrecisionType`` names -> the spec's dtype
_DTYPES = {"FP16": "float16", "BF16": "bfloat16"}


@dataclass(frozen=True)
class Policy:
    """The AMP level, dtype and loss scale of the user's training, in the spec's words."""

    amp_level: str
    dtype: str = "float16"
    loss_scale: str = "none"


def detect_policy(network: Any, loss_scale: str = "none") -> Policy:
    """The AMP level a cast network runs under, read off its Cells.

    ``amp.auto_mixed_precision`` and ``Model(amp_level=...)`` mark the Cells
    they cast: under O2 and O3 the root is float16 (or bfloat16); O2 marks the
    Cells of its black list (``LayerNorm``, ``BatchNorm``...) float32, O3 does
    not; O1 rewrites every Cell class into a ``...Opt`` copy and marks
    nothing. A float16 network that has none of O2's black-listed Cells
    computes the same under O2 and O3: it is reported as O2.
    """
    marks = {type(cell).__name__: _mark(cell) for _, cell in network.cells_and_names()}
    cast = [mark for mark in marks.values() if mark in _DTYPES]
    if cast:
        dtype = _DTYPES[cast[0]]
        if any(mark == "FP32" for mark in marks.values()):
            return Policy("O2", dtype, loss_scale)
        black = set(_o2_black_list())
        return Policy("O3" if black & set(marks) else "O2", dtype, loss_scale)
    if any(name.endswith("Opt") or "Opt_" in name for name in marks):
        return Policy("O1", "float16", loss_scale)
    return Policy("O0", "float16", loss_scale)


def _mark(cell: Any) -> str:
    getter = getattr(cell, "get_mixed_precision_type", None)
    return getter().name if getter is not None else "NOTSET"


def _o2_black_list() -> list[str]:
    from mindspore import amp

    return [cls.__name__ for cls in amp.get_black_list()]


def loss_scale_of(manager: Any) -> str:
    """The spec's ``loss_scale`` for a ``Model``'s loss-scale manager (``none`` without one)."""
    if manager is None:
        return "none"
    name = type(manager).__name__
    try:
        scale = float(manager.get_loss_scale())
    except Exception:  # noqa: BLE001 - a manager of the user's own: its kind is enough
        scale = None
    if name.startswith("Dynamic"):
        return "dynamic" if scale is None else f"dynamic:{scale:g}"
    if scale is None or scale == 1.0:
        return "none"
    return f"static:{scale:g}"
