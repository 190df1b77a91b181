"""The driver's loop end to end without Ray: every trial committed once, lost calls rerun, attempts right."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from ampsweep.sweep import RunConfig, SpecError, Sweep, SweepPlan, SweepStore
from ampsweep.sweep._result import SweepResult
from ampsweep.sweep.cluster._launcher import drive_trials
from ampsweep.sweep.cluster._pool import WorkerPool
from ampsweep.sweep.devices import AscendBackend
from benchmarks._standin import ActorGone, InProcessActors, QuietCluster

NOOP = Path(__file__).resolve().parents[1] / "benchmarks" / "noop_workload.py"


def _drive(
    tmp_path: Path,
    devices: int,
    actors: InProcessActors,
    profile: bool = False,
    pool: WorkerPool | None = None,
    name: str = "loop",
    **grid: list,
) -> tuple[SweepPlan, SweepResult]:
    """Every trial of an O0/O2 no-op sweep (``grid`` adds axes) through the real driver loop."""
    raw = {
        "name": name,
        "workload": f"{NOOP}:make",
        "steps": 1,
        "grid": {"amp_level": ["O0", "O2"], "clip": [None], **grid},
        "devices": "ascend",
    }
    plan = Sweep(raw).plan()
    store = SweepStore(str(tmp_path), plan.name)
    run = RunConfig(progress=False, profile=profile)
    pool = pool or WorkerPool(run, backends=[AscendBackend()] * devices, actors=actors, watch=QuietCluster())
    result = SweepResult(root=store.root, total=len(plan), skipped=0, ran=0)
    drive_trials(plan, plan.workload_ref, store, plan.trials, pool, run, result, lambda running: None)
    return plan, result


def test_every_trial_is_committed_once_with_many_devices(tmp_path):
    actors = InProcessActors()
    _, result = _drive(tmp_path, 40, actors, seed=list(range(100)))
    trials = pd.read_parquet(tmp_path / "loop" / "trials")
    assert result.ran == 200 and actors.calls == 200
    assert len(trials) == 200 and trials["trial_id"].is_unique
    assert (trials["attempts"] == 1).all()


class _Starts(InProcessActors):
    """Counts the actors started."""

    def __init__(self) -> None:
        super().__init__()
        self.started = 0

    def start(self, index, setup, options):
        self.started += 1
        return super().start(index, setup, options)


def test_one_pool_keeps_its_actors_and_their_graphs_across_runs(tmp_path):
    # the grid, then a horizon round or an adaptive round: the second run starts no actor
    actors = _Starts()
    pool = WorkerPool(RunConfig(), backends=[AscendBackend()] * 2, actors=actors, watch=QuietCluster())
    _drive(tmp_path, 2, actors, pool=pool, seed=[0, 1])
    graphs = [set(slot.graphs) for slot in pool.slots]
    assert actors.started == 2 and all(graphs)
    _, again = _drive(tmp_path, 2, actors, pool=pool, name="round", seed=[2, 3])
    assert again.ran == 4 and actors.started == 2
    assert [slot.graphs >= seen for slot, seen in zip(pool.slots, graphs)] == [True, True]
    pool.close()
    assert all(slot.actor is None for slot in pool.slots)


class _DiesOnce(InProcessActors):
    """The first actor dies while it holds two trials: the running one and the one queued behind it."""

    def __init__(self) -> None:
        super().__init__()
        self.lost: list[str] = []

    def run(self, actor, config, workload_ref, hint, start):
        if actor.worker_index == 0 and len(self.lost) < 2 and not getattr(actor, "dead", False):
            self.lost.append(config.trial_id)
            self.calls += 1
            if len(self.lost) == 2:
                actor.dead = True
            future: Future = Future()
            future.set_exception(ActorGone("the actor died"))
            call = object()
            self.completions.put((call, future))
            return call
        return super().run(actor, config, workload_ref, hint, start)


def test_a_dead_actor_s_trials_run_again_and_only_the_running_one_counts_an_attempt(tmp_path):
    actors = _DiesOnce()
    _, result = _drive(tmp_path, 2, actors, seed=list(range(10)))
    trials = pd.read_parquet(tmp_path / "loop" / "trials").set_index("trial_id")
    assert result.ran == 20 and len(trials) == 20
    running, queued = actors.lost
    assert trials.loc[running, "attempts"] == 2
    assert trials.loc[queued, "attempts"] == 1


class _Profiled(InProcessActors):
    """Records when the profile call comes, against the trials already handed out."""

    def __init__(self) -> None:
        super().__init__()
        self.profiled_after: list[int] = []

    def profile(self, actor, args):
        self.profiled_after.append(self.calls)
        return self._answer(lambda *given: ("profile", given), *args)


def test_the_profile_goes_once_to_the_first_actor_the_queue_leaves_idle(tmp_path):
    actors = _Profiled()
    plan, result = _drive(tmp_path, 2, actors, profile=True, seed=[0, 1, 2])
    assert actors.profiled_after == [len(plan)], "once, after every trial was handed out"
    name, args = result.profile
    assert name == "profile" and args[1:3] == (plan.trials[0].seed, 1) and result.ran == len(plan)


def test_the_profile_goes_out_before_the_trials_that_only_confirm_an_equivalence(tmp_path):
    # O0 casts nothing: its black-listed trials compute what O0 without one does; they are copied
    # from that trial, never trained, so the profile goes out once the others are handed out
    actors = _Profiled()
    plan, result = _drive(tmp_path, 2, actors, profile=True, black_list=[[], ["Dense"]], seed=[0, 1, 2])
    assert len(plan.equivalent_to) == 3 and result.ran == len(plan) == 12
    assert actors.profiled_after == [len(plan) - len(plan.equivalent_to)]


def test_trials_equivalent_on_their_twins_graph_are_copied_not_trained(tmp_path):
    # O0 casts nothing: with ["Dense"] it is the same graph, seed, clip and data as without
    actors = InProcessActors()
    plan, result = _drive(tmp_path, 2, actors, black_list=[[], ["Dense"]], seed=[0, 1, 2])
    assert actors.calls == len(plan) - 3 and result.ran == len(plan) == 12 and result.copied == 3
    trials = pd.read_parquet(tmp_path / "loop" / "trials").set_index("trial_id")
    steps = pd.read_parquet(tmp_path / "loop" / "steps")
    assert len(trials) == 12
    for copy, twin in plan.equivalent_to.items():
        assert trials.loc[copy, "attempts"] == 0 and trials.loc[copy, "wall_s"] == 0.0
        assert trials.loc[copy, "outcome"] == trials.loc[twin, "outcome"]
        assert trials.loc[copy, "final_loss"] == trials.loc[twin, "final_loss"]
        mine, theirs = (steps[steps["trial_id"] == t].drop(columns="trial_id") for t in (copy, twin))
        assert mine.reset_index(drop=True).equals(theirs.reset_index(drop=True))


def test_an_equivalent_trial_whose_twin_is_already_committed_is_trained(tmp_path):
    plan = Sweep(
        {
            "name": "resumed",
            "workload": f"{NOOP}:make",
            "steps": 1,
            "grid": {"amp_level": ["O0"], "black_list": [[], ["Dense"]], "seed": [0]},
            "devices": "ascend",
        }
    ).plan()
    ((copy, twin),) = plan.equivalent_to.items()
    assert plan.copy_map(plan.trials, exact_reruns=True).always == {
        twin: tuple(t for t in plan.trials if t.trial_id == copy)
    }
    assert plan.copy_map([t for t in plan.trials if t.trial_id != twin], exact_reruns=True).always == {}


class _Depths(InProcessActors):
    """Records, for each trial sent, how many calls its actor already held and how many trials were left."""

    def __init__(self, total: int) -> None:
        super().__init__()
        self.total = total
        self.sent: dict[Any, int] = {}  # call -> worker index
        self.held: dict[int, int] = {}  # worker index -> calls sent and not yet taken by the driver
        self.seen: list[tuple[int, int]] = []  # (calls the actor held, trials not yet sent)
        answers = self.completions
        owner = self

        class _Counting:
            def put(self, item):
                answers.put(item)

            def get(self, timeout=None):
                call, future = answers.get(timeout=timeout)
                index = owner.sent.pop(call, None)
                if index is not None:
                    owner.held[index] -= 1
                return call, future

        self.completions = _Counting()

    def run(self, actor, config, workload_ref, hint, start):
        index = actor.worker_index
        self.seen.append((self.held.get(index, 0), self.total - self.calls))
        call = super().run(actor, config, workload_ref, hint, start)
        self.sent[call] = index
        self.held[index] = self.held.get(index, 0) + 1
        return call


def test_no_trial_waits_behind_another_when_too_few_are_left_for_every_actor(tmp_path):
    # 4 ResNet trials on 2 actors once ran 3 on one actor while the other idled for 100 s
    actors = _Depths(total=12)
    _, result = _drive(tmp_path, 2, actors, seed=list(range(6)))
    assert result.ran == 12
    queued_behind = [left for held, left in actors.seen if held >= 1]
    assert queued_behind, "with plenty left, an actor holds the next trial behind the one it runs"
    assert min(queued_behind) >= 2 * 2, actors.seen


def test_an_actor_left_idle_with_trials_in_line_is_asked_again_before_the_loop_ends(tmp_path, monkeypatch):
    # the queue may leave a ready actor idle (its trial's graph is held by a busy actor); when
    # nothing else is in flight the loop must ask it again rather than end with trials unrun
    from ampsweep.sweep.scheduling._dispatch import Dispatcher

    take = Dispatcher.take
    refused = []

    def refuses_an_idle_actor_once(self, slot, idle):
        if idle and not refused:
            refused.append(slot.index)
            return None
        return take(self, slot, idle)

    monkeypatch.setattr(Dispatcher, "take", refuses_an_idle_actor_once)
    actors = InProcessActors()
    _, result = _drive(tmp_path, 1, actors, seed=[0, 1])
    assert refused, "the actor was never left idle"
    assert result.ran == 4 and actors.calls == 4
    assert len(pd.read_parquet(tmp_path / "loop" / "trials")) == 4


class _OnNode(InProcessActors):
    """Every actor reports node n7, its index as its device id; ``killed``: the actors ended."""

    def __init__(self) -> None:
        super().__init__()
        self.killed: list[int] = []

    def probe(self, actor):
        return self._answer(lambda: {"node": "n7", "device_id": str(actor.worker_index)})

    def kill(self, actor):
        self.killed.append(actor.worker_index)


def test_a_device_in_avoid_devices_runs_no_trial_and_leaving_none_is_a_usage_error(tmp_path, capsys):
    actors = _OnNode()
    pool = WorkerPool(RunConfig(), backends=[AscendBackend()] * 3, actors=actors, watch=QuietCluster())
    pool.avoid = {"n7:1"}  # two trials: actors 0 and 1 start, 1 is held idle and 2 starts in its place
    _drive(tmp_path, 3, actors, pool=pool)
    trials = pd.read_parquet(tmp_path / "loop" / "trials")
    assert len(trials) == 2 and 1 not in set(trials["worker_index"])
    assert capsys.readouterr().err.count("device n7:1 is in avoid_devices") == 1
    pool.close()
    assert sorted(actors.killed) == [0, 1, 2], "a spare started; the held actor ends with the pool"
    pool = WorkerPool(RunConfig(), backends=[AscendBackend()] * 2, actors=_OnNode(), watch=QuietCluster())
    pool.avoid = {"n7:0", "n7:1"}
    with pytest.raises(SpecError, match="avoid_devices: .* it leaves no device to run on"):
        _drive(tmp_path, 2, pool.actors, pool=pool, name="none-left")
