"""The loss-scale value of a spec: ``none``, ``static:<value>``, ``dynamic[:<init>]``."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

LOSS_SCALE_ALLOWED = "allowed: none, static:<value>, dynamic or dynamic:<initial scale>"
_NUMBER = r"(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?"
_FORM = re.compile(rf"^(none|dynamic|dynamic:{_NUMBER}|static:{_NUMBER})$")
#: MindSpore's own default initial scale for dynamic loss scaling.
DEFAULT_DYNAMIC_SCALE = 2.0**16
#: Finite steps after which dynamic loss scaling doubles the scale again. MindSpore's
#: ``Model`` uses 2000; 50 lets a few-hundred-step trial show the scale recover, not
#: only fall. The trainer uses it and the report's code to paste repeats it.
DYNAMIC_SCALE_WINDOW = 50


@dataclass(frozen=True)
class LossScale:
    """``kind`` changes the compiled graph; ``value`` only its starting state."""

    kind: str  # none | static | dynamic
    value: float | None

    @property
    def initial(self) -> float:
        if self.kind == "dynamic":
            return self.value if self.value is not None else DEFAULT_DYNAMIC_SCALE
        return self.value if self.value is not None else 1.0


def parse_loss_scale(text: str) -> LossScale:
    """Parse a spec's value; ``ValueError`` names what is allowed."""
    text = str(text)
    if not _FORM.match(text):
        raise ValueError(f"loss_scale {text!r}: {LOSS_SCALE_ALLOWED}")
    kind, _, value = text.partition(":")
    number = float(value) if value else None
    if number is not None and not (math.isfinite(number) and number > 0):
        raise ValueError(f"loss_scale {text!r}: the scale must be a finite number > 0")
    return LossScale(kind, number)


#: The largest static scale the search proposes (2^24, float16's own dynamic range); the
#: loss times the scale must stay finite in float16 too.
MAX_STATIC_EXPONENT = 24


def static_scale_for(grad_absmax: float | None, headroom: float = 2.0) -> str:
    """A static loss scale ``static:2^k`` for gradients whose largest magnitude is ``grad_absmax``.

    The largest power of two that keeps ``grad_absmax * 2^k`` a factor
    ``headroom`` below float16's maximum (65504), so the small values rise into
    float16's range and the large ones do not overflow; between 2^1 and 2^24.
    Unknown magnitudes give MindSpore's default 2^16.
    """
    if grad_absmax is None or not math.isfinite(grad_absmax) or grad_absmax <= 0:
        exponent = 16
    else:
        exponent = math.floor(math.log2(65504.0 / (headroom * grad_absmax)))
    exponent = min(max(exponent, 1), MAX_STATIC_EXPONENT)
    return f"static:{2.0**exponent:.0f}"
