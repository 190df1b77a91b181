"""The hooks of ``ampsweep profile``: what each Cell's values reached, ops inside it included.

A forward pre-hook pushes a Cell on a stack and its forward hook pops it, so
the watched ops (:class:`Watched`) report to the innermost Cell running: a
softmax's ``exp`` counts for the softmax, not for the ``Dense`` before it.
The hooks are attached for a sampled PyNative step only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ampsweep.contracts import FLOAT16_MAX, FLOAT16_TINY, UNDERFLOW_EVIDENCE

from ..localization._hooks import display_name, float_arrays
from ..localization._inside import INNER_OPS

#: a value within this factor of float16's maximum counts as an overflow risk
OVERFLOW_MARGIN = 2.0
#: ``Tensor`` methods and operators watched like :data:`INNER_OPS` (``e.sum(-1)``, ``x * x``)
TENSOR_METHODS = ("exp", "sum", "mean", "square", "pow", "matmul", "__mul__", "__matmul__", "__pow__")


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


def _max_abs(arrays: list[np.ndarray]) -> tuple[float, bool] | None:
    """(max |x| of the finite part, all finite), or None when nothing floating was given."""
    flat = [a.astype(np.float64).reshape(-1) for a in arrays if a.size]
    if not flat:
        return None
    values = np.concatenate(flat)
    ok = np.isfinite(values)
    finite = np.abs(values[ok])
    return (float(finite.max()) if finite.size else 0.0), bool(ok.all())


class Recorder:
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
            if name is None or kind == "NetworkWithLoss":
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


class Watched:
    """The ops of :data:`INNER_OPS`, :data:`TENSOR_METHODS` and every Primitive wrapped for one step.

    A Cell reaches an op as ``ops.exp(z)``, ``z.exp()`` or ``self.exp(z)`` with
    ``self.exp = ops.Exp()``; all three are seen (a function imported by name,
    ``from mindspore.ops import exp``, is not). Restored after the step.
    """

    def __init__(self, recorder: Recorder) -> None:
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
