"""``horizon.json`` and the ``horizon/`` folder: the answer continued to the length of the user's training.

A sweep shorter than the user's training can recommend a configuration that
breaks later. With ``horizon:`` past the trials' end, the driver continues the
recommended configuration (and each runner-up that would replace it) from each
seed's own snapshot at the trials' end, in the sub-folder ``horizon/`` (a sweep
folder of its own: its trials start later and run longer, so they must not mix
into the ranking as trials of their own). This file records which
configurations were continued, why, and how far each held. The analysis reads
both: a configuration whose continuation broke is judged broken at that step,
and the answer says up to which step it held.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ._search import LocalizedCell

HORIZON_FILE = "horizon.json"
#: Sub-folder (a sweep folder of its own) holding the continuations.
HORIZON_FOLDER = "horizon"


def held_to(start_step: float, steps_run: float, first_nonfinite: float | None) -> int:
    """How far a trial held, the one meaning of ``held_to`` in ``horizon.json`` and the analysis: the global
    step before which every step was finite, its end (the horizon, for a continuation that held) or, where it
    broke, its first non-finite step.
    """
    if first_nonfinite is not None and first_nonfinite == first_nonfinite:  # NaN != NaN
        return int(first_nonfinite)
    return int(start_step + steps_run)


@dataclass
class Continued:
    """One configuration continued from its trials' end to the horizon, on every seed."""

    label: str  # the configuration's name (``Configuration.name()``)
    config: dict[str, Any]  # ``Configuration.as_row()`` without the device kind
    round: int
    why: str  # why it was continued: recommended, a runner-up, the profile's forecast, FP32 baseline
    #: seed -> the step it held to (:func:`held_to`: the horizon when it held, else where it broke)
    held_to: dict[str, int] = field(default_factory=dict)
    #: seed -> the global step it went non-finite at (only seeds that broke)
    broke_at: dict[str, int] = field(default_factory=dict)
    localized: list[LocalizedCell] = field(default_factory=list)
    trial_ids: list[str] = field(default_factory=list)

    @property
    def held(self) -> bool:
        return bool(self.held_to) and not self.broke_at


@dataclass
class HorizonLog:
    """What the continuation to the horizon did, in the order it did it."""

    horizon: int
    trials_end: int
    #: the FP32 profile's forecast that ordered the work, in words (empty: no profile, or nothing at risk)
    forecast: list[str] = field(default_factory=list)
    continued: list[Continued] = field(default_factory=list)
    #: configurations the grid lacked, added after a break named a class (as ``search: adaptive`` adds it):
    #: label -> why
    added: dict[str, str] = field(default_factory=dict)
    #: the label of the configuration the answer is, once it held to the horizon (None: none held)
    answer: str | None = None
    trials_run: int = 0


def encode_horizon(log: HorizonLog) -> str:
    return json.dumps(asdict(log), indent=1) + "\n"


def decode_horizon(text: str | bytes) -> HorizonLog:
    """The log in a ``horizon.json``; ``ValueError`` when it is not one."""
    try:
        data = json.loads(text)
        continued = []
        for item in data.pop("continued"):
            item["localized"] = [LocalizedCell(**cell) for cell in item.get("localized", [])]
            continued.append(Continued(**item))
        return HorizonLog(continued=continued, **data)
    except (TypeError, KeyError, json.JSONDecodeError) as exc:
        raise ValueError(f"not an ampsweep horizon log: {exc}") from None
