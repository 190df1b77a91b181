"""Keep chosen Cell classes in float32 under an AMP level, with MindSpore's public API only.

``amp.custom_mixed_precision(net, black_list=...)`` wraps each listed Cell in a
private wrapper that casts its output back to float16: it breaks on a Cell that
returns a tuple (``nn.MultiheadAttention``) and on a parent that reads the
child's attributes (``out_proj.weight``), and code that reaches into the
wrappers breaks on the next MindSpore release. :func:`keep_in_float32` builds
the level from public parts (``Cell.to_float``, forward hooks,
``amp.get_black_list``; O1 is ``amp.auto_mixed_precision``'s) and, wherever
MindSpore's API works too, computes the same bit for bit
(``tests/test_keep_in_float32.py``). Use it instead of ``auto_mixed_precision``::

    from ampsweep.amp import keep_in_float32

    net = keep_in_float32(net, (MyNorm, nn.MultiheadAttention), "O2")
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ampsweep.contracts import error_line

AMP_LEVELS = ("O0", "O1", "O2", "O3")


class NotKeptInFloat32(RuntimeError):
    """A listed Cell refused float32 (its ``to_float`` or hook raised); the message is one line.

    It names the class and the Cell's path, so a caller can tell "this
    configuration cannot be built" from a failure of the training itself.
    """

    def __init__(self, class_name: str, cell_path: str, cause: BaseException) -> None:
        self.class_name = class_name
        why = error_line(cause)
        super().__init__(f"{class_name} cannot be kept in FP32 ({cell_path or 'the network itself'}): {why}")


def listed_cells(root: Any, classes: Sequence[type]) -> list[tuple[str, Any]]:
    """``(path, cell)`` of every Cell under ``root`` (itself included, as ``""``) whose class is listed.

    ``isinstance``: a listed class covers its subclasses. The one rule of what
    a black list selects.
    """
    listed = tuple(classes)
    return [(n, c) for n, c in root.cells_and_names() if isinstance(c, listed)] if listed else []


def outermost(paths: Sequence[str]) -> list[str]:
    """The paths not inside another of them (``""``, the root, is outside everything)."""
    paths = list(dict.fromkeys(paths))
    inside = [p for p in paths for o in paths if o != p and (o == "" or p.startswith(f"{o}."))]
    return [p for p in paths if p not in inside]


def outputs_to(dtype: Any) -> Any:
    """A forward hook that casts a Cell's floating outputs (a Tensor, or in a tuple, list or dict) to ``dtype``.

    What MindSpore's wrappers do (back to float16 around a black-listed Cell,
    to float32 around the network), without wrapping: under ``mindspore.jit`` too.
    """
    import mindspore as ms

    floats = (ms.float16, ms.bfloat16, ms.float32, ms.float64)

    def cast(value: Any) -> Any:  # compiled by jit: no import inside
        if isinstance(value, ms.Tensor) and value.dtype in floats and value.dtype != dtype:
            return value.astype(dtype)
        return value

    def hook(cell: Any, inputs: Any, output: Any) -> Any:
        if isinstance(output, tuple):
            return tuple([cast(v) for v in output])
        if isinstance(output, list):
            return [cast(v) for v in output]
        if isinstance(output, dict):
            return {k: cast(v) for k, v in output.items()}
        return cast(output)

    return hook


def keep_in_float32(network: Any, classes: Sequence[type], amp_level: str = "O2", dtype: Any = None) -> Any:
    """Cast ``network`` in place for ``amp_level`` with every instance of ``classes`` in float32; return it.

    Why not ``amp.custom_mixed_precision``: see the module docstring. Here
    nothing wraps a listed Cell, so every kind of Cell can be listed:

    * O0 casts nothing.
    * O1: each listed instance is marked ``to_float(float32)`` first; O1's
      rewrite (``amp.auto_mixed_precision``) leaves a Cell whose precision
      was set alone (marking after it finds nothing: the rewrite made copies).
    * O2 and O3: the network computes in ``dtype`` (``to_float``), each listed
      instance (for O2 also ``amp.get_black_list()``, MindSpore's LayerNorm and
      BatchNorm) in float32. The outermost listed Cells hand their outputs back
      to their parent in ``dtype`` and the network hands its own out in
      float32 (forward hooks), as ``amp.auto_mixed_precision`` and
      ``custom_mixed_precision`` do. A LayerNorm inside a listed Cell
      therefore stays in float32 throughout.

    ``isinstance`` selects, so a listed class covers its subclasses. A listed
    Cell that refuses (its ``to_float`` or hook raises) raises
    :class:`NotKeptInFloat32`, naming it.
    """
    import mindspore as ms
    from mindspore import amp

    if amp_level not in AMP_LEVELS:
        raise ValueError(f"amp_level: {amp_level!r} is not one of {', '.join(AMP_LEVELS)}")
    if amp_level == "O0":
        return network
    dtype = dtype or ms.float16
    classes = tuple(classes) + (tuple(amp.get_black_list()) if amp_level == "O2" else ())
    if amp_level != "O1":
        network.to_float(dtype)
    kept = listed_cells(network, classes)
    tops = outermost([name for name, _ in kept])
    for name, cell in kept:
        try:
            cell.to_float(ms.float32)
            if name and name in tops and amp_level != "O1":  # the network's own output goes to float32
                cell.register_forward_hook(outputs_to(dtype))
        except Exception as exc:  # the Cell refuses float32: the configuration cannot be built
            raise NotKeptInFloat32(type(cell).__name__, name, exc) from exc
    if amp_level == "O1":  # its rewrite leaves a Cell whose precision was set as it is
        return amp.auto_mixed_precision(network, "O1", dtype=dtype)
    network.register_forward_hook(outputs_to(ms.float32))
    return network
