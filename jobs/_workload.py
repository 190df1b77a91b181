"""The contract between ampsweep and a user's model, and how a factory is found.

A workload is deliberately a plain dataclass of MindSpore objects: a user's
existing Cell, loss and optimizer fit without subclassing anything of ours.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ampsweep.contracts import ReferenceFormError, WorkloadReference, locate_file, parse_reference


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
    #: the global step ``batches`` begins at: set by ampsweep when the factory took ``start_step``
    data_start: int = 0


class WorkloadError(ValueError):
    """A workload reference that cannot be imported or called.

    ``failed``: something went wrong while using it (its import raised, the
    factory is missing), as opposed to a reference that is not allowed (the
    old package names, the wrong form, a factory returning the wrong type).
    """

    def __init__(self, message: str, *, failed: bool = False) -> None:
        super().__init__(message)
        self.failed = failed


# --- the names before one namespace (issue 18) ------------------------------
# A spec or workload file written against them must fail with one line that
# says what to write instead, also where a checkout makes the bare packages
# importable (cwd = the repository root), and without refusing a user's own
# package that happens to be called ``jobs``.

#: old top-level package -> where it lives now
_OLD_PACKAGES = {
    "jobs": "ampsweep.jobs",
    "sweep": "ampsweep.sweep",
    "analysis": "ampsweep.analysis",
    "ampsweep_contracts": "ampsweep.contracts",
}
_BUILTIN_WORKLOADS = Path(__file__).resolve().with_name("workloads")


def _refuse_old_builtin(module_part: str, attr: str) -> None:
    """``jobs.workloads.X`` where X is one of ours: the built-ins moved to ``ampsweep.jobs.workloads``."""
    parts = module_part.split(".")
    if len(parts) < 3 or parts[:2] != ["jobs", "workloads"]:
        return
    name = parts[2]
    if (_BUILTIN_WORKLOADS / f"{name}.py").is_file() or (_BUILTIN_WORKLOADS / name / "__init__.py").is_file():
        old = f"{module_part}:{attr}"
        raise WorkloadError(f"workload: {old!r} is the old name; use 'ampsweep.{old}'")


def _public_owner(name: str) -> str | None:
    """The part that exports ``name`` as ``ampsweep.<name>``, or None."""
    import ampsweep

    return ampsweep._PUBLIC.get(name)


def _new_import(node: ast.Import | ast.ImportFrom, check: bool) -> tuple[str, str] | None:
    """``(old package, statement to write instead)`` for an import of an old package, else None.

    With ``check``, only when the new module (and each imported name) exists: an
    import that fails for a user's own missing ``analysis`` is not ours to rename.
    """
    if isinstance(node, ast.ImportFrom):
        if node.level or not node.module or node.module.split(".")[0] not in _OLD_PACKAGES:
            return None
        old_top = node.module.split(".")[0]
        new_module = _OLD_PACKAGES[old_top] + node.module[len(old_top) :]
        if check and not _names_exist(new_module, [alias.name for alias in node.names]):
            return None
        if node.module == old_top and all(_public_owner(a.name) == new_module for a in node.names):
            new_module = "ampsweep"
        return old_top, ast.unparse(ast.ImportFrom(module=new_module, names=node.names, level=0))
    for alias in node.names:
        old_top = alias.name.split(".")[0]
        if old_top not in _OLD_PACKAGES:
            continue
        new_module = _OLD_PACKAGES[old_top] + alias.name[len(old_top) :]
        if check and not _names_exist(new_module, []):
            return None
        asname = alias.asname or (alias.name if "." not in alias.name else None)
        return old_top, f"import {new_module}" + (f" as {asname}" if asname else "")
    return None


def _names_exist(module: str, names: list[str]) -> bool:
    try:
        if importlib.util.find_spec(module) is None:
            return False
        if not names or names == ["*"]:
            return True
        imported = importlib.import_module(module)
    except Exception:
        return False
    return all(
        hasattr(imported, name) or importlib.util.find_spec(f"{module}.{name}") is not None for name in names
    )


def _shown(path: str) -> str:
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _old_import_in(path: str | None, line: int | None = None, check: bool = False) -> str | None:
    """``FILE line N: 'OLD IMPORT' uses the old name 'jobs'; write 'NEW IMPORT'`` for the first such import (at ``line``)."""
    if not path or not path.endswith(".py"):
        return None
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    imports = sorted(
        (n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))), key=lambda n: n.lineno
    )
    for node in imports:
        if line is not None and not node.lineno <= line <= (node.end_lineno or node.lineno):
            continue
        found = _new_import(node, check)
        if found is not None:
            old, new = found
            return f"{_shown(path)} line {node.lineno}: {ast.unparse(node)!r} uses the old name {old!r}; write {new!r}"
    return None


def _old_import_failed(exc: ModuleNotFoundError) -> str | None:
    """The old import that raised ``exc`` (``No module named 'jobs'``), found through its traceback."""
    if exc.name not in _OLD_PACKAGES:
        return None
    frame_file, frame_line = None, None
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not filename.startswith("<") and os.path.abspath(filename) != os.path.abspath(__file__):
            if os.path.dirname(os.path.abspath(filename)) != os.path.dirname(importlib.__file__):
                frame_file, frame_line = filename, tb.tb_lineno
        tb = tb.tb_next
    return _old_import_in(frame_file, frame_line, check=True)


def _is_our_old_package(top: str) -> bool:
    """Whether the bare module ``top`` is this project's part, imported from a checkout by its old name."""
    if top not in _OLD_PACKAGES:
        return False
    filename = getattr(sys.modules.get(top), "__file__", None)
    if not filename:
        return False
    root = Path(filename).resolve().parent.parent
    return (root / "ampsweep" / "__init__.py").is_file() or (root / "ampsweep_contracts").is_dir()


def _old_package_used(module: Any) -> str | None:
    """The old package a loaded workload module took a name from (it found the checkout's bare one)."""
    for value in list(vars(module).values()):
        name: object
        try:
            if isinstance(value, types.ModuleType):
                name = value.__name__
            elif isinstance(value, type) or callable(value):
                name = getattr(value, "__module__", None)
            else:
                continue
        except Exception:  # a lazy or proxy object that cannot say
            continue
        if isinstance(name, str) and _is_our_old_package(name.split(".")[0]):
            return name.split(".")[0]
    return None


def _old_package_message(old: str, source: str | None) -> str:
    found = _old_import_in(source)
    if found is not None:
        return found
    return f"it uses the old name {old!r}; import from 'ampsweep' (e.g. 'from ampsweep import Workload')"


def module_name_for_file(path: Path) -> str:
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]
    return f"ampsweep_workload_{path.stem}_{digest}"


def _load_module_from_file(path: Path) -> Any:
    # mindspore.jit and amp's O1 rewrite read a Cell's source through
    # sys.modules, so the module must be registered before any class in it is
    # compiled; a stable name keeps a second load from creating a second module.
    name = module_name_for_file(path)
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise WorkloadError(f"workload: cannot import {str(path)!r}", failed=True)
    # the file imports what sits beside it, as it would run as a script (`from model import Net`);
    # appended, not put first, so a file there never shadows an installed package
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.append(folder)
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
        _refuse_old_builtin(module_part, attr)
        return reference
    found = locate_file(WorkloadReference(module_part, attr), base_dir)
    if found is None:
        raise WorkloadError(f"workload: file {module_part!r} does not exist")
    return str(found)


def load_factory(reference: str) -> Callable[..., Workload]:
    """Import the factory a spec names."""
    module_part, attr = split_reference(reference)
    if not module_part.endswith(".py"):
        _refuse_old_builtin(module_part, attr)
    try:
        if module_part.endswith(".py"):
            module = _load_module_from_file(Path(module_part))
        else:
            module = importlib.import_module(module_part)
    except WorkloadError:
        raise
    except Exception as exc:  # the user's module failed to import
        old = _old_import_failed(exc) if isinstance(exc, ModuleNotFoundError) else None
        if old is not None:
            raise WorkloadError(f"workload: {old}") from exc
        raise WorkloadError(
            f"workload: importing {module_part!r} failed: {type(exc).__name__}: {exc}", failed=True
        ) from exc
    old_package = _old_package_used(module)
    if old_package is not None:
        raise WorkloadError(
            f"workload: {_old_package_message(old_package, getattr(module, '__file__', None))}"
        )
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise WorkloadError(f"workload: {module_part!r} has no callable {attr!r}", failed=True)
    return factory


def accepts_start_step(factory: Callable[..., Any]) -> bool:
    """Whether a factory positions its own data: it takes ``start_step`` (or ``**kwargs``)."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "start_step" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def build_workload(reference: str, seed: int, workload_args: dict[str, Any], start_step: int = 0) -> Workload:
    """Call the factory and check that it kept its side of the contract.

    ``start_step`` > 0 (a forked trial): a factory that accepts ``start_step``
    gets it and positions its own data there (``Workload.data_start``);
    otherwise the trainer skips the batches before it.
    """
    factory = load_factory(reference)
    positions = bool(start_step) and accepts_start_step(factory)
    try:
        if positions:
            workload = factory(seed=seed, start_step=start_step, **workload_args)
        else:
            workload = factory(seed=seed, **workload_args)
    except ModuleNotFoundError as exc:  # an import inside the factory
        old = _old_import_failed(exc)
        if old is None:
            raise
        raise WorkloadError(f"workload: {old}") from exc
    kind = type(workload)
    if kind.__name__ == "Workload" and kind.__module__.split(".")[0] == "jobs":
        # the checkout's bare ``jobs`` (cwd = the repository root): a second copy of our class
        source = getattr(sys.modules.get(getattr(factory, "__module__", "")), "__file__", None)
        found = _old_import_in(source)
        raise WorkloadError(
            f"workload: {found}"
            if found is not None
            else f"workload: {reference!r} returned {kind.__module__}.Workload, the class of the old package "
            "'jobs'; write 'from ampsweep import Workload'"
        )
    if not isinstance(workload, Workload):
        raise WorkloadError(
            f"workload: {reference!r} returned {type(workload).__name__}, expected ampsweep.Workload"
        )
    if positions:
        workload.data_start = start_step
    return workload
