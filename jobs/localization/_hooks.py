"""Forward and backward hooks on every Cell of a cast network, for localization: only on a PyNative
*replay* (``_localize``), never on the compiled step (a Python call and a host copy per Cell per step).

MindSpore facts relied on (2.10, CPU): ``register_forward_hook(fn)`` calls ``fn(cell, args, output)``
when ``construct`` returns, innermost first, once per call. ``register_backward_hook(fn)`` calls
``fn(cell, grad_input, grad_output)`` under PyNative ``value_and_grad``, in reverse execution order with
containers after their children; ``grad_input`` holds ``None`` for an input that needs no gradient (raw
data, an integer label). The cast wraps no Cell (``ampsweep.amp.keep_in_float32``): a Cell kept in float32
hands its parent the level's dtype through a forward hook registered before these, so it reports the
dtype its parent receives.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ampsweep.contracts import saturated


def display_name(qualified: str) -> str | None:
    """The name a user knows a Cell by: ``network.norm1`` reads ``norm1``; ``None`` for ``NetworkWithLoss``.

    The user's root network is ``network``, the loss ``loss_fn``;
    ``NetworkWithLoss`` itself (name ``""``) is not a layer and is skipped.
    """
    if not qualified:
        return None
    return qualified.removeprefix("network.")


def float_arrays(value: Any) -> list[np.ndarray]:
    """Every floating-point tensor in a hook argument, as NumPy (None and ints skipped)."""
    if value is None:
        return []
    if isinstance(value, (tuple, list)):
        return [a for item in value for a in float_arrays(item)]
    dtype = getattr(value, "dtype", None)
    if dtype is None or not hasattr(value, "asnumpy"):
        return []
    if "float" not in str(dtype).lower():
        return []
    return [value.asnumpy()]


def first_float_dtype(value: Any) -> str | None:
    """The dtype name of the first floating-point tensor (``float16``, ``float32``)."""
    if isinstance(value, (tuple, list)):
        for item in value:
            found = first_float_dtype(item)
            if found is not None:
                return found
        return None
    dtype = getattr(value, "dtype", None)
    text = str(dtype).lower() if dtype is not None else ""
    return text if "float" in text else None


@dataclass
class TensorStats:
    """What localization needs from one tensor (or all tensors a Cell produced)."""

    finite: bool
    max_abs: float  # of the finite part; 0.0 when nothing is finite
    zero_fraction: float
    size: int

    @classmethod
    def of(cls, arrays: list[np.ndarray]) -> TensorStats | None:
        if not arrays:
            return None
        flat = np.concatenate([a.astype(np.float64).reshape(-1) for a in arrays])
        if flat.size == 0:
            return None
        ok = np.isfinite(flat)
        finite_part = np.abs(flat[ok])
        return cls(
            # a float16 value at ±65504 is where a saturating chip put an overflow
            finite=bool(ok.all()) and not any(saturated(a) for a in arrays),
            max_abs=float(finite_part.max()) if finite_part.size else 0.0,
            zero_fraction=float(np.mean(flat == 0.0)),
            size=int(flat.size),
        )


@dataclass
class Event:
    """One hook call: a Cell finished its forward pass, or its input gradient was computed."""

    name: str
    cell_class: str
    phase: str  # forward | backward
    call: int  # how many times this Cell had reported in this phase before, this step
    input_dtype: str | None
    output_dtype: str | None
    stats: TensorStats
    incoming_finite: bool = True  # backward: was the gradient arriving at the output finite?
    forward_call: int = 0  # backward: which forward call of this Cell the gradient belongs to
    input_max_abs: float | None = None  # forward: max |x| of the finite part of the inputs
    #: forward: every floating input was finite (False: the value broke before this Cell was called)
    inputs_finite: bool = True
    array: np.ndarray | None = None  # forward output, kept only when comparing
    #: forward, only when finite inputs gave a non-finite output: the Cell and its inputs,
    #: so a primitive-level replay can look inside it (``jobs.localization._inside``)
    cell: Any = None
    inputs: tuple[Any, ...] | None = None


@dataclass
class CellProbe:
    """Hooks on every Cell of one cast loss cell; records only while ``active``.

    Hooks stay registered for the whole replay and return immediately while
    inactive, so training steps between checks cost one Python call per Cell.
    ``keep_arrays`` keeps forward outputs for a comparison with another
    network (departure mode); otherwise only statistics are kept.
    """

    keep_arrays: bool = False
    backward: bool = True
    active: bool = False
    events: list[Event] = field(default_factory=list)
    order: dict[str, int] = field(default_factory=dict)  # name -> index of first forward report
    _dtypes: dict[tuple[str, int], tuple[str | None, str | None]] = field(default_factory=dict)
    _calls: dict[tuple[str, str], int] = field(default_factory=dict)
    _handles: list[Any] = field(default_factory=list)

    def attach(self, loss_cell: Any) -> CellProbe:
        for qualified, cell in loss_cell.cells_and_names():
            name = display_name(qualified)
            if name is None or type(cell).__name__ == "NetworkWithLoss":
                continue
            self._handles.append(cell.register_forward_hook(self._forward_hook(name)))
            if self.backward:
                self._handles.append(cell.register_backward_hook(self._backward_hook(name)))
        return self

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def start(self) -> None:
        """Record the next step from a clean slate."""
        self.active = True
        self.events = []
        self._dtypes = {}
        self._calls = {}

    def stop(self) -> None:
        self.active = False

    def _next_call(self, name: str, phase: str) -> int:
        key = (name, phase)
        call = self._calls.get(key, 0)
        self._calls[key] = call + 1
        return call

    def _forward_hook(self, name: str) -> Any:
        def hook(cell: Any, args: Any, output: Any) -> None:
            if not self.active:
                return None
            arrays = float_arrays(output)
            stats = TensorStats.of(arrays)
            call = self._next_call(name, "forward")
            dtypes = (first_float_dtype(args), first_float_dtype(output))
            self._dtypes[(name, call)] = dtypes
            self.order.setdefault(name, len(self.order))
            if stats is None:
                return None
            array = None
            if self.keep_arrays:
                array = np.concatenate([a.astype(np.float64).reshape(-1) for a in arrays])
            inputs = TensorStats.of(float_arrays(args))
            # the overflow happened inside this Cell: keep what a replay of it needs (rare, so cheap)
            inside = not stats.finite and (inputs is None or inputs.finite)
            self.events.append(
                Event(
                    name,
                    type(cell).__name__,
                    "forward",
                    call,
                    dtypes[0],
                    dtypes[1],
                    stats,
                    array=array,
                    forward_call=call,
                    input_max_abs=None if inputs is None else inputs.max_abs,
                    inputs_finite=inputs is None or inputs.finite,
                    cell=cell if inside else None,
                    inputs=tuple(args) if inside else None,
                )
            )
            return None

        return hook

    def _backward_hook(self, name: str) -> Any:
        def hook(cell: Any, grad_input: Any, grad_output: Any) -> None:
            if not self.active:
                return None
            stats = TensorStats.of(float_arrays(grad_input))
            call = self._next_call(name, "backward")
            if stats is None:  # no input of this Cell needs a gradient
                return None
            # the k-th backward report undoes the (n-1-k)-th forward call
            forward_call = max(0, self._calls.get((name, "forward"), 1) - 1 - call)
            in_dtype, out_dtype = self._dtypes.get((name, forward_call), (None, None))
            incoming = TensorStats.of(float_arrays(grad_output))
            self.events.append(
                Event(
                    name,
                    type(cell).__name__,
                    "backward",
                    call,
                    in_dtype,
                    out_dtype,
                    stats,
                    incoming_finite=incoming is None or incoming.finite,
                    forward_call=forward_call,
                )
            )
            return None

        return hook

    def first_nonfinite(self, phase: str) -> Event | None:
        """The first report of ``phase`` whose tensor holds inf or NaN: forward, the first Cell that
        turned finite inputs into a non-finite output.

        That is the innermost Cell whose own computation broke, so keeping it in
        FP32 can help. A Cell that only received the broken value comes first in
        the hooks' order, yet is not it: an overflow in a functional op of
        mindcv's ``Attention`` (``q @ k``) reaches its ``attn_drop`` Dropout as
        NaN, and the Dropout reports before the Attention that called it.
        Without such a Cell (every broken output had broken inputs, e.g. a
        non-finite batch), the first broken output.
        """
        broken = [e for e in self.events if e.phase == phase and not e.stats.finite]
        if phase == "forward":
            own = next((e for e in broken if e.inputs_finite), None)
            if own is not None:
                return own
        return broken[0] if broken else None

    def find(self, name: str, phase: str, call: int) -> Event | None:
        return next((e for e in self.events if e.name == name and e.phase == phase and e.call == call), None)

    def forward_events(self) -> Iterable[Event]:
        return (e for e in self.events if e.phase == "forward")
