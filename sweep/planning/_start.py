"""``start_from`` (``docs/late-divergence.md``): where each seed's trials start, resolved before it runs.

A snapshot is named by its content (a prefix by what makes it and the MindSpore version, a checkpoint by
its bytes), and so are the trials' ids: resume and later sweeps find both.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ampsweep.contracts import CHECKPOINT_SNAPSHOT, PREFIX_SNAPSHOT, reference_value
from ampsweep.jobs import (
    TrialConfig,
    Workload,
    checkpoint_step,
    mindspore_version,
    misfits,
    read_checkpoint,
    snapshot_id,
)

from .._errors import SpecError
from ._spec import SweepSpec


@dataclass(frozen=True)
class StartPoint:
    """Where the trials of one seed start: a step and the snapshot taken there."""

    step: int
    snapshot: str  # content id, recorded as ``trials.start_from``
    prefix: TrialConfig | None = None  # the FP32 run that makes it ({steps: N})
    checkpoint: str | None = None  # the user's file ({checkpoint: PATH})

    @property
    def source(self) -> str:
        return "an FP32 prefix" if self.prefix is not None else f"checkpoint {self.checkpoint}"


def prefix_arguments(spec: SweepSpec) -> dict[str, Any]:
    """The swept workload arguments an FP32 prefix runs with: a precision knob at float32, every other
    argument at its first value (the grid's trials of a seed all continue from that one prefix)."""
    return {name: reference_or(values, values[0]) for name, values in spec.grid.workload_args.items()}


def reference_or(values: Sequence[Any], own: Any) -> Any:
    """A swept argument's value in the FP32 reference: float32 for a precision knob, else ``own``."""
    found = reference_value(values)
    return own if found is None else found


def prefix_config(spec: SweepSpec, seed: int, steps: int) -> TrialConfig:
    """The FP32 run whose end state every trial of ``seed`` starts from."""
    return TrialConfig.fp32(
        spec.workload,
        seed,
        steps,
        workload_args={**spec.workload_args, **prefix_arguments(spec)},
        abort_after=spec.abort_after,
        layer_every=spec.layer_every,
        save_snapshot=True,
        devices=spec.devices_per_trial,  # on the gangs the trials run on: one size per sweep
    )


def prefix_snapshot_id(prefix: TrialConfig, version: str) -> str:
    """A prefix snapshot's name: what makes it, and the MindSpore that computed it."""
    text = json.dumps([prefix.trial_id, version])
    return PREFIX_SNAPSHOT + hashlib.sha256(text.encode()).hexdigest()[:12]


class Starts:
    """The spec's ``start_from``, per seed; ``None`` everywhere when it has none."""

    def __init__(self, spec: SweepSpec, workload: Workload | None, spec_dir: Path | None) -> None:
        self.spec = spec
        self._by_checkpoint: dict[str, StartPoint] = {}
        self._version = mindspore_version()
        start = spec.start_from
        if start is None or start.checkpoint is None:
            return
        paths = start.checkpoint if isinstance(start.checkpoint, dict) else {None: start.checkpoint}
        for seed, path in paths.items():
            field = "start_from.checkpoint" + ("" if seed is None else f".{seed}")
            self._by_checkpoint[str(seed)] = self._checkpoint_point(field, path, workload, spec_dir)
        if isinstance(start.checkpoint, dict) and spec.search == "adaptive" and spec.confirm.seeds:
            raise SpecError(
                "start_from.checkpoint",
                start.checkpoint,
                "one path for every seed: search: adaptive confirms on seeds the mapping cannot name",
            )
        if isinstance(start.checkpoint, dict):
            missing = [seed for seed in spec.grid.seed if seed not in start.checkpoint]
            if missing:
                raise SpecError(
                    "start_from.checkpoint", start.checkpoint, f"no checkpoint for seed {missing[0]}"
                )

    def _checkpoint_point(
        self, field: str, path: str, workload: Workload | None, spec_dir: Path | None
    ) -> StartPoint:
        file = Path(path).expanduser()
        if not file.is_absolute() and not file.is_file() and spec_dir is not None:
            file = spec_dir / file
        if not file.is_file():
            raise SpecError(field, path, "a MindSpore checkpoint file that exists")
        data = file.read_bytes()
        try:
            params = read_checkpoint(data)
        except Exception as exc:  # noqa: BLE001 - whatever MindSpore raises on a bad file
            raise SpecError(field, path, f"a MindSpore checkpoint ({type(exc).__name__})") from None
        if workload is not None:
            problems = misfits(workload, params)
            if problems:
                raise SpecError(
                    field, path, "a checkpoint of this workload; it does not fit: " + "; ".join(problems)
                )
        step = self.spec.start_from.step if self.spec.start_from else None
        step = step or checkpoint_step(params)
        if not step:
            raise SpecError(
                "start_from.step", None, "required: the checkpoint has no global_step to start from"
            )
        return StartPoint(
            step=step, snapshot=CHECKPOINT_SNAPSHOT + snapshot_id(data), checkpoint=str(file.resolve())
        )

    def for_seed(self, seed: int) -> StartPoint | None:
        start = self.spec.start_from
        if start is None:
            return None
        if start.steps is not None:
            prefix = prefix_config(self.spec, seed, start.steps)
            return StartPoint(start.steps, prefix_snapshot_id(prefix, self._version), prefix=prefix)
        point = self._by_checkpoint.get(str(seed)) or self._by_checkpoint.get("None")
        if point is None:
            raise SpecError("start_from.checkpoint", start.checkpoint, f"no checkpoint for seed {seed}")
        return point
