"""Offline analysis of an ampsweep sweep folder.

Reads only Parquet (through pyarrow), never MindSpore or Ray, so results can
be analysed on any laptop after ``ampsweep pull``. Compute, then text, then
renderers; one concept per private module, arrows one way::

    load -> scores -> configs -> rank (criteria) -> evidence -> figure data -> model
    model -> text (sections, once) -> markdown / html (+ figures) / json / csv / terminal -> writer

Every read happens in ``analyze``; the renderers receive the model and write
only their own output. The public surface::

    a = analyze("out/my-sweep")      # Analysis: ranking, one Recommendation per device kind
    a.report()                       # report.md, report.html, recommendation.json, ranking.csv
    a.terminal(top=5)                # the table the CLI prints (render_terminal: answer + table)

``write_report(path)`` does both steps at once; ``render_markdown`` and
``render_html`` return one file's text without writing it.
"""

from __future__ import annotations

from ._code import snippets
from ._criteria import CRITERIA, TIE_RULE
from ._csv import RANKING_COLUMNS, ranking_csv
from ._html import render_html
from ._load import load_trials
from ._markdown import render_markdown
from ._model import FigureData, Fp32Reference, KindAnalysis, Localization, Recommendation, SweepAnalysis
from ._public import Analysis, analyze, top_configs
from ._recommendation import SCHEMA as RECOMMENDATION_SCHEMA
from ._recommendation import recommendation_json
from ._scores import trial_scores, trial_verdicts
from ._terminal import render_terminal, terminal_table
from ._writer import write_report

__all__ = [
    "CRITERIA",
    "RANKING_COLUMNS",
    "RECOMMENDATION_SCHEMA",
    "TIE_RULE",
    "Analysis",
    "FigureData",
    "Fp32Reference",
    "KindAnalysis",
    "Localization",
    "Recommendation",
    "SweepAnalysis",
    "analyze",
    "load_trials",
    "ranking_csv",
    "recommendation_json",
    "render_html",
    "render_markdown",
    "render_terminal",
    "snippets",
    "terminal_table",
    "top_configs",
    "trial_scores",
    "trial_verdicts",
    "write_report",
]
