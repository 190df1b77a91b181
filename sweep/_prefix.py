"""Before the trials of a forked sweep: the snapshots they start from, made or found.

A ``{steps: N}`` snapshot that ``OUT/_snapshots/`` already holds (resume, or
an earlier sweep with the same prefix) is read, not run again. Missing ones
are FP32 prefix runs on the sweep's own actors, one per seed, in parallel;
the actors stay up and take the trials next, with the FP32 graph already
compiled. The user's checkpoint is read from its file. Every snapshot then
goes into Ray's object store once, so a worker on any node gets its bytes
with the trial that needs them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ampsweep.jobs import TrialConfig, TrialResult

from ._baselines import Baselines
from ._dispatch import Dispatcher, DispatchOptions, Slot
from ._errors import PrefixFailed
from ._health import ClusterWatch
from ._plan import SweepPlan
from ._progress import SweepProgress
from ._store import SweepStore


def _prefix_problem(result: TrialResult) -> str:
    config = result.config
    if result.error:
        return f"the FP32 prefix of seed {config.seed} failed: {result.error}"
    where = result.first_nonfinite_step
    at = f" at step {where:,}" if where is not None else ""
    return (
        f"the FP32 prefix of seed {config.seed} diverged{at}, before step {config.steps:,}: FP32 itself breaks "
        "there, so there is no healthy state to fork from (choose a smaller start_from.steps)"
    )


def make_snapshots(
    plan: SweepPlan,
    pending: list[TrialConfig],
    store: SweepStore,
    slots: list[Slot],
    options: DispatchOptions,
    progress: bool,
    heartbeat: Callable[[list[str]], None],
    watch: ClusterWatch,
) -> dict[str, bytes]:
    """The bytes of every snapshot ``pending`` starts from, running the missing prefixes."""
    needed = sorted({t.start_from for t in pending if t.start_from})
    found: dict[str, bytes] = {}
    to_run: list[TrialConfig] = []
    for snapshot in needed:
        point = plan.starts[snapshot]
        data = store.read_snapshot(snapshot)
        if data is not None:
            found[snapshot] = data
        elif point.prefix is not None:
            to_run.append(point.prefix)
        else:
            found[snapshot] = Path(str(point.checkpoint)).read_bytes()
    if not to_run:
        return found
    by_prefix = {point.prefix.trial_id: sid for sid, point in plan.starts.items() if point.prefix is not None}
    results: list[TrialResult] = []

    def keep(result: TrialResult, attempts: int) -> None:
        results.append(result)
        if result.snapshot is not None:
            store.write_snapshot(by_prefix[result.trial_id], result.snapshot)

    print(
        f"ampsweep: {len(to_run)} FP32 prefix runs of {to_run[0].steps:,} steps (one per seed) before the trials",
        flush=True,
    )
    with SweepProgress(len(to_run), 0, progress) as bar:
        dispatcher = Dispatcher(slots[: len(to_run)], to_run, options, keep, bar, heartbeat, 0, Baselines())
        dispatcher.run(watch)
    for result in results:
        if result.snapshot is None:
            raise PrefixFailed(_prefix_problem(result), 0, len(pending))
        found[by_prefix[result.trial_id]] = result.snapshot
    if dispatcher.pending:
        raise PrefixFailed(
            f"every worker died repeatedly during the FP32 prefix (last error: {dispatcher.last_error})",
            0,
            len(pending),
        )
    return found


def object_refs(snapshots: dict[str, bytes]) -> dict[str, Any]:
    """Each snapshot put into Ray's object store once: the trials pass the reference."""
    import ray

    return {snapshot: ray.put(data) for snapshot, data in snapshots.items()}
