"""The workload reference: ``package.module:make`` or ``path/to/file.py:make``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

REFERENCE_FORM = "'package.module:make' or 'path/to/file.py:make'"


class ReferenceFormError(ValueError):
    """A string that is not a workload reference."""


@dataclass(frozen=True)
class WorkloadReference:
    """A parsed reference; ``module`` is a dotted module or a ``.py`` path."""

    module: str
    attr: str

    @property
    def is_file(self) -> bool:
        return self.module.endswith(".py")

    def with_module(self, module: str) -> WorkloadReference:
        return WorkloadReference(module, self.attr)

    def __str__(self) -> str:
        return f"{self.module}:{self.attr}"


def parse_reference(text: str) -> WorkloadReference:
    """Split at the last ``:`` (a Windows drive letter keeps its own)."""
    module, sep, attr = str(text).rpartition(":")
    if not sep or not module or not attr.isidentifier():
        raise ReferenceFormError(f"workload must be {REFERENCE_FORM}")
    return WorkloadReference(module, attr)


def locate_file(reference: WorkloadReference, base_dir: Path | None = None) -> WorkloadReference | None:
    """A file reference with its absolute path; None when no such file exists.

    A relative path is looked up against the working directory first, then
    against ``base_dir`` (the spec's folder): the order every process that
    resolves a spec's workload uses.
    """
    path = Path(reference.module).expanduser()
    if path.is_absolute():
        candidates = [path]
    else:
        candidates = [Path.cwd() / path] + ([base_dir / path] if base_dir is not None else [])
    found = next((c for c in candidates if c.is_file()), None)
    return None if found is None else reference.with_module(str(found.resolve()))
