"""FP32 final losses by seed: what a mixed-precision trial is judged against.

Handed to the actor with each trial, so a trial that stays finite but learns
far worse than its FP32 baseline (a silent float16 failure) is localized too.
"""

from __future__ import annotations

from ampsweep.contracts import FP32_LEVEL
from ampsweep.jobs import TrialConfig


class Baselines:
    """FP32 final losses by seed, so an actor can tell a silent failure from a healthy trial."""

    def __init__(self) -> None:
        self._by_seed: dict[int, list[tuple[TrialConfig, float]]] = {}

    def add(self, config: TrialConfig, final_loss: float | None) -> None:
        if config.amp_level == FP32_LEVEL and final_loss is not None:
            self._by_seed.setdefault(config.seed, []).append((config, final_loss))

    def for_trial(self, config: TrialConfig) -> float | None:
        """The baseline with the same seed, preferring the same clip and loss scale."""
        candidates = self._by_seed.get(config.seed, [])
        for baseline, loss in candidates:
            if baseline.clip == config.clip and baseline.loss_scale == config.loss_scale:
                return loss
        return candidates[0][1] if candidates else None
