"""The answer a person reads first: the change, why, and how sure, in one to three lines.

Written once, here, into ``Recommendation.answer``; the terminal, report.md and report.html open with it
(docs/ranking.md, "What a person sees first"). When FP32 itself broke, the first line says so and no line
offers a mixed-precision remedy or "keep FP32" (docs/remedies.md, "When FP32 itself breaks").
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ampsweep.contracts import (
    FP32_LEVEL,
    LOSS_INSIDE,
    Configuration,
    black_list_value,
    clip_name,
    loss_scale_name,
    num,
)

from .._model import (
    NEXT_SPEC_FILE,
    STATUS_NO_TRIALS,
    STATUS_RECOMMENDED,
    Fp32Break,
    HeldPast,
    Localization,
    Recommendation,
)
from ..compute import _classes as cls
from ..compute._anomalies import in_fp32, lost_precision, overflowed_inside
from ._held import held_line
from ._localization import dtype_words, fp32_words, inner_sentence, rank_phrase, seed_list


def change_text(config: dict[str, Any], loss_placement_recorded: bool = False) -> str:
    """'Use O2, keep ExpSoftmax in FP32, clip 1.0': the change in the words of the configuration's name;
    a swept workload argument in the user's own words: 'Use O2, set softmax_dtype=float32, clip 1.0'."""
    level = str(config["amp_level"])
    configuration = Configuration.from_row(config)
    if level == FP32_LEVEL:
        head = "Use O0" if configuration.low_precision_args else "Keep FP32 (O0)"
    else:
        head = f"Use {level}" + ("" if config.get("dtype") in (None, "float16") else f" in {config['dtype']}")
    parts = [head]
    black_list = list(config.get("black_list") or [])
    if black_list and level != FP32_LEVEL:
        parts.append(f"keep {black_list_value(black_list)} in FP32")
    parts.extend(f"set {name}={value}" for name, value in configuration.workload_args)
    parts.append(clip_name(config.get("clip")))
    if str(config.get("loss_scale", "none")) not in ("none", ""):
        parts.append(loss_scale_name(config["loss_scale"]))
    if loss_placement_recorded and config.get("loss_placement") == LOSS_INSIDE:
        parts.append("loss inside the cast")
    return ", ".join(parts)


def _who(loc: Localization) -> str:
    return f"{loc.cell_class} (`{loc.cell}`)" if loc.cell_class else f"`{loc.cell}`"


def _where(loc: Localization) -> str:
    ranks = rank_phrase(loc)
    step = "" if loc.replay_step is None else f"step ~{loc.replay_step:,.0f}, "
    return f"{', ' + ranks if ranks else ''}; {step}{seed_list(loc.seeds)}"


def what_happened(loc: Localization) -> str:
    """The localized Cell in a sentence: what went wrong in it, and where."""
    dtype = dtype_words(loc.output_dtype or loc.input_dtype)
    if loc.kind == "departure":
        return f"{_who(loc)} departs from FP32 (relative error {num(loc.rel_error, 'not recorded')}){_where(loc)}"
    if overflowed_inside(loc):
        if loc.inner_op:
            return f"{inner_sentence(loc)}, in `{loc.cell}`{_where(loc)}"
        return f"{inner_sentence(loc, _who(loc))}{_where(loc)}"
    if lost_precision(loc):
        fp32 = "" if loc.fp32_max_abs is None else f" where FP32's is {num(loc.fp32_max_abs)}"
        return (
            f"{_who(loc)} loses precision in {dtype} in the forward pass: its output stays finite but reaches "
            f"max|x| {num(loc.max_abs, 'not recorded')}{fp32}, and the overflow follows from it{_where(loc)}"
        )
    versus = "" if in_fp32(loc) else f", {fp32_words(loc.fp32_max_abs, loc)}"
    if loc.phase == "backward":
        return (
            f"the gradient into {_who(loc)} overflows {dtype} in the backward pass (max|x| {num(loc.max_abs, 'not recorded')}"
            f"{versus}){_where(loc)}"
        )
    return f"{_who(loc)} overflows {dtype} in the forward pass (max|x| {num(loc.max_abs, 'not recorded')}{versus}){_where(loc)}"


def cause_text(rec: Recommendation) -> str:
    """'Why: without it, the `exp` inside ExpSoftmax overflowed float16 ...'; '' when nothing was localized."""
    loc = rec.localization
    if loc is None:
        return ""
    text = what_happened(loc)
    if rec.config and loc.cell_class and loc.cell_class in (rec.config.get("black_list") or []):
        return f"Why: without {loc.cell_class} in FP32, {text}."
    return f"Where it breaks: {text}."


def _runner_up_text(rec: Recommendation) -> str:
    """How far the next stable configuration is behind the recommendation, in plain words."""
    other = rec.evidence.get("runner_up")
    if not other:
        return "no other mixed-precision configuration was stable on every seed"
    name = f"the runner-up (#{other['rank']})" if other.get("rank") is not None else "the runner-up"
    if other.get("within_noise"):
        return f"{name} is within seed noise of it, so either works"
    criterion = other.get("decided_by_label")
    if not criterion:
        return f"{name} ranks below it"
    beyond = "beyond seed noise " if other.get("decided_by_score") else ""
    return f"{name} ranks below it {beyond}on {criterion}"


def confidence_text(rec: Recommendation, ranking: pd.DataFrame, n_trials: int) -> str:
    """'How sure: stable on 3/3 seeds; the runner-up (#2) is within seed noise of it, so either works; 2/6
    mixed-precision configurations broke (36 trials).'

    It says what was measured: the seeds the answer was stable on, how far the
    runner-up is behind it (within seed noise or not; which criterion, when
    not), and what broke. Whether each seed alone ranks it first is evidence,
    not doubt about the fix: it is in the evidence and "could not decide" lists.
    """
    mixed = ranking[~ranking["baseline"]] if len(ranking) else ranking
    broke = int((mixed["tier"].isin((cls.TIER_UNSTABLE, cls.TIER_SILENT))).sum()) if len(mixed) else 0
    tail = f"{broke}/{len(mixed)} mixed-precision configurations broke ({n_trials} trials)"
    if rec.status != STATUS_RECOMMENDED:
        return f"How sure: {tail}."
    evidence = rec.evidence
    n = int(evidence.get("n_trials") or 0)
    runs = "seeds" if evidence.get("n_seeds") == n else "trials"
    return f"How sure: stable on {n}/{n} {runs}; {_runner_up_text(rec)}; {tail}."


def _held_words(held: HeldPast, broke: Fp32Break) -> str:
    """'FP32 · clip 1.0 stayed finite to step 3,000 on 3/3 seeds where FP32 without a clip broke at ~1,149'."""
    plain = (
        f"{broke.label} without a clip"
        if held.amp_level == FP32_LEVEL and held.clip is not None
        else broke.label
    )
    at = "" if broke.step is None else f" at ~{broke.step:,.0f}"
    return (
        f"{held.label} stayed finite to step {held.held_to:,} on {held.n_held}/{held.n_seeds} seeds "
        f"where {plain} broke{at}"
    )


def fp32_next_step(broke: Fp32Break) -> str:
    """The next step when FP32 breaks: a clip in FP32 that held, else the Cell that broke, else the learning rate.

    Each choice carries its evidence: the clip that stayed finite, or the clips
    that broke as well (then clipping is no fix), or that clipping was not tried.
    """
    loc = broke.localization
    cell = (
        f"change {loc.cell_class} (`{loc.cell}`), where FP32 broke"
        if loc is not None and loc.cell_class
        else ""
    )
    held = [h for h in broke.held if h.amp_level == FP32_LEVEL]
    if held:
        rest = ", or ".join(x for x in ("lower the learning rate", cell) if x)
        return f"Next: clip in FP32: {_held_words(held[0], broke)}; or {rest}."
    clipped = [b for b in broke.broke_too if b.clip is not None]
    if clipped:
        tried = "; ".join(
            f"{b.label} broke{'' if b.step is None else f' at ~{b.step:,.0f}'} on {b.n_broken}/{b.n_seeds} seeds"
            for b in clipped[:2]
        )
        first = ", or ".join(x for x in (cell, "lower the learning rate") if x)
        return f"Next: {first}; clipping in FP32 did not help ({tried})."
    options = [
        x for x in ("lower the learning rate", "clip the gradients in FP32 (not tried here)", cell) if x
    ]
    return "Next: " + ", ".join(options[:-1]) + f" or {options[-1]}."


def _fp32_break_lines(rec: Recommendation, loss_placement_recorded: bool) -> list[str]:
    """After the first line when FP32 breaks: where (the Cell, in float32), the next step, what held in mixed precision."""
    broke = rec.fp32_break
    assert broke is not None
    loc = broke.localization
    lines = [
        f"Where it breaks in FP32: {what_happened(loc)}."
        if loc is not None
        else "Where it breaks in FP32: not localized (no replay of the FP32 trials was recorded).",
        fp32_next_step(broke),
    ]
    mixed = [h for h in broke.held if h.amp_level != FP32_LEVEL]
    if rec.status == STATUS_RECOMMENDED and rec.config:
        mine = next((h for h in mixed if h.config_id == rec.config_id), None)
        held = f"; {_held_words(mine, broke)}" if mine is not None else ""
        lines.append(
            "Mixed precision, judged against FP32 only before it broke: "
            f"{change_text(rec.config, loss_placement_recorded)}{held}."
        )
    elif mixed:
        lines.append(f"Mixed precision that stayed finite where FP32 broke: {_held_words(mixed[0], broke)}.")
    return lines


def answer_lines(
    rec: Recommendation, ranking: pd.DataFrame, n_trials: int, loss_placement_recorded: bool
) -> tuple[str, ...]:
    """The lines every output opens with: the first says what to do, or, when FP32 broke, says so whatever
    the ranking recommends (and no line offers "keep FP32": FP32 is broken too).
    """
    if rec.status == STATUS_NO_TRIALS:
        return (rec.headline,)
    after: list[str]
    if rec.fp32_break is not None:
        broke = rec.fp32_break
        at = "" if broke.step is None else f" at step ~{broke.step:,.0f}"
        first = f"{broke.label} itself breaks{at} on {broke.n_broken}/{broke.n_seeds} seeds: this is not a mixed-precision problem."
        after = _fp32_break_lines(rec, loss_placement_recorded)
    elif rec.status == STATUS_RECOMMENDED and rec.config:
        first = change_text(rec.config, loss_placement_recorded) + "."
        after = [cause_text(rec)]
        held = held_line(rec.held_to) if rec.held_to is not None else None
        if held:
            after.insert(0, held)
    elif rec.next_sweep is not None:
        # no answer, but the evidence says what the grid lacked: that is the change to make next
        ready = f" (report/{NEXT_SPEC_FILE})" if rec.next_sweep.has_spec else ""
        first = f"Keep FP32 (O0) for now; next, {rec.next_sweep.change}{ready}."
        after = [f"Why: {rec.next_sweep.why}."]
    else:
        first = "Keep FP32 (O0): no mixed-precision configuration was stable on every seed."
        after = [cause_text(rec)]
    after.append(confidence_text(rec, ranking, n_trials))
    return tuple(line for line in (first, *after) if line)
