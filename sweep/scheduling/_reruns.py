"""A NaN that an exact replay did not reproduce is no verdict on its configuration: run it once more,
on another device where one is free (docs/faults.md). The worker has rerun it in place (``cause_of``);
this is Megatron-Core's second step, elsewhere. The rerun's result is the trial's, with the first run's
row beside it (``attempt`` 1); a rerun that breaks at the same step is localized as numerics after all.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ampsweep.contracts import ANOMALIES_SCHEMA, NOT_REPRODUCED
from ampsweep.jobs import TrialResult


class Reruns:
    """Which trials run again, and on which slot not (``avoids``)."""

    def __init__(self) -> None:
        #: trial id -> the first run's anomalies rows, kept for its rerun's result
        self._first: dict[str, pa.Table] = {}
        #: trial id -> the slot its first run broke on
        self._slot: dict[str, int] = {}

    def wanted(self, result: TrialResult, slot: int) -> bool:
        """Whether ``result`` is a first run to run again (it is then held here); a rerun's result gets
        its first run's rows, and is the trial's."""
        first = self._first.pop(result.trial_id, None)
        self._slot.pop(result.trial_id, None)
        if first is not None:
            attempt = ANOMALIES_SCHEMA.get_field_index("attempt")
            again = result.anomalies.set_column(
                attempt,
                ANOMALIES_SCHEMA.field(attempt),
                pa.array([2] * result.anomalies.num_rows, pa.int64()),
            )
            result.anomalies = pa.concat_tables([first, again])
            return False
        causes = result.anomalies.column("cause")
        if not pc.any(pc.equal(causes, NOT_REPRODUCED)).as_py():
            return False
        self._first[result.trial_id] = result.anomalies
        self._slot[result.trial_id] = slot
        return True

    def avoids(self, trial_id: str, slot: int) -> bool:
        """Whether ``slot`` is where the trial's first run broke (another takes it when one can)."""
        return self._slot.get(trial_id) == slot
