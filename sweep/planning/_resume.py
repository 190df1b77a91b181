"""Resuming and extending a sweep under the same name, and refusing to mix two sweeps in one folder:
a setting outside the grid applies to every trial, so changing it under the same name is refused."""

from __future__ import annotations

from typing import Any

import yaml

from ampsweep.contracts import SPEC_FILE

from .._errors import SpecError
from ..store._store import SweepStore

#: Settings every trial shares; the grid axes, ``devices`` and ``max_attempts`` may change.
FIXED_SETTINGS = ("workload", "workload_args", "steps", "abort_after", "layer_every")


def check_same_sweep(store: SweepStore, resolved_yaml: str) -> None:
    """Raise ``SpecError`` when the folder holds a sweep with other fixed settings."""
    text = store.read_text(SPEC_FILE)
    if not text:
        return
    try:
        before: Any = yaml.safe_load(text)
    except yaml.YAMLError:
        return  # not ours to judge; the plan is rewritten
    if not isinstance(before, dict):
        return
    now = yaml.safe_load(resolved_yaml)
    for name in FIXED_SETTINGS:
        if name in before and before[name] != now.get(name):
            raise SpecError(
                name,
                now.get(name),
                f"the sweep in {store.root} was run with {name} {before[name]!r}; only the grid axes "
                "(and devices, max_attempts) may change under the same name — give the sweep a new name",
            )
