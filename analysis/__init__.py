"""Offline analysis of an ampsweep sweep folder: Parquet in, the report out, never MindSpore or Ray.

Compute, then words, then renderers, arrows one way (tests/test_architecture.py checks them)::

    compute: load -> scores -> configs -> rank (criteria) -> evidence -> figure data -> model
    wording: model -> labels, answer, evidence, code, next sweep, sections (once)
    render:  model + words -> markdown / html (+ figures) / json / csv / terminal -> writer

``analyze(path)`` returns an :class:`Analysis` (every read happens there); ``.report()`` writes the
report folder and ``.terminal(top=5)`` is the table the CLI prints. Public names load on first use.
"""

# ruff: noqa: F401 (the imports for type checkers are the public names, listed once in _OWNERS)
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._model import (
        NEXT_SPEC_FILE,
        FigureData,
        Fp32Reference,
        KindAnalysis,
        Localization,
        Recommendation,
        SweepAnalysis,
    )
    from ._public import Analysis, analyze, top_configs
    from ._tensorboard import Exported, export_tensorboard
    from ._writer import write_report
    from .compute._criteria import CRITERIA, TIE_RULE
    from .compute._faults import read_faults, suspect_devices
    from .compute._load import load_trials
    from .compute._scores import trial_scores, trial_verdicts
    from .render._csv import RANKING_COLUMNS, ranking_csv
    from .render._html import render_html
    from .render._markdown import render_markdown
    from .render._recommendation import SCHEMA as RECOMMENDATION_SCHEMA
    from .render._recommendation import recommendation_json
    from .render._terminal import render_terminal, terminal_table
    from .wording._code import snippets

#: public name -> (the private module that owns it, its name there). Loaded on first use, so that
#: ``ampsweep plan`` and the driver's start do not pay for pandas and matplotlib.
_OWNERS: dict[str, tuple[str, str]] = {
    "snippets": (".wording._code", "snippets"),
    "CRITERIA": (".compute._criteria", "CRITERIA"),
    "TIE_RULE": (".compute._criteria", "TIE_RULE"),
    "RANKING_COLUMNS": (".render._csv", "RANKING_COLUMNS"),
    "ranking_csv": (".render._csv", "ranking_csv"),
    "render_html": (".render._html", "render_html"),
    "load_trials": (".compute._load", "load_trials"),
    "read_faults": (".compute._faults", "read_faults"),
    "suspect_devices": (".compute._faults", "suspect_devices"),
    "render_markdown": (".render._markdown", "render_markdown"),
    "NEXT_SPEC_FILE": ("._model", "NEXT_SPEC_FILE"),
    "FigureData": ("._model", "FigureData"),
    "Fp32Reference": ("._model", "Fp32Reference"),
    "KindAnalysis": ("._model", "KindAnalysis"),
    "Localization": ("._model", "Localization"),
    "Recommendation": ("._model", "Recommendation"),
    "SweepAnalysis": ("._model", "SweepAnalysis"),
    "Analysis": ("._public", "Analysis"),
    "analyze": ("._public", "analyze"),
    "top_configs": ("._public", "top_configs"),
    "RECOMMENDATION_SCHEMA": (".render._recommendation", "SCHEMA"),
    "recommendation_json": (".render._recommendation", "recommendation_json"),
    "trial_scores": (".compute._scores", "trial_scores"),
    "trial_verdicts": (".compute._scores", "trial_verdicts"),
    "render_terminal": (".render._terminal", "render_terminal"),
    "terminal_table": (".render._terminal", "terminal_table"),
    "write_report": ("._writer", "write_report"),
    "Exported": ("._tensorboard", "Exported"),
    "export_tensorboard": ("._tensorboard", "export_tensorboard"),
}


def __getattr__(name: str) -> Any:
    """A public name, imported from its owner the first time it is asked for."""
    if name not in _OWNERS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _OWNERS[name]
    value = getattr(importlib.import_module(module, __name__), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


__all__ = sorted(_OWNERS)
