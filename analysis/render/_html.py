"""``report/report.html``: the sections of :mod:`analysis.wording._text` as one self-contained page.

A report is mailed and opened from object storage, where sibling files get lost: figures are PNG data
URIs, the style is inline, there is no script, and a Content-Security-Policy (``default-src 'none'``)
makes the browser refuse any fetch. Everything from the sweep goes through :func:`html.escape`, backticked
text included. Formatting only: the figures are drawn from ``KindAnalysis.figures``, no file is read.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any

from .._model import SweepAnalysis
from ..wording._blocks import Bullets, Code, Figure, Paragraph, Section, Table
from ..wording._not_tried import with_not_tried
from ..wording._text import PLACED_FIGURES, report_sections, title
from ._figures import kind_figures
from ._plot import FigureImage

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

_STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1300px;
       padding: 0 1.5em; color: #1d1d1f; overflow-wrap: anywhere; }
h1 { font-size: 1.6em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; padding-bottom: .2em; }
code, pre { font: 12.5px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
pre { background: #f6f8fa; border: 1px solid #e1e4e8; border-radius: 6px; padding: .8em 1em; overflow-x: auto;
      max-width: 100%; box-sizing: border-box; overflow-wrap: normal; }
p.verdict { font-size: 1.15em; padding: .6em .9em; border-left: 4px solid #2da44e; background: #f0fff4; }
p.verdict.none { border-color: #cf222e; background: #fff5f5; }
div.table { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; font-size: 12.5px; }
table.ranking { width: 100%; }
table th, table td { border: 1px solid #d0d7de; padding: 3px 6px; vertical-align: top; overflow-wrap: break-word; }
table th { background: #f6f8fa; }
table.ranking tr.recommended td { background: #e6ffec; }
table.ranking tr.baseline td { background: #f6f8fa; }
table.ranking td.rule { font-size: 11.5px; color: #444; min-width: 20em; overflow-wrap: anywhere; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
img, svg { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: 12.5px; }
"""


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _inline(text: object) -> str:
    """Escape, then show `backticked` spans as code (the escaped text only)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", _esc(text))


def _table(block: Table) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in block.headers)
    wide = len(block.headers) - 2 if block.role == "ranking" else len(block.headers)
    body = []
    for i, row in enumerate(block.rows):
        role = block.row_roles[i] if i < len(block.row_roles) else ""
        tds = "".join(
            f'<td class="rule">{_esc(c)}</td>' if j >= wide else f"<td>{_esc(c)}</td>"
            for j, c in enumerate(row)
        )
        body.append(f'<tr class="{role}">{tds}</tr>' if role else f"<tr>{tds}</tr>")
    cls = f' class="{block.role}"' if block.role else ""
    # the box scrolls sideways if a table is still too wide; the page itself never does
    return (
        f'<div class="table"><table{cls}>\n<thead><tr>{head}</tr></thead>\n<tbody>\n'
        + "\n".join(body)
        + "\n</tbody>\n</table></div>"
    )


def _figure(image: FigureImage) -> str:
    return (
        f'<figure id="{_esc(image.key)}">'
        f'<img class="plot" alt="{_esc(image.title)}" src="data:image/png;base64,{image.png_base64}">'
        f"<figcaption>{_esc(image.caption)}</figcaption></figure>"
    )


class _Renderer:
    """Formats blocks; draws each kind's figures once (from its data) and hands them out by key."""

    def __init__(self, a: SweepAnalysis, figures: bool, images: list[list[FigureImage]] | None) -> None:
        self._a = a
        self._figures = figures
        self._images: dict[int, list[FigureImage]] = dict(enumerate(images)) if images is not None else {}

    def _images_of(self, index: int) -> list[FigureImage]:
        if index not in self._images:
            data = self._a.kinds[index].figures
            self._images[index] = kind_figures(data, f"k{index}") if data is not None else []
        return self._images[index]

    def figure(self, block: Figure) -> str:
        if not self._figures or self._a.kinds[block.kind_index].figures is None:
            return self.block(block.fallback) if block.fallback is not None else ""
        images = self._images_of(block.kind_index)
        if block.keys:
            chosen = [i for i in images if i.key.startswith(block.keys)]
        else:
            chosen = [i for i in images if not i.key.startswith(PLACED_FIGURES)]
        if not chosen:
            return "<p>No step data to draw.</p>" if not block.keys else ""
        return "\n".join(_figure(i) for i in chosen)

    def block(self, block: object) -> str:
        handlers: dict[type, Callable[[Any], str]] = {
            Paragraph: self._paragraph,
            Bullets: self._bullets,
            Code: lambda b: (
                f'<h4>{_inline(b.title)}</h4>\n<pre><code class="language-python">{_esc(b.text)}</code></pre>'
            ),
            Table: _table,
            Figure: self.figure,
        }
        return handlers[type(block)](block)

    @staticmethod
    def _paragraph(block: Paragraph) -> str:
        cls = f' class="{block.role}"' if block.role else ""
        lead = f"<strong>{_inline(block.lead)}</strong> " if block.lead else ""
        return f"<p{cls}>{lead}{_inline(block.text)}</p>"

    @staticmethod
    def _bullets(block: Bullets) -> str:
        if not block.items:
            return ""
        tag = "ol" if block.ordered else "ul"
        return f"<{tag}>\n" + "\n".join(f"<li>{_inline(i)}</li>" for i in block.items) + f"\n</{tag}>"

    def section(self, section: Section) -> str:
        level = min(section.level, 6)
        parts = [f"<h{level}>{_esc(section.title)}</h{level}>"]
        parts += [self.block(b) for b in section.blocks]
        return "\n".join(p for p in parts if p)


def render_html(a: SweepAnalysis, figures: bool = True, images: list[list[FigureImage]] | None = None) -> str:
    """The whole page, formatted from ``a`` alone (no file is read).

    ``figures=False`` skips matplotlib (for quick text-only checks); so does an
    analysis made with ``analyze(..., figures=False)``, which holds no figure data.
    ``images``: the figures :func:`analysis.render._figures.report_figures` drew for
    ``a`` already (the writer's, for failure.png too); drawn here when None.
    """
    renderer = _Renderer(a, figures, images)
    body = [
        f"<h1>{_esc(title(a))}</h1>",
        *[renderer.section(s) for s in with_not_tried(report_sections(a), a)],
    ]
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_esc(title(a))}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )
