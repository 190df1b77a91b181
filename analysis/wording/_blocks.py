"""The plain blocks a report section is made of; renderers (Markdown, HTML) only format them.

Text is plain (unescaped); text between backticks is code in every renderer.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Paragraph:
    text: str
    lead: str = ""  # shown strong before the text
    role: str = ""  # "verdict" | "verdict none" | ""


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]
    ordered: bool = False


@dataclass(frozen=True)
class Code:
    title: str
    text: str


@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    row_roles: tuple[str, ...] = ()  # "recommended" | "baseline" | ""
    role: str = ""  # "ranking" | "divergence"


@dataclass(frozen=True)
class Figure:
    """A figure slot: report.html draws ``key`` of kind ``kind_index``; others show ``fallback``."""

    kind_index: int
    keys: tuple[str, ...]  # figure key prefixes, e.g. ("divergence",); () = the remaining ones
    caption: str = ""
    fallback: Table | Paragraph | None = None
    #: the figure's PNG beside report.md (the writer writes it); "" when Markdown shows only the fallback
    file: str = ""


Block = Paragraph | Bullets | Code | Table | Figure


@dataclass
class Section:
    title: str
    level: int = 2
    blocks: list[Block] = field(default_factory=list)
