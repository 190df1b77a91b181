"""The terminal table ``ampsweep run`` and ``ampsweep report`` print, built from the model.

The CLI used to take the rule string apart; here every cell comes from the
ranking's own columns, the placement phrase included. Formatting only: the
rows come from the analysis in hand, nothing is read.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from ._configs import CONFIG_KEYS
from ._model import SweepAnalysis

if TYPE_CHECKING:
    from rich.table import Table

#: What :func:`top_rows` keeps: enough to choose, the rest is in the CSV.
TOP_COLUMNS = (
    "rank",
    "stability",
    *CONFIG_KEYS,
    "n_seeds",
    "divergence_rate",
    "clip_rate_median",
    "steps_to_target_median",
    "final_loss_median",
    "speed_vs_fp32_median",
    "phrase",
    "tied_with_above",
    "rule",
)
HEADERS = ("#", "configuration", "seeds", "diverged", "clip rate", "steps to target", "final loss")


def top_rows(ranking: pd.DataFrame, n: int = 5) -> pd.DataFrame:
    """The first ``n`` ranked configurations (per device kind), with the columns a terminal table needs."""
    columns = [c for c in TOP_COLUMNS if c in ranking.columns]
    if "device_kind" in ranking.columns and ranking["device_kind"].nunique() > 1:
        # each device kind is ranked on its own: its first n rows, kind after kind
        ranking = ranking.groupby("device_kind", sort=False).head(n)
    else:
        ranking = ranking.head(n)
    return ranking.loc[:, columns].reset_index(drop=True)


def _fmt(value: Any, pattern: str) -> str:
    try:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "-"
        return pattern.format(value)
    except (TypeError, ValueError):
        return str(value)


def _configuration(row: dict[str, Any], several_kinds: bool) -> str:
    clip = row["clip"]
    parts = [
        str(row["amp_level"]),
        f"FP32: {row['black_list_key']}" if row["black_list_key"] != "[]" else "default black list",
        "no clip" if clip is None or clip != clip else f"clip {clip:g}",
    ]
    if row["loss_scale"] != "none":
        parts.append(f"loss scale {row['loss_scale']}")
    parts.append(str(row["dtype"]))
    if row.get("loss_placement", "inside") != "inside":
        parts.append(f"loss {row['loss_placement']}")
    if several_kinds:
        parts.append(f"on {row['device_kind']}")
    return " · ".join(parts)


def terminal_table(result: SweepAnalysis, top: int, report_path: str | Path | None = None) -> Table:
    """The first ``top`` ranked rows (per device kind) as a ``rich`` table.

    The last column is the row's placement: ranked first, tied with the row
    above and on what, or the criterion that put it below.
    """
    from rich.table import Table

    frame = top_rows(result.ranking, top)
    where = f" (full report: {report_path})" if report_path is not None else ""
    table = Table(title=f"top {len(frame)} configurations{where}", show_lines=True)
    for name in HEADERS:
        table.add_column(name, overflow="fold")
    table.add_column("vs the row above", overflow="fold", max_width=70)
    several = "device_kind" in frame.columns and frame["device_kind"].nunique() > 1
    for row in frame.to_dict("records"):
        rank = str(row["rank"]) + (" (=)" if row.get("tied_with_above") else "")
        table.add_row(
            rank,
            _configuration(row, several),
            str(row["n_seeds"]),
            _fmt(row["divergence_rate"], "{:.0%}"),
            _fmt(row["clip_rate_median"], "{:.0%}"),
            _fmt(row["steps_to_target_median"], "{:.0f}"),
            _fmt(row["final_loss_median"], "{:.3f}"),
            str(row.get("phrase", "")),
        )
    return table
