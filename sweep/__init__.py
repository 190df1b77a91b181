"""What the user drives: the sweep file, the grid, the launcher, the store, the CLI over
``Sweep(spec).run(out)``."""

from __future__ import annotations

from ._api import Sweep
from ._config import FailurePolicy, RunConfig
from ._errors import SpecError
from ._result import SweepResult
from .cluster._ray_start import start_ray
from .planning._grid import count_graphs, equivalents, expand_grid
from .planning._plan import SweepPlan
from .planning._spec import Grid, SweepSpec, parse_spec, read_spec
from .store._store import SweepStore

__all__ = [
    "FailurePolicy",
    "Grid",
    "RunConfig",
    "SpecError",
    "Sweep",
    "SweepPlan",
    "SweepResult",
    "SweepSpec",
    "SweepStore",
    "count_graphs",
    "equivalents",
    "expand_grid",
    "parse_spec",
    "read_spec",
    "start_ray",
]
