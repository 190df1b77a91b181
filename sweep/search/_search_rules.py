"""The adaptive search's decisions, as pure functions over typed evidence: testable without Ray,
MindSpore or a sweep folder. A probe is stable exactly when ``configuration_verdict`` says so."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ampsweep.contracts import (
    UNDERFLOW_EVIDENCE,
    LocalizedCell,
    TrialVerdict,
    Verdict,
    configuration_verdict,
    pct,
)


@dataclass(frozen=True)
class SeedEvidence:
    """What one seed of a probe showed: its verdict and, if a replay named one, the Cell."""

    seed: int
    verdict: TrialVerdict
    localized: LocalizedCell | None = None
    #: share of gradient values float16 lost (``underflow_excess`` against the seed's FP32 run)
    underflow: float | None = None

    @property
    def underflowed(self) -> bool:
        return self.underflow is not None and self.underflow >= UNDERFLOW_EVIDENCE


@dataclass(frozen=True)
class GrowStep:
    """The grow phase's next move: add ``add`` to the black list, or stop (``add`` is None)."""

    add: str | None
    decision: str


def probe_verdict(seeds: Sequence[SeedEvidence]) -> Verdict:
    """The probe's verdict over its seeds (stable only when every seed is)."""
    return configuration_verdict(s.verdict for s in seeds)


def is_stable(seeds: Sequence[SeedEvidence]) -> bool:
    return probe_verdict(seeds) is Verdict.STABLE


def not_applicable(seeds: Sequence[SeedEvidence]) -> str | None:
    """Why the probe's black list could not be applied (its first seed's reason); None when it could. Such a
    probe says nothing about the class it added (the search tries the next class the replays named)."""
    if probe_verdict(seeds) is not Verdict.NOT_APPLICABLE:
        return None
    reasons = [s.verdict.reason for s in seeds if s.verdict.verdict is Verdict.NOT_APPLICABLE]
    return next((r for r in reasons if r), "its black list could not be applied")


def next_class(
    black: Sequence[str], seeds: Sequence[SeedEvidence], max_classes: int, refused: Sequence[str] = ()
) -> GrowStep:
    """After an unstable probe: the Cell class to add next, the one the unstable seeds' replays named most
    often, not one in the list or ``refused`` (its probe was ``not_applicable``); or why the search stops."""
    named = Counter(
        s.localized.cell_class for s in seeds if s.localized is not None and not s.verdict.learns_like_fp32
    )
    candidates = [name for name, _ in named.most_common() if name not in black and name not in refused]
    if not candidates and refused:
        listed = ", ".join(refused)
        return GrowStep(
            None,
            f"stop: {listed} cannot be kept in FP32 (not applicable) and the replays named no other class",
        )
    if not candidates and any(s.verdict.verdict is Verdict.FAILED for s in seeds):
        return GrowStep(None, "stop: trials failed with an exception (see the ranking's error column)")
    if not candidates:
        return GrowStep(None, "stop: the replays named no Cell class that is not already in FP32")
    if len(black) >= max_classes:
        return GrowStep(None, f"stop: {max_classes} classes added and still unstable (search_rounds)")
    chosen = candidates[0]
    return GrowStep(chosen, f"add {chosen} (named on {named[chosen]} of {len(seeds)} seeds)")


def needs_loss_scaling(seeds: Sequence[SeedEvidence], scaled: bool) -> str | None:
    """Whether the evidence calls for loss scaling rather than a black list; the decision if so. Only for a
    *silent* failure whose gradients float16 lost (underflow): no Cell is broken, the values are too small,
    and keeping a Cell in FP32 does not bring them back."""
    if scaled:
        return None
    bad = [s for s in seeds if not s.verdict.learns_like_fp32]
    if not bad or any(s.verdict.verdict is not Verdict.SILENT for s in bad):
        return None
    lost = [s for s in bad if s.underflowed]
    if len(lost) * 2 <= len(bad):
        return None
    shares = ", ".join(pct(s.underflow) for s in lost)
    return (
        f"loss scaling: silent on {len(bad)} of {len(seeds)} seeds with {shares} of the gradient values "
        "lost to float16's range (underflow), so a black list cannot help"
    )


def shrinkable(black: Sequence[str]) -> bool:
    """Not a list of one class: without it the probe is the default list, which the grow phase saw fail."""
    return len(black) >= 2


def shrink_decision(dropped: str, stable_without: bool, applicable: bool = True) -> str:
    if not applicable:
        return f"keep {dropped}: the list without it could not be applied"
    return f"drop {dropped}: stable on every seed without it" if stable_without else f"keep {dropped}: needed"


def stability_phrase(seeds: Sequence[SeedEvidence]) -> str:
    """A probe's verdict in the words ``search.json`` and the report use."""
    verdict = probe_verdict(seeds)
    if verdict is Verdict.STABLE:
        return "stable on every seed"
    if verdict is Verdict.SILENT:
        return "finite, but learns clearly worse than FP32 on some seed (silent failure)"
    if verdict is Verdict.NOT_APPLICABLE:
        return f"not applicable: {not_applicable(seeds)}"
    return "unstable"
