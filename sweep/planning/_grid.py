"""From a validated spec to the list of trials, with stable ids."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ampsweep.contracts import FP32_LEVEL, LOSS_OUTSIDE, Configuration, workload_args_of
from ampsweep.jobs import TrialConfig

from ._spec import SweepSpec

if TYPE_CHECKING:
    from ._start import Starts


def sweep_trial(
    spec: SweepSpec,
    chosen: Configuration,
    seed: int,
    swept: dict[str, Any],
    starts: Starts | None = None,
    steps: int | None = None,
) -> TrialConfig:
    """``chosen`` on ``seed`` with the spec's run settings, from the seed's start (``starts``, the spec's
    resolved ``start_from``); ``swept``: the values of the workload arguments ``chosen`` names."""
    point = starts.for_seed(seed) if starts is not None else None
    start, steps = point.step if point else 0, steps or spec.steps
    return TrialConfig.of(
        chosen,
        seed,
        spec.workload,
        steps,
        workload_args={**spec.workload_args, **swept},
        abort_after=spec.abort_after,
        layer_every=spec.layer_every,
        localize=spec.localize,
        devices=spec.devices_per_trial,
        start_step=start,
        start_from=point.snapshot if point else None,
        # a trial that ends before the horizon keeps its end state: the answer continues from it
        save_snapshot=spec.horizon is not None and spec.horizon > start + steps,
    )


def expand_grid(spec: SweepSpec, starts: Starts | None = None) -> list[TrialConfig]:
    """Every point of the product of the axes, in a deterministic order, without duplicates."""
    grid = spec.grid
    trials: dict[str, TrialConfig] = {}
    for level, black, clip, scale, dtype, placement, args, seed in itertools.product(
        grid.amp_level,
        grid.black_list,
        grid.clip,
        grid.loss_scale,
        grid.dtype,
        grid.loss_placement,
        itertools.product(*grid.workload_args.values()),
        grid.seed,
    ):
        swept = dict(zip(grid.workload_args, args))
        chosen = Configuration(
            level, tuple(black), clip, scale, dtype, placement, workload_args=workload_args_of(swept)
        )
        config = sweep_trial(spec, chosen, seed, swept, starts)
        trials.setdefault(config.trial_id, config)
    return list(trials.values())


def equivalents(trials: list[TrialConfig], loss_classes: frozenset[str] = frozenset()) -> dict[str, str]:
    """Map each trial that computes exactly what another does to that other trial: under O0, any black list,
    dtype or loss placement; under ``loss_placement: outside``, a black-listed class that lives only in the
    loss (``loss_classes``). The ranking must not count them twice."""
    by_id = {t.trial_id: t for t in trials}
    result = _o0_equivalents(trials, by_id)
    for trial in trials:
        if trial.trial_id in result or trial.loss_placement != LOSS_OUTSIDE or trial.amp_level == FP32_LEVEL:
            continue
        kept = tuple(name for name in trial.black_list if name not in loss_classes)
        if kept != trial.black_list:
            base = replace(trial, black_list=kept)
            if base.trial_id in by_id:
                result[trial.trial_id] = base.trial_id
    return result


def _o0_equivalents(trials: list[TrialConfig], by_id: dict[str, TrialConfig]) -> dict[str, str]:
    canonical_dtype = {t.dtype for t in trials if t.amp_level == FP32_LEVEL}
    first_dtype = "float16" if "float16" in canonical_dtype else min(canonical_dtype, default="float16")
    placements = {t.loss_placement for t in trials if t.amp_level == FP32_LEVEL}
    first_placement = LOSS_OUTSIDE if LOSS_OUTSIDE in placements else min(placements, default=LOSS_OUTSIDE)
    result: dict[str, str] = {}
    for trial in trials:
        if trial.amp_level != FP32_LEVEL:
            continue
        base = replace(trial, black_list=(), dtype=first_dtype, loss_placement=first_placement)
        if base.trial_id != trial.trial_id and base.trial_id in by_id:
            result[trial.trial_id] = base.trial_id
    return result


def count_graphs(trials: list[TrialConfig]) -> int:
    return len({t.graph_id for t in trials})


def trials_to_train(spec: SweepSpec) -> int:
    """How many of the spec's trials train, as the spec alone tells: the actors worth starting before the
    workload check ends."""
    trials = expand_grid(spec)
    return len(trials) - len(equivalents(trials))
