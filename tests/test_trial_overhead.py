"""A worker's trial builds nothing it already holds, and trains exactly as a fresh process would.

``jobs.training._starts`` keeps each seed's starting values and converted batches in
the ``GraphCache``; ``run_trial`` then loads them into the held graph instead
of calling the workload factory again. These tests pin that this shortcut
changes no number: every column of ``steps`` (but the timing) and of
``layers`` is bit-identical to a trial run without any cache.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

import ampsweep.jobs.training._trainer as trainer
from ampsweep.jobs import TrialConfig
from ampsweep.jobs.training._starts import StartCache, TrialStart, draw
from ampsweep.jobs.training._trainer import GraphCache, run_trial

SEED_REPRO = "ampsweep.jobs.workloads.seed_repro:make"


def _config(**overrides: Any) -> TrialConfig:
    fields: dict[str, Any] = {
        "workload": SEED_REPRO,
        "steps": 40,
        "abort_after": 10,
        "amp_level": "O2",
        "black_list": ("CustomNorm",),
        "clip": None,
        "loss_scale": "dynamic",
        "dtype": "float16",
        "seed": 0,
        "workload_args": {"hidden": 32},
        "layer_every": 10,
    }
    return TrialConfig(**{**fields, **overrides})


def _tables(result: Any) -> dict[str, dict[str, list]]:
    assert result.error is None, result.error
    return {"steps": result.steps.drop(["step_ms"]).to_pydict(), "layers": result.layers.to_pydict()}


def _assert_identical(got: dict[str, dict[str, list]], want: dict[str, dict[str, list]]) -> None:
    for table in ("steps", "layers"):
        assert got[table].keys() == want[table].keys()
        for name, values in want[table].items():
            if values and isinstance(values[0], float):
                # bit for bit, NaN where the fresh trial has NaN
                np.testing.assert_array_equal(
                    np.asarray(got[table][name]), np.asarray(values), f"{table}.{name}"
                )
            else:
                assert got[table][name] == values, f"{table}.{name}"


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The seeds ``run_trial`` called the workload factory for."""
    seen: list[int] = []
    build = trainer.trial_workload

    def counting(config: TrialConfig, workload_ref: str, start: Any = None) -> Any:
        seen.append(config.seed)
        return build(config, workload_ref, start)

    monkeypatch.setattr(trainer, "trial_workload", counting)
    return seen


@pytest.mark.parametrize("loss_scale", [pytest.param("dynamic", marks=pytest.mark.slow), "none"])
def test_a_trial_from_a_held_start_matches_a_trial_without_cache(builds: list[int], loss_scale: str) -> None:
    cache = GraphCache()
    run_trial(_config(seed=1, loss_scale=loss_scale), SEED_REPRO, cache=cache)  # compiles the graph
    run_trial(
        _config(seed=0, loss_scale=loss_scale), SEED_REPRO, cache=cache
    )  # reuses it; keeps seed 0's start
    assert builds == [1, 0] and len(cache.starts) == 2
    target = _config(seed=0, clip=0.7, loss_scale=loss_scale)
    held = run_trial(target, SEED_REPRO, cache=cache)
    assert builds == [1, 0], "the graph and seed 0's start are held: nothing is built"
    assert held.compile_s == 0.0
    _assert_identical(_tables(held), _tables(run_trial(target, SEED_REPRO)))


@pytest.mark.slow
def test_a_new_graph_on_a_held_seed_matches_a_trial_without_cache(builds: list[int]) -> None:
    """Another graph for a seed already seen: built from the factory, trained on the kept batches."""
    cache = GraphCache()
    run_trial(_config(seed=0), SEED_REPRO, cache=cache)
    other = _config(seed=0, amp_level="O0", black_list=(), loss_scale="none", clip=1.0)
    assert other.graph_id != _config(seed=0).graph_id
    result = run_trial(other, SEED_REPRO, cache=cache)
    assert builds == [0, 0] and result.compile_s > 0
    _assert_identical(_tables(result), _tables(run_trial(other, SEED_REPRO)))


@pytest.mark.slow
def test_a_diverging_trial_from_a_held_start_matches_a_trial_without_cache(builds: list[int]) -> None:
    """O2 without the black list turns the loss NaN: the abort step and the NaN rows are the same."""
    base = _config(black_list=(), loss_scale="none", loss_placement="inside", workload_args={}, steps=60)
    cache = GraphCache()
    for seed in (1, 0):
        run_trial(replace(base, seed=seed), SEED_REPRO, cache=cache)
    target = replace(base, seed=0, clip=1.0)
    held = run_trial(target, SEED_REPRO, cache=cache)
    assert builds == [1, 0]
    fresh = run_trial(target, SEED_REPRO)
    assert fresh.outcome.value == "diverged", "the case this test is about"
    assert held.outcome == fresh.outcome and held.steps_run == fresh.steps_run
    _assert_identical(_tables(held), _tables(fresh))


def test_a_diverging_trial_trains_no_step_past_its_abort(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once its losses go non-finite, a trial copies them early enough to stop at the abort step."""
    from ampsweep.jobs.training._step import CompiledStep

    calls = []
    step_call = CompiledStep.__call__

    def counted(self: CompiledStep, clip: Any, batch: Any) -> Any:
        calls.append(1)
        return step_call(self, clip, batch)

    monkeypatch.setattr(CompiledStep, "__call__", counted)
    config = _config(black_list=(), loss_scale="none", loss_placement="inside", workload_args={}, steps=120)
    result = run_trial(config, SEED_REPRO)
    assert result.outcome.value == "diverged", "the case this test is about"
    assert result.steps_run < trainer.BLOCK_STEPS * 3, "the abort comes within a few blocks"
    # the whole block after the first non-finite loss used to run on NaN before the abort was seen
    assert len(calls) == result.steps_run


class _Tensor:
    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes


def test_starts_stay_within_their_byte_budget() -> None:
    cache = StartCache(budget=100)
    small = TrialStart(1.0, ((_Tensor(30),),), None)
    cache.put("a", small)
    cache.put("b", small)
    cache.put("c", TrialStart(None, ((_Tensor(101),),), None))  # larger than the budget: never kept
    assert cache.get("c") is None and len(cache) == 2
    cache.get("a")  # a was used last: b is the first to give way
    cache.put("d", TrialStart(None, ((_Tensor(60),),), None))
    assert cache.get("b") is None and cache.get("a") is small and cache.get("d") is not None


def test_draw_keeps_batches_up_to_its_limit_and_streams_the_rest() -> None:
    batches = [(_Tensor(10), _Tensor(10)) for _ in range(5)]
    kept, trained = draw(iter(batches), limit=100)
    assert kept == tuple(batches) and list(trained) == batches
    kept, trained = draw(iter(batches), limit=50)
    assert kept is None and list(trained) == batches, (
        "past the limit the trial still gets every batch, in order"
    )
