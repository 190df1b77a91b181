"""The plan's copies while the sweep runs (``CopyMap``, decided by ``planning._copies``), made when their
source's result comes back; a held trial whose condition fails goes back to the queue."""

from __future__ import annotations

from collections.abc import Callable

from ampsweep.jobs import Hint, TrialConfig, TrialResult, same_run_with_clip

from ..planning._copies import CLIP_NEVER_REACHED, EQUIVALENT, CopyMap


class Copies:
    """The copies still to make, by the id of the trial each waits for."""

    def __init__(self, plan: CopyMap) -> None:
        self._always = dict(plan.always)
        self._held = dict(plan.if_clip_never_reached)
        self._held_count = sum(len(held) for held in self._held.values())

    def held(self) -> list[TrialConfig]:
        """Every trial still held for its source's result (they count as trials left)."""
        return [config for held in self._held.values() for config in held]

    def unmade(self) -> list[TrialConfig]:
        """Every copy not made yet, held or not: what a sweep that ends now did not commit."""
        return [config for copies in self._always.values() for config in copies] + self.held()

    def __len__(self) -> int:
        """How many trials are held (copies made for sure are counted with their source)."""
        return self._held_count

    def release_one(self) -> TrialConfig:
        """A held trial to train now, for a device that would otherwise idle: the tightest clip of the first
        group, the likeliest to be reached (the copy it gives up was the least likely anyway)."""
        source = next(iter(self._held))
        *rest, tightest = self._held.pop(source)
        if rest:
            self._held[source] = tuple(rest)
        self._held_count -= 1
        return tightest

    def after(
        self, result: TrialResult, hint: Callable[[TrialConfig], Hint]
    ) -> tuple[list[TrialResult], list[TrialConfig]]:
        """The copies ``result`` makes, and the held trials it releases to train; ``hint``: a held trial's
        FP32 baseline, for the silent-failure check its copy must pass as its own run would."""
        made = [result.copied_as(config, EQUIVALENT) for config in self._always.pop(result.trial_id, ())]
        held = self._held.pop(result.trial_id, ())
        self._held_count -= len(held)
        train = []
        for config in held:
            if same_run_with_clip(result, config, hint(config)):
                made.append(result.copied_as(config, CLIP_NEVER_REACHED))
            else:
                train.append(config)
        copies: list[TrialResult] = []
        while made:  # a copy is a source too: O0 [Dense] clip 1.0 copies O0 clip 1.0, itself a copy
            copy = made.pop(0)
            copies.append(copy)
            made += [copy.copied_as(config, EQUIVALENT) for config in self._always.pop(copy.trial_id, ())]
        return copies, train
