"""``ampsweep.Watch``: sit in the user's own training and turn its first NaN into a ready sweep (docs/watch.md).

While the loss is finite it looks at the loss tensors in blocks (one wait for the device per block) and
keeps snapshots; at the first non-finite loss it replays from the last healthy one, writes
``watch.json`` (and, for a precision failure, ``spec.yaml``) and stops the training. In an ``msrun``
job the ranks stop, replay and turn off together. It never raises into the user's step. It is a
``mindspore.train.Callback``, mixed in when the first ``Watch`` is made, so ``import ampsweep`` does
not import MindSpore.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from ..training._data_parallel import RankGroup, agree
from ._watch_snapshots import Policy, SnapshotRing, detect_policy, loss_scale_of

#: losses are copied to the host in blocks of at most this many steps (and at every snapshot)
CHECK_EVERY = 50

_WITH_CALLBACK: dict[type, type] = {}


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"Watch: {name} must be an int >= 1, got {value!r}")
    return value


def _folder(name: str, value: Any) -> Path:
    if not isinstance(value, (str, Path)) or not str(value):
        raise ValueError(f"Watch: {name} must be a folder path, got {value!r}")
    return Path(value)


def _check_workload(workload: Any) -> str:
    """The factory reference, checked for form now: a typo must not wait for the NaN hours later."""
    from .._workload import WorkloadError, resolve_reference

    if not isinstance(workload, str):
        raise ValueError(
            f"Watch: workload must be a 'module:make' or 'file.py:make' string, got {workload!r}"
        )
    try:
        resolved = resolve_reference(workload)
    except WorkloadError as exc:
        raise ValueError(f"Watch: {exc}") from None
    _check_factory_name(resolved)
    return resolved


def _check_factory_name(reference: str) -> None:
    """A file's factory must be defined in it: read, not imported (the file may be the running script).

    Any top-level binding counts (def, class, assignment, import); a file with a
    star import is not judged. A module reference is left to the replay, which
    imports it anyway.
    """
    import ast

    from .._workload import split_reference

    module_part, name = split_reference(reference)
    if not module_part.endswith(".py"):
        return
    tree = ast.parse(Path(module_part).read_text(encoding="utf-8", errors="replace"))
    bound: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(alias.name == "*" for alias in node.names):
                return
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    if name not in bound:
        raise ValueError(
            f"Watch: workload {reference!r}: {Path(module_part).name} defines no {name!r} at its top level"
        )


class Watch:
    """A callback for ``Model.train`` (and a helper for hand-written loops) that watches the loss.

    Args:
        workload: the factory that rebuilds this training, ``module:make`` or
            ``path/to/train.py:make`` (see the workload contract); it is called
            only when the loss breaks, to replay from the last snapshot.
        out: folder for ``watch.json``, ``spec.yaml`` and the snapshot the spec starts from.
        snapshot_every: save network and optimizer every this many steps.
        keep: how many snapshots to keep (the newest).
        workload_args: keyword arguments for the factory, as a spec's ``workload_args``.
        stop: stop the training after the first non-finite loss (``Model.train``:
            ``request_stop``; a hand-written loop: ``step`` returns True).
        seed: the seed the factory rebuilds this run's data with (the replay's seed,
            and the first of the spec's seeds).
        amp_level: the AMP level in use, when reading it off the network is not
            enough (``None``: read it off the network).
        planned_steps: how many steps this training is meant to run, the
            spec's ``horizon`` (``None``: ``Model.train``'s epochs × steps per
            epoch; a hand-written loop that does not say gets a horizon well
            past the failure, and the spec says so).
        snapshot_dir: where this process writes its snapshots while it trains, in a folder of
            its own that is removed when the Watch ends (``None``: the system's temporary folder).
        disk_budget: the most bytes of snapshot files kept at once; reaching it ends the
            snapshots with one warning (``None``: no limit but the disk's).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Watch:
        # ``Model.train`` only takes ``mindspore.train.Callback`` instances; mix the base in lazily
        from mindspore.train import Callback

        if issubclass(cls, Callback):
            return super().__new__(cls)
        if cls not in _WITH_CALLBACK:
            _WITH_CALLBACK[cls] = type(cls.__name__, (cls, Callback), {"__module__": cls.__module__})
        return super().__new__(_WITH_CALLBACK[cls])

    def __init__(
        self,
        workload: str = "train.py:make",
        out: str | Path = "ampsweep-watch",
        snapshot_every: int = 500,
        keep: int = 2,
        workload_args: Mapping[str, Any] | None = None,
        stop: bool = True,
        *,
        seed: int = 0,
        amp_level: str | None = None,
        planned_steps: int | None = None,
        snapshot_dir: str | Path | None = None,
        disk_budget: int | None = None,
    ) -> None:
        self.snapshot_every = _positive_int("snapshot_every", snapshot_every)
        self.keep = _positive_int("keep", keep)
        if workload_args is not None and not isinstance(workload_args, Mapping):
            raise ValueError(
                f"Watch: workload_args must be a dict of keyword arguments, got {workload_args!r}"
            )
        self.out = _folder("out", out)
        scratch = None if snapshot_dir is None else _folder("snapshot_dir", snapshot_dir)
        if disk_budget is not None:
            _positive_int("disk_budget", disk_budget)
        if not isinstance(stop, bool):
            raise ValueError(f"Watch: stop must be True or False, got {stop!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"Watch: seed must be an int, got {seed!r}")
        if amp_level is not None and amp_level not in ("O0", "O1", "O2", "O3"):
            raise ValueError(f"Watch: amp_level must be one of O0, O1, O2, O3 or None, got {amp_level!r}")
        if planned_steps is not None:
            _positive_int("planned_steps", planned_steps)
        #: the training's planned length in steps: the written spec's ``horizon``
        self.planned_steps = planned_steps
        self.workload = _check_workload(workload)
        self.workload_args = dict(workload_args or {})
        self.stop = stop
        self.seed = seed
        self.amp_level = amp_level
        #: this process's rank and the data-parallel group's size ((0, 1) outside such a job)
        self.rank, self.group_size = data_parallel_group()
        self._group = RankGroup(self.rank, self.group_size) if self.group_size > 1 else None
        # every rank keeps snapshots to replay from; rank 0 moves the one the spec names into ``out``
        self._ring = SnapshotRing(scratch, self.keep, disk_budget, self.rank)
        self._error: BaseException | None = None  # Watch's own, not yet shared with the other ranks
        self._off = False
        self._pending: list[tuple[int, Any]] = []  # (global step, loss) not yet looked at
        self._last_snapshot = 0
        self._network: Any = None
        self._optimizer: Any = None
        self._loss_scale = "none"
        #: the global step whose loss was first non-finite, once seen
        self.first_nonfinite_step: int | None = None
        #: what ``watch.json`` holds, once written
        self.report: dict[str, Any] | None = None

    # --- state ------------------------------------------------------------------------------

    @property
    def stop_requested(self) -> bool:
        """True once the loss broke and ``stop`` asks the training to end."""
        return self.stop and self.first_nonfinite_step is not None

    @property
    def snapshot_steps(self) -> list[int]:
        """The steps of the snapshots kept now, oldest first (none once the Watch ended)."""
        return self._ring.steps

    # --- a hand-written loop -----------------------------------------------------------------

    def step(self, step: int, loss: Any, network: Any = None, optimizer: Any = None) -> bool:
        """Record the loss of global step ``step`` (0-based); True when the training should stop.

        ``loss`` is the tensor the loop computed anyway; it is not copied to
        the host here. ``network`` (the cast network the loop trains) and
        ``optimizer`` are needed for snapshots; give them once or every step.
        """
        if network is not None:
            self._network = network
        if optimizer is not None:
            self._optimizer = optimizer
        if self.first_nonfinite_step is not None or self._off:
            return self.stop_requested
        self._pending.append((int(step), loss))
        done = int(step) + 1  # steps trained so far: the state a snapshot now holds
        if done - self._last_snapshot >= self.snapshot_every:
            if self.check() and self._network is not None and self._error is None:
                try:
                    self._ring.save(done, self._network, self._optimizer)
                except Exception as exc:  # noqa: BLE001 - Watch's own error, never the training's
                    self._failed(exc)
                self._last_snapshot = done
        elif len(self._pending) >= CHECK_EVERY:
            self.check()
        return self.stop_requested

    def check(self) -> bool:
        """Look at the losses recorded since the last look (one wait for the device); False once one
        broke, or once Watch is off. Raises nothing: Watch's own errors turn it off."""
        if self.first_nonfinite_step is not None or self._off:
            return False
        if not self._pending:
            return True
        steps = [step for step, _ in self._pending]
        losses = [loss for _, loss in self._pending]
        self._pending = []
        try:
            broken = ~np.isfinite(_host_values(losses))
        except Exception as exc:  # noqa: BLE001 - still entering the ranks' collectives below
            self._failed(exc)
            broken = np.zeros(len(steps), bool)
        try:
            if self._group is not None:
                agree(self._group, self._error)  # one rank's error turns every rank's Watch off here
                broken = _on_any_rank(broken)
            bad = np.flatnonzero(broken)
            if self._off or not len(bad):
                return not self._off
            self._fire(steps[int(bad[0])])
        except Exception as exc:  # noqa: BLE001 - Watch's own error, never the training's
            self._turn_off(exc)
        return False

    def _failed(self, exc: BaseException) -> None:
        """Watch's own error: off at once on one device; in a data-parallel job at the next look, which
        every rank enters, so every rank's Watch turns off there and none waits for this one."""
        self._error = exc
        if self._group is None:
            self._turn_off(exc)

    def _turn_off(self, exc: BaseException) -> None:
        """Stop watching, with one warning; the snapshots go. A non-finite loss already seen still stops
        the training (``stop_requested``)."""
        from ._watch_report import described

        if not self._off:
            warnings.warn(
                f"ampsweep.Watch stopped watching (the training goes on without it): {described(exc)}",
                RuntimeWarning,
                stacklevel=3,
            )
        self._off = True
        self._pending = []
        self._ring.close()

    def __enter__(self) -> Watch:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        if kind is None:
            self.check()  # the last block's losses
        self._ring.close()

    # --- Model.train ------------------------------------------------------------------------

    def on_train_begin(self, run_context: Any) -> None:
        """Take the network, optimizer and loss scale ``Model`` trains with."""
        params = run_context.original_args()  # a dict: a missing key raises KeyError, not AttributeError
        self._network = params.get("network")
        self._optimizer = params.get("optimizer")
        self._loss_scale = loss_scale_of(params.get("loss_scale_mananger"))  # MindSpore's spelling
        self._last_snapshot = int(params.get("cur_step_num") or 0)
        if self.planned_steps is None:  # what Model.train was asked for: its epochs × steps per epoch
            epochs, per_epoch = params.get("epoch_num"), params.get("batch_num")
            if isinstance(epochs, int) and isinstance(per_epoch, int) and epochs > 0 and per_epoch > 0:
                self.planned_steps = epochs * per_epoch

    def on_train_step_end(self, run_context: Any) -> None:
        """One step (or one sink of steps) ended: ``net_outputs`` is its loss, already computed."""
        params = run_context.original_args()
        loss = params.net_outputs
        if isinstance(loss, (tuple, list)):  # a loss-scale cell returns (loss, overflow, scale)
            loss = loss[0]
        if self._network is None:  # on_train_begin took them; a Model that did not say
            self._network, self._optimizer = params.network, params.optimizer
        if self.step(params.cur_step_num - 1, loss):
            run_context.request_stop()

    def on_train_end(self, run_context: Any) -> None:
        self.check()
        self._ring.close()

    # --- the first non-finite loss ------------------------------------------------------------

    def _policy(self) -> Policy:
        detected = (
            detect_policy(self._network, self._loss_scale) if self._network is not None else Policy("O0")
        )
        if self.amp_level is not None:
            return Policy(self.amp_level, detected.dtype, detected.loss_scale)
        return detected

    def _fire(self, failed_at: int) -> None:
        """Localize the failure at ``failed_at`` and, on rank 0, write what was found.

        A failure to prepare (the snapshot's file) or to replay becomes the
        finding, and every rank still meets its peers in the same collectives:
        ``agree`` before the replay (all replay, or none), then ``first_of_ranks``.
        """
        from ampsweep.contracts import parse_loss_scale

        from ._watch_report import (
            failure,
            first_of_ranks,
            horizon_note,
            localize_from,
            one_line,
            spec_for,
            write_outputs,
        )
        from ._watch_snapshots import SNAPSHOT_FOLDER, moved

        started = time.perf_counter()
        self.first_nonfinite_step = failed_at
        policy, snapshot, error = Policy(self.amp_level or "O0"), None, None
        try:
            _factory_from_main(self.workload)
            policy = self._policy()
            snapshot = self._ring.last_healthy(before=failed_at)
        except Exception as exc:  # noqa: BLE001 - told to the other ranks, then written as the finding
            error = exc
        try:
            if self._group is not None:
                agree(self._group, error)
            finding = (
                failure(self._group, error)
                if error is not None
                else localize_from(
                    self.workload, self.workload_args, self.seed, policy, snapshot, failed_at, self._group
                )
            )
        except Exception as exc:  # noqa: BLE001 - the spec is still worth writing
            finding = failure(self._group, exc)
        if self._group is not None:
            finding = first_of_ranks(
                finding, self._group, parse_loss_scale(policy.loss_scale).kind == "dynamic"
            )
        if self.rank != 0:
            return  # rank 0 writes what the ranks found
        if snapshot is not None:  # out of the scratch folder, which goes when the Watch ends
            snapshot = moved(snapshot, self.out / SNAPSHOT_FOLDER)
        spec = spec_for(
            self.workload,
            self.workload_args,
            self.seed,
            policy,
            snapshot,
            failed_at,
            finding,
            self.out,
            planned=self.planned_steps,
            devices=self.group_size,
        )
        extra = {
            "horizon_note": horizon_note(spec, self.planned_steps),
            "workload": self.workload,
            "seed": self.seed,
            "seconds": round(time.perf_counter() - started, 2),
        }
        #: what ``watch.json`` holds, for a caller that stays in Python
        self.report = write_outputs(self.out, spec, finding, policy, snapshot, failed_at, extra)
        spec_path = Path(self.report["spec"]) if self.report["spec"] else None
        print(one_line(finding, failed_at, snapshot, spec_path, self.out), flush=True)


def _on_any_rank(broken: np.ndarray) -> np.ndarray:
    """Which steps of the block broke on any rank: every rank stops at the same step, or one rank
    would wait forever in the next step's gradient all-reduce. One small collective per block; CPU's
    AllReduce sums only, which is all a union needs."""
    import mindspore as ms
    from mindspore import ops

    summed = ops.AllReduce()(ms.Tensor(broken.astype(np.float32)))
    return summed.asnumpy() > 0


def data_parallel_group() -> tuple[int, int]:
    """(this process's rank, the group's size) once ``mindspore.communication.init()`` ran; (0, 1) before."""
    from mindspore.communication import GlobalComm, get_group_size, get_rank

    if not GlobalComm.INITED:
        return 0, 1
    return int(get_rank()), int(get_group_size())


def _factory_from_main(workload: str) -> None:
    """When the factory lives in the running script, the replay takes it from there.

    Loading ``train.py`` again under another name would run its top level a
    second time: a whole second training, when the script has no
    ``if __name__ == "__main__":`` guard. The loader looks a file up in
    ``sys.modules`` first, so the running ``__main__`` is registered there under
    the name it would get.
    """
    from .._workload import module_name_for_file, split_reference

    module_part, _ = split_reference(workload)
    main = sys.modules.get("__main__")
    main_file = getattr(main, "__file__", None)
    if not module_part.endswith(".py") or main is None or not main_file:
        return
    path = Path(module_part)
    if Path(main_file).resolve() == path.resolve():
        sys.modules.setdefault(module_name_for_file(path), main)


def _host_values(losses: list[Any]) -> np.ndarray:
    """The losses as one float array: the first copy waits for the device, the rest are ready.

    ``Tensor.item`` first: for a scalar it is several times cheaper than ``asnumpy`` (measured on
    ``Model.train``'s outputs, MindSpore 2.10 CPU: about 1 µs against 7 to 30 µs).
    """
    values = np.empty(len(losses), dtype=np.float64)
    for index, loss in enumerate(losses):
        values[index] = _scalar(loss)
    return values


def _scalar(loss: Any) -> float:
    item = getattr(loss, "item", None)
    if item is not None:
        try:
            return float(item())
        except (TypeError, ValueError, RuntimeError):
            pass  # not one element: the first of it, below
    if hasattr(loss, "asnumpy"):
        return float(np.asarray(loss.asnumpy(), dtype=np.float64).reshape(-1)[0])
    try:
        return float(loss)
    except (TypeError, ValueError):
        return math.nan


__all__ = ["Watch", "CHECK_EVERY", "data_parallel_group"]
