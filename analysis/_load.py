"""Locate and read a sweep folder's committed trials, tolerating partial sweeps.

A sweep folder may be local or any URI ``pyarrow.fs`` understands, because
results are often analysed straight from object storage after a cluster run.
Only files named ``*.parquet`` that do not start with ``.`` or ``_`` are read:
the store writes to a temporary name and renames, so anything else is an
in-flight write and must not be parsed.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

#: The columns every consumer of ``load_trials`` may rely on; absent ones are
#: filled with nulls so an older or partial writer does not break the report.
TRIAL_COLUMNS: dict[str, object] = {
    "trial_id": "str",
    "sweep": "str",
    "workload": "str",
    "graph_id": "str",
    "amp_level": "str",
    "black_list": "object",
    "clip": "float64",
    "loss_scale": "str",
    "dtype": "str",
    "seed": "Int64",
    "steps": "float64",
    "outcome": "str",
    "steps_run": "float64",
    "first_nonfinite_step": "float64",
    "final_loss": "float64",
    "target_loss": "float64",
    "equivalent_to": "str",
    "error": "str",
    "traceback": "str",
    "wall_s": "float64",
    "compile_s": "float64",
    "device_kind": "str",
    "node": "str",
    "device_id": "str",
    "worker_index": "float64",
}

#: Partition key type is pinned to string: hash ids such as ``"0123"`` would
#: otherwise be inferred as integers and lose their leading zeros.
TRIAL_PARTITIONING = ds.partitioning(pa.schema([("trial_id", pa.string())]), flavor="hive")


@dataclass(frozen=True)
class SweepLocation:
    """A resolved sweep folder, so every reader agrees on filesystem and root."""

    fs: pafs.FileSystem
    root: str
    name: str

    def join(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    def exists(self, *parts: str) -> bool:
        info = self.fs.get_file_info(self.join(*parts))
        return info.type != pafs.FileType.NotFound

    def is_dir(self, *parts: str) -> bool:
        return self.fs.get_file_info(self.join(*parts)).type == pafs.FileType.Directory


@dataclass
class SweepInventory:
    """What is (and is not) on disk, so the report can say how partial a sweep is."""

    has_trials_dir: bool
    has_steps_dir: bool
    has_layers_dir: bool
    expected_trials: int | None
    committed_trials: int
    #: ids with step data but no ``trials/`` row: an interrupted or running trial.
    debris_ids: list[str] = field(default_factory=list)
    #: committed trials that have no step data at all.
    trials_without_steps: list[str] = field(default_factory=list)

    @property
    def missing_trials(self) -> int | None:
        if self.expected_trials is None:
            return None
        return max(self.expected_trials - self.committed_trials, 0)


def resolve(sweep_dir: str | Path) -> SweepLocation:
    """Accept a local path or a URI, because results may never leave the bucket."""
    text = str(sweep_dir)
    if "://" in text:
        fs, root = pafs.FileSystem.from_uri(text)
    else:
        fs, root = pafs.LocalFileSystem(), str(Path(text).resolve())
    root = root.rstrip("/") or "/"
    return SweepLocation(fs=fs, root=root, name=posixpath.basename(root))


def _is_data_file(path: str) -> bool:
    base = posixpath.basename(path)
    return base.endswith(".parquet") and not base.startswith((".", "_"))


def list_parquet(loc: SweepLocation, sub: str, recursive: bool) -> list[str]:
    """List committed data files only; temporary names are mid-rename and unreadable."""
    if not loc.is_dir(sub):
        return []
    selector = pafs.FileSelector(loc.join(sub), recursive=recursive, allow_not_found=True)
    infos = loc.fs.get_file_info(selector)
    return sorted(i.path for i in infos if i.type == pafs.FileType.File and _is_data_file(i.path))


def partition_id(path: str, base: str) -> str | None:
    """The ``trial_id=<id>`` directory a file sits in, parsed from its path."""
    rel = posixpath.relpath(path, base)
    head = rel.split("/", 1)[0]
    key, sep, value = head.partition("=")
    if key != "trial_id" or not sep or not value:
        return None
    return value


def _normalise_black_list(value: object) -> tuple[str, ...]:
    """Order-insensitive, so [A, B] and [B, A] are the same configuration."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ()
    if isinstance(value, str):
        return (value,) if value else ()
    return tuple(sorted(str(v) for v in value))


def load_trials(sweep_dir: str | Path) -> pd.DataFrame:
    """Return one row per committed trial.

    A trial is committed exactly when its ``trials/`` file exists, so this is
    the table every other step keys on. Files are unified by schema rather
    than assuming the first one is representative: an all-null column (e.g.
    ``error`` on a run with no failures) may have been written as ``null``.
    ``black_list`` becomes a sorted tuple and ``black_list_key`` a readable
    string so configurations group and compare by value.
    """
    loc = resolve(sweep_dir)
    files = list_parquet(loc, "trials", recursive=False)
    if files:
        # One open per file (a dataset would open each twice: schema, then data);
        # permissive concatenation unifies a column written as null by one writer.
        tables = []
        for path in files:
            with loc.fs.open_input_file(path) as handle:
                tables.append(pq.ParquetFile(handle).read())
        frame = pa.concat_tables(tables, promote_options="permissive").to_pandas()
    else:
        frame = pd.DataFrame({name: pd.Series([], dtype="object") for name in TRIAL_COLUMNS})
    for name, dtype in TRIAL_COLUMNS.items():
        if name not in frame.columns:
            frame[name] = pd.Series([None] * len(frame), index=frame.index, dtype="object")
        if name == "black_list":
            continue
        frame[name] = frame[name].astype(dtype)
    for name in ("workload", "amp_level", "loss_scale", "dtype", "device_kind"):
        # Grouping keys: an unknown value is one group, not a dropped row.
        frame[name] = frame[name].fillna("")
    frame["black_list"] = [_normalise_black_list(v) for v in frame["black_list"]]
    frame["black_list_key"] = [black_list_label(v) for v in frame["black_list"]]
    frame = frame.drop_duplicates("trial_id", keep="last")
    return frame.sort_values("trial_id", kind="stable").reset_index(drop=True)


def black_list_label(black_list: Iterable[str]) -> str:
    """A stable, readable key for a black list (also used as a CSV column)."""
    return "[" + ", ".join(black_list) + "]"


def _expected_trials(loc: SweepLocation) -> int | None:
    """Grid size from the resolved spec, when there is one, to count missing trials."""
    if not loc.exists("sweep.yaml"):
        return None
    try:
        import yaml

        with loc.fs.open_input_stream(loc.join("sweep.yaml")) as stream:
            spec = yaml.safe_load(stream.read())
        grid = spec.get("grid") or {}
        if not isinstance(grid, dict) or not grid:
            return None
        total = 1
        for values in grid.values():
            total *= len(values) if isinstance(values, list) else 1
        return total
    except Exception:  # noqa: BLE001 - the count is advisory; a bad spec must not stop the report
        return None


def inventory(sweep_dir: str | Path, trial_ids: Iterable[str]) -> SweepInventory:
    """Compare committed trials with what else lies on disk."""
    loc = resolve(sweep_dir)
    committed = set(trial_ids)
    step_ids: set[str] = set()
    for path in list_parquet(loc, "steps", recursive=True):
        tid = partition_id(path, loc.join("steps"))
        if tid is not None:
            step_ids.add(tid)
    return SweepInventory(
        has_trials_dir=loc.is_dir("trials"),
        has_steps_dir=loc.is_dir("steps"),
        has_layers_dir=loc.is_dir("layers"),
        expected_trials=_expected_trials(loc),
        committed_trials=len(committed),
        debris_ids=sorted(step_ids - committed),
        trials_without_steps=sorted(committed - step_ids),
    )
