"""FP32 baselines by seed: what a mixed-precision trial is judged against (a silent float16 failure is
localized too). While a seed's baseline still runs, a trial is sent with that running call
(``PendingBaseline``), which the worker waits for only at the trial's end (``docs/internals.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ampsweep.contracts import FP32_LEVEL
from ampsweep.jobs import Baseline, Hint, PendingBaseline, TrialConfig, TrialResult

if TYPE_CHECKING:
    from ._slot import Slot


class Baselines:
    """FP32 baselines by seed, and the FP32 calls running now, so an actor can tell a silent
    failure from a healthy trial."""

    def __init__(self) -> None:
        self._by_seed: dict[int, list[tuple[TrialConfig, Baseline]]] = {}
        #: seed -> {call: its slot} of FP32 trials sent to an actor and not answered yet, oldest first
        self._sent: dict[int, dict[Any, Slot]] = {}

    def add_result(self, result: TrialResult) -> None:
        """A finished trial: an FP32 one becomes its seed's baseline (the others cost nothing here)."""
        if result.config.amp_level == FP32_LEVEL:
            self.add(result.config, Baseline.of(result))

    def add(self, config: TrialConfig, baseline: Baseline | None) -> None:
        if config.amp_level == FP32_LEVEL and baseline is not None:
            self._by_seed.setdefault(config.seed, []).append((config, baseline))

    def for_trial(self, config: TrialConfig) -> Baseline | None:
        """The baseline with the same seed, preferring the same clip and loss scale."""
        candidates = self._by_seed.get(config.seed, [])
        for fp32, baseline in candidates:
            if fp32.clip == config.clip and fp32.loss_scale == config.loss_scale:
                return baseline
        return candidates[0][1] if candidates else None

    def sent(self, config: TrialConfig, call: Any, slot: Slot) -> None:
        """A trial went to ``slot``'s actor as ``call``."""
        if config.amp_level == FP32_LEVEL:
            self._sent.setdefault(config.seed, {})[call] = slot

    def answered(self, config: TrialConfig, call: Any) -> None:
        """``call`` is no longer in flight (done, failed, or its actor died)."""
        self._sent.get(config.seed, {}).pop(call, None)

    def hint(self, config: TrialConfig) -> Hint:
        """What ``config`` is sent with: its baseline, else an FP32 call its actor runs now (not one queued
        behind another: an FP32 trial waits for nothing, so no circle of actors waits for each other)."""
        if config.amp_level == FP32_LEVEL:
            return None
        known = self.for_trial(config)
        if known is not None:
            return known
        call = next((c for c, slot in self._sent.get(config.seed, {}).items() if slot.runs(c)), None)
        return PendingBaseline([call]) if _a_ray_reference(call) else None


def _a_ray_reference(call: Any) -> bool:
    """Whether ``call`` is a Ray object reference a worker can wait on: a gang's call is the pool's own
    key for its ranks' combined answers, which no worker could resolve."""
    if call is None:
        return False
    import ray

    return isinstance(call, ray.ObjectRef)
