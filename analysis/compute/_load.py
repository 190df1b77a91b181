"""Locate and read a sweep folder's committed trials, tolerating partial sweeps.

A sweep folder may be local or any URI ``pyarrow.fs`` understands, because
results are often analysed straight from object storage after a cluster run.
What counts as a finished file, where a trial's partition lives and what the
plan holds are the contracts of :mod:`ampsweep.contracts`; this module only
applies them, so the store, ``pull`` and the report can never disagree.
"""

from __future__ import annotations

import posixpath
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ampsweep.contracts import (
    ARG_COLUMN_PREFIX,
    HORIZON_FOLDER,
    LOSS_INSIDE,
    PLAN_FILE,
    TRIALS_SCHEMA,
    Configuration,
    black_list_of,
    decode_plan,
    is_data_file,
    partition_value,
)

from ._horizon import merge_continuations

#: Integer columns that are grouping keys stay exact (nullable Int64); every
#: other integer becomes float64 so a null is a NaN that arithmetic tolerates.
_INTEGER_KEYS = ("seed",)
#: Grouping keys: an unknown value is one group (""), not a dropped row.
_GROUP_KEYS = ("workload", "amp_level", "loss_scale", "dtype", "device_kind")


def _pandas_dtype(name: str, kind: pa.DataType) -> str:
    """The pandas dtype a ``TRIALS_SCHEMA`` column is read as (derived, never restated)."""
    if pa.types.is_integer(kind):
        return "Int64" if name in _INTEGER_KEYS else "float64"
    if pa.types.is_floating(kind):
        return "float64"
    if pa.types.is_boolean(kind):
        return "boolean"
    return "object"  # strings keep None (astype(str) would turn it into "None"), lists, timestamps


TRIAL_DTYPES: dict[str, str] = {f.name: _pandas_dtype(f.name, f.type) for f in TRIALS_SCHEMA}


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
    #: trials in ``plan.json``; None when the folder has no readable plan
    expected_trials: int | None
    #: ids with step data but no ``trials/`` row: an interrupted or running trial.
    debris_ids: list[str] = field(default_factory=list)
    #: committed trials that have no step data at all.
    trials_without_steps: list[str] = field(default_factory=list)
    #: planned ids with no ``trials/`` row (empty when there is no plan)
    missing_ids: list[str] = field(default_factory=list)
    has_anomalies_dir: bool = False
    #: committed trials skipped because a file is truncated or corrupt: id -> which file, why
    unreadable: dict[str, str] = field(default_factory=dict)

    @property
    def missing_trials(self) -> int | None:
        return None if self.expected_trials is None else len(self.missing_ids)


def resolve(sweep_dir: str | Path) -> SweepLocation:
    """Accept a local path or a URI, because results may never leave the bucket."""
    text = str(sweep_dir)
    if "://" in text:
        fs, root = pafs.FileSystem.from_uri(text)
    else:
        fs, root = pafs.LocalFileSystem(), str(Path(text).resolve())
    root = root.rstrip("/") or "/"
    return SweepLocation(fs=fs, root=root, name=posixpath.basename(root))


def list_parquet(loc: SweepLocation, sub: str, recursive: bool) -> list[str]:
    """Finished data files only (the contract's rule); temporaries are mid-rename."""
    if not loc.is_dir(sub):
        return []
    selector = pafs.FileSelector(loc.join(sub), recursive=recursive, allow_not_found=True)
    infos = loc.fs.get_file_info(selector)
    return sorted(
        i.path for i in infos if i.type == pafs.FileType.File and is_data_file(posixpath.basename(i.path))
    )


def files_by_trial(loc: SweepLocation, sub: str, wanted: set[str] | None = None) -> dict[str, list[str]]:
    """Data files per trial id of a per-trial table, in path order; ``wanted`` filters."""
    base = loc.join(sub)
    grouped: dict[str, list[str]] = defaultdict(list)
    for path in list_parquet(loc, sub, recursive=True):
        tid = partition_value(path, base)
        if tid is not None and (wanted is None or tid in wanted):
            grouped[tid].append(path)
    return dict(grouped)


def configurations(frame: pd.DataFrame) -> list[Configuration]:
    """Each row's configuration (its ``Configuration.FIELDS`` columns and ``arg_<name>`` columns;
    missing ones take the defaults)."""
    columns = [c for c in (*Configuration.FIELDS, *arg_columns(frame)) if c in frame.columns]
    return [
        Configuration.from_row(dict(zip(columns, values))) for values in zip(*(frame[c] for c in columns))
    ]


def arg_columns(frame: pd.DataFrame) -> list[str]:
    """The trials table's swept-workload-argument columns (``arg_<name>``), in table order."""
    return [c for c in frame.columns if str(c).startswith(ARG_COLUMN_PREFIX)]


def load_trials(sweep_dir: str | Path) -> pd.DataFrame:
    """One row per committed trial (its ``trials/`` file exists), with every ``TRIALS_SCHEMA`` column.

    Files are unified by schema: an all-null column (``error`` on a run without failures) may have been
    written as ``null``, and a column an older writer did not have is filled with nulls (the loss
    placement with ``inside``). ``black_list`` becomes a sorted tuple, so configurations compare by value.
    """
    loc = resolve(sweep_dir)
    files = list_parquet(loc, "trials", recursive=False)
    if files:
        # One open per file (a dataset would open each twice: schema, then data);
        # permissive concatenation unifies a column written as null by one writer.
        tables = []
        for path in files:
            try:
                with loc.fs.open_input_file(path) as handle:
                    tables.append(pq.ParquetFile(handle).read())
            except (OSError, pa.ArrowException):
                continue  # reported by ``unreadable_trials``; ``run`` reruns the trial
        frame = pa.concat_tables(tables, promote_options="permissive").to_pandas() if tables else None
    if not files or frame is None:
        frame = pd.DataFrame({name: pd.Series([], dtype="object") for name in TRIAL_DTYPES})
    for name, dtype in TRIAL_DTYPES.items():
        if name not in frame.columns:
            frame[name] = pd.Series([None] * len(frame), index=frame.index, dtype="object")
        if dtype != "object":
            frame[name] = frame[name].astype(dtype)
    for name in _GROUP_KEYS:
        frame[name] = frame[name].fillna("")
    frame["loss_placement_recorded"] = frame["loss_placement"].notna()
    frame["loss_placement"] = frame["loss_placement"].fillna(LOSS_INSIDE)  # before the column: inside
    frame["black_list"] = [black_list_of(v) for v in frame["black_list"]]
    frame = frame.drop_duplicates("trial_id", keep="last")
    frame = frame.sort_values("trial_id", kind="stable").reset_index(drop=True)
    # how far each trial held: its continuation to the horizon (in ``horizon/``), where one ran, decides
    continued = load_trials(loc.join(HORIZON_FOLDER)) if loc.is_dir(HORIZON_FOLDER, "trials") else frame[:0]
    return merge_continuations(frame, continued)


def planned_ids(loc: SweepLocation) -> list[str] | None:
    """Trial ids of ``plan.json``; None when there is none or it is unreadable.

    The plan, not the spec, is counted: the driver writes every id it
    scheduled, so an axis left at its default can never be miscounted.
    """
    if not loc.exists(PLAN_FILE):
        return None
    try:
        with loc.fs.open_input_stream(loc.join(PLAN_FILE)) as stream:
            entries = decode_plan(stream.read())
    except (ValueError, OSError):
        return None  # the count is advisory; a bad plan must not stop the report
    return list(dict.fromkeys(entry.trial_id for entry in entries))


def unreadable_trials(sweep_dir: str | Path) -> dict[str, str]:
    """Committed trials whose ``trials/`` row or ``steps`` file is truncated or corrupt, and which file.

    Reads footers only. Such a trial is left out of the analysis (a partial
    disk write must not take the report down) and ``ampsweep run`` reruns it.
    """
    loc = resolve(sweep_dir)
    problems: dict[str, str] = {}
    steps = files_by_trial(loc, "steps")
    for path in list_parquet(loc, "trials", recursive=False):
        trial_id = posixpath.basename(path)[: -len(".parquet")]
        for candidate in [path, *steps.get(trial_id, [])]:
            try:
                pq.read_metadata(candidate, filesystem=loc.fs)
            except (OSError, pa.ArrowException) as exc:
                relative = posixpath.relpath(candidate, loc.root)
                problems[trial_id] = f"{relative} ({str(exc).splitlines()[0][:100]})"
                break
    return problems


def inventory(sweep_dir: str | Path, trial_ids: Iterable[str]) -> SweepInventory:
    """Compare committed trials with the plan and with what else lies on disk."""
    loc = resolve(sweep_dir)
    committed = set(trial_ids)
    step_ids = set(files_by_trial(loc, "steps"))
    plan = planned_ids(loc)
    return SweepInventory(
        has_trials_dir=loc.is_dir("trials"),
        has_steps_dir=loc.is_dir("steps"),
        has_anomalies_dir=loc.is_dir("anomalies"),
        expected_trials=None if plan is None else len(plan),
        debris_ids=sorted(step_ids - committed),
        trials_without_steps=sorted(committed - step_ids),
        missing_ids=[] if plan is None else [t for t in plan if t not in committed],
    )
