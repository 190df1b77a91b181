"""Assert that a finished sweep ran every planned trial on the MindSpore of this interpreter.

    python .ci/check_trials.py SWEEP_DIR EXPECTED_VERSION_PREFIX

Reads ``trials/*.parquet`` (the ``mindspore_version`` column the worker writes)
and ``plan.json``; exits 1 with one line per problem.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import mindspore
import pyarrow.dataset as ds


def problems(sweep_dir: Path, prefix: str) -> list[str]:
    planned = {t["trial_id"] for t in json.loads((sweep_dir / "plan.json").read_text())["trials"]}
    table = ds.dataset(str(sweep_dir / "trials"), format="parquet").to_table(
        columns=["trial_id", "outcome", "mindspore_version", "device_target"]
    )
    rows = table.to_pylist()
    found: list[str] = []
    missing = planned - {r["trial_id"] for r in rows}
    if missing:
        found.append(f"{len(missing)} planned trials have no trials/ row")
    versions = sorted({r["mindspore_version"] for r in rows})
    if versions != [mindspore.__version__]:
        found.append(f"trials ran on MindSpore {versions}, this interpreter has {mindspore.__version__}")
    if not mindspore.__version__.startswith(prefix):
        found.append(f"MindSpore {mindspore.__version__} is installed, expected {prefix}*")
    failed = [r["trial_id"] for r in rows if r["outcome"] == "failed"]
    if failed:
        found.append(f"failed trials: {failed}")
    return found


def main() -> int:
    sweep_dir, prefix = Path(sys.argv[1]), sys.argv[2]
    found = problems(sweep_dir, prefix)
    for line in found:
        print(f"check_trials: {line}", file=sys.stderr)
    if not found:
        print(f"check_trials: {sweep_dir}: every planned trial ran on MindSpore {mindspore.__version__}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
