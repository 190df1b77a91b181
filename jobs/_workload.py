"""The contract between ampsweep and a user's model, and how a factory is found.

A workload is deliberately a plain dataclass of MindSpore objects: a user's
existing Cell, loss and optimizer fit without subclassing anything of ours.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ampsweep.contracts import ReferenceFormError, parse_reference


@dataclass
class Workload:
    """What ``make(seed=..., **workload_args)`` returns.

    ``network`` maps inputs to predictions and ``loss_fn`` maps
    ``(predictions, label)`` to a scalar; ampsweep wraps both in one Cell so
    the loss itself can be kept in FP32 by a black list. ``optimizer`` is a
    callable because the optimizer must be built over the parameters of the
    network *after* AMP has cast it. ``batches`` is either an iterable of
    tuples ``(*inputs, label)`` of NumPy arrays or Tensors, at least ``steps``
    long, or a ``mindspore.dataset`` pipeline, which is repeated over as many
    epochs as ``steps`` needs.
    """

    network: Any
    loss_fn: Any
    optimizer: Callable[[list[Any]], Any]
    batches: Iterable[tuple[Any, ...]] | Any  # or a mindspore.dataset.Dataset
    target_loss: float | None = None


class WorkloadError(ValueError):
    """A workload reference that cannot be imported or called."""


def _module_name_for_file(path: Path) -> str:
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]
    return f"ampsweep_workload_{path.stem}_{digest}"


def _load_module_from_file(path: Path) -> Any:
    # mindspore.jit and amp's O1 rewrite read a Cell's source through
    # sys.modules, so the module must be registered before any class in it is
    # compiled; a stable name keeps a second load from creating a twin module.
    name = _module_name_for_file(path)
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise WorkloadError(f"workload: cannot import {str(path)!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def split_reference(reference: str) -> tuple[str, str]:
    """Split ``module:attr`` / ``file.py:attr`` into its two parts (the contract's parser)."""
    try:
        parsed = parse_reference(reference)
    except ReferenceFormError as exc:
        raise WorkloadError(f"workload: {reference!r}: {exc}") from None
    return parsed.module, parsed.attr


def resolve_reference(reference: str, base_dir: Path | None = None) -> str:
    """Make a file reference absolute, so it means the same thing in every process."""
    module_part, attr = split_reference(reference)
    if not module_part.endswith(".py"):
        return reference
    path = Path(module_part).expanduser()
    candidates = [path] if path.is_absolute() else [Path.cwd() / path]
    if base_dir is not None and not path.is_absolute():
        candidates.append(base_dir / path)
    for candidate in candidates:
        if candidate.is_file():
            return f"{candidate.resolve()}:{attr}"
    raise WorkloadError(f"workload: file {module_part!r} does not exist")


def load_factory(reference: str) -> Callable[..., Workload]:
    """Import the factory a spec names."""
    module_part, attr = split_reference(reference)
    try:
        if module_part.endswith(".py"):
            module = _load_module_from_file(Path(module_part))
        else:
            module = importlib.import_module(module_part)
    except WorkloadError:
        raise
    except Exception as exc:  # the user's module failed to import
        raise WorkloadError(
            f"workload: importing {module_part!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise WorkloadError(f"workload: {module_part!r} has no callable {attr!r}")
    return factory


def build_workload(reference: str, seed: int, workload_args: dict[str, Any]) -> Workload:
    """Call the factory and check that it kept its side of the contract."""
    workload = load_factory(reference)(seed=seed, **workload_args)
    if not isinstance(workload, Workload):
        raise WorkloadError(
            f"workload: {reference!r} returned {type(workload).__name__}, expected ampsweep.Workload"
        )
    return workload
