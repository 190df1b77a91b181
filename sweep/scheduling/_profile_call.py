"""The FP32 profile after the trials: one call to any actor that is still up.

The report's float16-headroom profile (``ampsweep profile``) needs MindSpore
and the workload, which the actors already hold; run there it costs no
start-up. It goes out once every trial is back, so it never competes with a
trial for a device, and it is waited for the way trials are: a lost cluster
or Ctrl-C ends the wait with the usual one line (every trial is committed).
"""

from __future__ import annotations

import queue
from typing import Any

from .._errors import ClusterLost, Interrupted
from ..cluster._actors import Actors
from ..cluster._health import ClusterWatch
from ._slot import Slot

#: How long the wait lasts before it checks the cluster and Ctrl-C again.
_TICK_S = 1.0


def profile_on_a_free_actor(
    slots: list[Slot], actors: Actors, args: tuple[Any, ...], watch: ClusterWatch, committed: int
) -> Any:
    """The profile (``TrialWorker.profile(*args)``), or the exception it ended with; None when no actor is up."""
    slot = next((s for s in slots if s.ready and not s.gone and s.actor is not None), None)
    if slot is None:
        return None
    call = actors.profile(slot.actor, args)
    try:
        while True:
            problem = watch.problem()
            if problem:
                raise ClusterLost(problem, committed, 0)
            try:
                done, answer = actors.completions.get(timeout=_TICK_S)
            except queue.Empty:
                continue
            if done is not call:
                continue  # a late answer of an actor replaced during the trials
            try:
                return answer.result()
            except Exception as exc:  # noqa: BLE001 - the profile is extra: its failure is reported, not raised
                return exc
    except KeyboardInterrupt:
        raise Interrupted("interrupted", committed, 0) from None
