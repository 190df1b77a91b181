"""Figures for report.html, rendered to PNG in memory and embedded as base64.

Why PNG and not SVG: a loss curve of 100k steps is 100k path vertices in SVG
(megabytes, slow to open) but a few dozen kB as PNG. Curves longer than
``MAX_POINTS`` are binned first (mean for losses, max for gradient norms, so
a spike never disappears in the binning).

Matplotlib is used without pyplot (``matplotlib.figure.Figure`` renders with
Agg on its own), so importing or running the analysis never changes the
caller's backend or opens a window, and it works with no display.

User-supplied names (layers, black-list classes) reach the figures only as
text with ``$`` escaped, so a name cannot switch matplotlib into math mode.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from . import _classes as cls
from ._evidence import fp32_row
from ._heatmap import divergence_map
from ._plot import FigureImage, new_figure, plot_text, png
from ._steps import read_trial_tables

MAX_POINTS = 2000
#: Loss curves are smoothed over about 1/SMOOTH_DIVISOR of the run.
SMOOTH_DIVISOR = 60
#: Per-layer figure: at most this many layers get their own line.
MAX_LAYERS = 10
FLOAT16_MAX = 65504.0


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


def _log_axis(ax: Any, values: list[np.ndarray]) -> None:
    """Log y axis with plain numbers; minor ticks labelled only when the range is under two decades."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    finite = np.concatenate([v[np.isfinite(v) & (v > 0)] for v in values]) if values else np.empty(0)
    narrow = finite.size and finite.max() / finite.min() < 100
    ax.yaxis.set_minor_formatter(plain if narrow else NullFormatter())


def _trials_of(row: pd.Series) -> list[str]:
    return str(row["trial_ids"]).split()


def loss_curves(sweep_dir: str | Path, ranking: pd.DataFrame, key: str) -> FigureImage | None:
    """Loss of the top configurations against FP32 (median over seeds, band = min-max)."""
    stable = ranking[ranking["tier"] == cls.TIER_STABLE]
    mixed = ranking[ranking["amp_level"] != "O0"]
    top = (stable if len(stable) else mixed).head(3)
    fp32 = fp32_row(ranking, top.iloc[0] if len(top) else None)
    rows = [r for _, r in top.iterrows()] + ([fp32] if fp32 is not None else [])
    ids = [t for r in rows for t in _trials_of(r)]
    tables = read_trial_tables(sweep_dir, "steps", ids, ("step", "loss"))
    if not tables:
        return None
    fig = new_figure()
    ax = fig.add_subplot()
    colours = ["tab:blue", "tab:orange", "tab:green"]
    upper = []
    lower = []
    for i, row in enumerate(rows):
        band = _seed_band([tables[t] for t in _trials_of(row) if t in tables], "loss")
        if band is None or band["median"].notna().sum() == 0:
            continue
        is_fp32 = fp32 is not None and i == len(rows) - 1
        label = f"#{int(row['rank'])} {row['config_id']}" + (" (FP32)" if is_fp32 else "")
        colour = "black" if is_fp32 else colours[i % len(colours)]
        band = _smooth(band)
        steps = band.index.to_numpy()
        x, med = _bin(steps, band["median"].to_numpy(), "mean")
        _, lo = _bin(steps, band["min"].to_numpy(), "mean")
        _, hi = _bin(steps, band["max"].to_numpy(), "mean")
        ax.plot(x, med, color=colour, lw=1.6, ls="--" if is_fp32 else "-", label=plot_text(label))
        if not is_fp32:
            ax.fill_between(x, lo, hi, color=colour, alpha=0.15, lw=0)
        finite = med[np.isfinite(med)]
        if finite.size:
            upper.append(np.quantile(finite, 0.98))
            lower.append(finite.min())
    if not upper:
        return None
    window = smoothing_window(max(len(t) for t in tables.values()))
    target = float(top.iloc[0]["target_median"]) if len(top) else float("nan")
    if np.isfinite(target):
        ax.axhline(target, color="grey", ls=":", lw=1, label=f"target loss {target:.3g}")
    span = max(upper) - min(lower)
    ax.set_ylim(min(lower) - 0.05 * span, max(upper) + 0.15 * span)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("Loss: top configurations against FP32 (median over seeds; band: min-max)")
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(alpha=0.3)
    return FigureImage(
        key=f"loss-{key}",
        title="Loss curves",
        caption="Loss of the best-ranked configurations against the FP32 baseline (dashed), median over seeds "
        f"with the range over seeds shaded, smoothed over {window} steps (centred moving average).",
        png_base64=png(fig),
    )


def _family(ranking: pd.DataFrame, row: pd.Series) -> pd.DataFrame:
    """Rows that differ from ``row`` only in the clip threshold."""
    mask = np.ones(len(ranking), bool)
    for k in ("amp_level", "black_list_key", "loss_scale", "dtype", "device_kind"):
        mask &= (ranking[k] == row[k]).to_numpy()
    return ranking[mask]


def grad_norms(sweep_dir: str | Path, ranking: pd.DataFrame, key: str) -> FigureImage | None:
    """Pre-clip gradient norm over steps, with every clip threshold tried drawn across it."""
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
    ids = [t for r in rows for t in _trials_of(r)]
    tables = read_trial_tables(sweep_dir, "steps", ids, ("step", "grad_norm"))
    if not tables:
        return None
    fig = new_figure()
    ax = fig.add_subplot()
    drawn: list[np.ndarray] = []
    # the sibling first, so the recommended configuration's line is drawn on top
    for colour, row in reversed(list(zip(("tab:blue", "tab:purple"), rows))):
        band = _seed_band([tables[t] for t in _trials_of(row) if t in tables], "grad_norm")
        if band is None:
            continue
        steps = band.index.to_numpy()
        med = band["median"].where(band["median"] > 0).to_numpy()
        x, y = _bin(steps, med, "max")
        if np.isfinite(y).any():
            label = f"#{int(row['rank'])} {row['config_id']} (median over seeds)"
            ax.plot(x, y, color=colour, lw=1.0, alpha=0.85, label=plot_text(label))
            drawn.append(y)
    if not drawn:
        return None
    thresholds = sorted({float(c) for c in ranking["clip"].dropna()})
    colours = ["tab:red", "tab:orange", "tab:olive", "tab:brown", "tab:pink", "tab:cyan"]
    for i, clip in enumerate(thresholds):
        same = family[family["clip"] == clip]
        rate = same.iloc[0]["clip_rate_median"] if len(same) else float("nan")
        note = f"clip {clip:g}" + (f": fires on {cls.pct(rate)} of steps" if np.isfinite(rate) else "")
        ax.axhline(clip, color=colours[i % len(colours)], ls="--", lw=1.2, label=note)
    _log_axis(ax, [*drawn, np.asarray(thresholds)])
    ax.set_xlabel("step")
    ax.set_ylabel("global gradient norm (before clipping)")
    ax.set_title("Gradient norm and the clip thresholds tried")
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(alpha=0.3, which="both")
    return FigureImage(
        key=f"gradnorm-{key}",
        title="Gradient norm",
        caption="Global gradient norm before clipping (binned maxima on long runs) with each clip threshold of "
        "the sweep; the rate is how often that threshold fired for this AMP level and black list.",
        png_base64=png(fig),
    )


def _diverged_trial(ranking: pd.DataFrame, scores: pd.DataFrame, has_layers: set[str]) -> pd.Series | None:
    """A diverged trial with per-layer data, from the best-ranked unstable configuration that has one."""
    by_id = scores.set_index("trial_id")
    for _, row in ranking[ranking["tier"] == cls.TIER_UNSTABLE].iterrows():
        for tid in _trials_of(row):
            if tid in has_layers and tid in by_id.index and by_id.loc[tid, "outcome"] == "diverged":
                return by_id.loc[tid]
    return None


def layer_maxima(
    sweep_dir: str | Path, ranking: pd.DataFrame, scores: pd.DataFrame, key: str
) -> FigureImage | None:
    """Per-layer gradient maxima (``grad_absmax`` from ``layers/``) of one diverged trial."""
    from ._load import files_by_trial, resolve

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
    chosen = chosen[:MAX_LAYERS]
    fig = new_figure(height=4.6)
    ax = fig.add_subplot()
    top = float(finite["grad_absmax"].max()) if len(finite) else 1.0
    marker_y = max(top * 4, FLOAT16_MAX * 2 if trial["dtype"] == "float16" else top * 4)
    shown_bad = False
    for name in chosen:
        rows = frame[frame["layer"].astype(str) == name].sort_values("step")
        vals = rows["grad_absmax"].to_numpy()
        ok = np.isfinite(vals) & (vals > 0)
        line = ax.plot(rows["step"].to_numpy()[ok], vals[ok], marker=".", ms=3, lw=1, label=plot_text(name))[
            0
        ]
        if (~np.isfinite(vals)).any():
            ax.plot(
                rows["step"].to_numpy()[~np.isfinite(vals)],
                np.full((~np.isfinite(vals)).sum(), marker_y),
                ls="none",
                marker="x",
                ms=7,
                color=line.get_color(),
            )
            shown_bad = True
    if trial["dtype"] == "float16":
        ax.axhline(FLOAT16_MAX, color="red", ls=":", lw=1, label="float16 max (65504)")
    first = trial.get("first_nonfinite")
    if first is not None and pd.notna(first):
        ax.axvline(float(first), color="black", ls="--", lw=1, label=f"first non-finite step ({int(first)})")
    _log_axis(ax, [finite["grad_absmax"].to_numpy()])
    ax.set_xlabel("step")
    ax.set_ylabel("max |gradient| per parameter")
    clip = "off" if pd.isna(trial["clip"]) else f"{float(trial['clip']):g}"
    title = (
        f"Per-layer gradient maxima of diverged trial {tid} "
        f"({trial['amp_level']} bl={trial['black_list_key']} clip={clip}, seed {trial['seed']})"
    )
    ax.set_title(plot_text(title), fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(alpha=0.3, which="both")
    more = len(peak) - len(chosen)
    caption = (
        "Largest absolute gradient per parameter at the sampled steps (every layer_every-th) of one diverged "
        "trial."
        + (" x marks a non-finite gradient." if shown_bad else "")
        + (
            f" The {len(chosen)} parameters shown are those that went non-finite first and then the largest;"
            if more > 0
            else ""
        )
        + (f" {more} more are in layers/." if more > 0 else "")
    )
    return FigureImage(
        key=f"layers-{key}", title="Per-layer gradient maxima", caption=caption, png_base64=png(fig)
    )


def kind_figures(
    sweep_dir: str | Path, ranking: pd.DataFrame, scores: pd.DataFrame, key: str
) -> list[FigureImage]:
    """Every figure that the data of one device kind allow, in report order."""
    if ranking.empty:
        return []
    makers: list[Any] = [
        lambda: loss_curves(sweep_dir, ranking, key),
        lambda: grad_norms(sweep_dir, ranking, key),
        lambda: divergence_map(ranking, key),
        lambda: layer_maxima(sweep_dir, ranking, scores, key),
    ]
    out = []
    for make in makers:
        image = make()
        if image is not None:
            out.append(image)
    return out
