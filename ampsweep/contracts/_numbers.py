"""How every part reads a number from a table or a spec, and writes one in a sentence."""

from __future__ import annotations

import math
from typing import Any


def number(value: Any) -> float | None:
    """``value`` as a float; None for None, NaN, pandas' NA and anything that is no number."""
    try:
        found = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(found) else found


def num(value: Any, unknown: str = "-") -> str:
    """'0.586', '6.55e4', '1.2e-5': three digits, no exponent padding; ``unknown`` where not finite."""
    found = number(value)
    if found is None or math.isinf(found):
        return unknown
    return f"{found:.3g}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")


def pct(rate: Any) -> str:
    """A share as a percentage, '12 %'; '<1 %' rather than a misleading '0 %'; '-' where unknown."""
    found = number(rate)
    if found is None or math.isinf(found):
        return "-"
    return "<1 %" if 0 < found < 0.01 else f"{found * 100:.0f} %"
