"""The divergence map: share of diverged or failed trials per AMP level x black list x clip.

Computed once from the ranking: report.md prints it as a table, report.html draws it as a heatmap. One
panel per (loss scale, dtype) when there are a few, so no cell averages settings a user chooses apart.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ampsweep.contracts import Configuration, clip_value, loss_scale_name

from .._model import DivergenceGrid
from . import _classes as cls

_LEVEL_ORDER = {lvl: i for i, lvl in enumerate(("O0", "O1", "O2", "O3"))}
MAX_PANELS = 6


def _swept(ranking: pd.DataFrame) -> list[tuple]:
    """Each row's swept workload arguments: a row of the map each, beside the level and black list."""
    if "workload_args" not in ranking.columns:
        return [()] * len(ranking)
    return [tuple(w) if isinstance(w, tuple) else () for w in ranking["workload_args"]]


def divergence_grids(ranking: pd.DataFrame) -> list[DivergenceGrid]:
    """The map's panels for one device kind's ranking (empty when there is nothing ranked)."""
    if ranking.empty:
        return []
    panels = sorted({(ls, dt) for ls, dt in zip(ranking["loss_scale"], ranking["dtype"])})
    if len(panels) > MAX_PANELS:
        panels = [("", "")]
    # a row per name: the O0 rows are one "FP32" row, whatever black list they carried
    names = [
        Configuration(a, b, workload_args=w).settings_name()
        for a, b, w in zip(ranking["amp_level"], ranking["black_list"], _swept(ranking))
    ]
    order: dict[str, tuple] = {}
    for name, a, b in zip(names, ranking["amp_level"], ranking["black_list"]):
        order[name] = min(order.get(name, (9,)), (_LEVEL_ORDER.get(a, 9), a, len(b), b))
    row_keys = sorted(order, key=order.__getitem__)
    row_of = dict(zip(ranking.index, names))
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
        for index, r in sub.iterrows():
            i = row_keys.index(row_of[index])
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
                title=f"{loss_scale_name(ls)}, {dt}" if ls or dt else "all loss scales and dtypes",
                rows=tuple(row_keys),
                columns=tuple(clip_value(None if math.isinf(c) else c) for c in clips),
                cells=cells,
                rates=rates,
            )
        )
    return out
