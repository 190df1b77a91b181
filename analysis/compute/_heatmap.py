"""The divergence map: share of diverged or failed trials per AMP level x black list x clip.

Computed once as data (:func:`divergence_grids`, from the ranking alone), so
report.md prints it as a table and report.html draws it as a heatmap
(:func:`divergence_map`, data in, PNG out) from the same cells. One panel per
(loss scale, dtype) pair when there are a few, so no cell averages over
settings the user would choose separately.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from .._model import DivergenceGrid
from ..render._plot import FigureImage, new_figure, plot_text, png
from . import _classes as cls

__all__ = ["HEATMAP_CAPTION", "DivergenceGrid", "divergence_grids", "divergence_map"]

_LEVEL_ORDER = {lvl: i for i, lvl in enumerate(("O0", "O1", "O2", "O3"))}
MAX_PANELS = 6


def divergence_grids(ranking: pd.DataFrame) -> list[DivergenceGrid]:
    """The map's panels for one device kind's ranking (empty when there is nothing ranked)."""
    if ranking.empty:
        return []
    panels = sorted({(ls, dt) for ls, dt in zip(ranking["loss_scale"], ranking["dtype"])})
    if len(panels) > MAX_PANELS:
        panels = [("", "")]
    row_keys = sorted(
        {(a, b) for a, b in zip(ranking["amp_level"], ranking["black_list_key"])},
        key=lambda k: (_LEVEL_ORDER.get(k[0], 9), k[0], len(k[1]), k[1]),
    )
    clips = sorted({math.inf if pd.isna(c) else float(c) for c in ranking["clip"]})
    out = []
    for ls, dt in panels:
        sub = (
            ranking
            if not ls and not dt
            else ranking[(ranking["loss_scale"] == ls) & (ranking["dtype"] == dt)]
        )
        bad = np.zeros((len(row_keys), len(clips)))
        total = np.zeros_like(bad)
        silent = np.zeros(bad.shape, bool)
        for _, r in sub.iterrows():
            i = row_keys.index((r["amp_level"], r["black_list_key"]))
            j = clips.index(math.inf if pd.isna(r["clip"]) else float(r["clip"]))
            bad[i, j] += r["n_diverged"] + r["n_failed"]
            total[i, j] += r["n_trials"]
            silent[i, j] |= r["tier"] == cls.TIER_SILENT
        with np.errstate(invalid="ignore", divide="ignore"):
            rates = np.where(total > 0, bad / total, np.nan)
        cells = tuple(
            tuple(
                (f"{int(bad[i, j])}/{int(total[i, j])}" + ("*" if silent[i, j] else ""))
                if total[i, j]
                else "not run"
                for j in range(len(clips))
            )
            for i in range(len(row_keys))
        )
        out.append(
            DivergenceGrid(
                title=f"loss scale {ls}, {dt}" if ls or dt else "all loss scales and dtypes",
                rows=tuple(f"{a} {b}" for a, b in row_keys),
                columns=tuple("off" if math.isinf(c) else f"{c:g}" for c in clips),
                cells=cells,
                rates=rates,
            )
        )
    return out


HEATMAP_CAPTION = (
    "Share of trials that diverged or failed, per AMP level and black list (rows) and clip threshold "
    "(columns). * finite on every seed but learns clearly worse than FP32 (silent failure)."
)


def divergence_map(grids: Sequence[DivergenceGrid], key: str) -> FigureImage | None:
    """The grids as a heatmap figure."""
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
