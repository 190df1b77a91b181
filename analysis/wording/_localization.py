"""The localized Cell in words (docs/localization.md), and a trial as the report names it.

What was not numerics (a bad batch, a device fault, a failed localization) is worded in ``_causes``.
"""

from __future__ import annotations

from typing import Any

from ampsweep.contracts import Configuration, dtype_name, num, pct

from .._model import Localization
from ..compute._anomalies import fp32_broke_first, in_fp32, lost_precision, overflow_limit, overflowed_inside

#: what the report says where the replay has no FP32 maximum to compare with
NO_FP32_VALUE = "no FP32 value at that step"
#: ... and where the FP32 replay had itself gone non-finite before that step
FP32_ALREADY_BROKE = "FP32 had already gone non-finite by that step"
#: Inner primitives that return NaN on a finite input out of their domain, not by overflowing.
_OUT_OF_DOMAIN = {"sqrt": "a negative input", "log": "an input at or below zero"}


def trial_label(row: Any) -> str:
    """A trial as the report names it: 'O2 · no clip · seed 0'."""
    return Configuration.from_row(row).trial_name(row["seed"])


def dtype_words(text: str) -> str:
    """'float16' for any spelling of a float dtype; 'low precision' where the replay recorded none."""
    return dtype_name(text) or "low precision"


def fp32_words(value: float | None, loc: Localization | None = None) -> str:
    """'FP32 310', or why there is none (never a bare question mark)."""
    if value is not None:
        return f"FP32 {num(value)}"
    return FP32_ALREADY_BROKE if fp32_broke_first(loc) else NO_FP32_VALUE


def versus_fp32(value: float | None, loc: Localization | None = None) -> str:
    """' vs FP32 310' after a maximum, ' (no FP32 value at that step)', or nothing for an FP32 trial."""
    if loc is not None and in_fp32(loc):
        return ""
    return f" ({fp32_words(None, loc)})" if value is None else f" vs FP32 {num(value)}"


def seed_list(seeds: tuple[object, ...]) -> str:
    """'seeds 0,1,2', 'seed 0'; a seed that was not recorded is 'unknown'."""
    listed = ",".join("unknown" if s is None else str(s) for s in seeds)
    return f"seed{'s' if len(seeds) != 1 else ''} {listed}"


def inner_sentence(loc: Localization, where: str = "") -> str:
    """'the `exp` inside ExpSoftmax overflowed float16 (input max 11.3 > ln 65504)', or the plain fallback.

    ``where`` names the Cell (default: its class, else its name). A ``sqrt``
    that returned NaN did not overflow: its input went negative (a variance
    computed as E[x^2] - E[x]^2 that cancelled, say), and the sentence says so.
    """
    dtype = dtype_words(loc.output_dtype or loc.input_dtype)
    where = where or loc.cell_class or loc.cell
    if loc.inner_op.lower() in _OUT_OF_DOMAIN:
        return f"the `{loc.inner_op}` inside {where} got {_OUT_OF_DOMAIN[loc.inner_op.lower()]} and returned NaN in {dtype}"
    if loc.inner_op:
        text = f"the `{loc.inner_op}` inside {where} overflowed {dtype}"
        limit = overflow_limit(loc.inner_op, dtype)
        if loc.inner_max_abs is not None:
            beyond = f" > {limit[1]}" if limit is not None and loc.inner_max_abs > limit[0] else ""
            text += f" (input max {num(loc.inner_max_abs)}{beyond})"
        return text
    inputs = "" if loc.input_max_abs is None else f"input max|x| {num(loc.input_max_abs)}"
    figures = ", ".join(x for x in ("" if in_fp32(loc) else fp32_words(loc.fp32_max_abs, loc), inputs) if x)
    figures = f" ({figures})" if figures else ""
    if not loc.max_abs:  # nothing finite left in the output: no bound to quote
        return f"the overflow happened inside {where}: its {dtype} output went non-finite{figures}"
    return (
        f"the overflow happened inside {where}: its output went NaN while its finite values stayed at "
        f"max|x| {num(loc.max_abs)}{figures}"
    )


def localization_phrase(loc: Localization) -> str:
    """'norm1 (CustomNorm), forward, float16 max|x| 6.5e4 vs FP32 310, seeds 0,1,2'.

    When the Cell's output stayed bounded the phrase says what overflowed
    inside it instead: comparing output maxima would say nothing there.
    """
    head = f"{loc.cell} ({loc.cell_class}), {loc.phase}" if loc.cell_class else f"{loc.cell}, {loc.phase}"
    dtype = dtype_words(loc.output_dtype)
    if loc.kind == "departure":
        zeros = f", {pct(loc.zero_fraction)} zeros" if loc.zero_fraction else ""
        evidence = f"departs from FP32 (relative error {num(loc.rel_error, 'not recorded')}{zeros})"
    elif overflowed_inside(loc):
        evidence = inner_sentence(loc)
    elif lost_precision(loc):
        evidence = (
            f"{dtype} output finite but max|x| {num(loc.max_abs, 'not recorded')}"
            f"{versus_fp32(loc.fp32_max_abs, loc)}, the overflow follows from it"
        )
    else:
        evidence = f"{dtype} max|x| {num(loc.max_abs, 'not recorded')}{versus_fp32(loc.fp32_max_abs, loc)}"
        if in_fp32(loc):
            evidence = f"non-finite in {dtype} (FP32 itself), {evidence}"
    ranks = rank_phrase(loc)
    return f"{head}, {evidence}, {seed_list(loc.seeds)}" + (f" ({ranks})" if ranks else "")


def rank_phrase(loc: Localization) -> str:
    """'on rank 1 of 2; rank 0's forward pass stayed finite at that step': where a gang's trial broke
    ('' on one device). ``ranks_broken`` counts the ranks that broke at that step in that phase."""
    if loc.devices <= 1 or loc.rank is None:
        return ""
    text = f"on rank {loc.rank} of {loc.devices}"
    broken = loc.ranks_broken or 1
    passes = f"{loc.phase} pass" if loc.phase else "part"
    if broken >= loc.devices:
        return f"{text}; every rank's {passes} broke at that step"
    if loc.devices == 2:
        return f"{text}; rank {1 - loc.rank}'s {passes} stayed finite at that step"
    return f"{text}; {loc.devices - broken} of the {loc.devices} ranks' {passes}es stayed finite at that step"


def localizations_phrase(locs: list[Localization]) -> str:
    """All of a configuration's localizations; one when its seeds agree."""
    return "; ".join(localization_phrase(loc) for loc in locs)
