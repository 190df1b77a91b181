"""Which trial an actor runs next: its own graphs first, then graphs nobody holds, FP32 before AMP."""

from __future__ import annotations

from collections import deque

from ampsweep.sweep._dispatch import baseline_first, next_trial
from tests._trial import trial_config


def _queue(*specs: tuple[str, tuple[str, ...], int]):
    return deque(
        baseline_first(
            [trial_config(amp_level=level, black_list=black, seed=seed) for level, black, seed in specs]
        )
    )


def test_an_actor_keeps_to_the_graph_it_compiled():
    queue = _queue(("O2", (), 0), ("O2", ("CustomNorm",), 0), ("O2", ("CustomNorm",), 1))
    own = {queue[1].graph_id}
    assert next_trial(queue, own, held=set()) == 1


def test_a_new_actor_takes_a_graph_no_other_actor_holds():
    queue = _queue(("O2", (), 0), ("O2", (), 1), ("O2", ("CustomNorm",), 0))
    assert next_trial(queue, own=set(), held={queue[0].graph_id}) == 2


def test_with_every_graph_held_elsewhere_the_head_of_the_queue_runs():
    queue = _queue(("O2", (), 0), ("O2", ("CustomNorm",), 0))
    held = {trial.graph_id for trial in queue}
    assert next_trial(queue, own=set(), held=held) == 0


def test_fp32_trials_are_never_passed_over_for_a_mixed_precision_graph():
    queue = _queue(("O0", (), 0), ("O0", (), 1), ("O2", (), 0))
    # the actor holds the O2 graph, another holds O0: it still runs an FP32 trial next
    own, held = {queue[2].graph_id}, {queue[0].graph_id}
    assert next_trial(queue, own, held) == 0


def test_a_trial_whose_snapshot_is_not_made_yet_is_passed_over():
    # seed 0's snapshot exists, seed 1's prefix still runs: seed 0's trials go ahead
    queue = _queue(("O0", (), 1), ("O0", (), 0), ("O2", (), 1), ("O2", (), 0))
    ready = {0}
    position = next_trial(queue, own={queue[0].graph_id}, held=set(), startable=lambda t: t.seed in ready)
    assert position is not None and queue[position].seed == 0 and queue[position].amp_level == "O0"


def test_no_trial_when_every_queued_trial_waits_for_its_snapshot():
    queue = _queue(("O0", (), 1), ("O2", (), 1))
    assert next_trial(queue, own=set(), held=set(), startable=lambda t: False) is None


def test_fp32_first_among_the_trials_that_may_start():
    # the only startable FP32 trial is behind blocked ones; it still runs before any O2 trial
    queue = _queue(("O0", (), 1), ("O0", (), 0), ("O2", (), 0))
    own = {queue[2].graph_id}
    position = next_trial(queue, own, held=set(), startable=lambda t: t.seed == 0)
    assert position is not None and queue[position].amp_level == "O0" and queue[position].seed == 0
