"""``report/report.md``: the sections of :mod:`analysis.wording._text` as Markdown (formatting only)."""

from __future__ import annotations

from .._model import SweepAnalysis
from ..wording._blocks import Bullets, Code, Figure, Paragraph, Section, Table
from ..wording._not_tried import with_not_tried
from ..wording._text import report_sections, title


def _md(value: object) -> str:
    """Inline text on one line (a newline would end the list item or paragraph)."""
    return str(value).replace("\n", " ")


def _cell(value: object) -> str:
    """A table cell: a pipe would also end the cell."""
    return _md(value).replace("|", "\\|")


def _paragraph(block: Paragraph) -> list[str]:
    lead = f"**{_md(block.lead)}** " if block.lead else ""
    return [lead + _md(block.text), ""]


def _table(block: Table) -> list[str]:
    lines = ["| " + " | ".join(_cell(h) for h in block.headers) + " |", "|" + "---|" * len(block.headers)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in block.rows]
    return lines + [""]


def _block(block: object) -> list[str]:
    if isinstance(block, Paragraph):
        return _paragraph(block)
    if isinstance(block, Bullets):
        mark = (lambda i: f"{i}.") if block.ordered else (lambda i: "-")
        return [f"{mark(i)} {_md(item)}" for i, item in enumerate(block.items, start=1)] + [""]
    if isinstance(block, Code):
        return [f"**Code: {block.title}**", "", "```python", block.text, "```", ""]
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Figure):
        if block.file:
            return [f"![{_md(block.caption or block.file)}]({block.file})", "", _md(block.caption), ""]
        lines = _block(block.fallback) if block.fallback is not None else []
        return lines + ([_md(block.caption), ""] if block.caption and block.fallback is not None else [])
    raise TypeError(f"unknown block {block!r}")  # pragma: no cover


def _section(section: Section) -> list[str]:
    lines = [f"{'#' * section.level} {_md(section.title)}", ""]
    for block in section.blocks:
        lines += _block(block)
    return lines


def render_markdown(a: SweepAnalysis) -> str:
    """The report as Markdown: the answer first, then the evidence."""
    lines = [f"# {_md(title(a))}", ""]
    for section in with_not_tried(report_sections(a), a):
        lines += _section(section)
    return "\n".join(lines)
