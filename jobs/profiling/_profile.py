"""``ampsweep profile``: one FP32 run with hooks that rates each Cell's float16 risk.

What it measures and how it rates a Cell: docs/cli.md (profile). The steps
between the :data:`SAMPLES` hooked PyNative steps run compiled and without
hooks, as a trial's do, so it costs about one FP32 trial.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ampsweep.contracts import FLOAT16_MAX, static_scale_for

from .._config import TrialConfig
from ..localization._replay import Replay, ensure_pynative, graph_for, restore_mode
from ..training._snapshot import read_checkpoint, snapshot_id
from ._profile_hooks import CellProfile, Recorder, Watched

if TYPE_CHECKING:
    from ..training._step import CompiledStep, GraphCache

#: how many steps are measured (evenly spread, first and last included)
SAMPLES = 16
#: an extrapolated crossing is reported only this many profiled lengths ahead at most
EXTRAPOLATE_FACTOR = 10
#: a value this far below 65504 is not extrapolated: a log-linear fit of a few samples (logits early
#: in training) would claim a thousandfold growth within a few hundred steps
EXTRAPOLATE_FROM = FLOAT16_MAX / 1024


@dataclass
class Profile:
    """Every profiled Cell (riskiest first) and the loss scale they call for."""

    cells: list[CellProfile]
    start_step: int
    steps: int
    sampled: list[int]
    #: the step (global) whose FP32 loss or gradients were not finite, if any
    nonfinite_step: int | None = None

    @property
    def loss_scale(self) -> str | None:
        """``static:2^k`` for underflow alone, ``dynamic`` when overflow comes with it, else None."""
        risks = {c.risk for c in self.cells}
        if "underflow" not in risks:
            return None
        if "overflow" in risks:
            return "dynamic"
        largest = max((c.backward_max for c in self.cells if c.backward_max), default=None)
        return static_scale_for(largest)

    def as_json(self) -> dict[str, Any]:
        return {
            "cells": [c.as_json() for c in self.cells],
            "loss_scale": self.loss_scale,
            "start_step": self.start_step,
            "steps": self.steps,
        }


def sample_steps(steps: int, samples: int = SAMPLES) -> list[int]:
    """Which of ``steps`` steps are measured: ``samples`` spread evenly, the first and last among them."""
    return sorted({int(round(x)) for x in np.linspace(0, steps - 1, min(steps, samples))})


def passes_max_at(history: list[tuple[int, float]], horizon: int) -> int | None:
    """The step where a growing maximum would pass 65504, from a fit of log(max) on the step.

    The later half of the samples only (early training moves fast and then
    settles); None when the values do not grow, are past 65504 already or
    still far below it (:data:`EXTRAPOLATE_FROM`), or would pass it only
    beyond ``horizon``.
    """
    if any(m >= FLOAT16_MAX for _, m in history):
        return None  # a sample passed it already: a forecast would contradict the profile's own maximum
    points = [(s, m) for s, m in history if m > 0]
    points = points[len(points) // 2 :]
    if len(points) < 3 or not EXTRAPOLATE_FROM <= points[-1][1] < FLOAT16_MAX:
        return None
    steps = np.array([s for s, _ in points], dtype=np.float64)
    logs = np.log([m for _, m in points])
    if np.ptp(steps) == 0:
        return None
    slope, intercept = np.polyfit(steps, logs, 1)
    if not slope > 0:
        return None
    crossing = (math.log(FLOAT16_MAX) - intercept) / slope
    if not (math.isfinite(crossing) and steps[-1] < crossing <= horizon):
        return None
    return int(round(crossing))


def _order(cell: CellProfile) -> tuple[int, float]:
    rank = {"overflow": 0, "underflow": 1, None: 2}[cell.risk]
    return rank, -max(cell.forward_max, cell.backward_max or 0.0)


def profile(
    workload_ref: str,
    seed: int,
    steps: int,
    workload_args: dict[str, Any] | None = None,
    *,
    prefix_steps: int = 0,
    start_step: int = 0,
    checkpoint: bytes | None = None,
    samples: int = SAMPLES,
    graphs: GraphCache | None = None,
) -> Profile:
    """Train ``steps`` FP32 steps of a workload with hooks; rate every Cell's float16 risk.

    Where to start follows the spec's ``start_from`` as trials do:
    ``prefix_steps`` N trains N compiled FP32 steps first without hooks
    (``{steps: N}``); ``checkpoint`` loads that file's bytes at ``start_step``.
    ``graphs``: a worker's compiled steps; when it has the FP32 graph, the
    steps between samples run on it instead of on a graph compiled here.
    """
    config = TrialConfig.fp32(
        workload_ref, seed, steps, workload_args=dict(workload_args or {}), abort_after=steps
    )
    start = None if checkpoint is None else read_checkpoint(checkpoint)
    if checkpoint is not None:
        snapshot = "profile-" + snapshot_id(checkpoint)
        config = dataclasses.replace(config, start_step=start_step, start_from=snapshot)
    compiled = graphs.compiled_for(config, workload_ref) if graphs is not None else None
    if compiled is not None:
        try:
            return _profile(config, workload_ref, steps, prefix_steps, samples, start, compiled)
        except Exception:  # noqa: BLE001 - an odd workload: its own compile below still works
            pass
    return _profile(config, workload_ref, steps, prefix_steps, samples, start)


def _profile(
    config: TrialConfig,
    workload_ref: str,
    steps: int,
    prefix_steps: int,
    samples: int,
    start: Mapping[str, Any] | None,
    compiled: CompiledStep | None = None,
) -> Profile:
    """``compiled``: the worker's FP32 graph, to run the steps between samples without a compile.

    ``start``: the checkpoint's parameters, when the profile starts from one.
    """
    mode = ensure_pynative()
    recorder = Recorder()
    try:
        replay = Replay(config, workload_ref, prefix_steps + steps, start)
        compiled = compiled if compiled is not None else graph_for(config, workload_ref, None, start)
        between = functools.partial(replay.on_graph, compiled)
        first = config.start_step
        bad = between(prefix_steps)
        nonfinite = None if bad is None else first + bad
        first += prefix_steps
        watched = Watched(recorder)
        done: list[int] = []
        position = 0  # steps of the profiled stretch run so far
        for index in sample_steps(steps, samples):
            # the steps between samples: compiled, without hooks (a PyNative step costs ~50 of them)
            bad = between(index - position)
            if bad is not None and nonfinite is None:
                nonfinite = first + position + bad
            position = index
            batch = next(replay.batches, None)
            if batch is None:
                break
            recorder.attach(replay.loss_cell)
            recorder.active = True
            try:
                with watched:
                    finite, _ = replay.step(batch)
            finally:
                recorder.active = False
                recorder.detach()
            recorder.end_step(first + index)
            done.append(first + index)
            position = index + 1
            if not finite and nonfinite is None:
                nonfinite = first + index
    finally:
        recorder.detach()
        restore_mode(mode)
    horizon = first + EXTRAPOLATE_FACTOR * steps
    cells = list(recorder.cells.values())
    for cell in cells:
        cell.passes_max_at = passes_max_at(cell.history, horizon)
    cells.sort(key=_order)
    return Profile(cells, start_step=first, steps=steps, sampled=done, nonfinite_step=nonfinite)
