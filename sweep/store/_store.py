"""Where finished trials go: a local folder or any URI ``pyarrow.fs`` understands.

Every file is written under a dot-prefixed temporary name and renamed into place; the ``trials/`` row
last, so a trial counts as done exactly when that row exists (``ampsweep.contracts``' rule). A full or
over-quota filesystem raises ``OutOfSpace``, leaving nothing half-written.
"""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ampsweep.contracts import (
    FP32_LEVEL,
    PER_TRIAL_TABLES,
    PLAN_FILE,
    SNAPSHOT_FOLDER,
    LocalizedCell,
    committed_ids,
    decode_plan,
    part_path,
    trial_folder,
    trial_row_path,
    trial_snapshot,
)
from ampsweep.jobs import Baseline, TrialConfig, TrialResult

from .._errors import OutOfSpace, is_out_of_space
from ..scheduling._baselines import Baselines


def open_filesystem(out: str) -> tuple[pafs.FileSystem, str]:
    """Filesystem and base path for a local path or URI."""
    if "://" not in out:
        return pafs.LocalFileSystem(), os.path.abspath(out)
    return pafs.FileSystem.from_uri(out)


def read_bytes(fs: pafs.FileSystem, path: str) -> bytes | None:
    """A file's bytes, or None when it does not exist."""
    if fs.get_file_info(path).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(path) as stream:
        return stream.read()


class SweepStore:
    """The folder ``OUT/<sweep-name>/`` of one sweep; only the driver writes it."""

    def __init__(self, out: str, name: str, snapshots: str | None = None) -> None:
        self.fs, base = open_filesystem(out)
        self.name = name
        self.root = f"{base.rstrip('/')}/{name}"
        #: ``OUT/_snapshots``, shared by every sweep in OUT; a nested folder (the search's
        #: confirmation round) passes its parent's, so it forks from the same snapshots
        self.snapshot_folder = snapshots or f"{base.rstrip('/')}/{SNAPSHOT_FOLDER}"

    @classmethod
    def at(cls, location: str) -> SweepStore:
        """The store of an existing sweep folder ``OUT/<name>`` (a path or a URI)."""
        fs, root = open_filesystem(location)
        root = root.rstrip("/")
        store = cls.__new__(cls)
        store.fs, store.root, store.name = fs, root, root.rpartition("/")[2]
        store.snapshot_folder = f"{root.rpartition('/')[0]}/{SNAPSHOT_FOLDER}"
        return store

    def exists(self, relative: str) -> bool:
        return self.fs.get_file_info(self.path(relative)).type != pafs.FileType.NotFound

    def path(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def _atomic_write(self, path: str, write: Callable[[str], None]) -> None:
        """``write`` a temporary file beside ``path``, then rename it into place."""
        folder, _, filename = path.rpartition("/")
        temporary = f"{folder}/.tmp-{uuid.uuid4().hex}-{filename}"
        try:
            self.fs.create_dir(folder, recursive=True)
            write(temporary)
            self.fs.move(temporary, path)
        except BaseException as exc:
            self._remove_quietly(temporary)
            if isinstance(exc, OSError) and is_out_of_space(exc):
                raise self.out_of_space(path, exc) from exc
            raise

    def _remove_quietly(self, path: str) -> None:
        """Remove a temporary file if it is there; a failure here must not hide the write's own error."""
        try:
            if self.fs.get_file_info(path).type == pafs.FileType.File:
                self.fs.delete_file(path)
        except (OSError, pa.ArrowException):
            pass

    def out_of_space(self, path: str, exc: OSError) -> OutOfSpace:
        """The stop for a write of ``path`` that ``exc`` (ENOSPC, EDQUOT) refused, with the folder's counts:
        from the folder itself, so whichever write fails (a commit, the lock, the plan) says the same."""
        prefix = f"{self.root}/"
        where = f"{path[len(prefix) :]} in {self.root}" if path.startswith(prefix) else path
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        try:
            done = self.committed()
        except (OSError, pa.ArrowException):
            done = set()
        planned: set[str] | None = None
        try:
            text = self.read_text(PLAN_FILE)
            planned = {entry.trial_id for entry in decode_plan(text)} if text else None
        except (OSError, ValueError, pa.ArrowException):
            planned = None
        if planned is None:
            return OutOfSpace(f"could not write {where}: {reason}", len(done), None)
        return OutOfSpace(f"could not write {where}: {reason}", len(done & planned), len(planned - done))

    def write_table(self, path: str, table: pa.Table) -> None:
        """One table file, atomically, without column statistics: a file holds one trial and is read whole,
        so they never skip anything (left out, bench_vs_tune's sweep wrote a fifth fewer bytes)."""
        self._atomic_write(
            path, lambda tmp: pq.write_table(table, tmp, filesystem=self.fs, write_statistics=False)
        )

    def write_text(self, relative: str, text: str) -> None:
        self.write_bytes(relative, text.encode())

    def write_bytes(self, relative: str, data: bytes) -> None:
        self._write_bytes_at(self.path(relative), data)

    def _write_bytes_at(self, path: str, data: bytes) -> None:
        def write(tmp: str) -> None:
            with self.fs.open_output_stream(tmp) as stream:
                stream.write(data)

        self._atomic_write(path, write)

    def read_text(self, relative: str) -> str | None:
        """A file's text, or None when it does not exist."""
        data = read_bytes(self.fs, self.path(relative))
        return None if data is None else data.decode()

    def snapshot_path(self, snapshot: str) -> str:
        """Where a snapshot lives: ``OUT/_snapshots/<id>.ckpt``, beside (not inside) the sweep folder."""
        return f"{self.snapshot_folder}/{snapshot}.ckpt"

    def read_snapshot(self, snapshot: str) -> bytes | None:
        return read_bytes(self.fs, self.snapshot_path(snapshot))

    def write_snapshot(self, snapshot: str, data: bytes) -> None:
        self._write_bytes_at(self.snapshot_path(snapshot), data)

    def committed(self) -> set[str]:
        """Ids of trials whose ``trials/`` row exists."""
        info = self.fs.get_file_info(pafs.FileSelector(self.path("trials"), allow_not_found=True))
        return committed_ids([f.base_name for f in info if f.type == pafs.FileType.File])

    def unreadable(self, trial_ids: set[str]) -> dict[str, str]:
        """Committed trials with a truncated or corrupt file, and which file: they must run again. Reads
        each file's Parquet footer only (a truncated file has none): one small read per file."""
        problems: dict[str, str] = {}
        for trial_id in trial_ids:
            for relative in (trial_row_path(trial_id), part_path("steps", trial_id)):
                try:
                    pq.read_metadata(self.path(relative), filesystem=self.fs)
                except FileNotFoundError:
                    problems[trial_id] = f"{relative} is missing"
                    break
                except (OSError, pa.ArrowException) as exc:
                    problems[trial_id] = f"{relative} is unreadable ({str(exc).splitlines()[0][:120]})"
                    break
        return problems

    def trial_row(self, trial_id: str, columns: list[str] | None = None) -> dict[str, Any]:
        """The committed ``trials/`` row of one trial, as a dict: the one way the driver reads it."""
        table = pq.read_table(self.path(trial_row_path(trial_id)), columns=columns, filesystem=self.fs)
        return table.slice(0, 1).to_pylist()[0]

    def _part(self, table: str, trial_id: str, columns: list[str] | None = None) -> pa.Table | None:
        """A committed trial's ``table`` file; None where it is missing or cannot be read."""
        try:
            return pq.read_table(self.path(part_path(table, trial_id)), columns=columns, filesystem=self.fs)
        except (FileNotFoundError, OSError, pa.ArrowException):
            return None

    def gradient_absmax(self, trial_id: str) -> float | None:
        """The largest finite gradient element its sampled steps saw (``layers.grad_absmax``)."""
        table = self._part("layers", trial_id, ["grad_absmax"])
        if table is None:
            return None
        values = [v for v in table.column("grad_absmax").to_pylist() if v is not None and math.isfinite(v)]
        return max(values) if values else None

    def localized_cell(self, trial_id: str) -> LocalizedCell | None:
        """The Cell the trial's localization replay named (its ``anomalies`` row), if any."""
        table = self._part("anomalies", trial_id)
        rows = [] if table is None else table.to_pylist()
        return LocalizedCell.from_row(rows[0]) if rows else None

    def baselines(self, trials: list[TrialConfig], done: set[str]) -> Baselines:
        """The baselines of the committed FP32 trials of ``trials`` (a resumed sweep has them on disk)."""
        found = Baselines()
        for config in trials:
            if config.amp_level == FP32_LEVEL and config.trial_id in done:
                row = self.trial_row(config.trial_id, ["final_loss", "target_loss"])
                found.add(
                    config,
                    Baseline.of_run(row["final_loss"], row["target_loss"], self._losses(config.trial_id)),
                )
        return found

    def _losses(self, trial_id: str) -> Any:
        """A committed trial's per-step losses; None where its ``steps`` file cannot be read."""
        table = self._part("steps", trial_id, ["loss"])
        return None if table is None else table.column("loss").to_numpy(zero_copy_only=False)

    def clear_trial_folder(self, table: str, trial_id: str) -> None:
        """Remove what an interrupted write left under an uncommitted trial."""
        path = self.path(trial_folder(table, trial_id))
        if self.fs.get_file_info(path).type == pafs.FileType.Directory:
            self.fs.delete_dir(path)

    def commit(self, result: TrialResult, *, equivalent_to: str | None = None, attempts: int = 1) -> None:
        """Write one finished trial, adding the columns the driver owns; the ``trials/`` row goes last.

        An end state (``save_snapshot``) goes first, as ``trial-<id>``: a committed trial's snapshot is
        always there to continue from. A copy (``attempts`` 0) has none: its source's is the same state.
        """
        trial_id = result.trial_id
        if result.snapshot is not None and attempts:
            self.write_snapshot(trial_snapshot(trial_id), result.snapshot)
        tables = {"steps": result.steps, "layers": result.layers, "anomalies": result.anomalies}
        for table_name in PER_TRIAL_TABLES:
            self.clear_trial_folder(table_name, trial_id)
        for table_name in PER_TRIAL_TABLES:
            table = tables[table_name]
            if table_name == "steps" or table.num_rows:
                self.write_table(self.path(part_path(table_name, trial_id)), table)
        row = result.trial_row(sweep=self.name, equivalent_to=equivalent_to, attempts=attempts)
        self.write_table(self.path(trial_row_path(trial_id)), row)
