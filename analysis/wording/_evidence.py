"""The recommendation for one device kind in words, with its evidence, as a :class:`Recommendation`.

Its numbers against the FP32 baseline of the same device kind, its neighbours in the grid
(:mod:`analysis.wording._neighbours`), how many seeds agree, the runner-up and whether it is tied within
seed noise, the Cell that overflows without the change, and what the sweep could not decide: everything
derived from the ranking and the trial scores (docs/ranking.md, "What `report/` holds").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ampsweep.contracts import FP32_LEVEL, black_list_value, clip_value, loss_scale_name, num

from .._model import (
    NEXT_SPEC_FILE,
    STATUS_NO_STABLE,
    STATUS_NO_TRIALS,
    STATUS_RECOMMENDED,
    Fp32Break,
    Localization,
    Recommendation,
    clean,
)
from ..compute import _classes as cls
from ..compute._criteria import BY_NAME, RankContext
from ..compute._evidence import culprit, fp32_break, fp32_row
from ..compute._learning_rate import LearningRate
from ..compute._rank import seed_picks
from ._labels import clip_phrase, progress_phrase, runs
from ._localization import localization_phrase
from ._loss_placement import loss_placement_notes
from ._neighbours import config_dict, neighbours, row_facts, summary
from ._next_sweep import diagnose

#: With fewer seeds than this the report says how rare a divergence could hide.
FEW_SEEDS = 5
NO_STABLE_HEADLINE = "No mixed-precision configuration was stable on every seed and as good as FP32."


def describe(row: pd.Series) -> str:
    """A configuration in words, for the recommendation sentence."""
    level = "FP32 (AMP level O0)" if row["amp_level"] == FP32_LEVEL else f"AMP level {row['amp_level']}"
    bits = [f"{level} in {row['dtype']}" if row["amp_level"] != FP32_LEVEL else level]
    if row["amp_level"] != FP32_LEVEL:
        bits.append(
            f"keeping {black_list_value(row['black_list'])} in float32"
            if len(row["black_list"])
            else "with the default black list"
        )
    bits.extend(f"{name}={value}" for name, value in row["configuration"].workload_args)
    bits.append(
        "no gradient clipping"
        if pd.isna(row["clip"])
        else f"clip by global norm at {clip_value(row['clip'])}"
    )
    bits.append(loss_scale_name(row["loss_scale"]))
    where = f"on {row['device_kind'] or 'an unknown device kind'}"
    devices = int(row.get("devices", 1))
    if devices > 1:
        batch = row.get("global_batch")
        where += f"; on {devices} devices per trial: data parallel" + (
            f", global batch {int(batch)}" if batch is not None and batch == batch else ""
        )
    return ", ".join(bits) + f" ({where})"


def _steps(value: float) -> str:
    return "never" if value is None or not np.isfinite(value) else f"{value:.0f}"


def _metric(row: pd.Series, name: str) -> dict[str, Any]:
    return {"median": row[f"{name}_median"], "min": row[f"{name}_min"], "max": row[f"{name}_max"]}


def _fp32_comparison(best: pd.Series, fp32: pd.Series | None) -> tuple[dict[str, Any] | None, str]:
    if fp32 is None:
        return None, "no FP32 (O0) trial on this device kind: no comparison with FP32 is possible"
    delta = best["final_loss_median"] - fp32["final_loss_median"]
    rel = delta / fp32["final_loss_median"] if fp32["final_loss_median"] else np.nan
    bits = [f"final loss {num(best['final_loss_median'])} vs {num(fp32['final_loss_median'])}"]
    if np.isfinite(rel):
        bits[-1] += f" ({rel * 100:+.1f} %)"
    if np.isfinite(best["steps_to_target_median"]) or np.isfinite(fp32["steps_to_target_median"]):
        bits.append(
            f"steps to target {_steps(best['steps_to_target_median'])} vs {_steps(fp32['steps_to_target_median'])}"
        )
    if np.isfinite(best["speed_vs_fp32_median"]):
        speed = best["speed_vs_fp32_median"]
        word = "faster" if speed > 1.02 else "slower" if speed < 0.98 else "about as fast"
        bits.append(f"step time {speed:.2f}x FP32's speed ({word})")
    bits.append(
        f"FP32 diverged or failed on {int(fp32['n_diverged'] + fp32['n_failed'])}/{int(fp32['n_trials'])}, "
        f"this configuration on {int(best['n_diverged'] + best['n_failed'])}/{int(best['n_trials'])}"
    )
    text = f"against {fp32['label']}: " + "; ".join(bits)
    facts = {
        **row_facts(fp32),
        "final_loss_delta": delta,
        "final_loss_delta_rel": rel,
        "steps_to_target_delta": best["steps_to_target_median"] - fp32["steps_to_target_median"],
        "text": text,
    }
    return facts, text


def _runner_up(ranking: pd.DataFrame, best: pd.Series) -> tuple[dict[str, Any] | None, list[str]]:
    """The next stable mixed-precision row, and whether only seed noise or FP32 classes separate it.

    The runner-up's facts say which criterion put it below (``decided_by``,
    ``decided_by_label``), whether that criterion is a score measured per seed
    (``decided_by_score``), and whether it is within seed noise of the
    recommendation on a score (``within_noise``, ``tied_on``).
    """
    stable = ranking[(ranking["tier"] == cls.TIER_STABLE) & (ranking["rank"] > best["rank"])]
    if stable.empty:
        return None, []
    other = stable.iloc[0]
    undecided = []
    adjacent = int(other["rank"]) == int(best["rank"]) + 1
    within_noise = bool(adjacent and (other["tied_on"] or other["tied_with_above"]))
    tied = ", ".join(BY_NAME[n].label for n in other["tied_on"]) or "every score"
    decided = BY_NAME.get(str(other["decided_by"])) if adjacent else None
    if within_noise and decided is not None:
        undecided.append(
            f"#{int(best['rank'])} and #{int(other['rank'])} ({other['label']}) are tied within seed noise "
            f"on {tied}; #{int(best['rank'])} ranks first on {decided.label}"
        )
    facts = {
        **row_facts(other),
        "rule": other["rule"],
        "within_noise": within_noise,
        "tied_on": tied if within_noise else "",
        "decided_by": "" if decided is None else decided.name,
        "decided_by_label": "" if decided is None else decided.label,
        "decided_by_score": bool(decided is not None and decided.noisy),
        "text": f"next stable configuration, #{int(other['rank'])} {other['label']}: {other['rule']}",
    }
    return facts, undecided


def _dimension_gaps(ranking: pd.DataFrame, scores: pd.DataFrame, best: pd.Series | None) -> list[str]:
    """Choices the grid did not vary on this device kind."""
    notes: list[str] = []
    mp = ranking[~ranking["baseline"]]
    levels = sorted(set(mp["amp_level"]))
    if len(levels) == 1:
        notes.append(f"only AMP level {levels[0]} was tried besides FP32")
    scales = set(ranking["loss_scale"])
    if scales <= {"none", ""}:
        notes.append("loss scaling was not tried (every trial ran with `loss_scale: none`)")
    elif len(scales) == 1:
        notes.append(f"only loss scaling `{next(iter(scales))}` was tried")
    dtypes = set(mp["dtype"]) if len(mp) else set(ranking["dtype"])
    if len(dtypes) == 1:
        notes.append(f"only {next(iter(dtypes))} was tried as the low-precision type")
    if best is not None:
        # how far the answer held (the trials' end, or the horizon) is said by analysis.wording._held
        if best["n_seeds"] < FEW_SEEDS:
            n = int(best["n_seeds"])
            notes.append(
                f"{n} seed{'s' if n != 1 else ''} per configuration: a divergence that hits fewer than about 1 run "
                f"in {n} can go unseen"
            )
    return notes


def next_steps(ranking: pd.DataFrame, scores: pd.DataFrame, cell: Localization | None) -> list[str]:
    """Concrete next grid to try, from what this sweep did and did not cover."""
    tips = []
    if set(scores["loss_scale"]) <= {"none", ""}:
        tips.append(
            "add loss scaling (`loss_scale: [dynamic]`): float16 gradients under- and overflow without it"
        )
    if "bfloat16" not in set(scores["dtype"]):
        tips.append(
            "try `dtype: [bfloat16]` where the device supports it: float32's exponent range, no overflow at 65504"
        )
    if cell is not None and cell.cell_class:
        tips.append(
            f"black-list `{cell.cell_class}`, the class of the Cell that went wrong first ({cell.cell}, "
            f"{cell.phase})"
        )
    if (ranking["tier"] == cls.TIER_SILENT).any():
        tips.append(
            "finite-but-worse runs usually overflow a normalisation's variance or a softmax/exp: "
            "keep the normalisation and loss layers in float32"
        )
    if (ranking["clip_class"] == cls.CLIP_TOO_SMALL).any():
        p90 = scores.loc[scores["reference"], "p90_grad_norm"].median()
        hint = f" (90th percentile of the FP32 pre-clip norm: {p90:.3g})" if np.isfinite(p90) else ""
        tips.append(f"raise the clip thresholds that fire on nearly every step{hint}")
    if "O1" not in set(scores["amp_level"]):
        tips.append("try `amp_level: [O1]`, which casts only matmul/conv-type layers")
    tips.append("run more steps or seeds if divergence is rare")
    return tips


def _agreement(
    scores: pd.DataFrame, ranking: pd.DataFrame, best: pd.Series, ctx: RankContext
) -> tuple[int, int, list[dict[str, Any]], list[str]]:
    candidates = ranking[ranking["tier"] == cls.TIER_STABLE]
    # only seeds on which the recommendation itself ran can agree or disagree with it
    ids = set(str(best["trial_ids"]).split())
    seeds = {None if pd.isna(x) else x for x in scores.loc[scores["trial_id"].isin(ids), "seed"]}
    picks = [p for p in seed_picks(candidates, ctx) if p["seed"] in seeds]
    for pick in picks:
        pick["agrees"] = pick["config_id"] == best["config_id"]
    agreeing = sum(p["agrees"] for p in picks)
    undecided = []
    others = [p for p in picks if not p["agrees"]]
    labels = dict(zip(ranking["config_id"], ranking["label"]))
    if others:
        shown = "; ".join(
            f"seed {p['seed']}: {labels.get(p['config_id'], p['config_id'])}" for p in others[:3]
        )
        more = f" and {len(others) - 3} more" if len(others) > 3 else ""
        undecided.append(
            f"{len(others)} of {len(picks)} seeds rank another stable configuration first on their own "
            f"({shown}{more}): the order among the stable configurations is partly seed noise"
        )
    return agreeing, len(picks), picks, undecided


def _recommended(
    ranking: pd.DataFrame,
    scores: pd.DataFrame,
    best: pd.Series,
    kind: str,
    ctx: RankContext,
    loss_placement_recorded: bool,
) -> Recommendation:
    fp32 = fp32_row(ranking, best)
    near, undecided = neighbours(ranking, best)
    fp32_facts, fp32_text = _fp32_comparison(best, fp32)
    runner, close_call = _runner_up(ranking, best)
    agreeing, total, picks, seed_notes = _agreement(scores, ranking, best, ctx)
    n = int(best["n_trials"])
    statements = [
        f"stable on {n}/{n} {runs(best)}; " + clip_phrase(best) + "; " + (progress_phrase(best) or ""),
        fp32_text,
        *[nb["text"] for nb in near],
    ]
    if total:
        statements.append(
            f"ranked by each seed's trials alone, it comes first among the stable configurations on {agreeing} "
            f"of {total} seeds"
        )
    if runner is not None:
        statements.append(runner["text"])
    evidence = {
        "n_trials": n,
        "n_seeds": int(best["n_seeds"]),
        "n_diverged": int(best["n_diverged"]),
        "n_failed": int(best["n_failed"]),
        "target_loss": best["target_median"],
        "final_loss": _metric(best, "final_loss"),
        "steps_to_target": _metric(best, "steps_to_target"),
        "clip_rate": _metric(best, "clip_rate"),
        "speed_vs_fp32": _metric(best, "speed_vs_fp32"),
        "loss_spikes_median": best["loss_spikes_median"],
        "fp32": fp32_facts,
        "neighbours": near,
        "runner_up": runner,
        "statements": [s for s in statements if s],
    }
    return Recommendation(
        device_kind=kind,
        status=STATUS_RECOMMENDED,
        headline=f"Use {describe(best)}.",
        config=config_dict(best),
        config_id=best["config_id"],
        rank=int(best["rank"]),
        rule=best["rule"],
        evidence=clean(evidence),
        seeds_agreeing=agreeing,
        seeds_total=total,
        seed_picks=clean(picks),
        undecided=undecided + close_call + seed_notes + _dimension_gaps(ranking, scores, best),
        localization=culprit(ranking, best),
        loss_placement=str(best["loss_placement"]) if loss_placement_recorded else None,
        notes=loss_placement_notes(ranking, scores),
    )


def _no_stable(
    ranking: pd.DataFrame,
    scores: pd.DataFrame,
    kind: str,
    broke: Fp32Break | None = None,
    learning_rate: LearningRate | None = None,
) -> Recommendation:
    fp32 = fp32_row(ranking)
    mp = ranking[~ranking["baseline"]]
    counts = mp["stability"].value_counts()
    summary_text = ", ".join(f"{int(v)} {k}" for k, v in counts.items())
    statements = [
        f"no mixed-precision configuration was stable on every seed and as good as FP32 "
        f"({len(mp)} tried: {summary_text or 'none'})"
    ]
    closest = None
    if len(mp):
        top = mp.iloc[0]
        closest = {
            **row_facts(top),
            "rule": top["rule"],
            "text": f"closest: {top['label']}: {top['rule']}",
        }
        statements.append(closest["text"])
    if fp32 is not None:
        statements.append(f"{fp32['label']}: {summary(fp32)}")
    cell = culprit(ranking, None)
    following = diagnose(scores, cell, broke, learning_rate)
    if broke is not None:
        # FP32 is no fallback when it breaks itself: the Cell that broke in float32 is the one to show
        cell = broke.localization or cell
        detail = (
            "FP32 itself breaks on this workload, so neither FP32 nor a mixed-precision setting is the fix: "
            "make the FP32 run finite first (the next steps say how), then sweep again."
        )
    else:
        detail = (
            "Keep training in FP32 for now"
            + (" (code below) " if fp32 is not None else " ")
            + "and try the next steps listed."
        )
    return Recommendation(
        device_kind=kind,
        status=STATUS_NO_STABLE,
        headline=NO_STABLE_HEADLINE,
        detail=detail,
        fallback=None if fp32 is None else {"config": config_dict(fp32), "config_id": fp32["config_id"]},
        evidence=clean(
            {"closest": closest, "fp32": None if fp32 is None else row_facts(fp32), "statements": statements}
        ),
        undecided=_dimension_gaps(ranking, scores, None),
        next_steps=[
            f"{following.change} (ready to run: `report/{NEXT_SPEC_FILE}`)"
            if following.has_spec
            else following.change,
            *([] if broke is not None else next_steps(ranking, scores, cell)),
        ],
        localization=cell,
        next_sweep=following,
    )


def kind_recommendation(
    ranking: pd.DataFrame,
    scores: pd.DataFrame,
    ctx: RankContext | None = None,
    loss_placement_recorded: bool = False,
    learning_rate: LearningRate | None = None,
) -> Recommendation:
    """The recommendation for one device kind (``ranking`` and ``scores`` restricted to it).

    ``loss_placement_recorded``: whether the trials recorded ``loss_placement``
    (then the recommendation names it); ``learning_rate``: the factory's, which
    the next sweep lowers where FP32 itself breaks. ``answer`` and ``code`` are left for
    the wording to fill in (:mod:`analysis._analyze`).
    """
    kind = str(ranking["device_kind"].iloc[0]) if len(ranking) else ""
    if ranking.empty:
        rec = Recommendation(
            device_kind=kind,
            status=STATUS_NO_TRIALS,
            headline="Nothing to recommend: no committed trial could be ranked.",
        )
    else:
        broke = fp32_break(ranking, scores)
        if not ranking["recommended"].any():
            rec = _no_stable(ranking, scores, kind, broke, learning_rate)
        else:
            best = ranking[ranking["recommended"]].iloc[0]
            rec = _recommended(ranking, scores, best, kind, ctx or RankContext(), loss_placement_recorded)
        if broke is not None:
            rec.fp32_break = broke
            rec.evidence["fp32_break"] = broke.as_dict()
            rec.evidence["statements"].insert(0, fp32_break_statement(broke))
    return rec


def fp32_break_statement(broke: Fp32Break) -> str:
    """The evidence list's first item when FP32 broke: where, on how many seeds, what held past it."""
    at = "" if broke.step is None else f" (first non-finite step median {broke.step:,.0f})"
    text = f"{broke.label} diverged on {broke.n_broken}/{broke.n_seeds} seeds{at}"
    if broke.localization is not None:
        text += f"; localized to {localization_phrase(broke.localization)}"
    for held in broke.held:
        text += f"; {held.label} stayed finite to step {held.held_to:,} on {held.n_held}/{held.n_seeds} of those seeds"
    text += "; the mixed-precision configurations are judged against FP32 only on the steps before it broke"
    return text
