"""The path an adaptive search took (``search.json``), as a report section.

The search itself runs in the driver; here its log is only read and laid
out: one table row per round, then what it concluded and whether the
confirmation on more seeds and more steps held.
"""

from __future__ import annotations

from pathlib import Path

from ampsweep.contracts import SEARCH_FILE, SearchFamily, SearchLog, decode_search

from ..compute._load import resolve
from ._blocks import Bullets, Paragraph, Section, Table

SEARCH_HEADERS = (
    "round",
    "phase",
    "black list (beyond the default)",
    "clip",
    "outcome per seed",
    "localized",
    "decision",
)


def read_search(sweep_dir: str | Path) -> SearchLog | None:
    """The search log of a sweep folder, or None (a grid sweep, or an unreadable file)."""
    loc = resolve(sweep_dir)
    if not loc.exists(SEARCH_FILE):
        return None
    try:
        with loc.fs.open_input_stream(loc.join(SEARCH_FILE)) as stream:
            return decode_search(stream.read())
    except (ValueError, OSError):
        return None


def _clip(value: float | None) -> str:
    return "off" if value is None else f"{value:g}"


def _family_table(family: SearchFamily) -> Table:
    rows = []
    for probe in family.rounds:
        outcomes = ", ".join(f"{seed}: {verdict}" for seed, verdict in probe.outcomes.items())
        rows.append(
            (
                str(probe.round),
                probe.phase,
                "[" + ", ".join(probe.black_list) + "]",
                _clip(probe.clip),
                outcomes,
                "; ".join(dict.fromkeys(str(cell) for cell in probe.localized)) or "-",
                probe.decision or "-",
            )
        )
    return Table(SEARCH_HEADERS, tuple(rows))


def search_section(log: SearchLog) -> Section:
    """'How the answer was found': the rounds, the minimal set, the confirmation, the cost."""
    section = Section("How the answer was found (search: adaptive)")
    for family in log.families:
        head = f"{family.amp_level}, {family.dtype}, loss scale {family.loss_scale}, loss {family.loss_placement}: "
        section.blocks.append(Paragraph(head + (family.conclusion or "not finished"), lead="Search"))
        section.blocks.append(_family_table(family))
        if family.confirmed is not None:
            verdict = "held" if family.confirmed else "did NOT hold"
            section.blocks.append(
                Paragraph(f"The recommendation {verdict}: {family.confirmation}.", lead="Confirmation")
            )
    facts = [
        f"trials run by the search: {log.trials_run} (in this folder; the confirmation is in `confirm/`)"
    ]
    if log.candidate_classes and log.grid_equivalent:
        facts.append(
            f"a grid over every subset of the workload's {len(log.candidate_classes)} Cell classes "
            f"({', '.join(log.candidate_classes)}) would take {log.grid_equivalent} trials"
        )
    section.blocks.append(Bullets(tuple(facts)))
    return section
