"""What one trial hands back to the driver: an outcome, its numbers, its tables.

The actor owns the columns it measured (outcome, losses, timings, where it
ran); the driver owns the columns that describe the sweep (its name, which
trial this one duplicates, how many workers it took) and adds them when it
commits. Tables travel as Arrow, so the driver writes them without copying.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from ampsweep.contracts import (
    ANOMALIES_SCHEMA,
    LAYERS_SCHEMA,
    STEPS_SCHEMA,
    TRIALS_SCHEMA,
    Outcome,
    arg_column,
)

from ._config import TrialConfig
from ._placement import Placement
from .training._amp import Fp32Part, fp32_cells_mechanism


@dataclass(frozen=True)
class RankAnswer:
    """One rank's answer for its part of a data-parallel trial (``TrialWorker.run_rank``): ``result`` is
    rank 0's (or a failed or ``apart`` rank's own), ``checksum`` the trained parameters' (taken before any
    replay; equal on ranks that trained together), ``anomalies`` this rank's finding (``merge_ranks``);
    ``apart``: its replay raised where its peers may still wait in a collective, so the gang is formed
    again (the trial's result stands)."""

    result: TrialResult | None
    checksum: str
    anomalies: pa.Table = field(default_factory=ANOMALIES_SCHEMA.empty_table)
    apart: bool = False


@dataclass
class TrialResult:
    """One finished trial, as the actor measured it."""

    config: TrialConfig
    outcome: Outcome
    placement: Placement
    steps_run: int = 0
    first_nonfinite_step: int | None = None
    final_loss: float | None = None
    target_loss: float | None = None
    compile_s: float = 0.0
    wall_s: float = 0.0
    error: str | None = None
    traceback: str | None = None
    steps: pa.Table = field(default_factory=STEPS_SCHEMA.empty_table)
    layers: pa.Table = field(default_factory=LAYERS_SCHEMA.empty_table)
    anomalies: pa.Table = field(default_factory=ANOMALIES_SCHEMA.empty_table)
    #: (zero_fraction, underflow_fraction) of the sampled gradients, see ``TrialMetrics``
    gradient_fractions: tuple[float | None, float | None] = (None, None)
    #: an FP32 prefix run's training state at its end (``TrialConfig.save_snapshot``), checkpoint bytes
    snapshot: bytes | None = None
    #: the worker's clock around the whole trial, localization replay included (``TrialWorker.run``);
    #: None for a failure the driver wrote because no worker finished the trial
    started_at: datetime | None = None
    finished_at: datetime | None = None
    #: seconds of the localization replay after training (0 when the trial needed none)
    diagnose_s: float = 0.0
    #: a failed trial: the global step it was in when it raised (None: before its first step); on a gang
    #: it says where a rank waited for a peer that never came (``sweep.cluster._gang``)
    failed_step: int | None = None
    #: for a copy: the trial whose rows it took, and why that is exact (``COPY_REASONS``)
    copied_from: str | None = None
    copy_reason: str | None = None
    #: what the black list kept in FP32 (``fp32_params``, ``fp32_cell_paths``), as the trial's graph
    #: was cast (``CompiledStep.fp32_part``); a copy keeps its source's; None: never cast
    fp32_part: Fp32Part | None = None
    #: rows of the workload's first batch: the global batch a gang's ranks split (None: never drawn)
    global_batch: int | None = None

    @property
    def trial_id(self) -> str:
        return self.config.trial_id

    @classmethod
    def failure(
        cls,
        config: TrialConfig,
        error: str,
        placement: Placement,
        *,
        traceback: str | None = None,
        wall_s: float = 0.0,
        target_loss: float | None = None,
        outcome: Outcome = Outcome.FAILED,
        failed_step: int | None = None,
    ) -> TrialResult:
        """A trial that raised, or that no worker could finish (``error`` is one line).

        ``outcome`` ``not_applicable``: the cast could not keep a listed class in
        FP32 (``ampsweep.amp.NotKeptInFloat32``), so the configuration was never tried,
        which is neither a failure nor a sign of instability; its one line is
        the reason, with no traceback.
        """
        return cls(
            config=config,
            outcome=outcome,
            placement=placement,
            target_loss=target_loss,
            wall_s=wall_s,
            error=error,
            traceback=traceback,
            failed_step=failed_step,
        )

    def copied_as(self, config: TrialConfig, reason: str) -> TrialResult:
        """This result as the result of ``config``, a trial that computes exactly what this one did.

        Its tables are this trial's (they carry no trial id: the folder names
        it); it took no time of its own, so its clock stops where this one's did.
        ``reason`` says why the copy is exact (a key of ``COPY_REASONS``).
        """
        return replace(
            self,
            config=config,
            copied_from=self.trial_id,
            copy_reason=reason,
            compile_s=0.0,
            wall_s=0.0,
            diagnose_s=0.0,
            snapshot=None,
            started_at=self.finished_at,
        )

    def trial_row(self, *, sweep: str, equivalent_to: str | None, attempts: int) -> pa.Table:
        """The one-row ``trials`` table, with the columns only the driver knows."""
        config = self.config
        row: dict[str, Any] = {
            "trial_id": config.trial_id,
            "sweep": sweep,
            "workload": config.workload,
            "graph_id": config.graph_id,
            "amp_level": config.amp_level,
            "black_list": list(config.black_list),
            "loss_placement": config.loss_placement,
            "clip": config.clip,
            "loss_scale": config.loss_scale,
            "dtype": config.dtype,
            "seed": config.seed,
            "steps": config.steps,
            "outcome": Outcome(self.outcome).value,
            "steps_run": self.steps_run,
            "first_nonfinite_step": self.first_nonfinite_step,
            "start_step": config.start_step,
            "start_from": config.start_from,
            "zero_fraction": self.gradient_fractions[0],
            "underflow_fraction": self.gradient_fractions[1],
            "final_loss": self.final_loss,
            "target_loss": self.target_loss,
            "equivalent_to": equivalent_to,
            "copied_from": self.copied_from,
            "copy_reason": self.copy_reason,
            "error": self.error,
            "traceback": self.traceback,
            "wall_s": self.wall_s,
            "compile_s": self.compile_s,
            "device_kind": self.placement.device_kind,
            "node": self.placement.node,
            "device_id": self.placement.device_id,
            "worker_index": self.placement.worker_index,
            "attempts": attempts,
            "mindspore_version": self.placement.mindspore_version,
            "device_target": self.placement.device_target,
            "overflow_mode": self.placement.overflow_mode,
            # the worker's stamps: the driver's commit comes later (and would make a sweep
            # look shorter than the work done in it); a driver-made failure has the commit time
            "started_at": self.started_at,
            "finished_at": self.finished_at or datetime.now(timezone.utc),
            "diagnose_s": self.diagnose_s,
            "fp32_cells": fp32_cells_mechanism(config.amp_level, config.black_list),
            "fp32_params": None if self.fp32_part is None else self.fp32_part.params,
            "fp32_cell_paths": None if self.fp32_part is None else list(self.fp32_part.paths),
            "devices": config.devices,
            "global_batch": self.global_batch,
        }
        table = pa.Table.from_pylist([row], schema=TRIALS_SCHEMA)
        # the swept workload arguments: one text column each, after the fixed schema (``arg_column``)
        for name, value in config.configuration.workload_args:
            table = table.append_column(arg_column(name), pa.array([value], pa.string()))
        return table
