"""The sweep folder's layout and the rule that says what counts as written.

```
OUT/<sweep-name>/
  sweep.yaml                          the resolved spec (every default filled in)
  plan.json                           every trial id of the grid, as run
  trials/<trial_id>.parquet           one row; written last = the trial is committed
  <table>/trial_id=<id>/part-0.parquet steps, layers, anomalies
```

Writers put every file under a name starting with ``.`` and rename it into
place, so readers must skip names starting with ``.`` (in flight) — and
``_`` (Arrow's and Spark's metadata files, e.g. ``_SUCCESS``).
"""

from __future__ import annotations

import posixpath

SPEC_FILE = "sweep.yaml"
#: Beside the sweep folders in the output folder: the snapshots trials fork from
#: (``start_from``), ``<snapshot id>.ckpt``, shared by every sweep written there.
#: The leading ``_`` keeps it out of readers' way and out of the sweep-name space.
SNAPSHOT_FOLDER = "_snapshots"
#: A snapshot id (``trials.start_from``, the file's name) says where it came from:
#: ``prefix-<hash of what made it>`` (an FP32 prefix the sweep ran) or
#: ``ckpt-<hash of the file's bytes>`` (the user's own checkpoint), or
#: ``trial-<trial id>`` (a trial's own end state, which ``horizon`` continues from).
PREFIX_SNAPSHOT = "prefix-"
CHECKPOINT_SNAPSHOT = "ckpt-"
TRIAL_SNAPSHOT = "trial-"


def trial_snapshot(trial_id: str) -> str:
    """The snapshot id of a trial's own end state."""
    return TRIAL_SNAPSHOT + trial_id


PLAN_FILE = "plan.json"
LOCK_FILE = ".driver.lock"
PART_FILE = "part-0.parquet"
TRIAL_PARTITION_KEY = "trial_id"
#: Tables stored as one hive partition per trial, copied by ``pull`` before the row.
PER_TRIAL_TABLES = ("steps", "layers", "anomalies")
_SUFFIX = ".parquet"


def is_data_file(base_name: str) -> bool:
    """A finished Parquet file: not an in-flight temporary, not metadata."""
    return base_name.endswith(_SUFFIX) and not base_name.startswith((".", "_"))


def committed_ids(base_names: list[str] | set[str]) -> set[str]:
    """Trial ids from a listing of the files under ``trials/``."""
    return {name[: -len(_SUFFIX)] for name in base_names if is_data_file(name)}


def trial_row_path(trial_id: str) -> str:
    """Relative path of a trial's ``trials/`` row."""
    return f"trials/{trial_id}{_SUFFIX}"


def trial_folder(table: str, trial_id: str) -> str:
    """Relative path of a trial's partition folder in a per-trial table."""
    return f"{table}/{TRIAL_PARTITION_KEY}={trial_id}"


def part_path(table: str, trial_id: str) -> str:
    """Relative path of the single data file of a trial in a per-trial table."""
    return f"{trial_folder(table, trial_id)}/{PART_FILE}"


def partition_value(path: str, table_root: str) -> str | None:
    """The ``<id>`` of the ``trial_id=<id>`` folder a file sits in, or None."""
    head = posixpath.relpath(path, table_root).split("/", 1)[0]
    key, sep, value = head.partition("=")
    if key != TRIAL_PARTITION_KEY or not sep or not value:
        return None
    return value


#: ``OUT/<name>/profile.json``: the FP32 float16-headroom profile (``ampsweep profile --json``'s
#: object) that ``ampsweep run`` writes after the trials and the report shows.
PROFILE_FILE = "profile.json"
