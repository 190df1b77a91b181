"""What ``ampsweep run`` and ``ampsweep report`` print: the answer first, then a table that fits.

The answer lines (``Recommendation.answer``) and the path of report.html come first, then the top of the
ranking in short cells (:mod:`analysis.wording._labels`); every line fits the terminal's width, else
:data:`PIPE_WIDTH` (docs/ranking.md, "What a person sees first"). Formatting only: nothing is read.
"""

from __future__ import annotations

import io
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from ampsweep.contracts import num, pct

from .._model import SweepAnalysis, top_rows
from ..wording._not_tried import not_tried_items

if TYPE_CHECKING:
    from rich.table import Table


#: Width when stdout is not a terminal (a log file, a pipe).
PIPE_WIDTH = 100
HEADERS = ("#", "configuration", "seeds", "clip", "to target", "final loss", "why here")


def terminal_width() -> int:
    """The terminal's width when stdout is a terminal, else :data:`PIPE_WIDTH`."""
    try:
        tty = sys.stdout.isatty()
    except (AttributeError, ValueError):
        tty = False
    return shutil.get_terminal_size((PIPE_WIDTH, 24)).columns if tty else PIPE_WIDTH


def _cells(row: dict[str, Any]) -> tuple[str, ...]:
    rank = str(row["rank"]) + (" =" if row.get("tied_with_above") else "")
    if row.get("broke_at"):
        # a broken row's losses before its NaN are not convergence: show where it broke instead
        to_target, final = str(row["broke_at"]), "-"
    else:
        steps = row["steps_to_target_median"]
        to_target = "never" if pd.isna(steps) else f"{steps:,.0f}"
        final = num(row["final_loss_median"])
    clip = "-" if pd.isna(row["clip"]) else pct(row["clip_rate_median"])
    return (rank, str(row["label"]), str(row["outcome_text"]), clip, to_target, final, str(row["reason"]))


def terminal_table(result: SweepAnalysis, top: int, report_path: str | Path | None = None) -> Table:
    """The first ``top`` ranked rows (per device kind) as a compact ``rich`` table.

    ``report_path`` is accepted for callers of the older table, whose title
    carried it; the link now opens the output (:func:`render_terminal`).
    """
    from rich import box
    from rich.table import Table

    frame = top_rows(result.ranking, top)
    total = len(result.ranking)
    table = Table(
        title=f"top {len(frame)} of {total} configurations",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for name in HEADERS:
        right = name in ("clip", "to target", "final loss")
        table.add_column(name, overflow="fold", justify="right" if right else "left")
    for row in frame.to_dict("records"):
        table.add_row(*_cells(row))
    return table


def answer_lines(result: SweepAnalysis) -> list[str]:
    """Each device kind's answer lines (``Recommendation.answer``), plain text (no backticks)."""
    many = len(result.kinds) > 1
    lines = []
    for kind in result.kinds:
        for i, line in enumerate(kind.recommendation.answer or (kind.recommendation.headline,)):
            prefix = f"On {kind.device_kind or 'unknown'}: " if many and i == 0 else ""
            lines.append(prefix + line.replace("`", ""))
    return lines or ["Nothing to recommend: no committed trial could be ranked."]


def render_terminal(
    result: SweepAnalysis,
    top: int = 8,
    report_path: str | Path | None = None,
    width: int | None = None,
    next_spec: str | Path | None = None,
) -> str:
    """The whole terminal output as text, every line at most ``width`` wide.

    ``report_path`` is report.md's path (what ``write_report`` returns); the
    output links report.html next to it. ``next_spec``: the next sweep's spec
    the report wrote (``report/next-spec.yaml``), given the command to run it.
    """
    from rich.console import Console
    from rich.text import Text

    width = terminal_width() if width is None else width
    console = Console(
        file=io.StringIO(),
        width=width,
        color_system=None,
        highlight=False,
        emoji=False,
        markup=False,
        legacy_windows=False,
    )
    for line in answer_lines(result):
        console.print(Text(line), overflow="fold")
    if report_path is not None:
        console.print(Text(f"Report: {Path(report_path).with_name('report.html')}"), overflow="fold")
    if next_spec is not None:  # REPORT_DIR is OUT/<name>/report: the next sweep goes beside this one
        following = Path(next_spec)
        out = shlex.quote(str(following.parent.parent.parent))
        console.print(
            Text(f"Next sweep: ampsweep run {shlex.quote(str(following))} --out {out}"), overflow="fold"
        )
    if not result.ranking.empty:
        console.print()
        console.print(terminal_table(result, top))
    for line in not_tried_items(result):  # never ranked: listed as what could not be tried
        console.print(Text(f"Could not be tried: {line}"), overflow="fold")
    out = console.file.getvalue()  # type: ignore[attr-defined]
    return "\n".join(line.rstrip() for line in out.splitlines()) + "\n"
