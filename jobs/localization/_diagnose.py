"""After a trial: decide whether it needs a culprit, and find it by replay.

A trial that went non-finite (diverged, or completed with steps a static
loss scale skipped), an FP32 one included, is replayed up to the step where
it failed (past the steps a dynamic scaler skipped: those are its work); a trial that
stayed finite but learned clearly worse than its FP32 baseline — the driver
passes that baseline (``jobs.Baseline``) when it has one — is replayed side by side
with FP32. A replay that itself fails never fails the trial: the trial's own
result stands, with one row of cause ``unknown`` that says where the
localization failed and why (the report lists it under what the sweep could
not decide).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ampsweep.contracts import (
    ANOMALIES_SCHEMA,
    FP32_LEVEL,
    NUMERICS,
    TARGET_FROM_FP32,
    UNKNOWN,
    LearningEvidence,
    Verdict,
    parse_loss_scale,
    start_loss,
    steps_to_target,
    trial_verdict,
)

from .._result import Outcome, TrialResult
from ..training._baseline import Hint, resolve_baseline
from ..training._capture import loss_ok
from ..training._data_parallel import PeerFailed
from ._cause import Cause, cause_of
from ._localize import finding_order, localize

if TYPE_CHECKING:
    from ..training._data_parallel import RankGroup
    from ..training._step import GraphCache


def localize_mode(result: TrialResult, baseline: Hint) -> tuple[str, int | None] | None:
    """``(mode, until_step)`` for the replay this trial needs, or None.

    An FP32 (``FP32_LEVEL``) trial that went non-finite is replayed too: when
    FP32 itself breaks the report must name the Cell that broke in float32,
    because then no mixed-precision remedy is the answer. An FP32 trial never
    gets a departure replay: it is the baseline a departure is measured from.
    """
    if result.outcome in (Outcome.FAILED, Outcome.NOT_APPLICABLE):
        return None  # nothing trained to replay (and no FP32 baseline to wait for)
    bad = _first_failure(result)
    if result.outcome == Outcome.DIVERGED or bad is not None:
        # the replay counts steps from the trial's start; the tables count globally
        first = result.first_nonfinite_step
        return "nonfinite", bad if bad is not None else (
            None if first is None else first - result.config.start_step
        )
    if result.config.amp_level != FP32_LEVEL and _silent(result, baseline):
        return "departure", None
    return None


def _first_failure(result: TrialResult) -> int | None:
    """The first step (from the trial's start) that really failed, or None: the step a replay must reach.

    A step failed when its loss was not a real number, or its gradients were not finite and no dynamic
    loss scaler skipped the update: such skips (at 2^16 nearly always) are the scaler's work, so a trial
    replayed to them ended short of the real break and blamed the loss scale. A static scale cannot
    adapt: an overflow under it is the failure."""
    steps = result.steps
    nonfinite = steps.column("nonfinite").to_numpy(zero_copy_only=False).astype(bool)
    if not nonfinite.any():
        return None
    loss_bad = ~loss_ok(result.config, steps.column("loss").to_numpy(zero_copy_only=False))
    if parse_loss_scale(result.config.loss_scale).kind == "dynamic":
        nonfinite &= ~steps.column("skipped").to_numpy(zero_copy_only=False).astype(bool)
    failed = np.flatnonzero(loss_bad | nonfinite)
    return int(failed[0]) if len(failed) else None


def _silent(result: TrialResult, hint: Hint) -> bool:
    """Whether the trial is a silent failure by the contracts' verdict, as far as the worker can tell.

    The worker knows its seed's FP32 final loss and whether FP32 reached the
    target, not FP32's whole curve: a trial that stays above a target FP32
    reached is then replayed. An extra replay costs seconds; a missed one leaves the
    search with no Cell to black-list. The report's verdict is the analysis'.
    Only here, for a trial that stayed finite, does a baseline that still runs
    elsewhere have to be waited for.
    """
    fp32_baseline = resolve_baseline(hint)
    if fp32_baseline is None:
        return False
    fp32_final_loss = fp32_baseline.final_loss
    target = result.target_loss if result.target_loss is not None else TARGET_FROM_FP32 * fp32_final_loss
    loss = result.steps.column("loss").to_numpy(zero_copy_only=False)
    trial = LearningEvidence(result.final_loss, steps_to_target(loss, target) is not None, start_loss(loss))
    fp32 = LearningEvidence(fp32_final_loss, reached_target=fp32_baseline.reached_target is not False)
    return trial_verdict(result.outcome, trial, fp32).verdict is Verdict.SILENT


def diagnose(
    result: TrialResult,
    workload_ref: str,
    baseline: Hint,
    graphs: GraphCache | None = None,
    start: Mapping[str, Any] | None = None,
    group: RankGroup | None = None,
) -> pa.Table:
    """The ``anomalies`` table of one finished trial: zero or one row.

    ``graphs``: the worker's compiled steps, so the replay can run the steps it
    need not look at on the trial's own graph instead of compiling one.
    ``start``: the trial's snapshot (``run_trial``'s), which its replays start from.
    ``group``: this rank's place in a gang, whose every rank diagnoses at once
    (``jobs.localization._ranks``); its row is this rank's part, merged by the driver (``merge_ranks``).
    """
    wanted = localize_mode(result, baseline)
    if wanted is None:
        return ANOMALIES_SCHEMA.empty_table()
    mode, until_step = wanted
    rank = 0 if group is None else group.rank
    run: dict[str, Any] = {"rank": rank, "ranks_broken": 1, "attempt": 1}
    run |= {"node": result.placement.node, "device_id": result.placement.device_id}
    try:
        if mode == "nonfinite" and until_step is not None:  # a bad batch or a device fault is no Cell's
            cause = cause_of(result, workload_ref, until_step, graphs, start, group)
            if cause is not None:
                return _caused(mode, cause, result.config.start_step, run)
        target = result.placement.device_target
        table = localize(
            result.config, workload_ref, mode=mode, device_target=target, until_step=until_step, graphs=graphs,
            start=start, group=group,
        )  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - a replay is evidence, never a reason to lose the trial
        if isinstance(exc, PeerFailed):  # every rank raised here together: none waits for another
            failed = _failed(mode, f"localization failed on {exc}", {**run, "rank": exc.rank})
        else:
            failed = _failed(mode, f"localization failed{_on_rank(group)}: {type(exc).__name__}: {exc}", run)
        if group is not None:  # a rank's replay state is unknown after it failed: form the gang again
            raise RanksApart(failed) from exc
        return failed
    table = _global_steps(table, result.config.start_step)
    for column, value in {**run, "cause": NUMERICS}.items():
        index = table.schema.get_field_index(column)
        field = table.schema.field(index)
        table = table.set_column(index, field, pa.array([value] * table.num_rows, field.type))
    return table


def _on_rank(group: RankGroup | None) -> str:
    return "" if group is None else f" on rank {group.rank} of {group.size}"


def _failed(mode: str, why: str, run: dict[str, Any]) -> pa.Table:
    """The one row of a localization that failed: cause ``unknown``, no Cell, the first line of why."""
    return pa.Table.from_pylist(
        [{"kind": mode, "cause": UNKNOWN, "note": why.splitlines()[0], **run}], ANOMALIES_SCHEMA
    )


def _caused(mode: str, cause: Cause, start_step: int, run: dict[str, Any]) -> pa.Table:
    """The row of a trial whose break was not numerics (``cause_of``); none on a rank whose own part was
    clean while another's held the input fault."""
    if not cause.mine:
        return ANOMALIES_SCHEMA.empty_table()
    row = {"kind": mode, "cause": cause.cause, "replay_step": start_step + cause.step, "note": cause.note}
    row |= {"input_position": cause.position, "input_index": cause.index, **run}
    return pa.Table.from_pylist([row], ANOMALIES_SCHEMA)


class RanksApart(RuntimeError):
    """A rank's replay raised: its gang is formed again before its next trial (where the ranks agreed to
    stop, none waits; where they did not, in a collective say, a peer may); ``table`` is the row that says
    the localization failed."""

    def __init__(self, table: pa.Table) -> None:
        super().__init__(table.column("note")[0].as_py())
        self.table = table


def merge_ranks(tables: list[pa.Table], dynamic: bool) -> pa.Table:
    """A gang's finding from its ranks' (``diagnose`` on each): the one a single device gives
    (``finding_order``: the step, forward before backward, a dynamic scaler's backward-only fallback
    last, then the lowest rank), with how many ranks' parts broke at that step in that phase. With no
    Cell named on any rank, a failed localization's row: the failing rank's, which says why."""
    rows = [row for table in tables for row in table.to_pylist()]
    found = [row for row in rows if row["cause"] != UNKNOWN]
    if not found:
        failed = sorted(rows, key=lambda row: -len(row["note"] or ""))
        return pa.Table.from_pylist(failed[:1], schema=ANOMALIES_SCHEMA)

    def order(row: dict[str, Any]) -> tuple[int, int, int, int]:
        return finding_order(row["replay_step"], row["phase"], row["rank"], dynamic)

    first = min(found, key=order)
    first["ranks_broken"] = sum(order(row)[:3] == order(first)[:3] for row in found)
    return pa.Table.from_pylist([first], schema=ANOMALIES_SCHEMA)


def _global_steps(table: pa.Table, start_step: int) -> pa.Table:
    """The replay counts from the trial's start; the table records global steps, like ``steps``."""
    if not start_step or not table.num_rows:
        return table
    index = table.schema.get_field_index("replay_step")
    shifted = pc.add(table.column(index), pa.scalar(start_step, pa.int64()))
    return table.set_column(index, table.schema.field(index), shifted)
