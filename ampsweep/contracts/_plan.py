"""The plan: every trial id a sweep's grid holds, written next to the resolved spec.

``report`` and ``status`` count expected and missing trials from it, so the
count can never drift from what ``run`` really scheduled (an axis left at its
default still counts). JSON, because a user reads it with ``cat``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class PlanEntry:
    """One planned trial."""

    trial_id: str
    graph_id: str
    label: str
    equivalent_to: str | None = None


def encode_plan(sweep: str, entries: list[PlanEntry]) -> str:
    document = {"sweep": sweep, "trials": [asdict(entry) for entry in entries]}
    return json.dumps(document, indent=1) + "\n"


def decode_plan(text: str | bytes) -> list[PlanEntry]:
    """The entries of a plan file; ``ValueError`` when it is not one."""
    try:
        document = json.loads(text)
        return [PlanEntry(**entry) for entry in document["trials"]]
    except (TypeError, KeyError, json.JSONDecodeError) as exc:
        raise ValueError(f"not an ampsweep plan: {exc}") from None
