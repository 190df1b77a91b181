"""A trial's verdict, and a configuration's: the one place that says "stable".

The adaptive search decides from these verdicts, the ranking sorts by them and
the report prints them, so all three must call the same trial by the same
name. Before this module existed the search called a finite trial "stable"
while the report called it a silent failure, and the search stopped on a
configuration the report then ranked as broken.

A trial is judged against its FP32 baseline: the FP32 (``FP32_LEVEL``) run of
the same workload and seed. Finite is not healthy: float16 can fail without a
NaN (a normalization's variance overflows, gradients underflow) and the loss
then sits near chance while FP32 converges. Such a trial is ``SILENT``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from ._formulas import learning_share, required_share
from ._numbers import num, pct

#: The AMP level that casts nothing: every FP32 baseline and reference runs at it.
FP32_LEVEL: Final = "O0"


class Outcome(str, enum.Enum):
    """How a trial ended on its worker; the ``str`` values are what the ``trials`` table stores."""

    COMPLETED = "completed"  # ran every step
    DIVERGED = "diverged"  # the loss stayed non-finite for ``abort_after`` steps
    FAILED = "failed"  # an exception, or a trial that killed its worker too often
    #: its black list could not be applied to the network (``keep_in_float32`` raised): the
    #: configuration was never tried, so it says nothing about stability and is never ranked
    NOT_APPLICABLE = "not_applicable"


class Verdict(str, enum.Enum):
    """What a trial (or a configuration over its seeds) says about mixed precision."""

    STABLE = "stable"  # completed and learns like FP32
    SILENT = "silent"  # completed, finite, but learns clearly worse than FP32
    DIVERGED = "diverged"
    FAILED = "failed"
    #: the black list could not be applied: not a failure of mixed precision, and not a result
    NOT_APPLICABLE = "not_applicable"

    @property
    def learns_like_fp32(self) -> bool:
        return self is Verdict.STABLE


@dataclass(frozen=True)
class LearningEvidence:
    """What a completed run showed about its learning; None = not measured.

    ``reached_target``: whether some 10-step window's mean loss reached the target loss (the workload's, or
    1.1 x FP32's final loss); ``start_loss``: the mean loss of its first steps, where the decrease is measured
    from; ``spread`` (FP32 only): how far the FP32 seeds' final losses lie apart, as a share of FP32's
    decrease: the seed noise.
    """

    final_loss: float | None
    reached_target: bool | None = None
    start_loss: float | None = None
    spread: float = 0.0


#: The rule in one sentence, for the report's criteria and the docs.
SILENT_RULE = (
    "a finite trial is a silent failure when it achieves less than the required share of the loss decrease "
    "its seed's FP32 run achieves from the same start (75 %, less when the FP32 seeds themselves differ by "
    "more: 1 - 2 x their spread), or never reaches the target loss while FP32 does"
)


@dataclass(frozen=True)
class TrialVerdict:
    """A trial's verdict and, for a silent failure, why (one phrase)."""

    verdict: Verdict
    reason: str = ""

    @property
    def learns_like_fp32(self) -> bool:
        return self.verdict.learns_like_fp32


def _known(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def trial_verdict(
    outcome: str | Outcome, trial: LearningEvidence, fp32: LearningEvidence | None
) -> TrialVerdict:
    """The verdict of one trial against its FP32 baseline of the same seed.

    A completed trial is a silent failure when its ``learning_share`` of
    FP32's decrease (from FP32's start, the same point both runs start from)
    is below ``required_share`` of the FP32 seeds' spread, or when FP32 reaches
    the target loss and the trial never does. The share is a ratio of loss
    differences, so a loss weighted by 1e-6 is judged as one of order 1 is.
    Without an FP32 baseline a completed trial is stable: there is nothing to
    be worse than.
    """
    outcome = Outcome(outcome)
    if outcome is Outcome.NOT_APPLICABLE:
        return TrialVerdict(Verdict.NOT_APPLICABLE, "its black list could not be applied")
    if outcome is Outcome.FAILED:
        return TrialVerdict(Verdict.FAILED)
    if outcome is Outcome.DIVERGED:
        return TrialVerdict(Verdict.DIVERGED)
    if fp32 is None:
        return TrialVerdict(Verdict.STABLE)
    start = fp32.start_loss if _known(fp32.start_loss) else trial.start_loss
    if _known(trial.final_loss) and _known(fp32.final_loss) and _known(start):
        assert trial.final_loss is not None and fp32.final_loss is not None and start is not None
        share = learning_share(start, trial.final_loss, fp32.final_loss)
        needed = required_share(fp32.spread)
        if share is not None and share < needed:
            return TrialVerdict(
                Verdict.SILENT,
                f"learns {pct(max(share, 0.0))} of FP32's loss decrease (needs {pct(needed)}): "
                f"final loss {num(trial.final_loss)} vs FP32 {num(fp32.final_loss)} from {num(start)}",
            )
    if fp32.reached_target and trial.reached_target is False:
        return TrialVerdict(Verdict.SILENT, "never reaches the target loss while FP32 does")
    return TrialVerdict(Verdict.STABLE)


def configuration_verdict(verdicts: Iterable[TrialVerdict | Verdict]) -> Verdict:
    """A configuration over its seeds: stable only when every seed is, else named by its worst seed
    (diverged, then failed, then silent): a seed that breaks one run in three is a real risk to the user's
    training. A seed whose black list could not be applied makes it ``NOT_APPLICABLE``: the configuration as
    asked for never ran, so its other seeds are no evidence about it (and it must not count as broken). No
    seeds at all is ``FAILED`` (nothing ran).
    """
    found = [v.verdict if isinstance(v, TrialVerdict) else Verdict(v) for v in verdicts]
    if not found:
        return Verdict.FAILED
    if Verdict.NOT_APPLICABLE in found:
        return Verdict.NOT_APPLICABLE
    for worst in (Verdict.DIVERGED, Verdict.FAILED, Verdict.SILENT):
        if worst in found:
            return worst
    return Verdict.STABLE
