"""Copies: decided once by the plan, made by one part, committed with what they were copied from and why.

A tighter clip that never engages computes what the looser run did; an
equivalent trial on its source's graph computes what it did. Such trials are
copied, not trained, but only where a rerun is bit-identical.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from ampsweep.contracts import STEPS_SCHEMA, final_loss
from ampsweep.jobs import (
    Baseline,
    Outcome,
    PendingBaseline,
    Placement,
    TrialResult,
    clip_engages,
    same_run_with_clip,
)
from ampsweep.sweep import RunConfig, Sweep, SweepStore
from ampsweep.sweep._result import SweepResult
from ampsweep.sweep.cluster._launcher import drive_trials
from ampsweep.sweep.cluster._pool import WorkerPool
from ampsweep.sweep.devices import AscendBackend
from benchmarks._standin import InProcessActors, QuietCluster
from tests._trial import trial_config

NOOP = Path(__file__).resolve().parents[1] / "benchmarks" / "noop_workload.py"


def _result(
    norms: list[float], *, amp_level: str = "O0", clip: float | None = None, **changes
) -> TrialResult:
    """A completed trial whose loss falls from 2.3 to 0.5 with these per-step global norms."""
    n = len(norms)
    loss = np.linspace(2.3, 0.5, n)
    columns = {
        field.name: pa.array(np.zeros(n, dtype=field.type.to_pandas_dtype()), type=field.type)
        for field in STEPS_SCHEMA
    }
    columns.update(step=pa.array(range(n), pa.int64()), loss=pa.array(loss, pa.float32()))
    columns["grad_norm"] = pa.array(norms, STEPS_SCHEMA.field("grad_norm").type)
    result = TrialResult(
        config=trial_config(amp_level=amp_level, clip=clip, steps=n),
        outcome=Outcome.COMPLETED,
        placement=Placement("cpu", "CPU"),
        steps_run=n,
        final_loss=final_loss(loss),
        steps=pa.table(columns, schema=STEPS_SCHEMA),
    )
    return replace(result, **changes)


def test_a_clip_engages_where_the_compiled_step_or_the_steps_table_would_clip():
    assert not clip_engages(np.array([0.5, 4.9, 5.0]), 5.0), "norm > clip, not >="
    assert clip_engages(np.array([0.5, 5.01]), 5.0)
    assert not clip_engages(np.array([0.5, np.nan]), 1.0), "a NaN norm scales by 1 under every clip"
    assert clip_engages(np.array([0.5, np.inf]), 1.0)
    assert not clip_engages(np.array([1e30]), None)
    # 1.1 is not a float32: the step compares in float32, the table in float64; either clipping counts
    just_above = float(np.nextafter(np.float32(1.1), np.float32(2)))
    assert clip_engages(np.array([just_above], dtype=np.float32), 1.1)


def test_a_run_whose_norm_stayed_under_the_clip_is_that_clipped_trial_s_run():
    result = _result([0.3, 0.9, 0.7])
    assert same_run_with_clip(result, trial_config(amp_level="O0", clip=1.0, steps=3), None)
    assert not same_run_with_clip(result, trial_config(amp_level="O0", clip=0.8, steps=3), None)


def test_a_broken_or_replayed_run_is_never_copied():
    tighter = trial_config(amp_level="O0", clip=1.0, steps=3)
    assert not same_run_with_clip(_result([0.1, 0.2, 0.3], outcome=Outcome.DIVERGED), tighter, None)
    replayed = _result([0.1, 0.2, 0.3])
    replayed = replace(replayed, anomalies=pa.table({"x": [1]}))
    assert not same_run_with_clip(replayed, tighter, None)


def test_a_mixed_precision_copy_needs_its_own_baseline_to_find_no_silent_failure():
    result = _result([0.1] * 100, amp_level="O2")
    tighter = trial_config(amp_level="O2", clip=1.0, steps=100)
    assert same_run_with_clip(result, tighter, Baseline(0.6, reached_target=True)), "learns like FP32"
    assert not same_run_with_clip(result, tighter, Baseline(0.01, reached_target=True)), "silent: it trains"
    assert not same_run_with_clip(result, tighter, PendingBaseline([object()])), "its baseline still runs"


def _plan(clip: list, black_list: list | None = None):
    grid = {"amp_level": ["O0", "O2"], "clip": clip, "seed": [0, 1]}
    if black_list is not None:
        grid["black_list"] = black_list
    return Sweep(
        {"name": "t", "workload": f"{NOOP}:make", "steps": 1, "grid": grid, "devices": "ascend"}
    ).plan()


def test_the_loosest_clip_of_each_group_trains_and_the_tighter_ones_wait_for_it():
    plan = _plan([1.0, None, 5.0])
    twins = plan.copy_map(plan.trials, exact_reruns=True).if_clip_never_reached
    assert len(twins) == 4, "one group per amp level and seed"
    by_id = {t.trial_id: t for t in plan.trials}
    for loosest, tighter in twins.items():
        assert by_id[loosest].clip is None and [t.clip for t in tighter] == [5.0, 1.0]
    without_none = _plan([1.0, 5.0])
    by_id = {t.trial_id: t for t in without_none.trials}
    held = without_none.copy_map(without_none.trials, exact_reruns=True).if_clip_never_reached
    assert {by_id[k].clip for k in held} == {5.0}


def test_equivalent_trials_keep_their_own_rule():
    plan = _plan([None, 1.0], black_list=[[], ["Dense"]])
    twins = plan.copy_map(plan.trials, exact_reruns=True).if_clip_never_reached
    held = {t.trial_id for same in twins.values() for t in same}
    loosest = set(twins)
    assert not (held | loosest) & set(plan.equivalent_to)


def _drive(tmp_path: Path, plan, actors: InProcessActors, devices: int = 2, **run) -> SweepResult:
    """Every trial of ``plan`` through the real driver loop, on in-process devices."""
    store = SweepStore(str(tmp_path), plan.name)
    config = RunConfig(progress=False, **run)
    pool = WorkerPool(config, backends=[AscendBackend()] * devices, actors=actors, watch=QuietCluster())
    result = SweepResult(root=store.root, total=len(plan), skipped=0, ran=0)
    drive_trials(plan, plan.workload_ref, store, plan.trials, pool, config, result, lambda running: None)
    return result


class _Norms(InProcessActors):
    """No-op trials whose one step had the global norm ``norms[seed]``."""

    def __init__(self, norms: dict[int, float]) -> None:
        super().__init__()
        self.norms = norms
        self.trained: list[tuple[int, float | None]] = []

    def run(self, actor, config, workload_ref, hint, start):
        self.calls += 1
        self.trained.append((config.seed, config.clip))
        norm = pa.array([self.norms[config.seed]], STEPS_SCHEMA.field("grad_norm").type)

        def work(*args):
            result = actor.run(*args)
            return replace(result, steps=result.steps.set_column(2, "grad_norm", norm))

        return self._answer(work, config, workload_ref, hint, start)


def test_a_tighter_clip_trial_is_copied_where_the_looser_run_never_reached_it_and_trained_where_it_did(
    tmp_path,
):
    # seed 0 peaked at 0.5: clip 1.0 would never have engaged; seed 1 reached 3.0: it would have
    actors = _Norms({0: 0.5, 1: 3.0})
    plan = _plan([None, 1.0])
    result = _drive(tmp_path, plan, actors)
    assert result.ran == len(plan) == 8 and result.copied == 2 and actors.calls == 6
    assert set(actors.trained) == {(0, None), (1, None), (1, 1.0)}
    trials = pd.read_parquet(tmp_path / "t" / "trials")
    steps = pd.read_parquet(tmp_path / "t" / "steps")
    copies = trials[trials["attempts"] == 0]
    assert sorted(copies["clip"]) == [1.0, 1.0] and set(copies["seed"]) == {0}
    for copy in copies.itertuples():
        twin = trials[(trials["seed"] == 0) & trials["clip"].isna() & (trials["amp_level"] == copy.amp_level)]
        mine, theirs = (
            steps[steps["trial_id"] == t].drop(columns="trial_id") for t in (copy.trial_id, *twin["trial_id"])
        )
        assert mine.reset_index(drop=True).equals(theirs.reset_index(drop=True))
        assert copy.wall_s == 0.0 and not mine["clipped"].any()
        assert copy.copied_from == twin["trial_id"].item() and copy.copy_reason == "clip_never_reached"
    trained = trials[trials["attempts"] > 0]
    assert trained["copied_from"].isna().all() and trained["copy_reason"].isna().all()


def test_an_equivalent_copy_names_its_source_and_reason(tmp_path):
    plan = _plan([None], black_list=[[], ["Dense"]])
    result = _drive(tmp_path, plan, InProcessActors())
    trials = pd.read_parquet(tmp_path / "t" / "trials").set_index("trial_id")
    copies = trials[trials["attempts"] == 0]
    assert result.copied == len(copies) == 2  # O0 with [Dense], one per seed
    for trial_id, row in copies.iterrows():
        assert row["copied_from"] == plan.equivalent_to[trial_id] and row["copy_reason"] == "equivalent"


def test_on_a_device_without_deterministic_mode_nothing_is_copied(tmp_path):
    # a GPU/NPU rerun is bit-identical only in MindSpore's deterministic mode: without it, all train
    actors = _Norms({0: 0.5, 1: 0.5})
    plan = _plan([None, 1.0], black_list=[[], ["Dense"]])
    result = _drive(tmp_path, plan, actors, deterministic=False)
    assert result.copied == 0 and actors.calls == result.ran == len(plan)
    assert pd.read_parquet(tmp_path / "t" / "trials")["copied_from"].isna().all()


def test_workers_on_a_device_set_deterministic_mode_unless_told_not_to():
    from ampsweep.sweep.devices import CpuBackend, device_setup

    assert device_setup(AscendBackend(), 0, None).deterministic
    assert device_setup(AscendBackend(), 0, None).exact_reruns
    fast = device_setup(AscendBackend(), 0, None, deterministic=False)
    assert not fast.deterministic and not fast.exact_reruns
    on_cpu = device_setup(CpuBackend(), 0, None, deterministic=False)
    assert on_cpu.exact_reruns and not on_cpu.deterministic  # CPU reruns are exact without it


class _SlowLoosest(_Norms):
    """The loosest trials (no clip) answer 0.3 s late, as a real trial would: the others at once."""

    def run(self, actor, config, workload_ref, hint, start):
        if config.clip is not None:
            return super().run(actor, config, workload_ref, hint, start)
        real = self.completions
        held: list = []

        class _Later:
            def put(self, item):
                held.append(item)

        self.completions = _Later()
        try:
            call = super().run(actor, config, workload_ref, hint, start)
        finally:
            self.completions = real
        threading.Timer(0.3, lambda: [real.put(item) for item in held]).start()
        return call


def test_a_device_with_nothing_else_to_run_trains_a_held_trial_rather_than_wait_for_its_twin(tmp_path):
    # 2 devices, one group: the second device would idle while the loosest trial runs
    actors = _SlowLoosest({0: 0.5})
    plan = Sweep(
        {"name": "t", "workload": f"{NOOP}:make", "steps": 1, "devices": "ascend",
         "grid": {"amp_level": ["O0"], "clip": [None, 1.0], "seed": [0]}}
    ).plan()  # fmt: skip
    result = _drive(tmp_path, plan, actors)
    assert result.ran == 2 and actors.calls == 2 and result.copied == 0
    assert {clip for _, clip in actors.trained} == {None, 1.0}


def test_a_copy_of_a_copy_is_made_too(tmp_path):
    # O0 [Dense] clip 1.0 is an exact copy of O0 clip 1.0, itself copied from O0 without a clip
    actors = _Norms({0: 0.5, 1: 0.5})
    plan = Sweep(
        {"name": "t", "workload": f"{NOOP}:make", "steps": 1, "devices": "ascend",
         "grid": {"amp_level": ["O0"], "black_list": [[], ["Dense"]], "clip": [None, 1.0], "seed": [0, 1]}}
    ).plan()  # fmt: skip
    result = _drive(tmp_path, plan, actors, devices=1)
    trials = pd.read_parquet(tmp_path / "t" / "trials").set_index("trial_id")
    assert len(trials) == result.ran == len(plan) == 8, "every trial committed, copies of copies too"
    chained = trials[(trials["clip"] == 1.0) & (trials["black_list"].map(len) == 1)]
    assert len(chained) == 2 and set(chained["copy_reason"]) == {"equivalent"}
    assert (trials.loc[chained["copied_from"], "copy_reason"] == "clip_never_reached").any()


def test_a_sweep_that_ends_with_copies_unmade_says_so():
    from ampsweep.sweep.planning._copies import CopyMap
    from ampsweep.sweep.scheduling._copies import Copies

    source, copy = trial_config(seed=0), trial_config(seed=0, black_list=("Dense",))
    copies = Copies(CopyMap(always={source.trial_id: (copy,)}))
    assert copies.unmade() == [copy]  # counted as not run until its source comes back
