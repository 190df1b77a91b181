"""``report/recommendation.json``: the recommendation as data, for scripts and CI.

A pipeline that picks up the chosen AMP settings (or fails a job when nothing is stable) should not parse
Markdown. UTF-8 JSON, keys in schema order, ``null`` wherever a figure is unknown (never NaN); the schema,
``ampsweep.recommendation/1``, is in docs/ranking.md ("What `report/` holds").
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from .._model import (
    NEXT_SPEC_FILE,
    STATUS_NO_STABLE,
    STATUS_NO_TRIALS,
    STATUS_RECOMMENDED,
    Recommendation,
    SweepAnalysis,
    clean,
)
from ..wording._localization import localization_phrase
from ..wording._not_tried import not_tried_items

SCHEMA = "ampsweep.recommendation/1"
STATUS_PARTIAL = "partial"
_MIRRORED = ("config", "evidence", "seeds_agreeing", "seeds_total", "undecided", "code")


def recommendation_entry(rec: Recommendation) -> dict[str, Any]:
    """One ``recommendations[]`` entry, derived from the dataclass (keys in schema order)."""
    loc = rec.localization
    loc_data = None if loc is None else {**asdict(loc), "text": localization_phrase(loc)}
    return clean(
        {
            "device_kind": rec.device_kind,
            "status": rec.status,
            "config": rec.config,
            "config_id": rec.config_id,
            "text": rec.text,
            "rank": rec.rank,
            "rule": rec.rule,
            "fallback": rec.fallback,
            "evidence": rec.evidence,
            "seeds_agreeing": rec.seeds_agreeing,
            "seeds_total": rec.seeds_total,
            "seed_picks": rec.seed_picks,
            "undecided": rec.undecided,
            "next_steps": rec.next_steps,
            "code": rec.code,
            "localization": loc_data,
            "loss_placement": rec.loss_placement,
            "notes": rec.notes,
            "answer": list(rec.answer),
            "next_sweep": None
            if rec.next_sweep is None
            else {**rec.next_sweep.as_dict(), "spec": NEXT_SPEC_FILE if rec.next_sweep.has_spec else None},
        }
    )


def recommendation_document(a: SweepAnalysis) -> dict[str, Any]:
    """The document as a dict (its schema: docs/ranking.md)."""
    recs = [recommendation_entry(k.recommendation) for k in a.kinds]
    statuses = {r["status"] for r in recs}
    if not recs or statuses == {STATUS_NO_TRIALS}:
        status = STATUS_NO_TRIALS
    elif statuses == {STATUS_RECOMMENDED}:
        status = STATUS_RECOMMENDED
    elif STATUS_RECOMMENDED in statuses:
        status = STATUS_PARTIAL
    else:
        status = STATUS_NO_STABLE
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "sweep": a.name,
        "status": status,
        "device_kinds": [k.device_kind for k in a.kinds],
    }
    single = recs[0] if len(recs) == 1 else None
    for key in _MIRRORED:
        doc[key] = None if single is None else single.get(key)
    doc["recommendations"] = recs
    doc["not_applicable"] = not_tried_items(a)
    return clean(doc)


def recommendation_json(a: SweepAnalysis) -> str:
    """The document as indented JSON text (``allow_nan=False``: nulls, never NaN)."""
    return json.dumps(recommendation_document(a), indent=2, allow_nan=False, ensure_ascii=False) + "\n"
