"""The ranking criteria as data: :data:`CRITERIA` is the only place the order is defined.

The same list sorts the configurations (:func:`order_paths`), names the criterion that put a row below the
one above and those it is tied on (:func:`rank_reason`), orders each seed's own trials for the
seed-agreement check, and writes the rules the report prints (:func:`rules_text`). The seed-noise rule,
and why speed decides only on an accelerator: docs/ranking.md, "The criteria".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ampsweep.contracts import (
    FINAL_FRACTION,
    SILENT_RULE,
    TARGET_FROM_FP32,
    TARGET_WINDOW,
    Configuration,
    num,
    number,
    pct,
)

from . import _classes as cls

Row = Mapping[str, Any]


@dataclass(frozen=True)
class RankContext:
    """What differs between device kinds in how they are ranked."""

    speed_decides: bool = True


def _finite_or_inf(value: Any) -> float:
    found = number(value)
    return found if found is not None and math.isfinite(found) else math.inf


@dataclass(frozen=True)
class Criterion:
    """One ranking key: how to read it, compare it, say it, and state it as a rule."""

    name: str  # identifier, also the ``decided_by`` value of ranking.csv
    label: str  # words in a phrase: "tied on final loss"
    column: str  # ranking column holding the (median) value
    rule: str  # the sentence in the rules text
    show: Callable[[Row], str]  # the row's value in words
    higher_is_better: bool = False
    #: compared by the seed-noise rule on per-seed values (``per_seed[seed_figure]``)
    seed_figure: str | None = None
    accelerator_only: bool = False

    @property
    def noisy(self) -> bool:
        return self.seed_figure is not None

    def decides(self, ctx: RankContext) -> bool:
        return ctx.speed_decides or not self.accelerator_only

    def _sorting(self, raw: Any) -> float:
        """Lower = better; unknown (NaN) sorts last."""
        value = _finite_or_inf(raw)
        return -value if self.higher_is_better and math.isfinite(value) else value

    def value(self, row: Row) -> Any:
        """Sort value (a text column sorts as it is)."""
        raw = row[self.column]
        return raw if isinstance(raw, str) else self._sorting(raw)

    def seed_values(self, row: Row) -> dict[Any, float]:
        """Per-seed sort values."""
        return {
            seed: self._sorting(v)
            for seed, v in (row.get("per_seed") or {}).get(self.seed_figure, {}).items()
        }

    def seed_range(self, row: Row) -> str:
        """'65-101' over the row's seeds, in the criterion's own words."""
        raw = list((row.get("per_seed") or {}).get(self.seed_figure, {}).values())
        if len(raw) < 2:
            return ""
        values = sorted(raw, key=_finite_or_inf)
        low, high = (self.show({self.column: v}) for v in (values[0], values[-1]))
        return "" if low == high else f"{low}-{high}"


def beyond_noise(better: Mapping[Any, float], worse: Mapping[Any, float]) -> bool:
    """The tie rule: ``worse`` is worse on every shared seed and the ranges do not overlap."""
    if not better or not worse:
        return False
    shared = better.keys() & worse.keys()
    if shared and not all(worse[s] > better[s] for s in shared):
        return False
    return max(better.values()) < min(worse.values())


def separated(crit: Criterion, leader: Row, other: Row, ctx: RankContext) -> bool:
    """Whether ``other`` ranks below ``leader`` on ``crit`` (never, if it does not decide here)."""
    if not crit.decides(ctx):
        return False
    if not crit.noisy:
        return crit.value(other) != crit.value(leader)
    return beyond_noise(crit.seed_values(leader), crit.seed_values(other))


def _steps_text(row: Row) -> str:
    value = _finite_or_inf(row["steps_to_target_median"])
    return "never" if math.isinf(value) else f"{value:.0f}"


def _speed_text(row: Row) -> str:
    value = _finite_or_inf(row["speed_vs_fp32_median"])
    return "unknown" if math.isinf(value) else f"{value:.2f}x FP32"


def _broke_text(row: Row) -> str:
    value = _finite_or_inf(row["first_nonfinite_step_median"])
    if math.isinf(value):
        return "failed (no NaN step)" if row.get("n_failed") else "no NaN"
    return f"NaN at ~{value:,.0f}"


def _fp32_part_text(row: Any) -> str:
    """'4,224 parameters (1 class)'; the class count alone where a sweep recorded no parameters."""
    classes = int(row["n_black_listed"])
    configuration = row.get("configuration") if hasattr(row, "get") else None
    if configuration is not None and configuration.fp32:
        return "all but what its arguments lower (O0 casts nothing)"
    params = row.get("fp32_params") if hasattr(row, "get") else None
    if params is None or params != params:  # NaN: an older sweep
        return str(classes)
    return f"{int(params):,} parameters ({classes} class{'es' if classes != 1 else ''})"


CRITERIA: tuple[Criterion, ...] = (
    Criterion(
        "tier",
        "stability",
        "tier",
        rule=(
            "Stable mixed precision (every seed completed and learns like FP32) first, then the FP32 baseline "
            "(O0, never recommended while a stable mixed-precision configuration exists), then silent failures "
            f"(finite on every seed, but some seed learns clearly worse than its FP32 run: {SILENT_RULE}), "
            "then configurations with diverged or failed seeds. The adaptive search judges its probes "
            "by the same verdict."
        ),
        show=lambda r: f"'{r['stability']}'",
    ),
    Criterion(
        "divergence_rate",
        "diverged or failed seeds",
        "divergence_rate",
        rule="Fewer diverged or failed seeds.",
        show=lambda r: pct(r["divergence_rate"]),
    ),
    Criterion(
        "broke_at",
        "where it broke",
        "first_nonfinite_step_median",
        rule=(
            "Among configurations with a diverged seed: a later first non-finite step (median over the seeds "
            "that diverged) first. Their losses before the NaN are not convergence, so they never decide."
        ),
        show=_broke_text,
        higher_is_better=True,
    ),
    Criterion(
        "steps_to_target",
        "steps to target",
        "steps_to_target_median",
        rule=(
            f"Fewer steps to target: first step where the {TARGET_WINDOW}-step moving average of the loss is at "
            "or below the target (the workload's `target_loss`, else "
            f"{TARGET_FROM_FP32:g} x the FP32 final loss of the same seed); a seed that never gets there counts as "
            "infinitely slow. Compared by the seed-noise rule."
        ),
        show=_steps_text,
        seed_figure="steps_to_target",
    ),
    Criterion(
        "final_loss",
        "final loss",
        "final_loss_median",
        rule=(
            f"Lower final loss (mean finite loss over the last {pct(FINAL_FRACTION)} of steps). Compared by the "
            "seed-noise rule."
        ),
        show=lambda r: num(r["final_loss_median"]),
        seed_figure="final",
    ),
    Criterion(
        "n_black_listed",
        "FP32 part",
        "n_black_listed",
        rule=(
            "Less of the network kept in FP32 (what AMP is for): parameter elements under the listed Cells, "
            "then the number of classes. The smaller FP32 part wins unless it learns worse beyond seed noise "
            "(the two scores above), before the clip band and speed. A stable configuration whose FP32 part "
            "contains another stable one's, otherwise equal, ranks below it. The recommendation is minimal: "
            "it never keeps a class in FP32 when the same configuration without it is stable on every seed "
            "and tied on every criterion above. O0 with a low-precision workload argument casts nothing "
            "itself, so it comes after the AMP levels it ties with."
        ),
        show=_fp32_part_text,
    ),
    Criterion(
        "workload_args",
        "workload arguments",
        "args_preference",
        rule=(
            "The earlier value of each swept workload argument: `grid.workload_args` lists its values in order "
            "of preference, cheapest first, so between configurations tied on everything above, the earlier "
            "value wins (the first argument listed first)."
        ),
        show=lambda r: Configuration.from_row(r).args_name() or "none swept",
    ),
    Criterion(
        "clip_class",
        "clipping",
        "clip_class",
        rule=(
            "Clip rate (clipped / finite steps, median over seeds), between configurations with the same FP32 "
            f"part: in band (0, {cls.HEALTHY_CLIP_MAX:g}] < no clipping < never fires < unknown < fires too "
            f"often < above {cls.TOO_SMALL_CLIP:g} (threshold too small)."
        ),
        show=lambda r: f"'{r['clip_label']}'",
    ),
    Criterion(
        "speed",
        "speed vs FP32",
        "speed_vs_fp32_median",
        rule=(
            "Higher speed vs FP32 (FP32 median step time / this median step time, same device kind), by the "
            "seed-noise rule; only on an accelerator: on the CPU backend float16 is emulated, so speed is shown "
            "but never decides."
        ),
        show=_speed_text,
        higher_is_better=True,
        seed_figure="speed_vs_fp32",
        accelerator_only=True,
    ),
    Criterion(
        "loss_inside",
        "loss placement",
        "loss_inside",
        rule=(
            "The loss outside the cast (`loss_placement: outside`, as `Model(net, loss_fn, opt)` and a "
            "hand-written loop compute it) before inside: the training script then needs no change to where "
            "its loss runs."
        ),
        show=lambda r: str(r["loss_placement"]),
    ),
    Criterion(
        "loss_scaling",
        "loss scaling",
        "loss_scaling",
        rule="No loss scaling before a static scale before a dynamic one: less to change in the training script.",
        show=lambda r: str(r.get("loss_scale", "none")),
    ),
    Criterion(
        "config_id",
        "name",
        "config_id",
        rule="The configuration's name, only so the order is deterministic.",
        show=lambda r: str(r["config_id"]),
    ),
)
BY_NAME = {c.name: c for c in CRITERIA}
#: index of the FP32-classes criterion: everything before it must tie for a smaller black list to win
MINIMAL_LEVEL = next(i for i, c in enumerate(CRITERIA) if c.name == "n_black_listed")

TIE_RULE = (
    "Seed noise: a score measured per seed separates two configurations only when the worse one is worse on "
    "every seed both ran and the seed ranges do not overlap; otherwise they are tied on it and the next "
    "criterion decides (each configuration is compared with the best one of its group). With one seed any "
    "difference separates."
)


def rules_text() -> list[str]:
    """The ranking rules as numbered sentences, in :data:`CRITERIA` order."""
    return [c.rule for c in CRITERIA]


Path = tuple[Any, ...]


def order_paths(rows: Sequence[Row], ctx: RankContext) -> list[Path]:
    """Each row's sort key, one entry per criterion; sorting by it is the ranking.

    An exact criterion's entry is its value; a noisy one's is the index of the
    band the row falls in within its parent group: sorted by the median, a row joins the band of the
    band's first (best) row when the two are tied, else it starts the next band.
    """
    paths: list[list[Any]] = [[] for _ in rows]
    groups = [list(range(len(rows)))]
    for crit in CRITERIA:
        next_groups: list[list[int]] = []
        for group in groups:
            if not crit.noisy or not crit.decides(ctx):
                buckets: dict[Any, list[int]] = {}
                for i in group:
                    key = crit.value(rows[i]) if crit.decides(ctx) else 0
                    paths[i].append(key)
                    buckets.setdefault(key, []).append(i)
                next_groups.extend(buckets.values())
                continue
            bands: list[list[int]] = []
            for i in sorted(group, key=lambda i: crit.value(rows[i])):
                if bands and not separated(crit, rows[bands[-1][0]], rows[i], ctx):
                    bands[-1].append(i)
                else:
                    bands.append([i])
            for index, band in enumerate(bands):
                for i in band:
                    paths[i].append(index)
            next_groups.extend(bands)
        groups = next_groups
    return [tuple(p) for p in paths]


def ties_above_minimal(best: Row, smaller: Row, ctx: RankContext) -> bool:
    """Whether ``smaller`` (``best`` less a class) is as good on every criterion before FP32 classes."""
    for crit in CRITERIA[:MINIMAL_LEVEL]:
        if crit.noisy:
            if separated(crit, best, smaller, ctx):
                return False
        elif crit.decides(ctx) and crit.value(smaller) != crit.value(best):
            return False
    return True


def adopt_rank(paths: list[Path], best: int, smaller: int) -> None:
    """Put ``smaller`` into ``best``'s groups, so the fewer FP32 classes decide between them."""
    paths[smaller] = paths[best][:MINIMAL_LEVEL] + paths[smaller][MINIMAL_LEVEL:]


@dataclass(frozen=True)
class Comparison:
    """One criterion's values, as shown, for a row and for the row it is compared with."""

    criterion: str  # a :data:`CRITERIA` name
    mine: str
    theirs: str
    #: the seed ranges ('70-190', '65-101') of a score measured per seed; None where they add nothing
    seeds: tuple[str, str] | None = None
    unit: str = ""  # said once after both values ('parameters')

    @property
    def label(self) -> str:
        return BY_NAME[self.criterion].label


@dataclass(frozen=True)
class Containment:
    """A stable row's FP32 part contains the one of the stable row ranked ``rank`` (``analysis.compute._rank``)."""

    rank: int
    mine: tuple[str, ...]  # this row's black list
    theirs: tuple[str, ...]
    sizes: tuple[str, str] | None = None  # parameter elements in FP32, where both are known


@dataclass(frozen=True)
class RankReason:
    """Why a row's rank is below the one above it, as data (:func:`analysis.wording._labels.phrase` words it)."""

    decided_by: str = ""  # criterion name; "" for the first row
    above: int = 0  # the rank it is compared with
    decided: Comparison | None = None
    tied_on: tuple[Comparison, ...] = ()  # noisy criteria whose medians differ but are tied
    #: a score measured here but never deciding (speed on the CPU backend)
    shown: tuple[Comparison, ...] = ()
    #: every score tied: only the FP32 part, the clip band or a tie-break decided
    tied_with_above: bool = False
    contains: Containment | None = None
    #: ahead of the row above on the criteria, below it only because it contains ``contains.rank``'s part
    by_containment: bool = False


def compare(crit: Criterion, row: Row, above: Row) -> Comparison:
    """``crit``'s values of ``row`` and ``above``, with the seed ranges of a score measured per seed."""
    mine, theirs = crit.show(row), crit.show(above)
    seeds = None
    if crit.noisy:
        mine_range, theirs_range = crit.seed_range(row), crit.seed_range(above)
        if mine_range or theirs_range:
            seeds = (mine_range or mine, theirs_range or theirs)
    return Comparison(crit.name, mine, theirs, seeds)


def rank_reason(
    row: Row, above: Row, path: Path, above_path: Path, above_rank: int, ctx: RankContext
) -> RankReason:
    """Which criterion put ``row`` below ``above``, and the scores they are tied on within seed noise."""
    tied_on: list[Comparison] = []
    shown: list[Comparison] = []
    decided = CRITERIA[-1]
    for level, crit in enumerate(CRITERIA):
        if path[level] != above_path[level]:
            decided = crit
            break
        if crit.noisy and crit.show(row) != crit.show(above):
            (tied_on if crit.decides(ctx) else shown).append(compare(crit, row, above))
    return RankReason(
        decided.name,
        above_rank,
        compare(decided, row, above),
        tuple(tied_on),
        tuple(shown),
        tied_with_above=decided.name in AFTER_SCORES,
    )


FIRST = RankReason()
#: the criteria that decide only between configurations tied on every learning score
AFTER_SCORES = ("n_black_listed", "workload_args", "clip_class", "loss_inside", "loss_scaling", "config_id")
