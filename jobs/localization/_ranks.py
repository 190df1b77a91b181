"""Localization on a gang: every rank looks at the broken step on its own part (docs/large-models.md).

The hooks see only a rank's local forward and backward (``Replay.look``, up to the reduction); the
steps before and each update run on the trial's compiled graph, all ranks together, so the parameters
are the trial's bit for bit, and whether to go on is read from reduced values, the same on every rank.
What a rank does on its own is followed by one agreement (``together``), so no rank waits in a
collective that a failed one skips. The driver merges the findings (``_diagnose.merge_ranks``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ampsweep.contracts import FP32_LEVEL

from .._config import TrialConfig
from ..training._data_parallel import RankGroup, together
from ._fp32_twin import hooked_twin_step
from ._hooks import CellProbe
from ._localize import Look, departure, judged, nonfinite_limit
from ._replay import CellFinding, Replay, fp32_of, graph_for

if TYPE_CHECKING:
    from ..training._step import CompiledStep, GraphCache

#: whose step a gang's ``replay_step`` is: the trial's own, looked at on one rank's part
ON_RANKS = "the trial's own compiled run, looked at on this rank's part of the global batch"


def on_ranks(
    config: TrialConfig,
    workload_ref: str,
    group: RankGroup,
    mode: str,
    until_step: int | None,
    graphs: GraphCache | None,
    start: Mapping[str, Any] | None,
) -> tuple[CellFinding, float] | None:
    """``localize``'s finding on one rank of a gang, called on every rank at once; a rank whose part stayed
    finite finds nothing but ran its share of the compiled steps."""
    compiled = together(group, step=-1, work=lambda: graph_for(config, workload_ref, graphs, start, group))
    if mode == "departure":
        return departure(config, workload_ref, start, group, compiled, graphs)
    limit = nonfinite_limit(config, until_step)
    finding, last = _nonfinite(config, workload_ref, compiled, limit, until_step, graphs, start, group)
    twin = None
    if config.amp_level != FP32_LEVEL and last >= 0:  # every rank runs the twin's steps, in step
        twin = _fp32_twin(config, workload_ref, finding, last, graphs, start, group)
    return judged(config, finding, twin, ON_RANKS)


def _nonfinite(
    config: TrialConfig,
    workload_ref: str,
    compiled: CompiledStep,
    limit: int,
    until_step: int | None,
    graphs: GraphCache | None,
    start: Mapping[str, Any] | None,
    group: RankGroup,
) -> tuple[CellFinding | None, int]:
    """This rank's culprit from the trial's first broken step on, and the last step looked at (the same
    on every rank; -1: none)."""
    first = 0 if until_step is None else max(0, min(until_step, limit))
    replay = together(
        group, step=-1, work=lambda: _started(config, workload_ref, limit, start, compiled, graphs, group)
    )
    early = replay.steps_on(compiled, first)
    if early is not None:  # the graph broke before the trial did: look from that step, from the start again
        together(group, lambda: _started(config, workload_ref, limit, start, compiled, graphs, group, replay))
        replay.steps_on(compiled, early)
        first = early
    probe = replay.attach(CellProbe(backward=True))
    look = Look(replay.dynamic)
    last = -1

    def looked_at(index: int) -> tuple[Any, ...] | None:
        batch = next(replay.batches, None)
        if batch is not None and look.finding is None:
            compiled.copy_state_into(replay.loss_cell, replay.optimizer, replay.scaler)
            probe.start()
            finite, bad_params = replay.look(batch)
            probe.stop()
            look.at(probe, index, finite, bad_params)
        return batch

    try:
        for index in range(first, limit):
            batch = together(group, step=index, work=lambda: looked_at(index))  # noqa: B023 - called at once
            if batch is None:
                break
            last = index
            if not replay.went_on(compiled, batch):
                break
    finally:
        replay.close()
    finding = look.settled()
    if finding is not None and first:
        finding.note.append(f"steps 0-{first - 1} ran on the trial's compiled graph, all ranks together")
    return finding, last


def _started(
    config: TrialConfig,
    workload_ref: str,
    steps: int,
    start: Mapping[str, Any] | None,
    compiled: CompiledStep,
    graphs: GraphCache | None,
    group: RankGroup,
    replay: Replay | None = None,
) -> Replay:
    """A replay at the trial's start: built, or ``replay`` restarted (its network and optimizer kept)."""
    if replay is None:
        replay = Replay(config, workload_ref, steps, start, group)
    else:
        replay.restart(config, workload_ref, steps, start)
    replay.start_on(compiled, graphs, workload_ref)
    return replay


def _fp32_twin(
    config: TrialConfig,
    workload_ref: str,
    finding: CellFinding | None,
    last: int,
    graphs: GraphCache | None,
    start: Mapping[str, Any] | None,
    group: RankGroup,
) -> CellProbe | None:
    """``fp32_twin`` on a gang: FP32's compiled steps 0 to ``last`` - 1 on every rank, with this rank's
    part hooked at its finding's step. None: no finding here, or FP32 broke first."""
    fp32 = fp32_of(config)
    compiled = together(group, step=-1, work=lambda: graph_for(fp32, workload_ref, graphs, start, group))
    at = last if finding is None else finding.step
    replay = together(
        group, step=-1, work=lambda: _started(fp32, workload_ref, last + 1, start, compiled, graphs, group)
    )
    try:
        if replay.steps_on(compiled, at) is not None:
            return None  # FP32 itself went non-finite before that step (on every rank)

        def twin_at() -> tuple[tuple[Any, ...] | None, CellProbe | None]:
            batch = next(replay.batches, None)
            if batch is None or finding is None:
                return batch, None
            compiled.copy_state_into(replay.loss_cell, replay.optimizer, replay.scaler)
            return batch, hooked_twin_step(replay, batch, finding)

        batch, twin = together(group, step=at, work=twin_at)
        if batch is not None and at < last and replay.went_on(compiled, batch):
            replay.steps_on(compiled, last - at - 1)
        return twin
    finally:
        replay.close()


__all__ = ["on_ranks"]
