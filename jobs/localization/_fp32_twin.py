"""The same Cells in FP32 at the step where a trial broke: what a culprit's magnitudes are judged against.

``jobs.localization._localize`` names the Cell; this replays the trial as FP32 (O0, same
seed, batches, clip and loss scale) to that step, records what every Cell did
there, and fills the finding's ``fp32_max_abs`` and note. The FP32 forward pass
runs first and alone: when the culprit's forward output already dwarfs FP32's
(``FORWARD_BLOWUP``), that is the whole answer, and the backward pass with its
hooks (most of the twin's time) is skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ampsweep.contracts import FORWARD_BLOWUP

from .._config import TrialConfig
from ._hooks import CellProbe, Event
from ._replay import JIT_PREFIX_MIN_STEPS, CellFinding, Replay, fp32_of, skip_ahead

if TYPE_CHECKING:
    from ..training._step import GraphCache

# FORWARD_BLOWUP (ampsweep.contracts): a Cell whose input gradient overflowed while its forward
# output was finite but that many times larger than in FP32 is reported as a forward failure: the
# forward pass lost precision first, the backward overflow is its consequence. The same factor on a
# forward culprit's *inputs* says the damage came from upstream (``blame_upstream``).


def fp32_twin(
    config: TrialConfig,
    workload_ref: str,
    finding: CellFinding,
    graphs: GraphCache | None = None,
    start: Mapping[str, Any] | None = None,
) -> CellProbe | None:
    """What every Cell did at the finding's step in an FP32 replay from the same start.

    Steps before it run without hooks: on the worker's compiled FP32 graph when
    it has one, else compiled anew when there are many (FP32 is not what is
    examined, and float32 rounding differences between jit and PyNative do not
    matter for a magnitude). The step itself runs in PyNative with hooks.
    """
    fp32 = fp32_of(config)
    compiled = graphs.compiled_for(fp32, workload_ref) if graphs is not None else None
    if compiled is not None or finding.step >= JIT_PREFIX_MIN_STEPS:
        replay, early = skip_ahead(
            fp32, workload_ref, finding.step + 1, finding.step, compiled, graphs, start
        )
        if early is not None:
            replay.close()
            return None  # FP32 itself went non-finite before that step
    else:
        replay = Replay(fp32, workload_ref, finding.step + 1, start)
        for _ in range(finding.step):
            replay.step(next(replay.batches))
    return hooked_twin_step(replay, next(replay.batches), finding)


def hooked_twin_step(replay: Replay, batch: tuple[Any, ...], finding: CellFinding) -> CellProbe:
    """What every Cell of the FP32 ``replay`` did on ``batch``: the forward pass first, alone (often all the
    comparison needs), then forward and backward (no update) when the finding's gradient needs a twin."""
    event = finding.event
    probe = CellProbe(backward=False)
    replay.probed(probe, lambda: replay.forward_only(batch))
    twin_forward = probe.find(event.name, "forward", event.forward_call)
    if event.phase == "backward" and not _forward_blew_up(finding.forward, twin_forward):
        probe = CellProbe(backward=True)  # a gradient to compare with: the whole step, hooked
        replay.probed(probe, lambda: replay.look(batch))
    return probe


def _forward_blew_up(policy: Event | None, fp32: Event | None) -> bool:
    """Whether the policy's forward output of a Cell is ``FORWARD_BLOWUP`` times FP32's or more."""
    if policy is None or fp32 is None or fp32.stats.max_abs <= 0:
        return False
    return policy.stats.max_abs > FORWARD_BLOWUP * fp32.stats.max_abs


def blame_upstream(finding: CellFinding, fp32: CellProbe | None) -> None:
    """Move a forward finding to the Cell upstream that went wrong first, when its inputs say so.

    The first Cell whose output is non-finite is where an overflow *shows*,
    not always where precision was lost: a hand-written variance that cancels
    in float16 stays finite but comes out hundreds of times too large, and
    the Cells after it (a float32 loss among them) overflow on its output. When
    the culprit's finite inputs are ``FORWARD_BLOWUP`` times FP32's, the finding
    becomes the first Cell, in the order the Cells returned that step, whose
    output is ``FORWARD_BLOWUP`` times its FP32 twin's. Without such a Cell
    (the damage arrived through the weights of earlier steps), the finding stays.
    """
    event = finding.event
    if fp32 is None or event.phase != "forward" or event.input_max_abs is None:
        return
    twin = fp32.find(event.name, "forward", event.call)
    if twin is None or not twin.input_max_abs or event.input_max_abs < FORWARD_BLOWUP * twin.input_max_abs:
        return
    for candidate in finding.step_forward:
        if candidate is event:
            return
        reference = fp32.find(candidate.name, "forward", candidate.call)
        if reference is None or not candidate.stats.finite or reference.stats.max_abs <= 0:
            continue
        if candidate.stats.max_abs >= FORWARD_BLOWUP * reference.stats.max_abs:
            finding.note.append(
                f"{event.name} ({event.cell_class}) was the first Cell to go non-finite, in {event.output_dtype}, "
                f"on inputs already {event.input_max_abs / twin.input_max_abs:.0f}x FP32's (max |x| "
                f"{event.input_max_abs:.4g} vs {twin.input_max_abs:.4g}); this Cell's output was the first that "
                f"step to reach {FORWARD_BLOWUP:g}x FP32's"
            )
            finding.event, finding.inside, finding.forward = candidate, None, None
            return


def compare_with_fp32(finding: CellFinding, policy_forward: Event | None, fp32: CellProbe | None) -> None:
    """Fill ``fp32_max_abs`` and add the magnitudes a user needs to see why to the note."""
    event = finding.event
    if fp32 is None:
        finding.note.append("the FP32 replay went non-finite before this step")
        return
    twin = fp32.find(event.name, event.phase, event.call)
    twin_forward = fp32.find(event.name, "forward", event.forward_call)
    if twin is None and event.phase == "backward":  # caught on a parameter: its forward output
        twin = twin_forward
    finding.fp32_max_abs = None if twin is None else twin.stats.max_abs
    if event.phase == "forward" and event.input_max_abs is not None and twin is not None:
        finding.note.append(
            f"input max |x| {event.input_max_abs:.4g} ({event.input_dtype}) vs "
            f"{twin.input_max_abs:.4g} in FP32"
        )
    if event.phase == "backward" and policy_forward is not None and twin_forward is not None:
        mine, fp32_value = policy_forward.stats.max_abs, twin_forward.stats.max_abs
        if _forward_blew_up(policy_forward, twin_forward):
            # the forward pass already lost precision in this Cell (a variance cancelled to ~0, say);
            # the overflow of the gradient through it is the consequence, so the origin is forward
            finding.event = policy_forward
            finding.fp32_max_abs = fp32_value
            finding.note.append(
                f"forward output max |x| {mine:.4g} ({policy_forward.output_dtype}) vs {fp32_value:.4g} in FP32 "
                f"({mine / fp32_value:.0f}x): the forward pass went wrong here, and the gradient w.r.t. its "
                "input overflowed in backward at the same step"
            )
        else:
            finding.note.append(
                f"forward output finite at that step, max |x| {mine:.4g} "
                f"({policy_forward.output_dtype}) vs {fp32_value:.4g} in FP32"
            )
