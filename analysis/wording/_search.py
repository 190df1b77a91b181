"""The path an adaptive search took (``search.json``), as a report section.

The search itself runs in the driver, and its log is read with the rest of
the sweep (:func:`analysis.compute._side_files.read_search`); here it is only
laid out: one table row per round, then what it concluded and whether the
confirmation on more seeds and more steps held.
"""

from __future__ import annotations

from ampsweep.contracts import (
    NAME_SEPARATOR,
    SearchFamily,
    SearchLog,
    black_list_value,
    clip_value,
    level_name,
    loss_placement_name,
    loss_scale_name,
)

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


def _family_table(family: SearchFamily) -> Table:
    rows = []
    for probe in family.rounds:
        outcomes = ", ".join(f"{seed}: {verdict}" for seed, verdict in probe.outcomes.items())
        rows.append(
            (
                str(probe.round),
                probe.phase,
                black_list_value(probe.black_list),
                clip_value(probe.clip),
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
        head = NAME_SEPARATOR.join(
            (
                level_name(family.amp_level, family.dtype, spell_dtype=True),
                loss_scale_name(family.loss_scale),
                loss_placement_name(family.loss_placement),
            )
        )
        head += ": "
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
