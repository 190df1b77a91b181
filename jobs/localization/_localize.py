"""Which Cell broke a trial: replay it in PyNative with hooks on every Cell (docs/localization.md).

The compiled step sees only per-parameter gradients, and once float16 made an inf every gradient is
non-finite at once; a replay (same seed, same batches) can look at each Cell's output and input
gradient as it is produced (``_hooks``). ``nonfinite`` replays to the first non-finite step of the
replay (a forward culprit before a backward one; a dynamic scaler's backward-only steps are its work),
then measures the Cell in an FP32 twin. ``departure`` compares the policy with an FP32 twin at the same
weights at check steps. A jitted run and its PyNative replay may break a few steps apart (fusion
changes float16 rounding): ``replay_step`` is the replay's.

On a gang (``on_ranks``, docs/large-models.md) the hooks see only a rank's own forward and backward (up
to the reduction); the steps before and each update run on the trial's compiled graph, all ranks
together, and whatever a rank does on its own is followed by one agreement (``together``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ampsweep.contracts import ANOMALIES_SCHEMA, FP32_LEVEL

from .._config import TrialConfig
from ..training._data_parallel import together
from ._fp32_twin import blame_upstream, compare_with_fp32, fp32_twin, hooked_twin_step
from ._hooks import CellProbe, Event
from ._inside import replay_inside
from ._replay import (
    JIT_PREFIX_MIN_STEPS,
    CellFinding,
    Replay,
    copy_weights,
    ensure_pynative,
    fp32_of,
    graph_for,
    parameter_owner,
    restore_mode,
    skip_ahead,
)

if TYPE_CHECKING:
    from ..training._data_parallel import RankGroup
    from ..training._step import CompiledStep, GraphCache

MODES = ("nonfinite", "departure")

#: The note of a finding in an FP32 trial: it broke with nothing cast, so no FP32 twin is replayed.
FP32_ITSELF_NOTE = "FP32 itself (nothing cast to float16) went non-finite here"

#: Relative L2 error ``||x - x_fp32|| / ||x_fp32||`` above which a Cell's output
#: departs from FP32. float16 rounding gives ~6e-4 for one Dense and a few 1e-3
#: after several layers; a broken normalization gives ~1.0. 0.1 sits two orders
#: above the first and one below the second.
REL_ERROR_THRESHOLD = 0.1
#: A Cell collapses when more than this share of its output is exactly zero ...
ZERO_FRACTION_THRESHOLD = 0.5
#: ... while the FP32 output has at most this share of zeros (ReLU-like Cells
#: have ~half zeros in FP32 too, and are not a collapse).
FP32_ZERO_FRACTION_MAX = 0.1
#: whose step a one-device ``replay_step`` is
REPLAYED = "the PyNative replay; the jitted run may go non-finite a few steps apart (fusion changes rounding)"
#: Steps at which departure mode compares the policy with FP32.
DEPARTURE_CHECKS = (0, 1, 2, 4, 8, 16, 32)
#: Replay this many steps past the jitted run's first non-finite step (``until_step``),
#: because the PyNative replay may diverge a few steps later than the jitted run.
UNTIL_MARGIN = 10
#: With ``until_step``, steps up to this many before it run compiled, without hooks (0: from
#: the trial's own state before it broke; 5 cost the demo's replays twice as long, same culprits).
UNTIL_LEAD = 0


def _row(kind: str, finding: CellFinding, zero_fraction: float | None) -> dict[str, Any]:
    event = finding.event
    return {
        "kind": kind,
        "replay_step": finding.step,
        "cell": event.name,
        "cell_class": event.cell_class,
        "phase": event.phase,
        "input_dtype": event.input_dtype,
        "output_dtype": event.output_dtype,
        "max_abs": event.stats.max_abs,
        "fp32_max_abs": finding.fp32_max_abs,
        "rel_error": finding.rel_error,
        "zero_fraction": zero_fraction,
        "note": "; ".join(finding.note) if finding.note else None,
        "input_max_abs": event.input_max_abs if event.phase == "forward" else None,
        "inner_op": finding.inside.op or None if finding.inside else None,
        "inner_max_abs": finding.inside.op_input_max_abs if finding.inside else None,
        "intermediate_max_abs": finding.inside.intermediate_max_abs if finding.inside else None,
        "finite": event.stats.finite,
    }


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=ANOMALIES_SCHEMA)


def _backward_culprit(probe: CellProbe, bad_params: list[str]) -> tuple[Event, list[str]] | None:
    """The first Cell in backward order whose input gradient is non-finite.

    A Cell whose inputs need no gradient (the first layer: its input is data)
    has no input gradient to look at; when no hook caught anything but a
    parameter's gradient is bad, the culprit is the Cell owning the bad
    parameter that comes last in forward order (first in backward order).
    """
    event = probe.first_nonfinite("backward")
    if event is not None:
        note = []
        if not event.incoming_finite:
            note.append(
                "the gradient arriving at this Cell's output was already non-finite "
                "(a loss scale beyond the dtype's range?)"
            )
        return event, note
    if not bad_params:
        return None
    param = max(bad_params, key=lambda n: probe.order.get(parameter_owner(n, probe), -1))
    owner = parameter_owner(param, probe)
    forward = probe.find(owner, "forward", 0)
    if forward is None:
        return None
    stats = dataclasses.replace(forward.stats, finite=False)
    event = dataclasses.replace(forward, phase="backward", stats=stats)
    return event, [f"caught on the gradient of parameter {param!r} (this Cell's input needs no gradient)"]


def _nonfinite(
    config: TrialConfig,
    workload_ref: str,
    limit: int,
    until_step: int | None,
    graphs: GraphCache | None = None,
    start: Mapping[str, Any] | None = None,
) -> CellFinding | None:
    """Replay under the trial's policy to the first non-finite step; see the module docstring."""
    prefix = 0 if until_step is None else max(0, min(until_step - UNTIL_LEAD, limit))
    compiled = graphs.compiled_for(config, workload_ref) if graphs is not None else None
    if compiled is None and prefix < JIT_PREFIX_MIN_STEPS:  # compiling costs more than it saves
        prefix = 0
    replay, early = skip_ahead(config, workload_ref, limit, prefix, compiled, graphs, start)
    if early is not None:  # the prefix diverged earlier than the trial did: look at every step
        replay = Replay(config, workload_ref, limit, start)
        prefix = 0
    probe = replay.attach(CellProbe(backward=True))
    look = Look(replay.dynamic)
    try:
        for index, batch in enumerate(replay.batches, start=prefix):
            probe.start()
            finite, bad_params = replay.step(batch)
            probe.stop()
            if look.at(probe, index, finite, bad_params):
                break
    finally:
        replay.close()
    finding = look.settled()
    if finding is not None and prefix:
        checked = "the loss finite in each" if replay.dynamic else "all finite"
        finding.note.append(f"steps 0-{prefix - 1} replayed compiled, without hooks ({checked})")
    return finding


class Look:
    """What the hooks of one replayed step show, step after step, until a culprit is found.

    The forward pass runs first, so a forward culprit wins over a backward one
    in the same step. A step whose backward alone overflows is what a *dynamic*
    loss scaler is for (it skips the step and lowers the scale): it is kept
    as the fallback, and counted, unless no forward culprit follows.
    """

    def __init__(self, dynamic: bool) -> None:
        self.dynamic = dynamic
        self.finding: CellFinding | None = None
        self.fallback: CellFinding | None = None
        self.skipped = 0

    def at(self, probe: CellProbe, index: int, finite: bool, bad_params: list[str]) -> bool:
        """Judge step ``index``'s hooks; True once the culprit is found."""
        forward = probe.first_nonfinite("forward")
        if forward is not None:
            # finite inputs, non-finite output: replay the Cell alone to see which op overflowed
            inside = replay_inside(forward)
            self.finding = CellFinding(
                forward, index, [], inside=inside, step_forward=tuple(probe.forward_events())
            )
            return True
        backward = _backward_culprit(probe, [] if finite else bad_params)
        if backward is None:
            return False
        candidate = CellFinding(backward[0], index, backward[1])
        candidate.forward = probe.find(backward[0].name, "forward", backward[0].forward_call)
        if not self.dynamic:
            self.finding = candidate
            return True
        self.fallback = self.fallback or candidate
        self.skipped += 1
        return False

    def settled(self) -> CellFinding | None:
        """The culprit, or the backward-only fallback, with what the skipped steps say in its note."""
        finding = self.finding
        if finding is None and self.fallback is not None:
            finding = self.fallback
            finding.note.insert(
                0,
                f"only backward overflows: {self.skipped} step(s) skipped by the dynamic loss scaler, "
                "the forward pass stayed finite",
            )
        elif finding is not None and self.skipped:
            finding.note.append(
                f"{self.skipped} earlier step(s) overflowed only in backward (skipped by the dynamic loss scaler)"
            )
        return finding


def finding_order(step: int, phase: str | None, rank: int | None, dynamic: bool) -> tuple[int, int, int, int]:
    """Where a finding stands in the order one device looks (``Look``), ranks last: the key that merges a
    gang's findings (``merge_ranks``, Watch's ``first_of_ranks``) into the one a single device gives.

    A device looks step by step, forward before backward; under a dynamic loss scaler a backward-only
    overflow is a fallback that any forward culprit, at any later step, beats.
    """
    backward = phase != "forward"
    return (int(dynamic and backward), step, int(backward), rank or 0)


def _rel_error(policy: np.ndarray, fp32: np.ndarray) -> float:
    if policy.shape != fp32.shape:
        return float("nan")
    if not np.isfinite(policy).all():
        return float("inf")
    denominator = max(float(np.linalg.norm(fp32)), float(np.finfo(np.float32).tiny))
    return float(np.linalg.norm(policy - fp32)) / denominator


def departure(
    config: TrialConfig,
    workload_ref: str,
    start: Mapping[str, Any] | None,
    group: RankGroup | None = None,
    compiled: CompiledStep | None = None,
    graphs: GraphCache | None = None,
) -> tuple[CellFinding, float] | None:
    """Train the policy and compare it with an FP32 twin at the same weights at each check step.

    The finding's ``replay_step`` is the check step: the comparison runs on that step's batch, with the
    weights the policy had before training on it. One device trains the policy in PyNative; a gang
    (``group``) trains it on ``compiled``, the ranks' reduction included, while each rank runs its own
    part forward by both, and every rank runs every step (a rank that stopped would leave its peers in
    the reduction).
    """
    limit = departure_limit(config)
    checks = [s for s in DEPARTURE_CHECKS if s < limit]
    if not checks:
        return None

    def replays() -> tuple[Replay, Replay]:
        policy = Replay(config, workload_ref, limit, start, group)
        if compiled is not None:
            policy.start_on(compiled, graphs, workload_ref)
        return policy, Replay(fp32_of(config), workload_ref, 0, start, group)

    policy, fp32 = together(group, replays)
    policy_probe = policy.attach(CellProbe(keep_arrays=True, backward=False))
    fp32_probe = fp32.attach(CellProbe(keep_arrays=True, backward=False))
    found: tuple[CellFinding, float] | None = None

    def compared(index: int) -> tuple[Any, ...] | None:
        nonlocal found
        batch = next(policy.batches, None)
        if batch is not None and index in checks and found is None:
            if compiled is not None:
                compiled.copy_state_into(policy.loss_cell, policy.optimizer, policy.scaler)
            found = compare_at(index, batch, (policy, policy_probe), (fp32, fp32_probe))
        return batch

    try:
        for index in range(limit):
            batch = together(group, lambda: compared(index), index)  # noqa: B023 - called at once
            if batch is None or index >= checks[-1] or (found is not None and group is None):
                break
            went_on = policy.went_on(compiled, batch) if compiled is not None else policy.step(batch)[0]
            if not (went_on or policy.scaler is not None):
                break  # not a silent failure: nonfinite mode is the one to ask
    finally:
        policy.close()
        fp32.close()
    return found


def compare_at(
    index: int, batch: tuple[Any, ...], policy: tuple[Replay, CellProbe], fp32: tuple[Replay, CellProbe]
) -> tuple[CellFinding, float] | None:
    """Step ``index``'s forward pass by the policy and by its FP32 twin at the policy's weights: the
    first Cell that departs, or None."""
    copy_weights(policy[0].network, fp32[0].network)
    for replay, probe in (policy, fp32):
        probe.start()
        replay.forward_only(batch)
        probe.stop()
    return _first_departure(policy[1], fp32[1], index)


def _first_departure(policy: CellProbe, fp32: CellProbe, step: int) -> tuple[CellFinding, float] | None:
    for event in policy.forward_events():
        twin = fp32.find(event.name, "forward", event.call)
        if twin is None or event.array is None or twin.array is None:
            continue
        rel = _rel_error(event.array, twin.array)
        collapsed = (
            event.stats.zero_fraction > ZERO_FRACTION_THRESHOLD
            and twin.stats.zero_fraction <= FP32_ZERO_FRACTION_MAX
        )
        if rel > REL_ERROR_THRESHOLD or collapsed:
            why = f"relative error {rel:.3g} > {REL_ERROR_THRESHOLD:g}" if rel > REL_ERROR_THRESHOLD else ""
            if collapsed:
                why = (why + "; " if why else "") + (
                    f"{event.stats.zero_fraction:.0%} exact zeros where FP32 has "
                    f"{twin.stats.zero_fraction:.0%}"
                )
            note = [f"first Cell in forward order whose output departs from FP32 at the same weights: {why}"]
            finding = CellFinding(event, step, note, rel_error=rel, fp32_max_abs=twin.stats.max_abs)
            return finding, event.stats.zero_fraction
    return None


def localize(
    config: TrialConfig,
    workload_ref: str,
    *,
    mode: str,
    device_target: str = "CPU",
    until_step: int | None = None,
    graphs: GraphCache | None = None,
    start: Mapping[str, Any] | None = None,
    group: RankGroup | None = None,
) -> pa.Table:
    """The Cell that broke a trial, as an ``ANOMALIES_SCHEMA`` table of 0 or 1 rows (module docstring).

    ``until_step``: the jitted run's first non-finite step, if known; the replay stops ``UNTIL_MARGIN``
    steps after it. ``graphs``: the worker's compiled steps, so the steps not looked at run on the trial's
    own graph. ``start``: a forked trial's snapshot. ``device_target`` only goes into the note. ``group``:
    this rank of a gang, every rank replaying its own part at once (``on_ranks``)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    started = time.perf_counter()
    previous = ensure_pynative()
    try:
        if group is not None:
            found = on_ranks(config, workload_ref, group, mode, until_step, graphs, start)
        elif mode == "departure":
            found = departure(config, workload_ref, start)
        else:
            finding = _nonfinite(
                config, workload_ref, nonfinite_limit(config, until_step), until_step, graphs, start
            )
            twin = None
            if finding is not None and config.amp_level != FP32_LEVEL:
                twin = fp32_twin(config, workload_ref, finding, graphs, start)
            found = judged(config, finding, twin, REPLAYED)
        return finished(mode, found, device_target, started)
    finally:
        restore_mode(previous)


def departure_limit(config: TrialConfig) -> int:
    """The steps a departure replay runs: to the last of ``DEPARTURE_CHECKS`` that fits."""
    return min(DEPARTURE_CHECKS[-1] + 1, config.steps)


def nonfinite_limit(config: TrialConfig, until_step: int | None) -> int:
    """The steps a non-finite replay may run: ``UNTIL_MARGIN`` past the jitted run's first non-finite step."""
    return config.steps if until_step is None else min(config.steps, until_step + 1 + UNTIL_MARGIN)


def judged(
    config: TrialConfig, finding: CellFinding | None, twin: CellProbe | None, replayed: str
) -> tuple[CellFinding, float] | None:
    """A non-finite finding measured against its FP32 twin (none for an FP32 trial: it is FP32), with
    its zero fraction. ``replayed`` says whose step ``replay_step`` is."""
    if finding is None:
        return None
    if config.amp_level == FP32_LEVEL:
        # the trial is FP32: there is no other FP32 run to compare it with, and no float16
        finding.note.append(FP32_ITSELF_NOTE)
    else:
        blame_upstream(finding, twin)
        compare_with_fp32(finding, finding.forward, twin)
    finding.note.append(f"step of {replayed}")
    return finding, finding.event.stats.zero_fraction


def finished(
    mode: str, found: tuple[CellFinding, float] | None, device_target: str, started: float
) -> pa.Table:
    """The anomalies table of one localization: its finding's row, or none."""
    if found is None:
        return _table([])
    finding, zero_fraction = found
    finding.note.append(f"replayed on {device_target} in {time.perf_counter() - started:.1f} s")
    return _table([_row(mode, finding, zero_fraction)])


# a gang ------------------------------------------------------------------------------------------

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
    finding, last = _nonfinite_on_ranks(
        config, workload_ref, compiled, limit, until_step, graphs, start, group
    )
    twin = None
    if config.amp_level != FP32_LEVEL and last >= 0:  # every rank runs the twin's steps, in step
        twin = _fp32_twin_on_ranks(config, workload_ref, finding, last, graphs, start, group)
    return judged(config, finding, twin, ON_RANKS)


def _nonfinite_on_ranks(
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


def _fp32_twin_on_ranks(
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


__all__ = [
    "localize",
    "finding_order",
    "MODES",
    "FP32_ITSELF_NOTE",
    "REL_ERROR_THRESHOLD",
    "DEPARTURE_CHECKS",
]
