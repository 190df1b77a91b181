"""The files beside a sweep's tables: ``search.json``, ``profile.json``, ``horizon.json`` and ``spec.yaml``.

Read here, with every other read of the sweep folder, so that the wording
(:mod:`analysis.wording._search`, :mod:`analysis.wording._profile`) only lays
out what was read. Plain JSON: the analysis still imports neither MindSpore
nor Ray.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from ampsweep.contracts import (
    HORIZON_FILE,
    PROFILE_FILE,
    SEARCH_FILE,
    SPEC_FILE,
    HorizonLog,
    SearchLog,
    arg_text,
    decode_horizon,
    decode_search,
)

from ._load import resolve

T = TypeVar("T")


def _decoded(sweep_dir: str | Path, name: str, decode: Callable[[bytes], T]) -> T | None:
    """A side file of the sweep folder, decoded; None when it is missing or does not decode."""
    loc = resolve(sweep_dir)
    if not loc.exists(name):
        return None
    try:
        with loc.fs.open_input_stream(loc.join(name)) as stream:
            return decode(stream.read())
    except (ValueError, OSError, yaml.YAMLError):
        return None


def read_search(sweep_dir: str | Path) -> SearchLog | None:
    """The search log of a sweep folder, or None (a grid sweep, or an unreadable file)."""
    return _decoded(sweep_dir, SEARCH_FILE, decode_search)


def read_profile(sweep_dir: str | Path) -> dict[str, Any] | None:
    """The sweep's ``profile.json`` (the FP32 float16-headroom profile), or None (none written, or unreadable)."""
    found = _decoded(sweep_dir, PROFILE_FILE, json.loads)
    return found if isinstance(found, dict) and isinstance(found.get("cells"), list) else None


def read_horizon(sweep_dir: str | Path) -> HorizonLog | None:
    """The sweep's ``horizon.json`` (what was continued to the horizon), or None (none, or unreadable)."""
    return _decoded(sweep_dir, HORIZON_FILE, decode_horizon)


def read_spec_file(sweep_dir: str | Path) -> dict[str, Any] | None:
    """The resolved spec the sweep ran (``spec.yaml`` in its folder); None when there is none."""
    spec = _decoded(sweep_dir, SPEC_FILE, lambda raw: yaml.safe_load(raw.decode()))
    return spec if isinstance(spec, dict) else None


def swept_values(sweep_dir: str | Path) -> dict[str, list[str]]:
    """Each swept workload argument's values as texts, in the spec's order of preference (cheapest first);
    empty when the spec sweeps none or is not there."""
    spec = read_spec_file(sweep_dir) or {}
    axes = (spec.get("grid") or {}).get("workload_args") or {}
    if not isinstance(axes, dict):
        return {}
    return {
        str(name): [arg_text(v) for v in values] for name, values in axes.items() if isinstance(values, list)
    }
