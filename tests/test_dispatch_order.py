"""Which trial an actor runs next: its own graphs first, then graphs nobody holds, FP32 before AMP."""

from __future__ import annotations

from ampsweep.sweep.scheduling._queue import TrialQueue
from tests._trial import trial_config


def _trials(*specs: tuple[str, tuple[str, ...], int], snapshot: bool = False):
    return [
        trial_config(
            amp_level=level, black_list=black, seed=seed, start_from=f"snap{seed}" if snapshot else None
        )
        for level, black, seed in specs
    ]


def _held_elsewhere(queue: TrialQueue, *graphs: str) -> None:
    other: set[str] = set()
    for graph in graphs:
        queue.hold(other, graph)


def test_an_actor_keeps_to_the_graph_it_compiled():
    trials = _trials(("O2", (), 0), ("O2", ("CustomNorm",), 0), ("O2", ("CustomNorm",), 1))
    queue = TrialQueue(trials)
    assert queue.take({trials[1].graph_id}) is trials[1]
    assert queue.take({trials[1].graph_id}) is trials[2]
    assert queue.take({trials[1].graph_id}) is trials[0]
    assert queue.take(set()) is None and not queue


def test_a_new_actor_takes_a_graph_no_other_actor_holds():
    trials = _trials(("O2", (), 0), ("O2", (), 1), ("O2", ("CustomNorm",), 0))
    queue = TrialQueue(trials)
    _held_elsewhere(queue, trials[0].graph_id)
    assert queue.take(set()) is trials[2]


def test_with_every_graph_held_elsewhere_the_head_of_the_queue_runs():
    trials = _trials(("O2", (), 0), ("O2", ("CustomNorm",), 0))
    queue = TrialQueue(trials)
    _held_elsewhere(queue, *(t.graph_id for t in trials))
    assert queue.take(set()) is trials[0]


def test_a_dead_actor_no_longer_holds_its_graphs():
    trials = _trials(("O2", (), 0), ("O2", ("CustomNorm",), 0))
    queue = TrialQueue(trials)
    dead: set[str] = set()
    queue.hold(dead, trials[0].graph_id)
    queue.drop(dead)
    assert not dead and queue.take(set()) is trials[0]


def test_fp32_trials_are_never_passed_over_for_a_mixed_precision_graph():
    trials = _trials(("O2", (), 0), ("O0", (), 0), ("O0", (), 1))
    queue = TrialQueue(trials)
    # the actor holds the O2 graph, another holds O0: it still runs an FP32 trial next
    _held_elsewhere(queue, trials[1].graph_id)
    assert queue.take({trials[0].graph_id}) is trials[1]


def test_a_retried_trial_goes_first():
    trials = _trials(("O2", (), 0), ("O2", (), 1))
    queue = TrialQueue(trials)
    first = queue.take(set())
    queue.push(first, front=True)
    assert queue.take(set()) is first and len(queue) == 1


def test_untake_puts_a_trial_back_in_its_place():
    trials = _trials(("O2", (), 0), ("O2", (), 1), ("O2", (), 2))
    queue = TrialQueue(trials)
    taken = queue.take(set())
    queue.untake()
    assert len(queue) == 3 and [t.seed for t in queue.remaining()] == [0, 1, 2] and taken is trials[0]


def test_a_trial_whose_snapshot_is_not_made_yet_waits():
    # seed 0's snapshot exists, seed 1's prefix still runs: seed 0's trials go ahead
    trials = _trials(("O0", (), 1), ("O0", (), 0), ("O2", (), 1), ("O2", (), 0), snapshot=True)
    queue = TrialQueue(trials, ready_snapshots={"snap0"})
    assert queue.take({trials[0].graph_id}) is trials[1]
    assert queue.take(set()) is trials[3]
    assert queue.take(set()) is None and len(queue) == 2
    queue.release("snap1")
    assert [queue.take(set()), queue.take(set())] == [trials[0], trials[2]]


def test_released_trials_rejoin_in_their_old_places():
    trials = _trials(("O2", (), 0), ("O2", (), 1), ("O2", (), 2), snapshot=True)
    queue = TrialQueue(trials, ready_snapshots={"snap0", "snap2"})
    queue.release("snap1")
    assert [queue.take(set()).seed for _ in range(3)] == [0, 1, 2]


def test_fp32_first_among_the_trials_that_may_start():
    # the only startable FP32 trial is behind blocked ones; it still runs before any O2 trial
    trials = _trials(("O0", (), 1), ("O0", (), 0), ("O2", (), 0), snapshot=True)
    queue = TrialQueue(trials, ready_snapshots={"snap0"})
    assert queue.take({trials[2].graph_id}) is trials[1]


def test_an_idle_actor_waits_when_the_holders_finish_sooner_than_it_would_compile():
    trials = _trials(*[("O2", (), seed) for seed in range(12)])
    graph = trials[0].graph_id
    queue = TrialQueue(trials)
    _held_elsewhere(queue, graph)
    queue.costs.record(graph, compile_s=3.0, busy_s=3.5)  # measured: a 3 s compile, 0.5 s a trial
    queue.costs.record(graph, compile_s=0.0, busy_s=0.5)
    assert queue.take(set()) is trials[0], "12 trials x 0.5 s on one holder: worth a 3 s compile"
    for _ in range(6):
        queue.take({graph})
    assert len(queue) == 5 and queue.take(set()) is None, "5 x 0.5 s left: the holder is done first"
    assert queue.take({graph}) is trials[7], "the holder still takes them"


def test_a_graph_with_nothing_measured_yet_is_always_worth_compiling():
    trials = _trials(("O2", (), 0), ("O2", (), 1))
    queue = TrialQueue(trials)
    _held_elsewhere(queue, trials[0].graph_id)
    assert queue.take(set()) is trials[0]


def test_trials_that_only_confirm_an_equivalence_run_last_and_fill_in():
    base, same, amp = _trials(("O0", (), 0), ("O0", ("CustomNorm",), 0), ("O2", (), 0))
    queue = TrialQueue([same, amp, base], run_last={same.trial_id})
    assert [queue.take(set()), queue.take(set()), queue.take(set())] == [base, amp, same]
    # an actor with only the FP32 graph, while the O2 graph's holder will be done before a compile
    queue = TrialQueue([same, amp, base], run_last={same.trial_id})
    assert queue.take(set()) is base
    _held_elsewhere(queue, amp.graph_id)
    queue.costs.record(amp.graph_id, compile_s=3.0, busy_s=3.5)
    assert queue.take({base.graph_id}) is same and queue.take({amp.graph_id}) is amp


def test_an_actor_runs_the_last_trials_of_its_own_graph_before_compiling_one_held_elsewhere():
    base, same, amp, amp2 = _trials(("O0", (), 0), ("O0", ("CustomNorm",), 0), ("O2", (), 0), ("O2", (), 1))
    queue = TrialQueue([base, amp, amp2, same], run_last={same.trial_id})
    assert queue.take(set()) is base
    _held_elsewhere(queue, amp.graph_id)
    # nothing measured: the O2 graph would be worth compiling, but its own equivalent trial costs no compile
    assert queue.take({base.graph_id}) is same
    assert queue.take({base.graph_id}) is amp, "then the compile, with nothing of its own left"
    assert queue.take({amp.graph_id}) is amp2 and queue.take(set()) is None
