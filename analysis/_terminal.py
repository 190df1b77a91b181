"""The terminal table ``ampsweep run`` and ``ampsweep report`` print, built from the model.

The CLI used to take the rule string apart; here every cell comes from the
ranking's own columns, the placement phrase included.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._analyze import top_configs
from ._model import SweepAnalysis

if TYPE_CHECKING:
    from rich.table import Table

HEADERS = ("#", "configuration", "seeds", "diverged", "clip rate", "steps to target", "final loss")


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

    frame = top_configs(result, top)
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
