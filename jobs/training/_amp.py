"""Casting a network for one AMP policy, with MindSpore's own APIs only.

MindSpore casts Cells in place, so every policy needs a freshly built network;
the trainer guarantees that by calling the workload factory per graph.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from ampsweep.contracts import FP32_LEVEL

AMP_LEVELS = ("O0", "O1", "O2", "O3")
DTYPES = ("float16", "bfloat16")


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
    """Names a black list may use: the workload's own Cells first, then ``mindspore.nn``."""
    known = mindspore_nn_cell_names()
    known.update(network_cell_types(cells))
    return known


def resolve_black_list(names: Sequence[str], known: dict[str, type]) -> list[type]:
    """Turn black-list names into classes; the spec already checked they exist."""
    return [known[name] for name in names]


def apply_amp(cell: Any, level: str, black_list: Sequence[type], dtype: str) -> Any:
    """Cast ``cell`` (network plus loss) for one policy and return it.

    O0 casts nothing. Without a black list the level goes to
    ``amp.auto_mixed_precision``. With one: under O1 (only white-listed ops in
    low precision) the classes are removed from the white list; under O2 they
    are added to MindSpore's default black list (``custom_mixed_precision``
    replaces the default, it does not extend it); under O3 (cast everything)
    they are the whole black list.
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

    if not black_list:
        return amp.auto_mixed_precision(cell, level, dtype=ms_dtype)
    if level == "O1":
        white = [c for c in amp.get_white_list() if c not in set(black_list)]
        return amp.custom_mixed_precision(cell, white_list=white, dtype=ms_dtype)
    base = amp.get_black_list() if level == "O2" else []
    merged = base + [c for c in black_list if c not in base]
    return amp.custom_mixed_precision(cell, black_list=merged, dtype=ms_dtype)
