"""The public entry point: ``analyze(path) -> Analysis``, and the analysis writes its own report.

:class:`Analysis` is the model (:class:`~analysis._model.SweepAnalysis`, every
field the same) with the two things a user does with it next: write the report
folder, print the terminal table. It lives here, above the writer, because the
model itself imports nothing of the package (a renderer could otherwise be
imported back by the data it shows).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from ._analyze import analyze as _analyze
from ._model import SweepAnalysis, top_rows
from ._writer import write_report
from .render._terminal import terminal_table

if TYPE_CHECKING:
    from rich.table import Table


@dataclass
class Analysis(SweepAnalysis):
    """What :func:`analyze` returns: the ranked sweep, per device kind, and its report."""

    @classmethod
    def of(cls, model: SweepAnalysis) -> Analysis:
        """The same model as an :class:`Analysis` (fields shared, nothing copied)."""
        if isinstance(model, cls):
            return model
        return cls(**{f.name: getattr(model, f.name) for f in fields(model)})

    def report(self, out: str | Path | None = None) -> Path:
        """Write report.md, report.html, recommendation.json and ranking.csv; return report.md's path.
        ``out`` defaults to ``<sweep_dir>/report`` (pass one when the sweep folder is a URI or read-only)."""
        return write_report(self.sweep_dir, out, analysis=self)

    def terminal(self, top: int = 5, report_path: str | Path | None = None) -> Table:
        """The first ``top`` configurations per device kind as a ``rich`` table (what the CLI prints)."""
        return terminal_table(self, top, report_path)


def analyze(sweep_dir: str | Path, *, figures: bool = True) -> Analysis:
    """Load, score and rank a sweep folder (local path or ``pyarrow.fs`` URI), per device kind.

    ``figures=False`` skips reading the few trials the report's figures show,
    for callers that want only the ranking; report.html then has no figures.
    """
    return Analysis.of(_analyze(sweep_dir, figures=figures))


def top_configs(source: str | Path | SweepAnalysis | pd.DataFrame, n: int = 5) -> pd.DataFrame:
    """The first ``n`` ranked configurations (per device kind), with the columns a terminal table needs.

    ``source`` is an analysis, a ranking, or a sweep folder (ranked without figures).
    """
    if isinstance(source, SweepAnalysis):
        ranking = source.ranking
    elif isinstance(source, pd.DataFrame):
        ranking = source
    else:
        ranking = _analyze(source, figures=False).ranking
    return top_rows(ranking, n)
