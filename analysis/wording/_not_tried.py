"""What could not be tried: configurations whose black list could not be applied to the network.

Never run as asked, so neither a failure nor ranked: every output that lists the sweep's results names
them here, with the one-line reason, so the user learns that the list must change.
"""

from __future__ import annotations

from .._model import SweepAnalysis
from ..compute._configs import not_applicable
from ._blocks import Bullets, Paragraph, Section

#: the section's title, placed before the "Trials" section of the report
TITLE = "What could not be tried"
_BEFORE = "Trials"


def not_tried_items(a: SweepAnalysis) -> list[str]:
    """One line per configuration whose black list could not be applied: its name and why."""
    rows = not_applicable(a.scores)
    return [f"{r['name']}: {r['reason']} (trials {r['trial_ids']})" for r in rows.to_dict("records")]


def not_tried_section(a: SweepAnalysis) -> Section | None:
    """The report's "What could not be tried" section; None when every black list could be applied."""
    items = not_tried_items(a)
    if not items:
        return None
    lead = Paragraph(
        "These configurations' black lists could not be applied to the network, so they were never trained: "
        "they are not failures of mixed precision and are not ranked. Change the black list (for example, "
        "name a class that encloses the one listed) to try them."
    )
    return Section(TITLE, blocks=[lead, Bullets(tuple(items))])


def with_not_tried(sections: list[Section], a: SweepAnalysis) -> list[Section]:
    """``sections`` with :func:`not_tried_section` before the "Trials" section (at the end without one)."""
    extra = not_tried_section(a)
    if extra is None:
        return sections
    at = next((i for i, s in enumerate(sections) if s.title == _BEFORE), len(sections))
    return [*sections[:at], extra, *sections[at:]]
