"""Figures for report.html: :class:`~analysis._model.FigureData` in, PNG (base64) out.

Drawing only: ``analyze`` read, smoothed and binned the numbers (:mod:`analysis.compute._figure_data`), so
nothing here opens a file. PNG, not SVG: a loss curve of 100k steps is 100k SVG vertices but a few dozen kB
of PNG. Matplotlib without pyplot and names escaped: :mod:`analysis.render._plot`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ampsweep.contracts import FLOAT16_MAX, num

from .._model import (
    DivergenceGrid,
    FailureFigureData,
    FigureData,
    GradNormFigureData,
    LayerFigureData,
    LossFigureData,
    SweepAnalysis,
)
from ..wording._captions import HEATMAP_CAPTION
from ._plot import FigureImage, new_figure, plot_text, png

_LOSS_COLOURS = ("tab:blue", "tab:orange", "tab:green")
_GRAD_COLOURS = ("tab:blue", "tab:purple")
_CLIP_COLOURS = ("tab:red", "tab:orange", "tab:olive", "tab:brown", "tab:pink", "tab:cyan")


def _log_axis(ax: Any, values: list[np.ndarray]) -> None:
    """Log y axis with plain numbers; minor ticks labelled only when the range is under two decades."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    finite = np.concatenate([v[np.isfinite(v) & (v > 0)] for v in values]) if values else np.empty(0)
    narrow = finite.size and finite.max() / finite.min() < 100
    ax.yaxis.set_minor_formatter(plain if narrow else NullFormatter())


def loss_curves(data: LossFigureData | None, key: str) -> FigureImage | None:
    """Loss of the top configurations against FP32 (median over seeds, band = min-max)."""
    if data is None:
        return None
    fig = new_figure()
    ax = fig.add_subplot()
    upper = []
    lower = []
    for curve in data.curves:
        colour = "black" if curve.reference else _LOSS_COLOURS[curve.slot % len(_LOSS_COLOURS)]
        med = curve.median
        ls = "--" if curve.reference else "-"
        ax.plot(curve.steps, med, color=colour, lw=1.6, ls=ls, label=plot_text(curve.label))
        if not curve.reference and curve.low is not None and curve.high is not None:
            ax.fill_between(curve.steps, curve.low, curve.high, color=colour, alpha=0.15, lw=0)
        finite = med[np.isfinite(med)]
        if finite.size:
            upper.append(np.quantile(finite, 0.98))
            lower.append(finite.min())
    if not upper:
        return None
    if np.isfinite(data.target):
        ax.axhline(data.target, color="grey", ls=":", lw=1, label=f"target loss {num(data.target)}")
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
        f"with the range over seeds shaded, smoothed over {data.window} steps (centred moving average).",
        png_base64=png(fig),
    )


def grad_norms(data: GradNormFigureData | None, key: str) -> FigureImage | None:
    """Pre-clip gradient norm over steps, with every clip threshold tried drawn across it."""
    if data is None or not data.curves:
        return None
    fig = new_figure()
    ax = fig.add_subplot()
    for curve in data.curves:
        colour = _GRAD_COLOURS[curve.slot % len(_GRAD_COLOURS)]
        ax.plot(curve.steps, curve.median, color=colour, lw=1.0, alpha=0.85, label=plot_text(curve.label))
    for i, line in enumerate(data.thresholds):
        colour = _CLIP_COLOURS[i % len(_CLIP_COLOURS)]
        ax.axhline(line.clip, color=colour, ls="--", lw=1.2, label=plot_text(line.label))
    thresholds = np.asarray([line.clip for line in data.thresholds])
    _log_axis(ax, [*(c.median for c in data.curves), thresholds])
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


def _layer_caption(data: LayerFigureData, shown_bad: bool) -> str:
    more = data.n_layers - len(data.layers)
    return (
        "Largest absolute gradient per parameter at the sampled steps (every layer_every-th) of one diverged "
        "trial."
        + (" x marks a non-finite gradient." if shown_bad else "")
        + (
            f" The {len(data.layers)} parameters shown are those that went non-finite first and then the largest;"
            if more > 0
            else ""
        )
        + (f" {more} more are in layers/." if more > 0 else "")
    )


def layer_maxima(data: LayerFigureData | None, key: str) -> FigureImage | None:
    """Per-layer gradient maxima of one diverged trial, non-finite values marked with an x."""
    if data is None:
        return None
    fig = new_figure(height=4.6)
    ax = fig.add_subplot()
    float16 = data.dtype == "float16"
    marker_y = max(data.peak * 4, FLOAT16_MAX * 2 if float16 else data.peak * 4)
    shown_bad = False
    for layer in data.layers:
        vals = layer.absmax
        ok = np.isfinite(vals) & (vals > 0)
        line = ax.plot(layer.steps[ok], vals[ok], marker=".", ms=3, lw=1, label=plot_text(layer.name))[0]
        shown_bad = _nonfinite_marks(ax, layer.steps, vals, marker_y, line.get_color(), size=7) or shown_bad
    if float16:
        ax.axhline(FLOAT16_MAX, color="red", ls=":", lw=1, label="float16 max (65504)")
    if data.first_nonfinite is not None:
        first = data.first_nonfinite
        ax.axvline(first, color="black", ls="--", lw=1, label=f"first non-finite step ({int(first)})")
    _log_axis(ax, [np.asarray(data.positive_range if data.positive_range else (), dtype="float64")])
    ax.set_xlabel("step")
    ax.set_ylabel("max |gradient| per parameter")
    title = f"Per-layer gradient maxima of diverged trial {data.trial_id} ({data.label})"
    ax.set_title(plot_text(title), fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(alpha=0.3, which="both")
    return FigureImage(
        key=f"layers-{key}",
        title="Per-layer gradient maxima",
        caption=_layer_caption(data, shown_bad),
        png_base64=png(fig),
    )


def _nonfinite_marks(
    ax: Any, steps: np.ndarray, values: np.ndarray, y: float, colour: Any, size: int = 6
) -> bool:
    """An x at height ``y`` on every step whose value is not finite; whether there was one."""
    bad = ~np.isfinite(values)
    if bad.any():
        ax.plot(steps[bad], np.full(bad.sum(), y), ls="none", marker="x", ms=size, color=colour)
    return bool(bad.any())


def _finite_top(*arrays: np.ndarray) -> float:
    finite = np.concatenate([a[np.isfinite(a)] for a in arrays]) if arrays else np.empty(0)
    return float(finite.max()) if finite.size else 1.0


FAILURE_TITLE = "The failure"


def failure_figure(data: FailureFigureData | None, key: str) -> FigureImage | None:
    """Loss and gradient norm around the first non-finite step, FP32 from the same start, and the Cell's max |x|.

    Left: loss (top) and global gradient norm (bottom, log) on one shared
    x axis of global steps, the broken configuration against FP32 of the same
    seed and start; an x marks each non-finite value. Right: the localized
    Cell's largest |x| in the replay against float16's 65504 (and, when the
    replay saw what overflowed inside, that primitive's limit on its input).
    """
    if data is None or not len(data.steps):
        return None
    fig = new_figure(width=11.0, height=5.2)
    grid = fig.add_gridspec(2, 3)
    ax_loss = fig.add_subplot(grid[0, :2])
    ax_grad = fig.add_subplot(grid[1, :2], sharex=ax_loss)
    first = data.first_nonfinite
    name = plot_text(data.label)
    ax_loss.plot(data.steps, data.loss, color="tab:red", lw=1.3, label=name)
    if len(data.fp32_steps):
        ax_loss.plot(
            data.fp32_steps, data.fp32_loss, color="black", lw=1.1, ls="--", label="FP32, same start"
        )
    top = _finite_top(data.loss, data.fp32_loss)
    marked = _nonfinite_marks(ax_loss, data.steps, data.loss, top, "tab:red")
    grads = data.grad_norm.copy()
    grads[grads <= 0] = np.nan
    ax_grad.plot(data.steps, np.where(np.isfinite(grads), grads, np.nan), color="tab:red", lw=1.0)
    if len(data.fp32_steps):
        fp32_grads = np.where(data.fp32_grad_norm > 0, data.fp32_grad_norm, np.nan)
        ax_grad.plot(data.fp32_steps, fp32_grads, color="black", lw=0.9, ls="--")
    marked |= _nonfinite_marks(ax_grad, data.steps, data.grad_norm, _finite_top(grads) * 2, "tab:red")
    _log_axis(ax_grad, [grads, data.fp32_grad_norm])
    for ax in (ax_loss, ax_grad):
        ax.axvline(first, color="tab:red", ls=":", lw=1)
        ax.grid(alpha=0.3, which="both")
    ax_loss.set_ylabel("loss")
    ax_grad.set_ylabel("global gradient norm")
    ax_grad.set_xlabel("global step" if data.start_step else "step")
    seed = "" if data.seed is None else f", seed {data.seed}"
    ax_loss.set_title(f"First non-finite step {first:,.0f}{seed}", fontsize=10)
    ax_loss.legend(fontsize=8, loc="upper left")
    ax_cell = fig.add_subplot(grid[:, 2])
    if data.maxima:
        labels = [plot_text(n) for n, _ in data.maxima]
        values = [v for _, v in data.maxima]
        colours = ["grey" if "FP32" in n else "tab:red" for n, _ in data.maxima]
        ax_cell.barh(range(len(values)), values, color=colours)
        ax_cell.set_yticks(range(len(values)), labels, fontsize=8)
        ax_cell.axvline(FLOAT16_MAX, color="black", ls="--", lw=1.2, label="float16 max 65504")
        if data.inner_limit is not None:
            ax_cell.axvline(
                data.inner_limit[1], color="tab:orange", ls=":", lw=1.2, label=data.inner_limit[0]
            )
        ax_cell.set_xscale("log")
        # a zero (or non-finite) maximum has no place on a log axis: the left edge ignores it
        positive = [v for v in values if 0 < v < float("inf")]
        ax_cell.set_xlim(left=min(positive + [1.0]) / 2, right=FLOAT16_MAX * 4)
        ax_cell.legend(fontsize=7, loc="lower right")
        ax_cell.set_title(plot_text(f"max |x| in {data.cell}"), fontsize=9)
    else:
        ax_cell.axis("off")
        ax_cell.text(0.5, 0.5, "no localized Cell\n(no anomalies row)", ha="center", va="center", fontsize=9)
    start = f" (trials start at global step {data.start_step:,})" if data.start_step else ""
    return FigureImage(
        key=f"failure-{key}",
        title=FAILURE_TITLE,
        caption=(
            f"{data.label}, trial {data.trial_id}{seed}: loss and global gradient norm around its first non-finite "
            f"step ({first:,.0f}, dotted), with FP32 from the same start (dashed){start}"
            + ("; x marks a non-finite value" if marked else "")
            + (
                f". Right: the largest |x| of {data.cell} in the localization replay against float16's 65504."
                if data.maxima
                else "."
            )
        ),
        png_base64=png(fig),
    )


def divergence_map(grids: Sequence[DivergenceGrid], key: str) -> FigureImage | None:
    """The divergence map's grids (:func:`analysis.compute._heatmap.divergence_grids`) as a heatmap."""
    if not grids:
        return None
    n_rows = len(grids[0].rows)
    fig = new_figure(width=min(4.2 * len(grids) + 1.5, 16), height=max(2.2, 0.45 * n_rows + 1.6))
    axes = fig.subplots(1, len(grids), squeeze=False)[0]
    from matplotlib import colormaps

    cmap = colormaps["RdYlGn_r"].with_extremes(bad="#dddddd")
    image = None
    for ax, grid in zip(axes, grids):
        image = ax.imshow(np.ma.masked_invalid(grid.rates), cmap=cmap, vmin=0, vmax=1, aspect="auto")
        for i, row in enumerate(grid.cells):
            for j, text in enumerate(row):
                ax.text(j, i, text, ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(grid.columns)), list(grid.columns))
        ax.set_yticks(range(len(grid.rows)), [plot_text(r) for r in grid.rows], fontsize=8)
        ax.set_xlabel("clip threshold")
        ax.set_title(plot_text(grid.title), fontsize=9)
    if image is not None:
        fig.colorbar(image, ax=list(axes), label="diverged or failed / trials", shrink=0.9)
    fig.suptitle("Divergence by AMP level, black list and clip threshold", fontsize=11)
    return FigureImage(
        key=f"divergence-{key}", title="Divergence map", caption=HEATMAP_CAPTION, png_base64=png(fig)
    )


def kind_figures(data: FigureData, key: str) -> list[FigureImage]:
    """Every figure that one device kind's data allow, in report order."""
    drawings: list[tuple[Callable[..., FigureImage | None], Any]] = [
        (loss_curves, data.loss),
        (grad_norms, data.grad_norm),
        (divergence_map, data.divergence),
        (layer_maxima, data.layers),
        (failure_figure, data.failure),
    ]
    return [image for draw, shown in drawings if (image := draw(shown, key)) is not None]


def report_figures(a: SweepAnalysis) -> list[list[FigureImage]]:
    """Every device kind's figures (index = kind index), drawn once for report.html and ``failure.png``:
    drawing is most of a report's time."""
    return [kind_figures(k.figures, f"k{n}") if k.figures is not None else [] for n, k in enumerate(a.kinds)]
