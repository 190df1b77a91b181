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
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return base64.b64encode(buf.getvalue()).decode("ascii")
