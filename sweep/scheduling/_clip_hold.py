"""Trials held back until their looser-clipped twin has run: then copied from it, or trained.

``SweepPlan.clip_twins`` names, per group of trials that differ only in
their clip, the loosest one (it trains) and the tighter ones (held here).
When the loosest one's result comes back, ``jobs.same_run_with_clip``
decides for each held trial: its norm never exceeded the tighter clip, so
the trial would compute exactly that result (copied, ``attempts`` 0), or
it did (the trial joins the queue and trains). A twin that fails or dies
for good releases its trials to train, and a device with nothing else to
run trains a held trial rather than wait (``release_one``): with more
devices than groups, waiting would leave devices idle for a saving that
may not come.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ampsweep.jobs import Hint, TrialConfig, TrialResult, same_run_with_clip


class HeldForTwins:
    """Held trials by the id of the twin they wait for."""

    def __init__(self, twins: Mapping[str, tuple[TrialConfig, ...]]) -> None:
        self._held = dict(twins)
        self._count = sum(len(held) for held in twins.values())

    def __len__(self) -> int:
        return self._count

    def trials(self) -> list[TrialConfig]:
        """Every trial still held (for the count of trials left, and their ids)."""
        return [config for held in self._held.values() for config in held]

    def release_one(self) -> TrialConfig:
        """A held trial to train now, for a device that would otherwise idle while its twin runs.

        The tightest clip of the first group: the likeliest to be reached, so
        the copy it gives up was the least likely anyway.
        """
        twin = next(iter(self._held))
        *rest, tightest = self._held.pop(twin)
        if rest:
            self._held[twin] = tuple(rest)
        self._count -= 1
        return tightest

    def settle(
        self, result: TrialResult, hint: Callable[[TrialConfig], Hint]
    ) -> tuple[list[TrialResult], list[TrialConfig]]:
        """The copies made from ``result`` and the trials it releases to train.

        ``hint``: the baseline a held trial would be sent with now, for its
        silent-failure check.
        """
        held = self._held.pop(result.trial_id, ())
        self._count -= len(held)
        copies = [
            result.copied_as(config) for config in held if same_run_with_clip(result, config, hint(config))
        ]
        copied = {copy.trial_id for copy in copies}
        return copies, [config for config in held if config.trial_id not in copied]
