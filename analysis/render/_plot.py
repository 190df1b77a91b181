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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from PIL import Image

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
    """The figure as a 256-colour PNG, base64: a palette image of a line plot looks the same and is about a
    third of matplotlib's RGBA file, which is most of a small sweep's bytes on disk.

    The pixels come from Agg's buffer after one ``draw`` (:func:`_drawn`): ``savefig`` draws a constrained
    layout twice and encodes an RGBA PNG only for it to be decoded again, and drawing is most of a report's
    time. A matplotlibrc whose ``savefig.*`` settings differ from the screen still goes through savefig.
    """
    from PIL import Image  # matplotlib's own dependency

    rgba = _drawn(fig)
    if rgba is None:
        encoded = io.BytesIO()
        fig.savefig(encoded, format="png", dpi=DPI)
        encoded.seek(0)
        rgba = Image.open(encoded)
    palette = rgba.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    out = io.BytesIO()
    palette.save(out, format="png", optimize=True)
    return base64.b64encode(out.getvalue()).decode("ascii")


#: the savefig settings under which ``savefig(dpi=DPI)`` renders exactly what Agg's ``draw`` does
_PLAIN_SAVEFIG = {
    "savefig.facecolor": "auto",
    "savefig.edgecolor": "auto",
    "savefig.transparent": False,
    "savefig.bbox": None,
}


def _drawn(fig: Figure) -> Image.Image | None:
    """The figure drawn once by Agg, as an RGBA image; None where savefig would draw it differently."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image

    params: Any = matplotlib.rcParams  # its stubs accept only literal keys
    if fig.dpi != DPI or any(params[k] != v for k, v in _PLAIN_SAVEFIG.items()):
        return None
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return Image.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
