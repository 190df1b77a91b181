"""Where finished trials go: a local folder or any URI ``pyarrow.fs`` understands.

Every file is written under a dot-prefixed temporary name (pyarrow.dataset
skips those) and renamed into place; the ``trials/`` row is written last, so
a trial counts as done exactly when that row exists. Anything else under an
uncommitted id is debris and is replaced.
"""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq


def open_filesystem(out: str) -> tuple[pafs.FileSystem, str]:
    """Filesystem and base path for a local path or URI."""
    if "://" not in out:
        import os

        return pafs.LocalFileSystem(), os.path.abspath(out)
    return pafs.FileSystem.from_uri(out)


class SweepStore:
    """The folder ``OUT/<sweep-name>/`` of one sweep."""

    def __init__(self, out: str, name: str) -> None:
        self.fs, base = open_filesystem(out)
        self.root = f"{base.rstrip('/')}/{name}"

    def _path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def _atomic_write(self, path: str, write: Any) -> None:
        folder, _, filename = path.rpartition("/")
        self.fs.create_dir(folder, recursive=True)
        temporary = f"{folder}/.tmp-{uuid.uuid4().hex}-{filename}"
        write(temporary)
        self.fs.move(temporary, path)

    def write_table(self, path: str, table: pa.Table) -> None:
        self._atomic_write(path, lambda tmp: pq.write_table(table, tmp, filesystem=self.fs))

    def write_text(self, relative: str, text: str) -> None:
        self.write_bytes(relative, text.encode())

    def write_bytes(self, relative: str, data: bytes) -> None:
        def write(tmp: str) -> None:
            with self.fs.open_output_stream(tmp) as stream:
                stream.write(data)

        self._atomic_write(self._path(relative), write)

    def committed(self) -> set[str]:
        """Ids of trials whose ``trials/`` row exists."""
        info = self.fs.get_file_info(pafs.FileSelector(self._path("trials"), allow_not_found=True))
        return {
            f.base_name[: -len(".parquet")]
            for f in info
            if f.type == pafs.FileType.File
            and f.base_name.endswith(".parquet")
            and not f.base_name.startswith(".")
        }

    def clear_trial_folder(self, table: str, trial_id: str) -> None:
        """Remove what an interrupted write left under an uncommitted trial."""
        path = self._path(table, f"trial_id={trial_id}")
        if self.fs.get_file_info(path).type == pafs.FileType.Directory:
            self.fs.delete_dir(path)

    def commit(self, record: Any) -> None:
        """Write one finished trial; the ``trials/`` row goes last."""
        trial_id = record.trial_id
        for table_name in ("steps", "layers"):
            self.clear_trial_folder(table_name, trial_id)
        self.write_table(self._path("steps", f"trial_id={trial_id}", "part-0.parquet"), record.steps)
        if record.layers.num_rows:
            self.write_table(self._path("layers", f"trial_id={trial_id}", "part-0.parquet"), record.layers)
        self.write_table(self._path("trials", f"{trial_id}.parquet"), record.trial)
