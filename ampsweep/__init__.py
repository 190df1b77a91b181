"""ampsweep: sweep MindSpore mixed-precision settings on Ray and rank them.

Everything a user imports lives in this namespace::

    from ampsweep import Sweep, RunConfig, Workload

The parts are :mod:`ampsweep.sweep` (what the user drives), :mod:`ampsweep.jobs`
(what runs on a device), :mod:`ampsweep.analysis` (offline, Parquet only) and
:mod:`ampsweep.contracts` (what the three share). The public names below are
resolved on first use, so ``import ampsweep.analysis`` on a laptop never pulls
in MindSpore or Ray.
"""

from __future__ import annotations

import importlib
import os
from importlib import metadata as _metadata
from typing import TYPE_CHECKING, Any

# In a source checkout the parts sit beside this folder (``sweep/``, ``jobs/``,
# ``analysis/``, the design card's top level); installed, setuptools'
# ``package-dir`` puts them inside it. Searching the checkout's root too makes
# ``ampsweep.sweep`` resolve when the checkout itself is on ``sys.path`` (a
# ``ray job submit`` working_dir), where this folder shadows the installed one.
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.isfile(os.path.join(_CHECKOUT, "pyproject.toml")) and os.path.isfile(
    os.path.join(_CHECKOUT, "sweep", "_api.py")
):
    __path__.append(_CHECKOUT)

try:  # one owner of the version: pyproject.toml, as installed
    __version__ = _metadata.version("ampsweep")
except _metadata.PackageNotFoundError:  # a checkout on sys.path, never installed
    __version__ = "0+unknown"

#: public name -> the module that owns it
_PUBLIC: dict[str, str] = {
    "Sweep": "ampsweep.sweep",
    "SweepResult": "ampsweep.sweep",
    "SweepSpec": "ampsweep.sweep",
    "Grid": "ampsweep.sweep",
    "RunConfig": "ampsweep.sweep",
    "FailurePolicy": "ampsweep.sweep",
    "SpecError": "ampsweep.sweep",
    "SweepPlan": "ampsweep.sweep",
    "Workload": "ampsweep.jobs",
    "TrialConfig": "ampsweep.jobs",
    "Watch": "ampsweep.jobs.watch._watch",
    "Outcome": "ampsweep.contracts",
    "Verdict": "ampsweep.contracts",
    "trial_verdict": "ampsweep.contracts",
    "configuration_verdict": "ampsweep.contracts",
    "analyze": "ampsweep.analysis",
    "write_report": "ampsweep.analysis",
    "SweepAnalysis": "ampsweep.analysis",
    "Analysis": "ampsweep.analysis",
}

__all__ = [
    "Analysis",
    "FailurePolicy",
    "Grid",
    "Outcome",
    "RunConfig",
    "SpecError",
    "Sweep",
    "SweepAnalysis",
    "SweepPlan",
    "SweepResult",
    "SweepSpec",
    "TrialConfig",
    "Verdict",
    "Watch",
    "Workload",
    "analyze",
    "configuration_verdict",
    "trial_verdict",
    "write_report",
]

if TYPE_CHECKING:
    from ampsweep.analysis import Analysis, SweepAnalysis, analyze, write_report
    from ampsweep.contracts import Outcome, Verdict, configuration_verdict, trial_verdict
    from ampsweep.jobs import TrialConfig, Workload
    from ampsweep.jobs.watch._watch import Watch
    from ampsweep.sweep import (
        FailurePolicy,
        Grid,
        RunConfig,
        SpecError,
        Sweep,
        SweepPlan,
        SweepResult,
        SweepSpec,
    )


def __getattr__(name: str) -> Any:
    owner = _PUBLIC.get(name)
    if owner is None:
        raise AttributeError(f"module 'ampsweep' has no attribute {name!r}")
    value = getattr(importlib.import_module(owner), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
