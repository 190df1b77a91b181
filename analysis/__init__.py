"""Offline analysis of an ampsweep sweep folder.

Reads only Parquet (through pyarrow), never MindSpore or Ray, so results can
be analysed on any laptop after ``ampsweep pull``. The pipeline is
``load_trials`` -> ``trial_scores`` -> ``config_scores`` -> ``rank_configs``
(per device kind) -> ``kind_recommendation`` -> ``write_report`` (report.md,
report.html, recommendation.json, ranking.csv); ``analyze`` runs all but the
writing once.
"""

from __future__ import annotations

from ._code import mindspore_snippet, model_snippet, snippets, train_step_snippet
from ._configs import CONFIG_KEYS, config_scores
from ._evidence import kind_recommendation
from ._html import render_html
from ._load import SweepInventory, inventory, load_trials
from ._rank import rank_configs
from ._recommendation import SCHEMA as RECOMMENDATION_SCHEMA
from ._recommendation import recommendation_document, recommendation_json
from ._report import KindAnalysis, SweepAnalysis, analyze, render_markdown, top_configs, write_report
from ._scores import Fp32Reference, fp32_reference, trial_scores
from ._steps import aggregate_steps, first_nonfinite_layers

__all__ = [
    "CONFIG_KEYS",
    "RECOMMENDATION_SCHEMA",
    "KindAnalysis",
    "Fp32Reference",
    "SweepAnalysis",
    "SweepInventory",
    "aggregate_steps",
    "analyze",
    "config_scores",
    "first_nonfinite_layers",
    "fp32_reference",
    "inventory",
    "load_trials",
    "kind_recommendation",
    "mindspore_snippet",
    "model_snippet",
    "recommendation_document",
    "recommendation_json",
    "render_html",
    "rank_configs",
    "render_markdown",
    "snippets",
    "top_configs",
    "train_step_snippet",
    "trial_scores",
    "write_report",
]
