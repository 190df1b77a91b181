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
import shutil
import tempfile
import warnings
import weakref
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


@dataclass(eq=False)
class _Held:
    """A snapshot in the ring: its host copy until it is written, then its file."""

    step: int
    nbytes: int
    arrays: list[tuple[str, np.ndarray]] | None
    path: Path | None = None


class SnapshotRing:
    """The last ``keep`` snapshots of this process, in a scratch folder of its own.

    Taking a snapshot copies the state to the host, which is all the training
    waits for (a fraction of a millisecond for a small network). Serializing
    a checkpoint costs a few milliseconds more, and a Python thread would take
    them from the training anyway (it holds the GIL), so a small snapshot is
    written only when it is needed: at the first non-finite loss. A large one
    (over ``IN_MEMORY_BYTES``), whose steps are long enough to pay for it, and
    which host memory should not hold ``keep`` times, is written at once.

    The folder (``tempfile.mkdtemp`` in ``parent``, the user's ``snapshot_dir``;
    None: the system's temporary folder) is made at the first write and removed
    by ``close``, or when the ring is collected or the interpreter exits
    (``weakref.finalize``): a healthy run, an exception or a rank other than 0
    leaves nothing behind. A written spec's snapshot is moved out first (``moved``).

    ``budget``: the most bytes of snapshot files kept at once. The first write
    that would pass it ends the snapshots, with one warning: host memory cannot
    hold what the disk may not, and the files already written stay for a replay.
    """

    def __init__(self, parent: Path | None, keep: int, budget: int | None = None, rank: int = 0) -> None:
        self.parent = parent
        self.keep = keep
        self.budget = budget
        self.rank = rank
        #: this process's scratch folder, once a snapshot was written
        self.folder: Path | None = None
        #: the budget was reached: no more snapshots are taken
        self.full = False
        self._held: list[_Held] = []
        self._state: list[tuple[str, Any]] = []
        self._owners: tuple[int, int] | None = None
        self._remove: weakref.finalize | None = None

    @property
    def steps(self) -> list[int]:
        return [held.step for held in self._held]

    def save(self, step: int, network: Any, optimizer: Any | None) -> None:
        """Copy the state after ``step`` steps to the host; the oldest beyond ``keep`` goes first."""
        if self.full:
            return
        owners = (id(network), id(optimizer))
        if owners != self._owners:  # walking the Cells costs more than the copy: once per network
            self._state = list(named_state(network, optimizer).items())
            self._owners = owners
        # copies: on CPU ``asnumpy`` can share the parameter's memory, which the next step overwrites
        arrays = [(name, np.array(param.asnumpy(), copy=True)) for name, param in self._state]
        held = _Held(step, sum(array.nbytes for _, array in arrays), arrays)
        older = [h for h in self._held if h.step != step]
        kept = older[max(0, len(older) - self.keep + 1) :]
        large = held.nbytes > IN_MEMORY_BYTES
        if large and not self._room(kept, held):
            return
        for old in self._held:
            if old not in kept and old.path is not None:
                old.path.unlink(missing_ok=True)
        self._held = [*kept, held]
        if large:
            self._write(held)

    def _room(self, others: list[_Held], held: _Held) -> bool:
        """Whether ``held``'s file fits in the budget beside ``others``' files; the first time it does
        not, the snapshots end with one warning."""
        on_disk = sum(h.nbytes for h in others if h.path is not None)
        if self.budget is None or on_disk + held.nbytes <= self.budget:
            return True
        if not self.full:
            self.full = True
            warnings.warn(
                f"ampsweep.Watch: disk_budget reached ({on_disk:,} bytes of snapshots on disk, the one at "
                f"step {held.step} needs {held.nbytes:,} more, the budget is {self.budget:,}): no more "
                "snapshots are taken; a non-finite loss is replayed from the newest one kept",
                RuntimeWarning,
                stacklevel=3,
            )
        return False

    def _write(self, held: _Held) -> None:
        assert held.arrays is not None
        if self.folder is None:
            if self.parent is not None:
                self.parent.mkdir(parents=True, exist_ok=True)
            self.folder = Path(tempfile.mkdtemp(prefix=f"ampsweep-watch-rank{self.rank}-", dir=self.parent))
            self._remove = weakref.finalize(self, shutil.rmtree, self.folder, ignore_errors=True)
        path = self.folder / f"step-{held.step}.ckpt"
        _write(held.arrays, path)
        held.path, held.arrays = path, None

    def close(self) -> None:
        """Drop every snapshot and remove the scratch folder (a spec's snapshot was moved out of it)."""
        self._held = []
        if self._remove is not None:
            self._remove()
        self.folder = self._remove = None

    def last_healthy(self, before: int) -> Snapshot | None:
        """The newest snapshot taken at or before step ``before`` whose values are all finite, on disk.

        A snapshot taken right after a step whose gradients overflowed while
        its loss stayed finite already holds inf/NaN weights; the older one
        is the start then.
        """
        import mindspore as ms

        for held in reversed(self._held):
            if held.step > before or (held.path is not None and not held.path.is_file()):
                continue
            if held.arrays is not None:
                values = [array for _, array in held.arrays]
            else:
                values = [value.asnumpy() for value in ms.load_checkpoint(str(held.path)).values()]
            if not all(_finite_array(np.asarray(value)) for value in values):
                continue
            if held.path is None:
                if not self._room([h for h in self._held if h is not held], held):
                    continue
                self._write(held)
            assert held.path is not None
            return Snapshot(held.path, held.step)
        return None


def moved(snapshot: Snapshot, folder: Path) -> Snapshot:
    """``snapshot``'s file moved into ``folder`` (out of the scratch folder that goes): where a spec names it."""
    folder.mkdir(parents=True, exist_ok=True)
    kept = Snapshot(folder / snapshot.path.name, snapshot.step)
    shutil.move(snapshot.path, kept.path)
    return kept


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
