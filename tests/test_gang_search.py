"""``search: adaptive`` on gangs of 2 devices gives the answer one device gives (slow).

Its list grows from the gang's own localization replays (every rank's part,
merged), and its confirmation round runs on gangs too. The workload's
overflow starts only in the second half of each global batch: on 2 devices,
only in rank 1's part, which a rank-0-only replay would never see.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ampsweep.contracts import CONFIRM_FOLDER, SEARCH_FILE, decode_search
from ampsweep.sweep import RunConfig, Sweep

pytestmark = pytest.mark.slow

ROWS = f"{Path(__file__).parent / 'workloads' / 'rows_overflow.py'}:make"


def _search(tmp_path: Path, devices: int) -> Path:
    spec = {
        "name": f"rows-{devices}",
        "workload": ROWS,
        "steps": 30,
        "search": "adaptive",
        "grid": {"amp_level": ["O2"], "seed": [0, 1]},
        "confirm": {"seeds": 1, "steps_factor": 2},
        "devices_per_trial": devices,
    }
    Sweep(spec).run(tmp_path, RunConfig(workers=2, progress=False))
    return tmp_path / spec["name"]


def test_a_search_on_gangs_finds_what_one_device_finds(tmp_path):
    answers = {}
    for devices in (2, 1):
        root = _search(tmp_path, devices)
        family = decode_search((root / SEARCH_FILE).read_text()).families[0]
        assert family.confirmed is True, (family.rounds, family.confirmation)
        grow = family.rounds[0]
        assert grow.localized and {cell.cell_class for cell in grow.localized} == {"MultiheadAttention"}
        trials = pd.read_parquet(root / "trials")
        assert set(trials["devices"]) == {devices}
        assert set(pd.read_parquet(root / CONFIRM_FOLDER / "trials")["devices"]) == {devices}
        answers[devices] = family.minimal_black_list
        if devices == 2:
            ranks = pd.read_parquet(root / "anomalies")
            assert set(ranks["rank"]) == {1}, "the overflow starts in rank 1's rows"
    assert answers[2] == answers[1] == ["MultiheadAttention"]
