"""The workload's learning-rate argument: what a next sweep lowers when FP32 itself breaks.

Read from the spec (fixed or swept), else from the factory's source, parsed, never imported (that would
import MindSpore): a keyword argument named ``lr``, ``learning_rate`` or ``*_lr`` with a number default.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ampsweep.contracts import ReferenceFormError, locate_file, parse_reference

#: how much lower the next sweep tries, relative to the smallest rate tried so far
LOWER_BY = (3.0, 10.0)


def is_learning_rate(name: str) -> bool:
    """'lr', 'learning_rate', 'base_lr', 'head_learning_rate': a factory argument that sets a learning rate."""
    name = name.lower()
    return name in ("lr", "learning_rate") or name.endswith(("_lr", "_learning_rate"))


@dataclass(frozen=True)
class LearningRate:
    """The factory's learning-rate argument and the values the sweep ran it at."""

    name: str
    tried: tuple[float, ...]
    swept: bool  # already an axis of ``grid.workload_args``

    def next_values(self) -> list[float]:
        """The values a next sweep runs: those tried, then lower ones (2 significant digits)."""
        low = min(self.tried)
        return [*self.tried, *(float(f"{low / by:.2g}") for by in LOWER_BY)]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return float(value)


def learning_rate_of(spec: dict[str, Any], spec_dir: str | Path | None = None) -> LearningRate | None:
    """The learning-rate argument of the spec's workload, or None (the factory takes none we can read)."""
    grid = spec.get("grid") or {}
    for name, values in (grid.get("workload_args") or {}).items():
        numbers = [n for n in map(_number, values or []) if n is not None]
        if is_learning_rate(str(name)) and numbers:
            return LearningRate(str(name), tuple(numbers), swept=True)
    for name, value in (spec.get("workload_args") or {}).items():
        if is_learning_rate(str(name)) and _number(value) is not None:
            return LearningRate(str(name), (float(value),), swept=False)
    defaults = _factory_defaults(str(spec.get("workload", "")), Path(spec_dir) if spec_dir else None)
    for name, value in defaults.items():
        if is_learning_rate(name) and _number(value) is not None:
            return LearningRate(name, (float(value),), swept=False)
    return None


def _source_file(reference: str, spec_dir: Path | None) -> tuple[Path, str] | None:
    """The file that defines the factory, found without importing anything."""
    try:
        parsed = parse_reference(reference)
    except ReferenceFormError:
        return None
    if parsed.is_file:
        found = locate_file(parsed, spec_dir)
        return None if found is None else (Path(found.module), parsed.attr)
    parts = parsed.module.split(".")
    for base in sys.path:
        for candidate in (Path(base, *parts).with_suffix(".py"), Path(base, *parts, "__init__.py")):
            if candidate.is_file():
                return candidate, parsed.attr
    return None


def _factory_defaults(reference: str, spec_dir: Path | None) -> dict[str, Any]:
    """The factory's keyword arguments with a constant default, from its source; {} when unreadable."""
    found = _source_file(reference, spec_dir)
    if found is None:
        return {}
    path, attr = found
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, ValueError):
        return {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == attr:
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            return {a.arg: d.value for a, d in pairs if isinstance(d, ast.Constant)}
    return {}
