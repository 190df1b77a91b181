"""What happened inside a Cell whose finite inputs gave a non-finite output: its ops replayed one by one.

``jobs.localization._localize`` names the Cell; this runs the Cell's ``construct`` again
on the inputs its forward hook kept, with the ``mindspore.ops`` functions it
may call watched, and names the first op that overflowed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ampsweep.contracts import saturated

from ._hooks import Event

#: ``mindspore.ops`` functions a primitive-level replay of one Cell watches: the
#: elementwise ones that overflow float16 while the Cell's output can stay bounded
#: (``exp`` before a division, a square before a square root or a mean).
INNER_OPS = ("exp", "square", "pow", "mul", "matmul", "sum", "reduce_sum", "mean", "sqrt", "log")


@dataclass
class Inside:
    """What a primitive-level replay of one Cell saw inside it."""

    #: the first watched op whose finite input gave a non-finite (or saturated) output; "" if none
    op: str = ""
    #: max |x| of that op's input; for ``exp``, the input's largest value (see ``_overflowing_input``)
    op_input_max_abs: float | None = None
    #: max |x| over the finite part of every intermediate the watched ops produced
    intermediate_max_abs: float | None = None


def _finite_part(value: Any) -> tuple[np.ndarray, bool] | None:
    """(the finite elements as float64, whether all were finite and unsaturated) of a float Tensor, or None."""
    try:
        array = value.asnumpy()
    except AttributeError:
        return None
    if not np.issubdtype(array.dtype, np.floating) or array.size == 0:
        return None
    flat = array.astype(np.float64).reshape(-1)
    ok = np.isfinite(flat)
    return flat[ok], bool(ok.all()) and not saturated(array)


def _max_abs(value: Any) -> tuple[float, bool] | None:
    """(max |x| of the finite part, all finite) of a float Tensor, or None."""
    found = _finite_part(value)
    if found is None:
        return None
    finite, ok = found
    return (float(np.abs(finite).max()) if finite.size else 0.0), ok


def _overflowing_input(name: str, value: Any) -> float | None:
    """The size of an op's input that matters for its overflow: max |x|, but for ``exp`` the largest value.

    ``exp`` overflows on large positive inputs only; a large negative one gives
    0. An attention mask written as ``-1e4`` made max |x| 10000 where the scores
    that overflowed were 11.3, and the report said "input max 1e4 > ln 65504".
    """
    found = _finite_part(value)
    if found is None or not found[0].size:
        return None
    finite = found[0]
    return float(finite.max()) if name == "exp" else float(np.abs(finite).max())


def replay_inside(event: Event) -> Inside | None:
    """Re-run a Cell whose finite inputs gave a non-finite output, watching the ops inside it.

    The Cell's ``construct`` runs again in PyNative on the inputs its forward
    hook kept (already in the Cell's compute dtype), with the functions of
    :data:`INNER_OPS` in ``mindspore.ops`` wrapped for the call: each records
    its input's and output's max |x|. This sees an op that the Cell reaches as
    ``ops.exp(...)``; one imported by name is not seen, and then the report says
    plainly that the overflow happened inside the Cell. None when the event
    kept no inputs.
    """
    if event.cell is None or event.inputs is None:
        return None
    import mindspore

    ops_module = mindspore.ops
    seen = Inside()
    largest: list[float] = []
    originals = {name: getattr(ops_module, name) for name in INNER_OPS if hasattr(ops_module, name)}

    def watch(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            ins = [m for m in (_max_abs(a) for a in args) if m is not None]
            result = _max_abs(out)
            if result is not None and result[1]:
                largest.append(result[0])
            if not seen.op and result is not None and not result[1] and ins and all(ok for _, ok in ins):
                seen.op = name
                sizes = [size for size in (_overflowing_input(name, a) for a in args) if size is not None]
                seen.op_input_max_abs = max(sizes) if sizes else None
            return out

        return wrapped

    try:
        for name, fn in originals.items():
            setattr(ops_module, name, watch(name, fn))
        event.cell.construct(*event.inputs)
    except Exception:  # noqa: BLE001 - a Cell that cannot run alone still has its hook figures
        return None
    finally:
        for name, fn in originals.items():
            setattr(ops_module, name, fn)
    seen.intermediate_max_abs = max(largest) if largest else None
    return seen
