"""Casting a network for one AMP policy, with MindSpore's own APIs only.

MindSpore casts Cells in place, so every policy needs a freshly built network;
the trainer guarantees that by calling the workload factory per graph.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
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


class BlackListNotApplicable(RuntimeError):
    """Keeping a listed class in float32 raised: the trial's outcome is ``not_applicable``, not ``failed``.

    The configuration the user asked for could not be built, so it says
    nothing about mixed precision: it must not count as a broken
    configuration, and the adaptive search must not read it as "this class in
    FP32 did not help". The message is one line that names the class and why.
    """

    def __init__(self, class_name: str, cell_path: str, cause: BaseException) -> None:
        self.class_name = class_name
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
        why = f"{type(cause).__name__}: {first}" if first else type(cause).__name__
        # O2 and O3 wrap the network (its Cells sit under `_backbone.`): name the path the user knows
        where = cell_path.removeprefix("_backbone.") if cell_path != "_backbone" else ""
        where = where or "the network itself"
        super().__init__(f"{class_name} cannot be kept in FP32 ({where}): {why}")


@dataclass(frozen=True)
class Fp32Part:
    """What a black list keeps in FP32: parameter elements, and the paths of the outermost listed Cells.

    The ranking compares configurations by it ("fewer in FP32" is how much of
    the network, not how many names the list holds) and puts one whose paths
    contain another's below it (``encoder`` contains ``encoder.self_attn``).
    """

    params: int = 0
    paths: tuple[str, ...] = ()


#: graph_id -> the FP32 part its cast kept (this process's casts): the trainer builds a
#: ``TrialResult`` without it, and ``TrialResult`` picks it up here by its config's graph
_CAST_PARTS: dict[str, Fp32Part] = {}


def record_fp32_part(graph_id: str, part: Fp32Part) -> None:
    """Remember what the cast of ``graph_id`` kept in FP32, for the trials of that graph."""
    _CAST_PARTS[graph_id] = part


def recorded_fp32_part(graph_id: str) -> Fp32Part | None:
    """What this process's cast of ``graph_id`` kept in FP32; None where it never cast it."""
    return _CAST_PARTS.get(graph_id)


def listed_cells(root: Any, classes: Sequence[type]) -> list[tuple[str, Any]]:
    """``(path, cell)`` of every Cell under ``root`` (itself included, as ``""``) whose class is listed.

    ``isinstance``: a listed class covers its subclasses. The one rule of what
    a black list selects, for :func:`keep_in_float32` and :func:`fp32_part`.
    """
    listed = tuple(classes)
    if not listed:
        return []
    return [(name, cell) for name, cell in root.cells_and_names() if isinstance(cell, listed)]


def outermost(paths: Iterable[str]) -> list[str]:
    """The paths not inside another of them (``""``, the root, is outside everything)."""
    paths = list(dict.fromkeys(paths))
    return [p for p in paths if not any(_inside(p, other) for other in paths if other != p)]


def _inside(path: str, outer: str) -> bool:
    return outer == "" or path.startswith(f"{outer}.")


def fp32_part(
    network: Any, loss_fn: Any, level: str, classes: Sequence[type], loss_placement: str
) -> Fp32Part:
    """What ``classes`` keep in FP32 at ``level``: the outermost listed Cells and their parameter elements.

    Nothing under O0 (nothing is cast) or with an empty list. The loss counts
    only when it is cast with the network (``loss_placement: inside``); its
    paths start with ``loss_fn``. Parameters are counted once each, in
    elements, over the uncast network: the cast changes dtypes, not shapes.
    """
    if level == FP32_LEVEL or not classes:
        return Fp32Part()
    found = listed_cells(network, classes)
    if loss_placement == "inside":
        found += [("loss_fn" + (f".{p}" if p else ""), c) for p, c in listed_cells(loss_fn, classes)]
    by_path = dict(found)
    paths = outermost(by_path)
    seen: set[int] = set()
    params = 0
    for path in paths:
        for param in by_path[path].get_parameters():
            if id(param) not in seen:
                seen.add(id(param))
                params += int(param.size)
    return Fp32Part(params, tuple(sorted(paths)))


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

    A listed Cell that refuses any of this (``to_float`` or the hook raises)
    makes the whole configuration impossible to build: that is
    :class:`BlackListNotApplicable`, which the trial records as
    ``not_applicable`` rather than as a failure of mixed precision.
    """
    from mindspore import nn
    from mindspore.common import dtype as mstype

    named = listed_cells(root, classes)
    if not named:
        return 0
    found: list[Any] = [cell for _, cell in named]
    for name, cell in named:
        try:
            cell.to_float(mstype.float32)
        except Exception as exc:  # the Cell refuses float32: the configuration cannot be built
            raise BlackListNotApplicable(type(cell).__name__, name, exc) from exc
    if back_to is not None:  # the outermost listed Cells hand their parent the level's dtype
        names = [name for name, _ in named]
        for name, cell in named:
            if not any(name.startswith(f"{other}.") for other in names if other):
                try:
                    cell.register_forward_hook(output_back_to(back_to))
                except Exception as exc:
                    raise BlackListNotApplicable(type(cell).__name__, name, exc) from exc
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
