"""The localized Cell of each configuration, from the ``anomalies`` table.

For a trial that went non-finite (or departed from FP32 silently) the trainer
replays it and writes one ``anomalies`` row naming the first Cell that
produced inf/NaN (or departed), with its max |x| under the trial's policy and
in FP32. The table may be absent: older sweeps and completed trials have
none. Per configuration the rows of its seeds are folded: seeds that agree
on (cell, class, phase, kind) are reported once.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from ampsweep.contracts import ANOMALIES_SCHEMA, FLOAT16_MAX, NUMERICS, dtype_name

from .._model import Localization
from ._load import files_by_trial, resolve

TABLE = "anomalies"
_AGREE_ON = ("cell", "cell_class", "phase", "kind")


def read_anomalies(sweep_dir: str | Path, trial_ids: list[str]) -> pd.DataFrame:
    """The anomaly rows of the given trials, with a ``trial_id`` column (empty if none)."""
    loc = resolve(sweep_dir)
    frames = []
    for trial_id, paths in files_by_trial(loc, TABLE, set(trial_ids)).items():
        for path in paths:
            with loc.fs.open_input_file(path) as handle:
                table = pq.ParquetFile(handle).read()
            frame = table.to_pandas()
            frame.insert(0, "trial_id", trial_id)
            frames.append(frame)
    columns = ["trial_id", *ANOMALIES_SCHEMA.names]
    if not frames:
        return pd.DataFrame({c: pd.Series([], dtype="object") for c in columns})
    out = pd.concat(frames, ignore_index=True).reindex(columns=columns)
    # the first Cell caught per trial is the culprit; later rows are consequences
    out = out.sort_values(["trial_id", "replay_step"], kind="stable", na_position="last")
    return out.drop_duplicates("trial_id", keep="first").reset_index(drop=True)


def by_cause(anomalies: pd.DataFrame | None) -> tuple[pd.DataFrame | None, pd.DataFrame]:
    """The rows that name a Cell (cause ``numerics``, or none recorded: older sweeps) and the others
    (a localization that failed), which no configuration is judged by."""
    if anomalies is None:
        return None, pd.DataFrame({"trial_id": [], "note": []})
    named = anomalies["cause"].isna() | (anomalies["cause"] == NUMERICS)
    return anomalies[named].reset_index(drop=True), anomalies[~named].reset_index(drop=True)


def _median(values: pd.Series) -> float | None:
    finite = pd.to_numeric(values, errors="coerce").to_numpy(dtype="float64")
    finite = finite[np.isfinite(finite)]
    return float(np.median(finite)) if finite.size else None


def _text(value: object) -> str:
    return "" if value is None or (isinstance(value, float) and np.isnan(value)) else str(value)


def _flag(value: object) -> bool | None:
    return None if value is None or pd.isna(value) else bool(value)


def _int(value: object) -> int | None:
    return None if value is None or pd.isna(value) else int(value)  # type: ignore[call-overload]


def localizations(
    rows: pd.DataFrame, seeds: dict[str, object], config_id: str = "", devices: int = 1
) -> list[Localization]:
    """Fold one configuration's anomaly rows: one :class:`Localization` per agreeing group.

    ``seeds`` maps trial id to seed; ``devices``: the devices each trial ran on
    (a gang's rank is named only above 1). Groups with more seeds come first;
    in a group, the rank is its earliest row's.
    """
    if rows.empty:
        return []
    keyed = rows.assign(**{k: rows[k].map(_text) for k in _AGREE_ON})
    out: list[Localization] = []
    for key, group in keyed.groupby(list(_AGREE_ON), sort=True, dropna=False):
        cell, cell_class, phase, kind = key
        group_seeds = tuple(sorted({seeds.get(t) for t in group["trial_id"]}, key=str))
        out.append(
            Localization(
                kind=kind,
                cell=cell,
                cell_class=cell_class,
                phase=phase,
                seeds=group_seeds,
                n_trials=len(group),
                replay_step=_median(group["replay_step"]),
                input_dtype=_text(group["input_dtype"].iloc[0]),
                output_dtype=_text(group["output_dtype"].iloc[0]),
                max_abs=_median(group["max_abs"]),
                fp32_max_abs=_median(group["fp32_max_abs"]),
                rel_error=_median(group["rel_error"]),
                zero_fraction=_median(group["zero_fraction"]),
                note=_text(group["note"].iloc[0]),
                config_id=config_id,
                inner_op=_text(group["inner_op"].iloc[0]) if "inner_op" in group else "",
                input_max_abs=_median(group["input_max_abs"]) if "input_max_abs" in group else None,
                inner_max_abs=_median(group["inner_max_abs"]) if "inner_max_abs" in group else None,
                finite=_flag(group["finite"].iloc[0]) if "finite" in group else None,
                rank=_int(group["rank"].iloc[0]) if "rank" in group else None,
                ranks_broken=_int(group["ranks_broken"].iloc[0]) if "ranks_broken" in group else None,
                devices=devices,
            )
        )
    out = [replace(loc, text=localization_phrase(loc)) for loc in out]
    return sorted(out, key=lambda loc: (-loc.n_trials, loc.cell))


def _dtype(text: str) -> str:
    return dtype_name(text) or "low precision"


def _num(value: float | None) -> str:
    """'6.55e4', '310': three digits, no exponent padding; 'not recorded' when there is none."""
    if value is None:
        return "not recorded"
    return f"{value:.3g}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")


#: what the report says where the replay has no FP32 maximum to compare with
NO_FP32_VALUE = "no FP32 value at that step"
#: ... and where the FP32 replay had itself gone non-finite before that step
FP32_ALREADY_BROKE = "FP32 had already gone non-finite by that step"
#: The replay's notes (``jobs.localization``) that say why there is no FP32 value: the trial
#: was FP32 itself (``FP32_ITSELF_NOTE``), or its FP32 twin broke first (``compare_with_fp32``).
#: The analysis reads only Parquet, so it matches the words, not an import.
_NOTE_FP32_ITSELF = "FP32 itself"
_NOTE_FP32_BROKE_FIRST = "FP32 replay went non-finite before this step"


def in_fp32(loc: Localization) -> bool:
    """Whether the localized trial was FP32 itself (O0): there is no FP32 to compare it with."""
    return _NOTE_FP32_ITSELF in loc.note


def fp32_words(value: float | None, loc: Localization | None = None) -> str:
    """'FP32 310', or why there is none (never a bare question mark)."""
    if value is not None:
        return f"FP32 {_num(value)}"
    return FP32_ALREADY_BROKE if loc is not None and _NOTE_FP32_BROKE_FIRST in loc.note else NO_FP32_VALUE


def versus_fp32(value: float | None, loc: Localization | None = None) -> str:
    """' vs FP32 310' after a maximum, ' (no FP32 value at that step)', or nothing for an FP32 trial."""
    if loc is not None and in_fp32(loc):
        return ""
    return f" ({fp32_words(None, loc)})" if value is None else f" vs FP32 {_num(value)}"


def seed_list(seeds: tuple[object, ...]) -> str:
    """'0,1,2'; a seed that was not recorded is 'unknown'."""
    return ",".join("unknown" if s is None else str(s) for s in seeds)


def _seeds(seeds: tuple[object, ...]) -> str:
    return f"seed{'s' if len(seeds) != 1 else ''} {seed_list(seeds)}"


#: A non-finite output whose finite part stays below this share of float16's
#: maximum did not overflow at the output: something inside the Cell did.
BOUNDED_SHARE = 0.5
#: The largest finite value of each dtype a Cell may compute in, and how the limits below name it.
_DTYPE_MAX = {"float16": (FLOAT16_MAX, "65504"), "float32": (float(np.finfo(np.float32).max), "3.4e38")}
#: Inner primitives: the input beyond which they overflow a dtype, as a function of its maximum.
_OVERFLOW_AT = {
    "exp": (math.log, "ln"),
    "square": (math.sqrt, "sqrt"),
    "pow": (math.sqrt, "sqrt"),
    "mul": (math.sqrt, "sqrt"),
}


def overflow_limit(op: str, dtype: str) -> tuple[float, str] | None:
    """The input beyond which ``op`` overflows ``dtype`` and its words: (11.09, 'ln 65504'); None if unknown."""
    at, words = _OVERFLOW_AT.get(op.lower(), (None, ""))
    largest = _DTYPE_MAX.get(dtype)
    if at is None or largest is None:
        return None
    return at(largest[0]), f"{words} {largest[1]}"


def lost_precision(loc: Localization) -> bool:
    """A forward output that stayed finite but far from FP32's: precision was lost here, a later Cell overflowed."""
    return loc.kind == "nonfinite" and loc.phase == "forward" and loc.finite is True


def overflowed_inside(loc: Localization) -> bool:
    """A forward non-finite output whose finite values stay bounded: the overflow was inside the Cell."""
    if loc.kind != "nonfinite" or loc.phase != "forward" or lost_precision(loc):
        return False
    if loc.inner_op:
        return True
    return loc.max_abs is not None and loc.max_abs < BOUNDED_SHARE * FLOAT16_MAX


#: Inner primitives that return NaN on a finite input out of their domain, not by overflowing.
_OUT_OF_DOMAIN = {"sqrt": "a negative input", "log": "an input at or below zero"}


def inner_sentence(loc: Localization, where: str = "") -> str:
    """'the `exp` inside ExpSoftmax overflowed float16 (input max 11.3 > ln 65504)', or the plain fallback.

    ``where`` names the Cell (default: its class, else its name). A ``sqrt``
    that returned NaN did not overflow: its input went negative (a variance
    computed as E[x^2] - E[x]^2 that cancelled, say), and the sentence says so.
    """
    dtype = _dtype(loc.output_dtype or loc.input_dtype)
    where = where or loc.cell_class or loc.cell
    if loc.inner_op.lower() in _OUT_OF_DOMAIN:
        return f"the `{loc.inner_op}` inside {where} got {_OUT_OF_DOMAIN[loc.inner_op.lower()]} and returned NaN in {dtype}"
    if loc.inner_op:
        text = f"the `{loc.inner_op}` inside {where} overflowed {dtype}"
        limit = overflow_limit(loc.inner_op, dtype)
        if loc.inner_max_abs is not None:
            if limit is not None and loc.inner_max_abs > limit[0]:
                text += f" (input max {_num(loc.inner_max_abs)} > {limit[1]})"
            else:
                text += f" (input max {_num(loc.inner_max_abs)})"
        return text
    inputs = "" if loc.input_max_abs is None else f"input max|x| {_num(loc.input_max_abs)}"
    figures = ", ".join(x for x in ("" if in_fp32(loc) else fp32_words(loc.fp32_max_abs, loc), inputs) if x)
    if not loc.max_abs:  # nothing finite left in the output: no bound to quote
        return f"the overflow happened inside {where}: its {dtype} output went non-finite" + (
            f" ({figures})" if figures else ""
        )
    return (
        f"the overflow happened inside {where}: its output went NaN while its finite values stayed at "
        f"max|x| {_num(loc.max_abs)}" + (f" ({figures})" if figures else "")
    )


def localization_phrase(loc: Localization) -> str:
    """'norm1 (CustomNorm), forward, float16 max|x| 6.5e4 vs FP32 310, seeds 0,1,2'.

    When the Cell's output stayed bounded the phrase says what overflowed
    inside it instead: comparing output maxima would say nothing there.
    """
    head = f"{loc.cell} ({loc.cell_class}), {loc.phase}" if loc.cell_class else f"{loc.cell}, {loc.phase}"
    if loc.kind == "departure":
        bits = [f"departs from FP32 (relative error {_num(loc.rel_error)}"]
        if loc.zero_fraction is not None and loc.zero_fraction > 0:
            bits.append(f", {loc.zero_fraction * 100:.0f} % zeros")
        evidence = "".join(bits) + ")"
    elif overflowed_inside(loc):
        evidence = inner_sentence(loc)
    elif lost_precision(loc):
        evidence = (
            f"{_dtype(loc.output_dtype)} output finite but max|x| {_num(loc.max_abs)}"
            f"{versus_fp32(loc.fp32_max_abs, loc)}, the overflow follows from it"
        )
    else:
        evidence = (
            f"{_dtype(loc.output_dtype)} max|x| {_num(loc.max_abs)}{versus_fp32(loc.fp32_max_abs, loc)}"
        )
        if in_fp32(loc):
            evidence = f"non-finite in {_dtype(loc.output_dtype)} (FP32 itself), {evidence}"
    ranks = rank_phrase(loc)
    return f"{head}, {evidence}, {_seeds(loc.seeds)}" + (f" ({ranks})" if ranks else "")


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
