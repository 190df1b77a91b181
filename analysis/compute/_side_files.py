"""The JSON files beside a sweep's tables: ``search.json``, ``profile.json`` and ``horizon.json``.

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

from ampsweep.contracts import (
    HORIZON_FILE,
    PROFILE_FILE,
    SEARCH_FILE,
    HorizonLog,
    SearchLog,
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
    except (ValueError, OSError):
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
