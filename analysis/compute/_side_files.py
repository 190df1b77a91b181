"""The JSON files beside a sweep's tables: ``search.json``, ``profile.json`` and ``horizon.json``.

Read here, with every other read of the sweep folder, so that the wording
(:mod:`analysis.wording._search`, :mod:`analysis.wording._profile`) only lays
out what was read. Plain JSON: the analysis still imports neither MindSpore
nor Ray.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def read_search(sweep_dir: str | Path) -> SearchLog | None:
    """The search log of a sweep folder, or None (a grid sweep, or an unreadable file)."""
    loc = resolve(sweep_dir)
    if not loc.exists(SEARCH_FILE):
        return None
    try:
        with loc.fs.open_input_stream(loc.join(SEARCH_FILE)) as stream:
            return decode_search(stream.read())
    except (ValueError, OSError):
        return None


def read_profile(sweep_dir: str | Path) -> dict[str, Any] | None:
    """The sweep's ``profile.json`` (the FP32 float16-headroom profile), or None (none written, or unreadable)."""
    loc = resolve(sweep_dir)
    if not loc.exists(PROFILE_FILE):
        return None
    try:
        with loc.fs.open_input_stream(loc.join(PROFILE_FILE)) as stream:
            found = json.loads(stream.read())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and isinstance(found.get("cells"), list) else None


def read_horizon(sweep_dir: str | Path) -> HorizonLog | None:
    """The sweep's ``horizon.json`` (what was continued to the horizon), or None (none, or unreadable)."""
    loc = resolve(sweep_dir)
    if not loc.exists(HORIZON_FILE):
        return None
    try:
        with loc.fs.open_input_stream(loc.join(HORIZON_FILE)) as stream:
            return decode_horizon(stream.read())
    except (ValueError, OSError):
        return None
