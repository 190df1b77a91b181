"""The figures' data, gathered by ``analyze``: the only reads report.html's figures need.

Only the trials a figure shows are opened (the top configurations, FP32, one diverged trial's
``layers/``), one configuration at a time, so the cost is the same on a sweep of any size. Curves longer
than ``MAX_POINTS`` are binned (mean for losses, max for gradient norms: a spike never disappears).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from ampsweep.contracts import Configuration, clip_name, dtype_name, pct

from .._model import (
    ClipLine,
    Curve,
    FailureFigureData,
    FigureData,
    GradNormFigureData,
    LayerFigureData,
    LayerSeries,
    LossFigureData,
)
from . import _classes as cls
from ._anomalies import overflow_limit
from ._evidence import fp32_row
from ._heatmap import divergence_grids
from ._load import files_by_trial, resolve
from ._steps import read_trial_tables

MAX_POINTS = 2000
#: Loss curves are smoothed over about 1/SMOOTH_DIVISOR of the run.
SMOOTH_DIVISOR = 60
#: Per-layer figure: at most this many layers get their own line.
MAX_LAYERS = 10
#: Failure figure: steps shown before the first non-finite step (at most), and after it.
FAILURE_BEFORE = 200
FAILURE_AFTER = 20


def _bin(steps: np.ndarray, values: np.ndarray, how: str) -> tuple[np.ndarray, np.ndarray]:
    """At most ``MAX_POINTS`` points: mean (or max) per bin of consecutive steps."""
    n = len(steps)
    if n <= MAX_POINTS:
        return steps, values
    size = math.ceil(n / MAX_POINTS)
    cut = (n // size) * size
    vals = values[:cut].reshape(-1, size)
    with np.errstate(all="ignore"), _quiet():
        reduced = np.nanmax(vals, axis=1) if how == "max" else np.nanmean(vals, axis=1)
    return steps[:cut].reshape(-1, size)[:, 0], reduced


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence numpy's all-NaN-slice warnings: a bin or step where every seed diverged is expected."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _seed_band(tables: list[pd.DataFrame], column: str) -> pd.DataFrame | None:
    """Median, min and max over seeds, per step (non-finite values left out)."""
    series = []
    for t in tables:
        if column not in t.columns or t.empty:
            continue
        values = t[column].astype("float64").where(np.isfinite(t[column].astype("float64")))
        series.append(pd.Series(values.to_numpy(), index=t["step"].to_numpy()))
    if not series:
        return None
    wide = pd.concat(series, axis=1)
    with _quiet():
        return pd.DataFrame(
            {"median": wide.median(axis=1), "min": wide.min(axis=1), "max": wide.max(axis=1)}
        ).sort_index()


def smoothing_window(n_steps: int) -> int:
    """Steps per moving-average window: minibatch noise hides the trend otherwise."""
    return max(1, round(n_steps / SMOOTH_DIVISOR))


def _smooth(band: pd.DataFrame) -> pd.DataFrame:
    """Centred moving average; a window with a non-finite value stays a gap, as divergence should."""
    window = smoothing_window(len(band))
    if window == 1:
        return band
    return band.rolling(window, center=True, min_periods=max(1, window // 2)).mean()


def _trials_of(row: pd.Series) -> list[str]:
    return str(row["trial_ids"]).split()


def _label(row: pd.Series) -> str:
    """'#1 O2 · FP32: CustomNorm · clip 1.0': the rank and the name every output uses."""
    return f"#{int(row['rank'])} {row['label']}"


def _clip_line(clip: float, rate: float) -> ClipLine:
    fires = f": fires on {pct(rate)} of steps" if np.isfinite(rate) else ""
    return ClipLine(clip, rate, f"{clip_name(clip)}{fires}")


def loss_data(sweep_dir: str | Path, ranking: pd.DataFrame) -> LossFigureData | None:
    """Loss of the top three configurations and of FP32: median over seeds, band = min-max."""
    stable = ranking[ranking["tier"] == cls.TIER_STABLE]
    mixed = ranking[ranking["amp_level"] != "O0"]
    top = (stable if len(stable) else mixed).head(3)
    fp32 = fp32_row(ranking, top.iloc[0] if len(top) else None)
    rows = [r for _, r in top.iterrows()] + ([fp32] if fp32 is not None else [])
    curves = []
    longest = 0
    for i, row in enumerate(rows):
        tables = read_trial_tables(sweep_dir, "steps", _trials_of(row), ("step", "loss"))
        longest = max([longest, *(len(t) for t in tables.values())])
        band = _seed_band([tables[t] for t in _trials_of(row) if t in tables], "loss")
        if band is None or band["median"].notna().sum() == 0:
            continue
        reference = fp32 is not None and i == len(rows) - 1
        band = _smooth(band)
        steps = band.index.to_numpy()
        x, med = _bin(steps, band["median"].to_numpy(), "mean")
        _, lo = _bin(steps, band["min"].to_numpy(), "mean")
        _, hi = _bin(steps, band["max"].to_numpy(), "mean")
        label = _label(row) + (" (FP32)" if reference else "")
        curves.append(Curve(label, i, x, med, lo, hi, reference=reference))
    if not curves:
        return None
    target = float(top.iloc[0]["target_median"]) if len(top) else float("nan")
    return LossFigureData(curves=tuple(curves), window=smoothing_window(longest), target=target)


def _family(ranking: pd.DataFrame, row: pd.Series) -> pd.DataFrame:
    """Rows that differ from ``row`` only in the clip threshold."""
    unclipped = replace(row["configuration"], clip=None)
    return ranking[[replace(c, clip=None) == unclipped for c in ranking["configuration"]]]


def grad_norm_data(sweep_dir: str | Path, ranking: pd.DataFrame) -> GradNormFigureData | None:
    """Pre-clip gradient norm of the recommended configuration (and its unclipped sibling), binned maxima."""
    mixed = ranking[ranking["amp_level"] != "O0"]
    rec = ranking[ranking["recommended"]]
    anchor = rec.iloc[0] if len(rec) else (mixed.iloc[0] if len(mixed) else None)
    if anchor is None:
        return None
    family = _family(ranking, anchor)
    rows = [anchor]
    unclipped = family[family["clip"].isna()]
    if pd.notna(anchor["clip"]) and len(unclipped):
        rows.append(unclipped.iloc[0])
    curves = []
    # the sibling first, so the recommended configuration's line is drawn on top
    for slot, row in reversed(list(enumerate(rows))):
        tables = read_trial_tables(sweep_dir, "steps", _trials_of(row), ("step", "grad_norm"))
        band = _seed_band([tables[t] for t in _trials_of(row) if t in tables], "grad_norm")
        if band is None:
            continue
        steps = band.index.to_numpy()
        med = band["median"].where(band["median"] > 0).to_numpy()
        x, y = _bin(steps, med, "max")
        if np.isfinite(y).any():
            curves.append(Curve(f"{_label(row)} (median over seeds)", slot, x, y))
    if not curves:
        return None
    thresholds = []
    for clip in sorted({float(c) for c in ranking["clip"].dropna()}):
        same = family[family["clip"] == clip]
        thresholds.append(
            _clip_line(clip, float(same.iloc[0]["clip_rate_median"]) if len(same) else math.nan)
        )
    return GradNormFigureData(curves=tuple(curves), thresholds=tuple(thresholds))


def _diverged_trial(ranking: pd.DataFrame, scores: pd.DataFrame, has_layers: set[str]) -> pd.Series | None:
    """A diverged trial with per-layer data, from the best-ranked unstable configuration that has one."""
    by_id = scores.set_index("trial_id")
    for _, row in ranking[ranking["tier"] == cls.TIER_UNSTABLE].iterrows():
        for tid in _trials_of(row):
            if tid in has_layers and tid in by_id.index and by_id.loc[tid, "outcome"] == "diverged":
                return by_id.loc[tid]
    return None


def layer_data(sweep_dir: str | Path, ranking: pd.DataFrame, scores: pd.DataFrame) -> LayerFigureData | None:
    """Per-layer gradient maxima (``grad_absmax`` from ``layers/``) of one diverged trial."""
    if not (ranking["tier"] == cls.TIER_UNSTABLE).any():
        return None  # no diverged trial to show: ``layers/`` is not even listed
    have = set(files_by_trial(resolve(sweep_dir), "layers"))
    trial = _diverged_trial(ranking, scores, have)
    if trial is None:
        return None
    tid = str(trial.name)
    tables = read_trial_tables(sweep_dir, "layers", [tid], ("step", "layer", "grad_absmax", "nonfinite"))
    frame = tables.get(tid)
    if frame is None or frame.empty or "grad_absmax" not in frame.columns:
        return None
    frame = frame.dropna(subset=["layer"])
    frame["grad_absmax"] = frame["grad_absmax"].astype("float64")
    bad = frame["nonfinite"].fillna(0).astype("int64") > 0 if "nonfinite" in frame.columns else None
    finite = frame[np.isfinite(frame["grad_absmax"])]
    peak = finite.groupby("layer")["grad_absmax"].max()
    first_bad: list[str] = []
    if bad is not None and bad.any():
        step0 = frame.loc[bad, "step"].min()
        first_bad = sorted(frame.loc[bad & (frame["step"] == step0), "layer"].astype(str).unique())
    chosen = list(dict.fromkeys(first_bad + list(peak.sort_values(ascending=False).index.astype(str))))
    layers = []
    for name in chosen[:MAX_LAYERS]:
        rows = frame[frame["layer"].astype(str) == name].sort_values("step")
        layers.append(LayerSeries(name, rows["step"].to_numpy(), rows["grad_absmax"].to_numpy()))
    values = finite["grad_absmax"].to_numpy()
    positive = values[values > 0]
    seed = trial["seed"]
    return LayerFigureData(
        trial_id=tid,
        seed=None if pd.isna(seed) else int(seed),
        dtype=str(trial["dtype"]),
        first_nonfinite=None if pd.isna(trial.get("first_nonfinite")) else float(trial["first_nonfinite"]),
        layers=tuple(layers),
        n_layers=len(peak),
        peak=float(values.max()) if len(values) else 1.0,
        positive_range=(float(positive.min()), float(positive.max())) if positive.size else None,
        label=Configuration.from_row(trial).trial_name(seed),
    )


def _top_broken(ranking: pd.DataFrame, scores: pd.DataFrame) -> tuple[pd.Series, pd.Series] | None:
    """The best-ranked configuration with a diverged trial, and that trial (lowest seed)."""
    by_id = scores.set_index("trial_id")
    for _, row in ranking[ranking["tier"] == cls.TIER_UNSTABLE].iterrows():
        ids = [t for t in _trials_of(row) if t in by_id.index]
        trials = by_id.loc[ids]
        trials = trials[(trials["outcome"] == "diverged") & trials["first_nonfinite"].notna()]
        if len(trials):
            return row, trials.sort_values("seed", kind="stable").iloc[0]
    return None


def _start(trial: pd.Series) -> int:
    value = trial.get("start_step")
    return 0 if value is None or pd.isna(value) else int(value)


def _fp32_twin(scores: pd.DataFrame, trial: pd.Series) -> str | None:
    """The FP32 reference trial of the same seed, device kind and start."""
    ref = scores[scores["reference"] & (scores["device_kind"] == trial["device_kind"])]
    same_seed = ref[ref["seed"] == trial["seed"]] if pd.notna(trial["seed"]) else ref.iloc[0:0]
    if "start_step" in ref.columns:
        same_seed = same_seed[same_seed["start_step"].fillna(0).astype(int) == _start(trial)]
    return str(same_seed.iloc[0]["trial_id"]) if len(same_seed) else None


def _cell_maxima(row: pd.Series) -> tuple[str, tuple[tuple[str, float], ...], tuple[str, float] | None]:
    """The localized Cell's name and its max |x| bars (policy, FP32, inputs, inner), from the replay."""
    locs = row.get("localizations") or []
    if not locs:
        return "", (), None
    loc = locs[0]
    dtype = dtype_name(loc.output_dtype) or "float16"
    bars = []
    for name, value in (
        (f"inputs ({dtype})", loc.input_max_abs),
        (f"`{loc.inner_op}` input ({dtype})" if loc.inner_op else "", loc.inner_max_abs),
        (f"output ({dtype}, finite part)", loc.max_abs),
        ("output (FP32)", loc.fp32_max_abs),
    ):
        if name and value is not None and np.isfinite(value):
            bars.append((name, float(value)))
    limit = overflow_limit(loc.inner_op, dtype) if loc.inner_op else None
    cell = f"{loc.cell} ({loc.cell_class})" if loc.cell_class else loc.cell
    return cell, tuple(bars), (limit[1], limit[0]) if limit else None


def failure_data(
    sweep_dir: str | Path, ranking: pd.DataFrame, scores: pd.DataFrame
) -> FailureFigureData | None:
    """Loss and gradient norm of the top broken configuration around its first NaN, with FP32's."""
    found = _top_broken(ranking, scores)
    if found is None:
        return None
    row, trial = found
    tid = str(trial.name)
    first = float(trial["first_nonfinite"])
    start = _start(trial)
    twin = _fp32_twin(scores, trial)
    ids = [tid] + ([twin] if twin else [])
    tables = read_trial_tables(sweep_dir, "steps", ids, ("step", "loss", "grad_norm"))
    if tid not in tables:
        return None
    low, high = max(start, first - FAILURE_BEFORE), first + FAILURE_AFTER

    def window(frame: pd.DataFrame | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if frame is None:
            empty = np.empty(0)
            return empty, empty, empty
        part = frame[(frame["step"] >= low) & (frame["step"] <= high)]
        return (
            part["step"].to_numpy(dtype="float64"),
            part["loss"].to_numpy(dtype="float64"),
            part["grad_norm"].to_numpy(dtype="float64"),
        )

    steps, loss, grad = window(tables[tid])
    f_steps, f_loss, f_grad = window(tables.get(twin) if twin else None)
    cell, maxima, limit = _cell_maxima(row)
    seed = trial["seed"]
    return FailureFigureData(
        trial_id=tid,
        label=str(row["label"]),
        seed=None if pd.isna(seed) else int(seed),
        first_nonfinite=first,
        start_step=start,
        steps=steps,
        loss=loss,
        grad_norm=grad,
        fp32_steps=f_steps,
        fp32_loss=f_loss,
        fp32_grad_norm=f_grad,
        cell=cell,
        maxima=maxima,
        inner_limit=limit,
    )


def figure_data(sweep_dir: str | Path, ranking: pd.DataFrame, scores: pd.DataFrame) -> FigureData:
    """Every figure's data that one device kind's ranking and files allow."""
    if ranking.empty:
        return FigureData()
    return FigureData(
        loss=loss_data(sweep_dir, ranking),
        grad_norm=grad_norm_data(sweep_dir, ranking),
        divergence=tuple(divergence_grids(ranking)),
        layers=layer_data(sweep_dir, ranking, scores),
        failure=failure_data(sweep_dir, ranking, scores),
    )
