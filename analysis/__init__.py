"""Offline analysis of an ampsweep sweep folder.

Reads only Parquet (through pyarrow), never MindSpore or Ray, so results can
be analysed on any laptop after ``ampsweep pull``. The pipeline is
``load_trials`` -> ``trial_scores`` -> ``config_scores`` -> ``rank_configs``
-> ``write_report``; ``analyze`` runs all of it once.
"""

from __future__ import annotations

from ._code import mindspore_snippet
from ._configs import CONFIG_KEYS, config_scores
from ._load import SweepInventory, inventory, load_trials
from ._rank import rank_configs
from ._report import SweepAnalysis, analyze, render_markdown, top_configs, write_report
from ._scores import Fp32Reference, fp32_reference, trial_scores
from ._steps import aggregate_steps, first_nonfinite_layers

__all__ = [
    "CONFIG_KEYS",
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
    "mindspore_snippet",
    "rank_configs",
    "render_markdown",
    "top_configs",
    "trial_scores",
    "write_report",
]
