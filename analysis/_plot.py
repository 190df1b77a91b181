"""Matplotlib primitives shared by every figure: no pyplot, PNG in memory, safe text.

Matplotlib is used without pyplot (``matplotlib.figure.Figure`` renders with
Agg on its own), so drawing never changes the caller's backend or opens a
window. User-supplied names reach a figure only through :func:`plot_text`, so
a ``$`` cannot switch matplotlib into math mode.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 100


@dataclass(frozen=True)
class FigureImage:
    """One embedded figure: what it shows (caption, alt text) and the PNG."""

    key: str
    title: str
    caption: str
    png_base64: str


def plot_text(value: object) -> str:
    """Plain text for matplotlib: ``$`` would start math mode."""
    return str(value).replace("$", r"\$")


def new_figure(width: float = 9.0, height: float = 4.2) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def png(fig: Figure) -> str:
    """The figure as a 256-colour PNG, base64.

    Line plots and heat maps use a handful of colours plus their anti-aliased
    edges; a palette image of them looks the same and is about a third of the
    RGBA file matplotlib writes, which is most of a small sweep's bytes on disk.
    """
    from PIL import Image  # matplotlib's own dependency

    rgba = io.BytesIO()
    fig.savefig(rgba, format="png", dpi=DPI)
    rgba.seek(0)
    with Image.open(rgba) as image:
        palette = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    out = io.BytesIO()
    palette.save(out, format="png", optimize=True)
    return base64.b64encode(out.getvalue()).decode("ascii")
