"""Offline analysis of an ampsweep sweep folder.

Reads only Parquet (through pyarrow), never MindSpore or Ray, so results can
be analysed on any laptop after ``ampsweep pull``. One concept per private
module, arrows one way::

    load -> scores -> configs -> rank (criteria) -> evidence -> model
    model -> text (sections, once) -> markdown / html / json / csv / terminal -> writer

``analyze`` builds the model (:class:`SweepAnalysis`, with one
:class:`Recommendation` per device kind); ``write_report`` writes report.md,
report.html, recommendation.json and ranking.csv; ``terminal_table`` is what
the CLI prints.
"""

from __future__ import annotations

from ._analyze import analyze, speed_decides, top_configs
from ._anomalies import localization_phrase, read_anomalies
from ._code import mindspore_snippet, model_snippet, snippets, train_step_snippet
from ._configs import CONFIG_KEYS, config_scores
from ._criteria import CRITERIA, TIE_RULE, Criterion, RankContext, rules_text
from ._csv import RANKING_COLUMNS, ranking_csv
from ._evidence import kind_recommendation
from ._html import render_html
from ._load import SweepInventory, inventory, load_trials
from ._markdown import render_markdown
from ._model import Fp32Reference, KindAnalysis, Localization, Recommendation, SweepAnalysis
from ._rank import rank_configs
from ._recommendation import SCHEMA as RECOMMENDATION_SCHEMA
from ._recommendation import recommendation_document, recommendation_entry, recommendation_json
from ._scores import fp32_reference, trial_scores
from ._steps import aggregate_steps
from ._terminal import terminal_table
from ._text import report_sections
from ._writer import write_report

__all__ = [
    "CONFIG_KEYS",
    "CRITERIA",
    "RANKING_COLUMNS",
    "RECOMMENDATION_SCHEMA",
    "TIE_RULE",
    "Criterion",
    "Fp32Reference",
    "KindAnalysis",
    "Localization",
    "RankContext",
    "Recommendation",
    "SweepAnalysis",
    "SweepInventory",
    "aggregate_steps",
    "analyze",
    "config_scores",
    "fp32_reference",
    "inventory",
    "kind_recommendation",
    "load_trials",
    "localization_phrase",
    "mindspore_snippet",
    "model_snippet",
    "rank_configs",
    "ranking_csv",
    "read_anomalies",
    "recommendation_document",
    "recommendation_entry",
    "recommendation_json",
    "render_html",
    "render_markdown",
    "report_sections",
    "rules_text",
    "snippets",
    "speed_decides",
    "terminal_table",
    "top_configs",
    "train_step_snippet",
    "trial_scores",
    "write_report",
]
