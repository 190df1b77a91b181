"""``search.json``: the path an adaptive search took, written by the driver, read by the report.

An adaptive search runs ordinary trials in rounds (each stored like any grid
trial, so it resumes), and this file records what it concluded from each
round: the black list tried, the outcome per seed, the Cell localized, the
decision — then the minimal black list, the clip sweep on it, and whether a
confirmation on more seeds and more steps held.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

SEARCH_FILE = "search.json"
#: Sub-folder (a sweep folder of its own) holding the confirmation trials: they
#: run longer than the sweep's ``steps``, so they must not mix into its ranking.
CONFIRM_FOLDER = "confirm"


@dataclass(frozen=True)
class LocalizedCell:
    """The Cell a trial's replay caught first (a row of the ``anomalies`` table), as a value.

    The search adds ``cell_class`` to the black list; it never parses it back
    out of display text.
    """

    cell: str
    cell_class: str
    phase: str  # forward | backward

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> LocalizedCell:
        return cls(str(row["cell"]), str(row["cell_class"]), str(row["phase"]))

    def __str__(self) -> str:
        return f"{self.cell} ({self.cell_class}, {self.phase})"


@dataclass
class SearchRound:
    """One probe of the search: a black list, run on every seed."""

    round: int
    phase: str  # baseline | grow | loss scale | remedy | shrink | clip | confirm
    black_list: list[str]
    clip: float | None
    outcomes: dict[str, str]  # seed -> stable | diverged | silent | failed
    localized: list[LocalizedCell] = field(default_factory=list)  # one per unstable seed the replay named
    decision: str = ""
    trial_ids: list[str] = field(default_factory=list)
    loss_scale: str = "none"  # what its mixed-precision trials ran with
    #: seed -> the share of gradient values float16 lost (``underflow_excess``), where measured
    underflow: dict[str, float] = field(default_factory=dict)
    #: the workload arguments its trials ran with beyond the spec's fixed ones (swept, and remedies kept)
    workload_args: dict[str, Any] = field(default_factory=dict)


@dataclass
class SearchFamily:
    """The search for one AMP level × dtype × loss scale (× loss placement × swept workload arguments)."""

    amp_level: str
    dtype: str
    loss_scale: str
    rounds: list[SearchRound] = field(default_factory=list)
    loss_placement: str = "outside"
    minimal_black_list: list[str] | None = None  # None: the search did not end stable
    conclusion: str = ""
    confirmed: bool | None = None  # None: no confirmation ran
    confirmation: str = ""
    #: the loss scale the search added because the evidence showed underflow (None: the grid's own)
    loss_scale_added: str | None = None
    #: this family's values of the grid's swept workload arguments (``grid.workload_args``)
    workload_args: dict[str, Any] = field(default_factory=dict)
    #: the spec's remedies the search kept because they made a probe stable (``remedies``)
    remedies_added: dict[str, Any] = field(default_factory=dict)

    @property
    def effective_loss_scale(self) -> str:
        """The loss scale its mixed-precision probes run with."""
        return self.loss_scale_added or self.loss_scale

    @property
    def arguments(self) -> dict[str, Any]:
        """The workload arguments its mixed-precision probes run with beyond the spec's fixed ones."""
        return {**self.workload_args, **self.remedies_added}


@dataclass
class SearchLog:
    sweep: str
    families: list[SearchFamily] = field(default_factory=list)
    trials_run: int = 0
    #: trials a grid over every subset of the workload's own Cell classes would take
    grid_equivalent: int = 0
    candidate_classes: list[str] = field(default_factory=list)


def encode_search(log: SearchLog) -> str:
    return json.dumps(asdict(log), indent=1) + "\n"


def decode_search(text: str | bytes) -> SearchLog:
    """The log in a ``search.json``; ``ValueError`` when it is not one."""
    try:
        data = json.loads(text)
        families = []
        for family in data.pop("families"):
            rounds = []
            for r in family.pop("rounds"):
                r["localized"] = [LocalizedCell(**cell) for cell in r.get("localized", [])]
                rounds.append(SearchRound(**r))
            families.append(SearchFamily(rounds=rounds, **family))
        return SearchLog(families=families, **data)
    except (TypeError, KeyError, json.JSONDecodeError) as exc:
        raise ValueError(f"not an ampsweep search log: {exc}") from None
