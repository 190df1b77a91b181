"""Which trials are copied instead of trained: decided once, here, before any trial runs.

The two cases (``copy_reason``: ``equivalent``, ``clip_never_reached``) are ``docs/sweep-and-trial.md``
("Trials that are copied, not trained"). An equivalent on a graph of its own trains, last
(``confirm_last``); a held tighter clip is copied when ``jobs.same_run_with_clip`` says so. Both assume
a bit-identical rerun (CPU, or MindSpore's deterministic mode): with ``exact_reruns`` False nothing is
copied.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ampsweep.jobs import TrialConfig

EQUIVALENT = "equivalent"
CLIP_NEVER_REACHED = "clip_never_reached"


@dataclass(frozen=True)
class CopyMap:
    """The plan's copies of the pending trials, by the id of the trial each is copied from."""

    #: copied from that trial whatever it shows (``equivalent``)
    always: Mapping[str, tuple[TrialConfig, ...]] = field(default_factory=dict)
    #: held until that trial has run, then copied if its norm never exceeded their clip, else trained
    if_clip_never_reached: Mapping[str, tuple[TrialConfig, ...]] = field(default_factory=dict)
    #: equivalent trials that still train (a graph of their own, or copies switched off): they run last
    confirm_last: frozenset[str] = frozenset()

    def to_train(self, pending: list[TrialConfig]) -> list[TrialConfig]:
        """The pending trials that go to the queue now: neither copied for sure nor held."""
        waiting = {c.trial_id for copies in self.always.values() for c in copies}
        waiting |= {c.trial_id for held in self.if_clip_never_reached.values() for c in held}
        return [t for t in pending if t.trial_id not in waiting]


def plan_copies(pending: list[TrialConfig], equivalent_to: Mapping[str, str], exact_reruns: bool) -> CopyMap:
    """The copies among ``pending`` (``exact_reruns``: the devices'); one whose source is committed already
    (a resumed run) trains: only a result this run produces is copied."""
    confirm_last = frozenset(t.trial_id for t in pending if t.trial_id in equivalent_to)
    if not exact_reruns:
        return CopyMap(confirm_last=confirm_last)
    by_id = {t.trial_id: t for t in pending}
    always: dict[str, tuple[TrialConfig, ...]] = {}
    for trial in pending:
        source = by_id.get(equivalent_to.get(trial.trial_id, ""))
        if source is not None and source.graph_id == trial.graph_id:
            always[source.trial_id] = (*always.get(source.trial_id, ()), trial)
    copied = {c.trial_id for copies in always.values() for c in copies}
    groups: dict[str, list[TrialConfig]] = {}
    for trial in pending:
        if trial.trial_id not in equivalent_to:
            groups.setdefault(replace(trial, clip=None).trial_id, []).append(trial)
    held: dict[str, tuple[TrialConfig, ...]] = {}
    for group in groups.values():
        if len(group) > 1:
            loosest, *tighter = sorted(
                group, key=lambda t: math.inf if t.clip is None else t.clip, reverse=True
            )
            held[loosest.trial_id] = tuple(tighter)
    return CopyMap(always, held, confirm_last - copied)
