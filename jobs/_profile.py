"""``ampsweep profile``: one FP32 run with hooks that rates each Cell's float16 risk.

Before a sweep, a user wants to know which layers float16 will hurt and
whether a loss scale is needed, without paying for the grid. This trains the
spec's workload at O0 (from step 0, or where the spec's ``start_from`` puts
its trials) in PyNative, and on about :data:`SAMPLES` evenly spread steps
records, per real Cell:

- the max |x| of its outputs *and* of what the ops inside it computed: while
  a Cell's ``construct`` runs, the ``mindspore.ops`` functions of
  :data:`~._replay.INNER_OPS` (and the matching ``Tensor`` methods and
  operators) report their output to the innermost Cell running, so a softmax
  whose ``exp`` passes 65504 is seen although its output stays <= 1;
- the max |x| of the gradients w.r.t. its inputs, and the share of those
  below float16's smallest subnormal (2^-24) that are not exactly zero (an
  FP32 zero, a ReLU's, is no underflow).

The steps between samples run compiled and without hooks (as a trial's do),
so the cost stays about one FP32 trial plus ~16 PyNative steps.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ampsweep.contracts import (
    FLOAT16_MAX,
    FLOAT16_TINY,
    FP32_LEVEL,
    UNDERFLOW_EVIDENCE,
    static_scale_for,
)

from ._config import TrialConfig
from ._hooks import display_name, float_arrays
from ._replay import INNER_OPS, _ensure_pynative, _Replay, _restore_mode
from ._snapshot import remember, snapshot_id

#: how many steps are measured (evenly spread, first and last included)
SAMPLES = 16
#: a value within this factor of float16's maximum counts as an overflow risk
OVERFLOW_MARGIN = 2.0
#: an extrapolated crossing is reported only this many profiled lengths ahead at most
EXTRAPOLATE_FACTOR = 10
#: a value this far below 65504 is not extrapolated: a log-linear fit of a few samples (logits early
#: in training) would claim a thousandfold growth within a few hundred steps
EXTRAPOLATE_FROM = FLOAT16_MAX / 1024
#: ``Tensor`` methods and operators watched like :data:`INNER_OPS` (``e.sum(-1)``, ``x * x``)
TENSOR_METHODS = ("exp", "sum", "mean", "square", "pow", "matmul", "__mul__", "__matmul__", "__pow__")
_WRAPPER_PREFIX = "_OutputTo"


@dataclass(eq=False)
class CellProfile:
    """What one Cell's sampled steps showed, and the float16 risk that follows."""

    cell: str
    cell_class: str
    forward_max: float = 0.0
    backward_max: float | None = None
    #: a value was already inf/NaN in FP32 (float16 cannot hold it either)
    nonfinite: bool = False
    grad_values: int = 0
    grad_tiny: int = 0
    #: (global step, forward max that step): what the extrapolation fits
    history: list[tuple[int, float]] = field(default_factory=list)
    #: the step where the fitted growth passes 65504, when it is near enough to matter
    passes_max_at: int | None = None

    @property
    def underflow_fraction(self) -> float | None:
        return self.grad_tiny / self.grad_values if self.grad_values else None

    @property
    def risk(self) -> str | None:
        """``overflow`` within 2x of 65504 (or non-finite), ``underflow`` when many gradients are tiny."""
        limit = FLOAT16_MAX / OVERFLOW_MARGIN
        if self.nonfinite or self.forward_max >= limit or (self.backward_max or 0.0) >= limit:
            return "overflow"
        share = self.underflow_fraction
        if share is not None and share >= UNDERFLOW_EVIDENCE:
            return "underflow"
        return None

    def as_json(self) -> dict[str, Any]:
        return {
            "cell": self.cell,
            "class": self.cell_class,
            "forward_max": self.forward_max,
            "backward_max": self.backward_max,
            "underflow_fraction": self.underflow_fraction,
            "risk": self.risk,
            "passes_max_at": self.passes_max_at,
        }


@dataclass
class Profile:
    """Every profiled Cell (riskiest first) and the loss scale they call for."""

    cells: list[CellProfile]
    start_step: int
    steps: int
    sampled: list[int]
    #: the step (global) whose FP32 loss or gradients were not finite, if any
    nonfinite_step: int | None = None

    @property
    def loss_scale(self) -> str | None:
        """``static:2^k`` for underflow alone, ``dynamic`` when overflow comes with it, else None."""
        risks = {c.risk for c in self.cells}
        if "underflow" not in risks:
            return None
        if "overflow" in risks:
            return "dynamic"
        largest = max((c.backward_max for c in self.cells if c.backward_max), default=None)
        return static_scale_for(largest)

    def as_json(self) -> dict[str, Any]:
        return {
            "cells": [c.as_json() for c in self.cells],
            "loss_scale": self.loss_scale,
            "start_step": self.start_step,
            "steps": self.steps,
        }


def _max_abs(arrays: list[np.ndarray]) -> tuple[float, bool] | None:
    """(max |x| of the finite part, all finite), or None when nothing floating was given."""
    flat = [a.astype(np.float64).reshape(-1) for a in arrays if a.size]
    if not flat:
        return None
    values = np.concatenate(flat)
    ok = np.isfinite(values)
    finite = np.abs(values[ok])
    return (float(finite.max()) if finite.size else 0.0), bool(ok.all())


class _Recorder:
    """The hooks: a stack of running Cells, and what each one's values reached this step."""

    def __init__(self) -> None:
        self.active = False
        self.stack: list[CellProfile] = []
        self.step_max: dict[int, float] = {}
        self.cells: dict[int, CellProfile] = {}  # id(Cell) -> its profile
        self.handles: list[Any] = []

    def attach(self, loss_cell: Any) -> None:
        for qualified, cell in loss_cell.cells_and_names():
            name = display_name(qualified)
            kind = type(cell).__name__
            if name is None or kind.startswith(_WRAPPER_PREFIX) or kind == "NetworkWithLoss":
                continue
            profile = self.cells.setdefault(id(cell), CellProfile(name, kind))
            self.handles.append(cell.register_forward_pre_hook(self._enter(profile)))
            self.handles.append(cell.register_forward_hook(self._leave(profile)))
            self.handles.append(cell.register_backward_hook(self._backward(profile)))

    def detach(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    def _seen(self, profile: CellProfile, value: Any, inputs: Any) -> None:
        found = _max_abs(float_arrays(value))
        if found is None:
            return
        largest, finite = found
        if not finite:  # its own doing only when what came in was finite (not a NaN passed on)
            given = _max_abs(float_arrays(inputs))
            profile.nonfinite |= given is None or given[1]
        profile.forward_max = max(profile.forward_max, largest)
        key = id(profile)
        self.step_max[key] = max(self.step_max.get(key, 0.0), largest)

    def _enter(self, profile: CellProfile) -> Callable[..., None]:
        def hook(cell: Any, args: Any) -> None:
            if self.active:
                self.stack.append(profile)

        return hook

    def _leave(self, profile: CellProfile) -> Callable[..., None]:
        def hook(cell: Any, args: Any, output: Any) -> None:
            if not self.active:
                return
            if profile in self.stack:  # pop it and anything a failed construct left above it
                del self.stack[len(self.stack) - 1 - self.stack[::-1].index(profile) :]
            self._seen(profile, output, args)

        return hook

    def _backward(self, profile: CellProfile) -> Callable[..., None]:
        def hook(cell: Any, grad_input: Any, grad_output: Any) -> None:
            if not self.active:
                return
            arrays = float_arrays(grad_input)
            found = _max_abs(arrays)
            if found is None:
                return
            largest, finite = found
            if not finite:
                incoming = _max_abs(float_arrays(grad_output))
                profile.nonfinite |= incoming is None or incoming[1]
            profile.backward_max = max(profile.backward_max or 0.0, largest)
            for array in arrays:
                magnitude = np.abs(array.astype(np.float64))
                profile.grad_values += int(magnitude.size)
                profile.grad_tiny += int(np.count_nonzero((magnitude > 0) & (magnitude < FLOAT16_TINY)))

        return hook

    def watch(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` reporting its output to the innermost Cell running (nothing outside a Cell)."""

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            if self.active and self.stack:
                self._seen(self.stack[-1], out, (args, kwargs and list(kwargs.values())))
            return out

        return wrapped

    def end_step(self, step: int) -> None:
        for profile in self.cells.values():
            if id(profile) in self.step_max:
                profile.history.append((step, self.step_max[id(profile)]))
        self.step_max.clear()
        self.stack.clear()


#: Primitive classes watched when a Cell holds one (``self.exp = ops.Exp()``): ops that compute
#: new values. Not Reshape, Cast or Transpose: they hand their input on, and would charge a
#: ``Dense`` with the large values it was given rather than made.
PRIMITIVES = (
    "Exp",
    "Square",
    "Pow",
    "Mul",
    "MatMul",
    "BatchMatMul",
    "ReduceSum",
    "ReduceMean",
    "Sqrt",
    "Log",
    "Add",
    "AddN",
    "BiasAdd",
    "CumSum",
)


def _primitive_classes() -> list[type]:
    """The :data:`PRIMITIVES` classes (and their subclasses) that define their own ``__call__``."""
    from mindspore.ops.primitive import Primitive

    found: list[type] = []
    pending: list[type] = [Primitive]
    while pending:
        cls = pending.pop()
        if cls.__name__ in PRIMITIVES and "__call__" in cls.__dict__ and cls not in found:
            found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


class _Watched:
    """The ops of :data:`INNER_OPS`, :data:`TENSOR_METHODS` and every Primitive wrapped for one step.

    A Cell reaches an op as ``ops.exp(z)``, ``z.exp()`` or ``self.exp(z)`` with
    ``self.exp = ops.Exp()``; all three are seen (a function imported by name,
    ``from mindspore.ops import exp``, is not). Restored after the step.
    """

    def __init__(self, recorder: _Recorder) -> None:
        from mindspore import Tensor, ops

        # (owner, name, the original, whether the owner itself defined it)
        self._targets: list[tuple[Any, str, Any, bool]] = [
            (ops, name, getattr(ops, name), True) for name in INNER_OPS if hasattr(ops, name)
        ]
        # most Tensor methods live on its C++ base: shadowed on Tensor for the step, then removed
        self._targets += [
            (Tensor, name, getattr(Tensor, name), name in Tensor.__dict__)
            for name in TENSOR_METHODS
            if hasattr(Tensor, name)
        ]
        self._targets += [(cls, "__call__", cls.__dict__["__call__"], True) for cls in _primitive_classes()]
        self._recorder = recorder

    def __enter__(self) -> None:
        for owner, name, original, _ in self._targets:
            setattr(owner, name, self._recorder.watch(original))

    def __exit__(self, *exc: object) -> None:
        for owner, name, original, own in self._targets:
            if own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)


def sample_steps(steps: int, samples: int = SAMPLES) -> list[int]:
    """Which of ``steps`` steps are measured: ``samples`` spread evenly, the first and last among them."""
    return sorted({int(round(x)) for x in np.linspace(0, steps - 1, min(steps, samples))})


def passes_max_at(history: list[tuple[int, float]], horizon: int) -> int | None:
    """The step where a growing maximum would pass 65504, from a fit of log(max) on the step.

    The later half of the samples only (early training moves fast and then
    settles); None when the values do not grow, are past 65504 already or
    still far below it (:data:`EXTRAPOLATE_FROM`), or would pass it only
    beyond ``horizon``.
    """
    points = [(s, m) for s, m in history if m > 0]
    points = points[len(points) // 2 :]
    if len(points) < 3 or not EXTRAPOLATE_FROM <= points[-1][1] < FLOAT16_MAX:
        return None
    steps = np.array([s for s, _ in points], dtype=np.float64)
    logs = np.log([m for _, m in points])
    if np.ptp(steps) == 0:
        return None
    slope, intercept = np.polyfit(steps, logs, 1)
    if not slope > 0:
        return None
    crossing = (math.log(FLOAT16_MAX) - intercept) / slope
    if not (math.isfinite(crossing) and steps[-1] < crossing <= horizon):
        return None
    return int(round(crossing))


def _order(cell: CellProfile) -> tuple[int, float]:
    rank = {"overflow": 0, "underflow": 1, None: 2}[cell.risk]
    return rank, -max(cell.forward_max, cell.backward_max or 0.0)


def profile(
    workload_ref: str,
    seed: int,
    steps: int,
    workload_args: dict[str, Any] | None = None,
    *,
    prefix_steps: int = 0,
    start_step: int = 0,
    checkpoint: bytes | None = None,
    samples: int = SAMPLES,
) -> Profile:
    """Train ``steps`` FP32 steps of a workload with hooks; rate every Cell's float16 risk.

    Where to start follows the spec's ``start_from`` as trials do:
    ``prefix_steps`` N trains N compiled FP32 steps first without hooks
    (``{steps: N}``); ``checkpoint`` loads that file's bytes at ``start_step``.
    """
    config = TrialConfig(
        workload=workload_ref,
        workload_args=dict(workload_args or {}),
        steps=steps,
        abort_after=steps,
        amp_level=FP32_LEVEL,
        black_list=(),
        clip=None,
        loss_scale="none",
        dtype="float16",
        seed=seed,
        localize=False,
    )
    if checkpoint is not None:
        snapshot = "profile-" + snapshot_id(checkpoint)
        remember(snapshot, checkpoint)
        config = dataclasses.replace(config, start_step=start_step, start_from=snapshot)
    mode = _ensure_pynative()
    recorder = _Recorder()
    try:
        replay = _Replay(config, workload_ref, prefix_steps + steps)
        first = config.start_step
        bad = replay.jit_prefix(prefix_steps)
        nonfinite = None if bad is None else first + bad
        first += prefix_steps
        watched = _Watched(recorder)
        done: list[int] = []
        position = 0  # steps of the profiled stretch run so far
        for index in sample_steps(steps, samples):
            # the steps between samples: compiled, without hooks (a PyNative step costs ~50 of them)
            bad = replay.jit_prefix(index - position)
            if bad is not None and nonfinite is None:
                nonfinite = first + position + bad
            position = index
            batch = next(replay.batches, None)
            if batch is None:
                break
            recorder.attach(replay.loss_cell)
            recorder.active = True
            try:
                with watched:
                    finite, _ = replay.step(batch)
            finally:
                recorder.active = False
                recorder.detach()
            recorder.end_step(first + index)
            done.append(first + index)
            position = index + 1
            if not finite and nonfinite is None:
                nonfinite = first + index
    finally:
        recorder.detach()
        _restore_mode(mode)
    horizon = first + EXTRAPOLATE_FACTOR * steps
    cells = list(recorder.cells.values())
    for cell in cells:
        cell.passes_max_at = passes_max_at(cell.history, horizon)
    cells.sort(key=_order)
    return Profile(cells, start_step=first, steps=steps, sampled=done, nonfinite_step=nonfinite)
