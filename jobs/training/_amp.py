"""Casting a network for one AMP policy, with MindSpore's public API only.

MindSpore casts Cells in place, so every policy needs a freshly built network;
the trainer guarantees that by calling the workload factory per graph. The
cast itself is :func:`ampsweep.amp.keep_in_float32`, the function users
import or paste: the code the report gives is the code that ran.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ampsweep.amp import keep_in_float32, listed_cells, outermost
from ampsweep.contracts import FP32_CELLS_MECHANISM, FP32_LEVEL, LOSS_INSIDE


def fp32_cells_mechanism(level: str, black_list: Sequence[Any]) -> str | None:
    """What kept ``black_list`` in float32 at ``level`` (the trials table's ``fp32_cells``); None for nothing."""
    return FP32_CELLS_MECHANISM if level != FP32_LEVEL and len(black_list) else None


@dataclass(frozen=True)
class Fp32Part:
    """What a black list keeps in FP32: parameter elements, and the paths of the outermost listed Cells.

    The ranking compares configurations by it ("fewer in FP32" is how much of
    the network, not how many names the list holds) and puts one whose paths
    contain another's below it (``encoder`` contains ``encoder.self_attn``).
    """

    params: int = 0
    paths: tuple[str, ...] = ()


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
    if loss_placement == LOSS_INSIDE:
        found += [("loss_fn" + (f".{p}" if p else ""), c) for p, c in listed_cells(loss_fn, classes)]
    by_path = dict(found)
    paths = outermost(list(by_path))
    seen: set[int] = set()
    params = 0
    for path in paths:
        for param in by_path[path].get_parameters():
            if id(param) not in seen:
                seen.add(id(param))
                params += int(param.size)
    return Fp32Part(params, tuple(sorted(paths)))


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
    known = {name: obj for name, obj in vars(nn).items() if inspect.isclass(obj) and issubclass(obj, nn.Cell)}
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
    """Cast ``cell`` (network plus loss) for one policy and return it: :func:`ampsweep.amp.keep_in_float32`.

    Around it, what a sweep needs: O1's rewrite leaves the network's source
    folder on ``sys.path`` (a later ``import mindcv`` would find
    ``jobs/workloads/mindcv.py``) and renames the parameters (:func:`_keep_names`).
    ``ampsweep.amp.NotKeptInFloat32`` (a listed Cell refuses float32): ``not_applicable``.
    """
    from mindspore.common import dtype as mstype

    if level == FP32_LEVEL:
        return cell
    path_before = list(sys.path)
    names_before = {id(param): param.name for param in cell.get_parameters()}
    try:
        cast = keep_in_float32(cell, black_list, level, getattr(mstype, dtype))
    finally:
        sys.path[:] = path_before
    _keep_names(cast, names_before)
    return cast


def _keep_names(cast: Any, names_before: dict[int, str]) -> None:
    """Give the cast Cell's parameters back the names they had before the cast.

    O1's rewrite builds new Cell classes around the same Parameters and
    renames them by their path: a ``NetworkWithLoss`` cast whole turned
    ``fc1.weight`` into ``network.fc1.weight``. Everything keyed by name
    expects the user's: a trial's starting values (a held graph's second
    trial failed on the mismatch), the ``layers`` table, snapshots.
    """
    for param in cast.get_parameters():
        before = names_before.get(id(param))
        if before is not None and param.name != before:
            param.name = before
