"""Whether a non-finite trial was numerics at all, before any Cell is looked for (docs/faults.md).

The trial is rerun from its own start on its own compiled graph and batches to the step that broke: a
batch that already held a non-finite value is ``input``; a rerun whose loss differs from the trial's
before that step is not exact (``unknown``); an exact rerun that breaks there again is numerics (the
Cell is localized next); one that stays finite is ``not_reproduced`` (a device or transfer fault). On a
gang each rank checks its own part and the ranks agree (``flagged``) before the rerun's steps.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ampsweep.contracts import INPUT, NOT_REPRODUCED, UNKNOWN, parse_loss_scale

from .._config import TrialConfig
from .._result import TrialResult
from ..training._batches import batch_stream
from ..training._capture import loss_ok
from ..training._data_parallel import flagged, shard_stream, together
from ..training._snapshot import continue_scaler
from ..training._step import HEAD_FINITE, HEAD_LOSS, CompiledStep, GraphCache
from ..training._trainer import begin_trial, skip_batches, trial_step, trial_workload

if TYPE_CHECKING:
    from ..training._data_parallel import RankGroup


@dataclass(frozen=True)
class Cause:
    """Why step ``step`` (from the trial's start) broke, when it was not numerics; ``position`` and
    ``index``: where an input fault sat in the batch. ``mine``: False on a rank of a gang whose own part
    was clean while another rank's held the input fault (that rank writes the row)."""

    cause: str
    step: int
    note: str
    position: int | None = None
    index: str | None = None
    mine: bool = True


def cause_of(
    result: TrialResult,
    workload_ref: str,
    until_step: int,
    graphs: GraphCache | None,
    start: Mapping[str, Any] | None,
    group: RankGroup | None,
) -> Cause | None:
    """The cause of the trial's break at ``until_step`` (from its start) when it is not numerics; None when
    an exact rerun broke there again (numerics: localize it)."""
    config = result.config

    def started() -> tuple[CompiledStep, list[tuple[Any, ...]]]:
        step, _, batches, _ = begin_trial(config, workload_ref, graphs or GraphCache(), start, group)
        continue_scaler(step.named_state(), start, config.loss_scale)
        return step, list(itertools.islice(batches, until_step + 1))

    step, drawn = together(group, started)
    held = _input_cause(drawn, config.start_step, group)
    if held is not None:
        return held
    clip = step.clip_tensor(config.clip)
    every = max(1, config.layer_every)
    trial_loss = result.steps.column("loss").to_numpy(zero_copy_only=False)
    head = np.zeros(3)
    for index, batch in enumerate(drawn):
        head = trial_step(step, clip, batch, index, every).asnumpy()
        if index < until_step and not _same(head[HEAD_LOSS], trial_loss[index]):
            return Cause(
                UNKNOWN,
                index,
                f"the rerun was not exact: its loss at step {config.start_step + index} was {head[HEAD_LOSS]!r}, "
                f"the trial's {float(trial_loss[index])!r}",
            )
    dynamic = parse_loss_scale(config.loss_scale).kind == "dynamic"
    broke = not loss_ok(config, head[:1])[0] or (head[HEAD_FINITE] <= 0.5 and not dynamic)
    if broke or len(drawn) <= until_step:
        return None
    at = config.start_step + until_step
    return Cause(
        NOT_REPRODUCED,
        until_step,
        f"an exact rerun from the trial's start (its loss bit for bit to step {at - 1}) stayed finite at "
        f"step {at}: a device or transfer fault, not numerics",
    )


def input_fault(
    config: TrialConfig,
    workload_ref: str,
    steps: int,
    start: Mapping[str, Any] | None,
    group: RankGroup | None,
) -> Cause | None:
    """The ``input`` cause among the first ``steps`` batches a run of ``config`` draws from its start (Watch:
    the user's run from its snapshot), or None."""

    def drawn() -> list[tuple[Any, ...]]:
        workload = trial_workload(config, workload_ref, start)
        stream = batch_stream(workload.batches, steps, skip=skip_batches(config, workload))
        return list(stream if group is None else shard_stream(stream, group))

    return _input_cause(together(group, drawn), config.start_step, group)


def _input_cause(drawn: list[tuple[Any, ...]], start_step: int, group: RankGroup | None) -> Cause | None:
    """An ``input`` cause when a batch of ``drawn`` (on a gang: any rank's part, agreed) holds a
    non-finite value."""
    bad = _nonfinite_input(drawn)
    held = flagged(group, bad is not None) if group is not None else ([0] if bad is not None else [])
    if not held:
        return None
    if bad is None:
        return Cause(INPUT, len(drawn) - 1, "", mine=False)
    at, position, index = bad
    where = f"item {position} of the batch at step {start_step + at}, index {index}"
    return Cause(INPUT, at, f"{where} held a non-finite value before the network saw it", position, index)


def _same(rerun: float, trial: float) -> bool:
    """Bit for bit as the steps table holds it (float32 widened), NaN equal to NaN."""
    a, b = np.float32(rerun), np.float32(trial)
    return bool(a.tobytes() == b.tobytes() or (np.isnan(a) and np.isnan(b)))


def _nonfinite_input(batches: list[tuple[Any, ...]]) -> tuple[int, int, str] | None:
    """(step, item of the batch tuple, index of its first non-finite element) of the first batch that
    held a non-finite float value, or None."""
    for at, batch in enumerate(batches):
        for position, item in enumerate(batch):
            values = np.asarray(item.asnumpy() if hasattr(item, "asnumpy") else item)
            if values.dtype.kind != "f":
                continue
            bad = np.argwhere(~np.isfinite(values))
            if len(bad):
                return at, position, str([int(i) for i in bad[0]])
    return None


__all__ = ["Cause", "cause_of", "input_fault"]
