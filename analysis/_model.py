"""The analysis result as data: what every renderer formats and nothing computes.

It imports no other module of the package, so a renderer can never be imported back by the data it shows;
the ranking's column groups live here so a renderer lays out the table without the code that computed it.
``recommendation.json`` is derived from :class:`Recommendation`, never assembled by hand.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ampsweep.contracts import Configuration

STATUS_RECOMMENDED = "recommended"
STATUS_NO_STABLE = "no_stable_config"
STATUS_NO_TRIALS = "no_trials"

#: The file the report writer puts the next sweep's spec in, beside report.md.
NEXT_SPEC_FILE = "next-spec.yaml"

#: Ranking columns that describe convergence; a broken configuration gets none of them.
CONVERGENCE_COLUMNS = (
    "steps_to_target_median",
    "steps_to_target_min",
    "steps_to_target_max",
    "final_loss_median",
    "final_loss_min",
    "final_loss_max",
)
#: ``per_seed`` figures that describe convergence (see ``analysis.compute._configs.PER_SEED_FIGURES``).
PER_SEED_CONVERGENCE = ("steps_to_target", "final")
#: What :func:`top_rows` keeps: enough to choose, the rest is in the CSV.
TOP_COLUMNS = (
    "rank",
    "stability",
    *Configuration.FIELDS,
    "n_seeds",
    "n_trials",
    "divergence_rate",
    "clip_rate_median",
    "steps_to_target_median",
    "final_loss_median",
    "speed_vs_fp32_median",
    "label",
    "outcome_text",
    "broke_at",
    "reason",
    "phrase",
    "tied_with_above",
    "rule",
)


def top_rows(ranking: pd.DataFrame, n: int = 5) -> pd.DataFrame:
    """The first ``n`` ranked configurations (per device kind), with the columns a terminal table needs."""
    columns = [c for c in TOP_COLUMNS if c in ranking.columns]
    if "device_kind" in ranking.columns and ranking["device_kind"].nunique() > 1:
        # each device kind is ranked on its own: its first n rows, kind after kind
        ranking = ranking.groupby("device_kind", sort=False).head(n)
    else:
        ranking = ranking.head(n)
    return ranking.loc[:, columns].reset_index(drop=True)


def clean(value: Any) -> Any:
    """JSON-ready: numpy scalars to Python, NaN and infinities to None, tuples to lists."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(float(value)) else None
    if value is pd.NA or value is pd.NaT:
        return None
    return value


@dataclass(frozen=True)
class Fp32Reference:
    """What "as good as FP32" means for this sweep, so rules can quote numbers."""

    final_loss: float
    reached_target: bool
    n_trials: int


@dataclass(frozen=True)
class Localization:
    """The Cell one configuration's trials agree went wrong first (``anomalies`` rows).

    One per distinct (cell, class, phase, kind) among the configuration's
    trials; ``seeds`` are the seeds that agree on it. Figures are medians over
    those seeds.
    """

    kind: str  # nonfinite | departure
    cell: str
    cell_class: str
    phase: str  # forward | backward
    seeds: tuple[Any, ...]
    n_trials: int  # trials of the configuration that agree on this Cell
    replay_step: float | None
    input_dtype: str
    output_dtype: str
    max_abs: float | None
    fp32_max_abs: float | None
    rel_error: float | None
    zero_fraction: float | None
    note: str = ""
    config_id: str = ""
    #: what overflowed inside the Cell when its output stayed bounded (e.g. the
    #: ``exp`` before a division), from the replay; "" when not seen
    inner_op: str = ""
    #: largest |x| of the Cell's inputs in that replay step (under the trial's policy)
    input_max_abs: float | None = None
    #: largest finite |x| of what overflowed inside (the inner primitive's input)
    inner_max_abs: float | None = None
    #: the Cell's tensor held no inf/NaN: precision was lost here and a Cell after it overflowed
    #: (None: not recorded, in sweeps written before the column)
    finite: bool | None = None
    #: on a gang: the rank whose part of the global batch broke first, how many ranks' parts broke at
    #: that step, and the ranks (devices per trial); None, None, 1 on one device
    rank: int | None = None
    ranks_broken: int | None = None
    devices: int = 1


@dataclass(frozen=True)
class HeldPast:
    """A configuration that stayed finite past the step where FP32 broke, on the seeds where it broke."""

    label: str  # the configuration's name, as the ranking shows it ("FP32 · clip 1.0")
    config_id: str
    amp_level: str
    clip: float | None
    #: seeds it stayed finite past FP32's break, of ``n_seeds`` (the seeds where FP32 broke that it ran)
    n_held: int
    n_seeds: int
    #: the step it held to on every seed it held (``ampsweep.contracts.held_to``)
    held_to: int


@dataclass(frozen=True)
class BrokeToo:
    """Another FP32 configuration (a clip, say) that went non-finite as well, and where."""

    label: str
    config_id: str
    clip: float | None
    n_broken: int
    n_seeds: int
    #: median first non-finite step over its seeds that broke
    step: float | None


@dataclass(frozen=True)
class HeldTo:
    """How far the recommended configuration was run without breaking, and what that leaves open.

    Without a ``horizon`` past the trials' end this is the trials' own end:
    nothing was run past it. With one, the recommendation was continued to it
    (``analysis.compute._horizon``); the configurations that were continued and
    broke on the way, and the stable ones that were not continued, are named.
    """

    step: int  # the step every counted seed held to
    seeds: int  # seeds of the recommendation that held to ``step``
    total: int  # its seeds
    horizon: int
    trials_end: int
    #: "O2 · no clip broke at ~1,417 (ExpSoftmax, forward)": continued past the trials and broke
    broke: tuple[str, ...] = ()
    #: labels of stable configurations run only to the trials' end
    unchecked: tuple[str, ...] = ()


@dataclass(frozen=True)
class Fp32Break:
    """FP32 itself went non-finite: the sweep's first fact, before anything about mixed precision.

    When the FP32 baseline diverges on a seed, the cause is not mixed
    precision: the answer says so first, names the Cell that broke in float32
    (``localization``, from a replay of the FP32 trial), shows what stayed
    finite where it broke (``held``) and what broke as well (``broke_too``),
    and never offers "keep FP32" as the fix.
    """

    label: str  # the FP32 baseline's name ("FP32")
    config_id: str
    #: median first non-finite step over the seeds that broke; None when not recorded
    step: float | None
    #: the first non-finite step of each seed that broke
    steps: dict[Any, float]
    n_broken: int
    n_seeds: int
    localization: Localization | None = None
    held: tuple[HeldPast, ...] = ()
    broke_too: tuple[BrokeToo, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return clean(asdict(self))


@dataclass(frozen=True)
class NextSweep:
    """What the sweep lacked and how the next one adds it."""

    cause: str  # fp32 | underflow | overflow | no_learning
    why: str  # one sentence: the evidence
    change: str  # what the next spec changes, in words
    grid: dict[str, Any]  # the grid axes the next spec sets (``workload_args``: a mapping of axes)
    search: str | None = None  # "adaptive" when the next sweep should search

    @property
    def has_spec(self) -> bool:
        """Whether a next sweep can be written: the grid changes or a search runs (else the fix is in the code)."""
        return bool(self.grid) or self.search is not None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Recommendation:
    """One device kind's answer: the change to make, with its evidence.

    ``evidence`` stays plain JSON-ready data (nested rows and statements)
    because it is written to ``recommendation.json`` as it is; the fields a
    renderer needs to lay out the first screen are typed.
    """

    device_kind: str
    status: str
    #: the answer in one sentence ("Use AMP level O2 ...", or why there is none)
    headline: str
    #: what to do about it, when the headline alone does not say
    detail: str = ""
    config: dict[str, Any] | None = None
    config_id: str | None = None
    rank: int | None = None
    rule: str | None = None
    fallback: dict[str, Any] | None = None
    evidence: dict[str, Any] = field(default_factory=lambda: {"statements": []})
    seeds_agreeing: int = 0
    seeds_total: int = 0
    seed_picks: list[dict[str, Any]] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)
    code: dict[str, str] | None = None
    #: the Cell that overflows without the recommended change (first screen)
    localization: Localization | None = None
    #: ``loss_placement`` of the recommended trials, when the column was written
    loss_placement: str | None = None
    #: one-sentence notes, e.g. a class that already computes in float32
    notes: list[str] = field(default_factory=list)
    #: the first lines a person sees (terminal, report): the change in a few words
    #: ("Use O2, keep ExpSoftmax in FP32, clip 1.0"), why (the localized Cell, in a
    #: sentence), and how sure (seeds, trials); see :mod:`analysis.wording._answer`
    answer: tuple[str, ...] = ()
    #: no answer: what the sweep lacked and the next sweep to run (``analysis.wording._next_sweep``)
    next_sweep: NextSweep | None = None
    #: how far the recommendation held (its trials' end, or the horizon it was continued to)
    held_to: HeldTo | None = None
    #: FP32 itself went non-finite on some seed: the answer opens with that, not with a remedy
    fp32_break: Fp32Break | None = None

    @property
    def text(self) -> str:
        """Headline and detail as one paragraph (``recommendation.json``'s ``text``)."""
        return f"{self.headline} {self.detail}".strip()


@dataclass(frozen=True)
class DivergenceGrid:
    """One panel of the divergence map: rows are (AMP level, black list), columns clip thresholds."""

    title: str
    rows: tuple[str, ...]
    columns: tuple[str, ...]
    #: "bad/total" per cell, "*" for a silent failure, "not run" where nothing ran
    cells: tuple[tuple[str, ...], ...]
    #: diverged-or-failed share per cell, NaN where nothing ran
    rates: np.ndarray


@dataclass(frozen=True)
class Curve:
    """One configuration's line over steps: the median over its seeds, already smoothed and binned."""

    label: str  # "#rank label", as the legend shows it
    #: the configuration's position in its figure (which colour it gets)
    slot: int
    steps: np.ndarray
    median: np.ndarray
    #: min and max over seeds (the shaded band); None where the figure draws no band
    low: np.ndarray | None = None
    high: np.ndarray | None = None
    #: the FP32 baseline (drawn dashed, without a band)
    reference: bool = False


@dataclass(frozen=True)
class LossFigureData:
    """Loss of the best-ranked configurations and of FP32."""

    curves: tuple[Curve, ...]
    #: steps per centred moving-average window the curves were smoothed over
    window: int
    #: the best configuration's target loss; NaN when there is none
    target: float


@dataclass(frozen=True)
class ClipLine:
    """One clip threshold of the sweep and how often it fired for the figure's AMP level and black list."""

    clip: float
    rate: float  # NaN where that threshold was not run with them
    #: the legend's words: "clip 5.0: fires on 12 % of steps"
    label: str = ""


@dataclass(frozen=True)
class GradNormFigureData:
    """Pre-clip gradient norm of the recommended (or best mixed) configuration and its unclipped sibling."""

    curves: tuple[Curve, ...]  # in drawing order: the sibling first, so the configuration is on top
    thresholds: tuple[ClipLine, ...]


@dataclass(frozen=True)
class LayerSeries:
    """One parameter's ``grad_absmax`` at the sampled steps, non-finite values kept."""

    name: str
    steps: np.ndarray
    absmax: np.ndarray


@dataclass(frozen=True)
class LayerFigureData:
    """Per-layer gradient maxima of one diverged trial (``layers/``)."""

    trial_id: str
    seed: int | None
    dtype: str
    first_nonfinite: float | None
    #: the parameters shown: those non-finite first, then the largest
    layers: tuple[LayerSeries, ...]
    #: parameters with a finite maximum (the rest of them are only in ``layers/``)
    n_layers: int
    #: largest finite value over every parameter (1.0 when there is none)
    peak: float
    #: smallest and largest finite positive value over every parameter; None when there is none
    positive_range: tuple[float, float] | None
    #: the trial's configuration and seed, named as everywhere ("O2 · no clip · seed 0")
    label: str = ""


@dataclass(frozen=True)
class FailureFigureData:
    """The top broken configuration around its first non-finite step, next to FP32 from the same start.

    Steps are global (a forked trial's first step is its ``start_step``). The
    Cell maxima are the localized Cell's, from the replay (``anomalies``).
    """

    trial_id: str
    label: str  # the configuration's honest label
    seed: int | None
    first_nonfinite: float
    start_step: int
    steps: np.ndarray
    loss: np.ndarray  # non-finite values kept (they are the failure)
    grad_norm: np.ndarray
    fp32_steps: np.ndarray
    fp32_loss: np.ndarray
    fp32_grad_norm: np.ndarray
    #: the localized Cell ("softmax (ExpSoftmax)"), "" when none was localized
    cell: str = ""
    #: (what, max |x|) bars against 65504: the Cell's output and, where the replay saw them,
    #: its inputs and what overflowed inside; and the same Cell in FP32
    maxima: tuple[tuple[str, float], ...] = ()
    #: the inner primitive's overflow limit on its input (ln 65504 for exp), with its name
    inner_limit: tuple[str, float] | None = None


@dataclass(frozen=True)
class FigureData:
    """What report.html's figures of one device kind show, as numbers; None where a figure has no data."""

    loss: LossFigureData | None = None
    grad_norm: GradNormFigureData | None = None
    divergence: tuple[DivergenceGrid, ...] = ()
    layers: LayerFigureData | None = None
    failure: FailureFigureData | None = None


@dataclass
class KindAnalysis:
    """Ranking and recommendation for one device kind.

    Numerics differ between backends (an Ascend float16 matmul is not a GPU
    one), so configurations are only compared with others, and with FP32, on
    the same device kind.
    """

    device_kind: str
    ranking: pd.DataFrame
    reference: Fp32Reference
    recommendation: Recommendation
    #: whether step time may decide the order (not on CPU, where float16 is emulated)
    speed_decides: bool = False
    #: the figures' data; None when ``analyze`` was asked not to gather it
    figures: FigureData | None = None

    @property
    def recommended(self) -> pd.Series | None:
        if self.ranking.empty or not self.ranking["recommended"].any():
            return None
        return self.ranking[self.ranking["recommended"]].iloc[0]


@dataclass
class SweepAnalysis:
    """Everything the report needs, computed once, for callers that want more than files."""

    name: str
    sweep_dir: str
    scores: pd.DataFrame
    #: all kinds' rankings, one after the other; ``rank`` restarts per kind
    ranking: pd.DataFrame
    #: the FP32 reference over the whole sweep (per kind: ``kinds[i].reference``)
    reference: Fp32Reference
    inventory: Any  # analysis.SweepInventory (kept untyped so the model imports nothing)
    kinds: list[KindAnalysis] = field(default_factory=list)
    #: ``ampsweep.contracts.SearchLog`` of a ``search: adaptive`` sweep, else None
    search: Any = None
    #: the FP32 float16-headroom profile ``ampsweep run`` wrote (``profile.json``), else None
    profile: dict[str, Any] | None = None

    @property
    def recommended(self) -> pd.Series | None:
        """The first kind's recommendation (the only one on a single-kind sweep)."""
        for kind in self.kinds:
            if kind.recommended is not None:
                return kind.recommended
        return None
