"""Casting a network for one AMP policy, with MindSpore's own APIs only.

MindSpore casts Cells in place, so every policy needs a freshly built network;
the trainer guarantees that by calling the workload factory per graph.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from ampsweep.contracts import FP32_CELLS_MECHANISM, FP32_LEVEL

AMP_LEVELS = ("O0", "O1", "O2", "O3")
DTYPES = ("float16", "bfloat16")
#: MindSpore's O2 wrapper around a default-black-list Cell (casts its output back to float16)
OUTPUT_TO_16 = "_OutputTo16"


def fp32_cells_mechanism(level: str, black_list: Sequence[Any]) -> str | None:
    """What kept ``black_list`` in float32 at ``level`` (the trials table's ``fp32_cells``).

    :data:`FP32_CELLS_MECHANISM` (``cell.to_float(float32)`` per listed
    instance, :func:`keep_in_float32`, as :func:`apply_amp` does), or None
    where nothing was kept: O0 casts nothing, and an empty list keeps nothing.
    """
    return FP32_CELLS_MECHANISM if level != FP32_LEVEL and len(black_list) else None


def mindspore_nn_cell_names() -> dict[str, type]:
    """Every Cell class that ``mindspore.nn`` exports, by name."""
    from mindspore import nn

    return {name: obj for name, obj in vars(nn).items() if inspect.isclass(obj) and issubclass(obj, nn.Cell)}


def network_cell_types(cells: Iterable[Any]) -> dict[str, type]:
    """The Cell classes used anywhere inside the given Cells, by name."""
    found: dict[str, type] = {}
    for root in cells:
        for _, cell in root.cells_and_names():
            found.setdefault(type(cell).__name__, type(cell))
    return found


def known_layer_types(cells: Iterable[Any]) -> dict[str, type]:
    """Names a black list may use: the workload's own Cells first, their base classes, then ``mindspore.nn``.

    A listed class covers its subclasses (``keep_in_float32`` goes by
    ``isinstance``), so a base class of the workload's Cells may be named even
    where the network never instantiates it.
    """
    from mindspore import nn

    cells = list(cells)
    known = mindspore_nn_cell_names()
    for kind in network_cell_types(cells).values():
        for base in reversed(kind.__mro__[1:]):
            if isinstance(base, type) and issubclass(base, nn.Cell) and base is not nn.Cell:
                known[base.__name__] = base
    known.update(network_cell_types(cells))
    return known


def resolve_black_list(names: Sequence[str], known: dict[str, type]) -> list[type]:
    """Turn black-list names into classes; the spec already checked they exist."""
    return [known[name] for name in names]


def apply_amp(cell: Any, level: str, black_list: Sequence[type], dtype: str) -> Any:
    """Cast ``cell`` (network plus loss) for one policy and return it.

    O0 casts nothing. Every other level is cast by ``amp.auto_mixed_precision``
    and each Cell instance of a black-listed class (``isinstance``, so a
    subclass counts) is kept in float32 with ``cell.to_float(float32)``
    (:data:`FP32_CELLS_MECHANISM`, see :func:`keep_in_float32`): after the
    cast under O2 and O3, before it under O1, whose rewrite leaves a Cell whose
    precision was set as it is. MindSpore's default black list (BatchNorm,
    LayerNorm) stays what O2 makes of it, wherever no listed Cell encloses it.
    """
    from mindspore.common import dtype as mstype

    if level == FP32_LEVEL:
        return cell
    # O1's rewrite puts the network's source folder on sys.path and leaves it there: a
    # later ``import mindcv`` in this process would find jobs/workloads/mindcv.py instead
    path_before = list(sys.path)
    names_before = {id(param): param.name for param in cell.get_parameters()}
    try:
        cast = _cast(cell, level, black_list, getattr(mstype, dtype))
    finally:
        sys.path[:] = path_before
    _keep_names(cast, names_before)
    return cast


def _keep_names(cast: Any, names_before: dict[int, str]) -> None:
    """Give the cast Cell's parameters back the names they had before the cast.

    O1's rewrite builds a new Cell class around the same Parameter objects
    (about 0.7-0.8 s per cast of bench_vs_tune's MLP with its loss, where an
    O2 cast takes a millisecond; measured 2026-12-05) and renames them by their path in it: a ``NetworkWithLoss`` cast as a whole
    (``loss_placement: inside``) turned ``fc1.weight`` into
    ``network.fc1.weight``. Every other level keeps the user's names, and
    everything keyed by name expects them: a trial's starting values, read
    from a fresh uncast build (a held graph's second trial failed on the
    mismatch), the ``layers`` table, snapshots and checkpoints.
    """
    for param in cast.get_parameters():
        before = names_before.get(id(param))
        if before is not None and param.name != before:
            param.name = before


def _cast(cell: Any, level: str, black_list: Sequence[type], ms_dtype: Any) -> Any:
    from mindspore import amp

    if level == "O1":
        # O1 rewrites the network into new Cell classes (``DenseOpt``...), so the
        # listed instances are marked first; the rewrite does not enter them
        keep_in_float32(cell, black_list)
        return amp.auto_mixed_precision(cell, level, dtype=ms_dtype)
    cast = amp.auto_mixed_precision(cell, level, dtype=ms_dtype)
    keep_in_float32(cast, black_list, back_to=ms_dtype)
    return cast


def output_back_to(dtype: Any) -> Any:
    """A forward hook that casts a Cell's float32 outputs (a Tensor, or those in a tuple, list or dict) to ``dtype``.

    What MindSpore's ``_OutputTo16`` wrapper does for a black-listed Cell, as
    a hook: nothing wraps the Cell, and it runs under ``mindspore.jit`` too
    (MindSpore 2.7 and 2.10, measured). Without it the parent's own ops mix a
    float32 output with its float16 tensors, which ``jit`` refuses
    (``MatMulExt, the input type must be same``: a hand-written attention whose
    softmax is listed).
    """
    from mindspore import Tensor
    from mindspore.common import dtype as mstype

    float32 = mstype.float32

    def back(value: Any) -> Any:  # compiled by jit: no import inside
        if isinstance(value, Tensor) and value.dtype == float32:
            return value.astype(dtype)
        return value

    def cast_back(cell: Any, inputs: Any, output: Any) -> Any:
        if isinstance(output, tuple):
            return tuple([back(v) for v in output])
        if isinstance(output, list):
            return [back(v) for v in output]
        if isinstance(output, dict):
            return {k: back(v) for k, v in output.items()}
        return back(output)

    return cast_back


def keep_in_float32(root: Any, classes: Sequence[type], back_to: Any = None) -> int:
    """Make every Cell under ``root`` whose class is listed compute in float32; return how many.

    ``cell.to_float(float32)`` marks the instance and all its children:
    MindSpore then casts the floating inputs and Parameters that the Cell uses
    to float32 (PyNative and ``mindspore.jit`` alike), and its output is
    float32 unless ``back_to`` casts it back. Nothing wraps the
    Cell, so a tuple or dict output, keyword arguments, a parent that reads
    its attributes (``MultiheadAttention`` reads ``out_proj.weight``) and an
    instance used twice all work (``custom_mixed_precision``'s ``_OutputTo16``
    wrapper broke on the first two). A parent that reads a listed child's
    Parameters itself computes with them in its own dtype: black-listing
    ``Dense`` does not keep ``MultiheadAttention``'s ``out_proj`` product in
    float32, since it never calls ``out_proj``.

    ``back_to`` (O2, O3: the level's dtype): each outermost listed Cell hands
    its outputs back in that dtype (:func:`output_back_to`, a forward hook), as
    MindSpore's own black list does, so the parent computes as it would with
    ``custom_mixed_precision``.

    Under O2, MindSpore's default black list is wrapped in ``_OutputTo16``,
    which casts the output back to float16; inside a listed Cell that wrapper
    is replaced by the Cell it wraps, so the listed Cell computes in float32
    throughout, as ``custom_mixed_precision`` (which does not enter a listed
    Cell) did.
    """
    from mindspore import nn
    from mindspore.common import dtype as mstype

    listed = tuple(classes)
    if not listed:
        return 0
    named: list[tuple[str, Any]] = [(n, c) for n, c in root.cells_and_names() if isinstance(c, listed)]
    found: list[Any] = [cell for _, cell in named]
    for cell in found:
        cell.to_float(mstype.float32)
    if back_to is not None:  # the outermost listed Cells hand their parent the level's dtype
        names = [name for name, _ in named]
        for name, cell in named:
            if not any(name.startswith(f"{other}.") for other in names if other):
                cell.register_forward_hook(output_back_to(back_to))
    for cell in found:
        for _, inner in list(cell.cells_and_names()):
            unwrapped = False
            for name, child in list(inner.name_cells().items()):
                if type(child).__name__ == OUTPUT_TO_16:
                    inner.insert_child_to_cell(name, child._backbone)
                    unwrapped = True
            if unwrapped and isinstance(inner, nn.SequentialCell):
                inner.cell_list = list(inner.cells())  # as MindSpore's own O2 pass does
    return len(found)
