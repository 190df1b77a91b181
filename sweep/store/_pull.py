"""``ampsweep pull``: copy the committed trials of a sweep folder, incrementally.

A trial's ``trials/`` row is copied last, so the destination never holds more than the source had
committed and an interrupted pull resumes. A source is any ``pyarrow.fs`` location, or the head node's
own disk reached through Ray when the cluster has no shared storage.
"""

from __future__ import annotations

import logging
import posixpath
from dataclasses import dataclass
from typing import Protocol

import pyarrow.fs as pafs

from ampsweep.contracts import (
    PER_TRIAL_TABLES,
    PLAN_FILE,
    SPEC_FILE,
    committed_ids,
    is_data_file,
    trial_folder,
    trial_row_path,
)

from ._store import SweepStore, open_filesystem, read_bytes


class SweepSource(Protocol):
    """Read access to one sweep folder somewhere."""

    name: str

    def committed(self) -> set[str]: ...

    def files_of(self, trial_id: str) -> list[str]:
        """Paths, relative to the sweep folder, of a trial's steps/layers files."""

    def read(self, relative: str) -> bytes | None:
        """A file's bytes, or None when it does not exist."""


class FileSystemSource:
    """A sweep folder on a local disk or behind any ``pyarrow.fs`` URI."""

    def __init__(self, location: str) -> None:
        self.fs, root = open_filesystem(location)
        self.root = root.rstrip("/")
        self.name = posixpath.basename(self.root)
        if self.fs.get_file_info(f"{self.root}/trials").type != pafs.FileType.Directory:
            raise FileNotFoundError(f"{location} is not a sweep folder (it has no trials/)")

    def _list(self, relative: str) -> list[pafs.FileInfo]:
        selector = pafs.FileSelector(f"{self.root}/{relative}", allow_not_found=True, recursive=True)
        return self.fs.get_file_info(selector)

    def committed(self) -> set[str]:
        return committed_ids([f.base_name for f in self._list("trials") if f.type == pafs.FileType.File])

    def files_of(self, trial_id: str) -> list[str]:
        found = []
        for table in PER_TRIAL_TABLES:
            for info in self._list(trial_folder(table, trial_id)):
                if info.type == pafs.FileType.File and is_data_file(info.base_name):
                    found.append(posixpath.relpath(info.path, self.root))
        return found

    def read(self, relative: str) -> bytes | None:
        return read_bytes(self.fs, f"{self.root}/{relative}")


def _head_node_id() -> str:
    import ray

    for node in ray.nodes():
        if node.get("Alive") and "node:__internal_head__" in node.get("Resources", {}):
            return node["NodeID"]
    raise RuntimeError("the Ray cluster reports no live head node")


class RayHeadSource:
    """A sweep folder on the head node's disk, read by Ray tasks pinned to the head."""

    def __init__(self, address: str, path: str) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if not ray.is_initialized():
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
        self._ray = ray
        self._on_head = NodeAffinitySchedulingStrategy(node_id=_head_node_id(), soft=False)
        self.name = posixpath.basename(path.rstrip("/"))
        self._call = ray.remote(num_cpus=0)(_head_call)
        if not self._run("is_sweep", path):
            raise FileNotFoundError(f"{path} on the head node is not a sweep folder (it has no trials/)")
        self.root = path

    def _run(self, operation: str, *args: str):  # noqa: ANN202 - whatever the operation returns
        ref = self._call.options(scheduling_strategy=self._on_head).remote(operation, *args)
        return self._ray.get(ref)

    def committed(self) -> set[str]:
        return committed_ids([name for name, is_file in self._run("list", f"{self.root}/trials") if is_file])

    def files_of(self, trial_id: str) -> list[str]:
        return self._run("files_of", self.root, trial_id)

    def read(self, relative: str) -> bytes | None:
        return self._run("read", f"{self.root}/{relative}")


def _head_call(operation: str, *args: str):  # noqa: ANN202 - runs on the head node
    import os

    if operation == "is_sweep":
        return os.path.isdir(os.path.join(args[0], "trials"))
    if operation == "list":
        folder = args[0]
        if not os.path.isdir(folder):
            return []
        return [(name, os.path.isfile(os.path.join(folder, name))) for name in os.listdir(folder)]
    if operation == "files_of":
        root, trial_id = args
        found = []
        for table in PER_TRIAL_TABLES:
            relative = trial_folder(table, trial_id)
            folder = os.path.join(root, relative)
            if os.path.isdir(folder):
                found += [f"{relative}/{name}" for name in os.listdir(folder) if is_data_file(name)]
        return found
    if operation == "read":
        return open(args[0], "rb").read() if os.path.isfile(args[0]) else None
    raise ValueError(operation)


@dataclass
class PullResult:
    destination: str
    copied: int
    already_there: int


def pull(source: SweepSource, destination: str) -> PullResult:
    """Copy what ``source`` has committed and ``destination/<name>`` lacks."""
    target = SweepStore(destination, source.name)
    have = target.committed()
    new = sorted(source.committed() - have)
    for name in (SPEC_FILE, PLAN_FILE):
        data = source.read(name)
        if data is not None:
            target.write_bytes(name, data)
    for trial_id in new:
        for table in PER_TRIAL_TABLES:
            target.clear_trial_folder(table, trial_id)  # debris of an interrupted pull
        for relative in source.files_of(trial_id):
            data = source.read(relative)
            if data is not None:
                target.write_bytes(relative, data)
        row = source.read(trial_row_path(trial_id))
        if row is not None:
            target.write_bytes(trial_row_path(trial_id), row)
    return PullResult(destination=target.root, copied=len(new), already_there=len(have))


def open_source(location: str, address: str | None) -> SweepSource:
    """A Ray head's disk when ``address`` is given, else a local path or URI."""
    return RayHeadSource(address, location) if address else FileSystemSource(location)
