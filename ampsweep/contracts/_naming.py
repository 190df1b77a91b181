"""How a configuration is named: one style for every output.

The terminal, report.md, report.html, ranking.csv, recommendation.json and
``ampsweep plan`` all call a configuration by the words built here, so the
"O2 · FP32: CustomNorm · clip 5.0" a user reads in one place is the name they
find in every other. The style:

* parts joined by `` · ``, in the order a user chooses them: the AMP level
  (with the low-precision dtype when it is not float16, or when asked for),
  the classes kept in FP32 (``FP32: CustomNorm, ExpSoftmax``), the clip
  (``clip 5.0`` / ``no clip``), the loss scale (``loss scale dynamic``, left
  out when there is none), where the loss runs (``loss outside``) and the
  device kind (``on gpu``); the last two only when asked for (``spell``);
* **O0 is FP32.** Under O0 nothing is cast: the name is ``FP32``, with no
  black list, no dtype, no loss placement and no "no clip" (a clip is named
  when one was set); the planner counts the O0 trials that differ only in
  those as equivalent, so the ranking never shows two of them.

This module writes the parts; :meth:`Configuration.name
<ampsweep.contracts.Configuration.name>` joins them into the name a person
reads (only the optional parts that differ between the rows shown) and
:attr:`Configuration.id <ampsweep.contracts.Configuration.id>` spells every
part (the stable key, ``config_id`` in ranking.csv and recommendation.json).
A clip threshold is written by :func:`clip_value` only (``5.0``, ``off``), a
black list by :func:`black_list_value` only.

Plain values in, text out (no pandas), so every part can import it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from ._verdict import FP32_LEVEL

NAME_SEPARATOR = " · "
FP32_NAME = "FP32"
DEFAULT_DTYPE = "float16"
#: the parts a name spells only when asked: those that differ between the rows shown
OPTIONAL_PARTS = frozenset({"dtype", "loss_placement", "device_kind"})
_NO_LOSS_SCALE = ("", "none")


def missing(value: Any) -> bool:
    """None, NaN or pandas' NA: a clip that is off."""
    if value is None:
        return True
    try:
        return math.isnan(float(value))
    except TypeError:  # pd.NA
        return True


def _classes(black_list: Iterable[Any] | None) -> tuple[str, ...]:
    return () if black_list is None else tuple(str(c) for c in black_list)


def clip_value(clip: Any) -> str:
    """The threshold as the user typed it in the spec: '5.0', '0.25'; 'off' when there is none."""
    return "off" if missing(clip) else repr(float(clip))


def clip_name(clip: Any) -> str:
    """'clip 5.0', or 'no clip'."""
    return "no clip" if missing(clip) else f"clip {clip_value(clip)}"


def black_list_value(black_list: Iterable[Any] | None) -> str:
    """'CustomNorm, ExpSoftmax'; 'none' for an empty black list."""
    return ", ".join(_classes(black_list)) or "none"


def _scaled(loss_scale: Any) -> bool:
    return loss_scale is not None and str(loss_scale) not in _NO_LOSS_SCALE


def loss_scale_name(loss_scale: Any) -> str:
    """'loss scale dynamic', 'loss scale static:1024'; 'no loss scaling'."""
    return f"loss scale {loss_scale}" if _scaled(loss_scale) else "no loss scaling"


def loss_placement_name(loss_placement: Any) -> str:
    """'loss outside' / 'loss inside' (where the loss runs: outside or inside the cast)."""
    return f"loss {loss_placement}"


def level_name(amp_level: Any, dtype: Any = DEFAULT_DTYPE, *, spell_dtype: bool = False) -> str:
    """'FP32' for O0; 'O2'; 'O2 bfloat16' when the dtype is not float16 (or ``spell_dtype``)."""
    level = str(amp_level)
    if level == FP32_LEVEL:
        return FP32_NAME
    if spell_dtype or (dtype is not None and str(dtype) != DEFAULT_DTYPE):
        return f"{level} {dtype}"
    return level


def cast_name(
    amp_level: Any,
    black_list: Iterable[Any] | None = (),
    dtype: Any = DEFAULT_DTYPE,
    *,
    spell_dtype: bool = False,
) -> str:
    """What is cast and what stays in FP32: 'O2 · FP32: CustomNorm', 'O2', 'FP32'.

    Under O0 nothing is cast, so there is no black list to name: 'FP32'.
    """
    level = level_name(amp_level, dtype, spell_dtype=spell_dtype)
    classes = _classes(black_list)
    if not classes or str(amp_level) == FP32_LEVEL:
        return level
    return f"{level}{NAME_SEPARATOR}{FP32_NAME}: {', '.join(classes)}"
