"""What the user drives: the sweep file, the grid, the launcher, the store, the CLI."""

from __future__ import annotations

from ._errors import SpecError
from ._grid import count_graphs, equivalents, expand_grid
from ._launcher import SweepRun, run_sweep, start_ray
from ._spec import Grid, SweepSpec, parse_spec, read_spec
from ._store import SweepStore

__all__ = [
    "Grid",
    "SpecError",
    "SweepRun",
    "SweepSpec",
    "SweepStore",
    "count_graphs",
    "equivalents",
    "expand_grid",
    "parse_spec",
    "read_spec",
    "run_sweep",
    "start_ray",
]
