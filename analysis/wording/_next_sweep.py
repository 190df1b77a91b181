"""Why a sweep has no answer, and the sweep to run next (docs/remedies.md, "A grid with no answer").

Causes, in this order: ``fp32`` (FP32 itself broke: a clip that held, the Cell, the learning rate; clip
thresholds only when the grid never clipped), ``underflow`` (most mixed-precision trials are silent and
float16 lost most of their gradient values: loss scaling), ``overflow`` (a localized Cell: keep its class in
FP32 on top of every black list) and ``no_learning`` (an adaptive search over the same grid, localization
on). :func:`diagnose` returns a typed :class:`NextSweep`; the writer writes :func:`next_spec` as
``report/next-spec.yaml``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ampsweep.contracts import (
    FP32_LEVEL,
    UNDERFLOW_EVIDENCE,
    Outcome,
    ReferenceFormError,
    Verdict,
    locate_file,
    parse_reference,
    pct,
    static_scale_for,
)

from .._model import Fp32Break, Localization, NextSweep
from ..compute._learning_rate import LearningRate


def _mixed(scores: pd.DataFrame) -> pd.DataFrame:
    """Mixed-precision trials that ran: one whose black list could not be applied kept nothing in FP32."""
    ranked = scores["ranked"] if "ranked" in scores.columns else True
    ran = scores["outcome"] != Outcome.NOT_APPLICABLE.value
    return scores[(scores["amp_level"] != FP32_LEVEL) & ranked & ran]


def _refused(scores: pd.DataFrame, cell_class: str) -> str | None:
    """Why keeping ``cell_class`` in FP32 could not be applied, where a trial tried and could not; else None."""
    tried = scores[(scores["outcome"] == Outcome.NOT_APPLICABLE.value) & scores["error"].notna()]
    hits = [e for e, bl in zip(tried["error"], tried["black_list"]) if cell_class in tuple(bl)]
    return str(hits[0]).splitlines()[0] if hits else None


def _fp32_gradient_norm(scores: pd.DataFrame) -> float | None:
    ref = scores.loc[scores["reference"], "max_grad_norm"].astype("float64")
    ref = ref[np.isfinite(ref) & (ref > 0)]
    return float(ref.max()) if len(ref) else None


def _axis(scores: pd.DataFrame, name: str) -> list[Any]:
    values: list[Any] = []
    for value in scores[name]:
        value = list(value) if isinstance(value, (list, tuple, np.ndarray)) else value
        if value not in values:
            values.append(value)
    return values


def _fp32_breaks(scores: pd.DataFrame, broke: Fp32Break, learning_rate: LearningRate | None) -> NextSweep:
    """FP32 itself broke: the next sweep is about the FP32 run, never a black list or "keep FP32".
    Where the factory takes a learning rate, the next sweep tries lower ones."""
    following = _fp32_clip_or_code(scores, broke)
    if learning_rate is None:
        return following
    values = learning_rate.next_values()
    return replace(
        following,
        change=f"{following.change}; the next sweep tries {learning_rate.name} {values}",
        grid={**following.grid, "workload_args": {learning_rate.name: values}},
    )


def _fp32_clip_or_code(scores: pd.DataFrame, broke: Fp32Break) -> NextSweep:
    """The next step for an FP32 break without a learning-rate argument: clip thresholds, or the code."""
    cell = broke.localization
    where = (
        f"{cell.cell} ({cell.cell_class}) went non-finite first in FP32 ({cell.phase})"
        if cell is not None and cell.cell_class
        else "the Cell that broke in FP32 was not localized"
    )
    at = "" if broke.step is None else f" at step ~{broke.step:,.0f}"
    why = f"FP32 itself breaks{at} on {broke.n_broken}/{broke.n_seeds} seeds; {where}"
    fixes = fp32_fixes(broke)
    held_fp32 = [h for h in broke.held if h.amp_level == FP32_LEVEL]
    clips = [c for c in _axis(scores, "clip") if c is not None and not pd.isna(c)]
    if held_fp32 or clips:
        # clipping was tried: it held (the sweep already shows it) or it did not (the fix is in the code)
        return NextSweep("fp32", why, fixes, {})
    norm = scores.loc[scores["reference"], "median_grad_norm"].astype("float64")
    norm = norm[np.isfinite(norm) & (norm > 0)]
    grid: dict[str, list[Any]] = {}
    if len(norm):
        base = float(norm.median())
        grid["clip"] = [None, *sorted({float(f"{base * f:.2g}") for f in (1.0, 3.0)})]
    return NextSweep("fp32", why, fixes, grid)


def fp32_fixes(broke: Fp32Break) -> str:
    """The next step when FP32 breaks, in words: a clip that held first, then the Cell, then the learning rate."""
    cell = broke.localization
    change = f"change {cell.cell_class} (`{cell.cell}`)" if cell is not None and cell.cell_class else ""
    held = [h for h in broke.held if h.amp_level == FP32_LEVEL]
    if held:
        clip = f"clip in FP32 ({held[0].label} held)"
        rest = ", ".join(x for x in (change, "lower the learning rate") if x)
        return f"{clip}, or {rest}"
    steps = [x for x in ("lower the learning rate", "clip the gradients in FP32", change) if x]
    return ", ".join(steps[:-1]) + f" or {steps[-1]}"


def diagnose(
    scores: pd.DataFrame,
    cell: Localization | None,
    broke: Fp32Break | None = None,
    learning_rate: LearningRate | None = None,
) -> NextSweep:
    """The cause of a sweep without an answer, from its trials' verdicts, underflow and localization.

    ``broke``: FP32 itself went non-finite. That comes first: no mixed-precision
    remedy (a black list, loss scaling) fixes what already breaks in FP32;
    ``learning_rate`` (the factory's, :mod:`._learning_rate`) is then swept lower.
    """
    if broke is not None:
        return _fp32_breaks(scores, broke, learning_rate)
    mixed = _mixed(scores)
    silent = mixed[mixed["verdict"] == Verdict.SILENT.value]
    underflow = (
        silent["underflow"].astype("float64") if "underflow" in silent.columns else pd.Series([], dtype=float)
    )
    lost = underflow[underflow >= UNDERFLOW_EVIDENCE]
    if len(silent) and len(silent) * 2 > len(mixed) and len(lost) * 2 > len(silent):
        scales = [s for s in _axis(scores, "loss_scale") if s != "none"]
        for scale in ("dynamic", static_scale_for(_fp32_gradient_norm(scores))):
            if scale not in scales:
                scales.append(scale)
        return NextSweep(
            "underflow",
            f"gradients underflow float16: {len(silent)} of {len(mixed)} mixed-precision trials learn clearly "
            f"worse than FP32 with no NaN, and float16 lost a median {pct(float(lost.median()))} of their "
            "gradient values (zero or below 2^-24 where FP32 has them); no black list brings them back",
            f"add loss scaling: loss_scale {scales}",
            {"loss_scale": scales},
        )
    if cell is not None and cell.cell_class and _refused(scores, cell.cell_class) is not None:
        return NextSweep(
            "overflow",
            f"{cell.cell} ({cell.cell_class}) broke first ({cell.phase}), and keeping {cell.cell_class} in FP32 "
            f"could not be applied: {_refused(scores, cell.cell_class)}",
            f"keep a Cell that encloses {cell.cell} in FP32 instead, or make {cell.cell_class} accept "
            "`to_float(float32)`, then sweep again",
            {},
        )
    if cell is not None and cell.cell_class:
        lists = _axis(_mixed(scores), "black_list") or [[]]
        grown = [sorted(set(bl) | {cell.cell_class}) for bl in lists]
        added = [bl for bl in grown if bl not in [sorted(b) for b in lists]]
        what = "overflowed" if cell.kind == "nonfinite" else "departed from FP32"
        if not added:  # every black list of the grid, with the class added, was run already
            return NextSweep(
                "overflow",
                f"{cell.cell} ({cell.cell_class}) {what} first ({cell.phase}), and the grid already kept "
                f"{cell.cell_class} in FP32 with each of its other black lists without a stable result: under "
                "O2 and O3 MindSpore casts a black-listed Cell's output back to float16, so an output beyond "
                "float16's range still overflows where it leaves the Cell",
                f"change {cell.cell_class} so that its output fits float16 (for `exp`, stay in log space), "
                "then sweep again",
                {},
            )
        black_lists = [list(bl) for bl in lists] + added
        return NextSweep(
            "overflow",
            f"{cell.cell} ({cell.cell_class}) {what} first ({cell.phase}); the grid never kept "
            f"{cell.cell_class} in FP32 together with its other black lists",
            f"keep {cell.cell_class} in FP32: black_list {black_lists}",
            {"black_list": black_lists},
        )
    return NextSweep(
        "no_learning",
        "no mixed-precision trial learns like FP32 and neither underflow nor a localized Cell explains it",
        "search adaptively over the same grid, with localization on, so the search names what breaks",
        {},
        search="adaptive",
    )


def _absolute_workload(reference: Any, spec_dir: Path) -> Any:
    """A workload file named relative to the run's folder or the spec's, as the absolute path it meant."""
    try:
        parsed = parse_reference(str(reference))
    except ReferenceFormError:
        return reference
    found = locate_file(parsed, spec_dir) if parsed.is_file else None
    return reference if found is None else str(found)


def next_spec(spec: dict[str, Any], sweep: NextSweep, spec_dir: str | Path | None = None) -> dict[str, Any]:
    """The sweep's own (resolved) spec with the change applied, under a new name.

    Black lists written out are a grid's: an adaptive sweep's next spec tests
    them as ``search: grid`` (adaptive finds its black list itself and refuses
    one in the grid). With ``spec_dir`` (the folder of the spec the sweep ran
    from), a relative workload file becomes absolute: the next spec lives in
    ``report/``, where a relative path would name nothing.
    """
    out = dict(spec)
    if spec_dir is not None and "workload" in out:
        out["workload"] = _absolute_workload(out["workload"], Path(spec_dir))
    out["name"] = f"{spec.get('name', 'sweep')}-next"
    grid = dict(spec.get("grid") or {})
    out["grid"] = {**grid, **sweep.grid}
    if "workload_args" in sweep.grid:
        # a swept argument joins the grid's others and leaves the fixed ones (it may not be both)
        out["grid"]["workload_args"] = {**(grid.get("workload_args") or {}), **sweep.grid["workload_args"]}
        fixed = {
            k: v for k, v in (spec.get("workload_args") or {}).items() if k not in sweep.grid["workload_args"]
        }
        out["workload_args"] = fixed
    if sweep.search:
        out["search"] = sweep.search
        out["localize"] = True
    elif "black_list" in sweep.grid and out.get("search") == "adaptive":
        out["search"] = "grid"
    return out
