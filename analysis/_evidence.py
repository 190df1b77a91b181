"""The recommendation for one device kind, with its evidence, as plain JSON data.

A ranked list alone does not say how much to trust its first line, so the
recommendation carries its own evidence:

* its numbers against the FP32 baseline of the same device kind;
* its *neighbours in the grid*: the same configuration with the next smaller
  and the next larger clip threshold (clipping off counts as the largest),
  and without each black-listed class. A neighbour that diverges where the
  recommendation is stable is the reason for the choice; a neighbour that is
  just as good says that part of the choice is not needed;
* how many seeds agree: each seed's trials ranked on their own, among the
  configurations stable on every seed, with the same rules;
* what the sweep could not decide, e.g. "no clip threshold was tried between
  3.0 and 5.0" when the neighbours on either side of a gap differ in class, a
  black list that was never tried without one of its classes, or dimensions
  the grid did not vary.

Everything here is derived from the ranking table and the trial scores; the
result is the ``recommendations[]`` entry of ``recommendation.json`` (see
:mod:`analysis._recommendation` for the schema).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from . import _rank
from ._code import snippets
from ._configs import config_label
from ._load import black_list_label

STATUS_RECOMMENDED = "recommended"
STATUS_NO_STABLE = "no_stable_config"
STATUS_NO_TRIALS = "no_trials"
#: With fewer seeds than this the report says how rare a divergence could hide.
FEW_SEEDS = 5


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


def config_dict(row: pd.Series) -> dict[str, Any]:
    """The user-facing choice (``recommendation.json``'s ``config``)."""
    return {
        "amp_level": str(row["amp_level"]),
        "black_list": [str(x) for x in row["black_list"]],
        "clip": None if pd.isna(row["clip"]) else float(row["clip"]),
        "loss_scale": str(row["loss_scale"]),
        "dtype": str(row["dtype"]),
        "device_kind": str(row["device_kind"]),
    }


def describe(row: pd.Series) -> str:
    """A configuration in words, for the recommendation sentence."""
    level = "FP32 (AMP level O0)" if row["amp_level"] == "O0" else f"AMP level {row['amp_level']}"
    bits = [f"{level} in {row['dtype']}" if row["amp_level"] != "O0" else level]
    if row["amp_level"] != "O0":
        bits.append(
            f"keeping {', '.join(row['black_list'])} in float32"
            if len(row["black_list"])
            else "with the default black list"
        )
    bits.append(
        "no gradient clipping" if pd.isna(row["clip"]) else f"clip by global norm at {float(row['clip'])!r}"
    )
    bits.append(f"loss scaling: {row['loss_scale']}")
    return ", ".join(bits) + f" (on {row['device_kind'] or 'an unknown device kind'})"


def _num(value: float) -> str:
    return "-" if value is None or not np.isfinite(value) else f"{value:.3g}"


def _steps(value: float) -> str:
    return "never" if value is None or not np.isfinite(value) else f"{value:.0f}"


def _pct(rate: float) -> str:
    return "-" if not np.isfinite(rate) else _rank._pct(rate)


def _metric(row: pd.Series, name: str) -> dict[str, Any]:
    return {
        "median": row[f"{name}_median"],
        "min": row[f"{name}_min"],
        "max": row[f"{name}_max"],
    }


def _state(row: pd.Series) -> str:
    """'stable on 3/3 seeds' / 'diverged on 2/3 seeds (first non-finite step median 15)'."""
    n = int(row["n_trials"])
    runs = "seeds" if row["n_trials"] == row["n_seeds"] else "trials"
    if row["tier"] == _rank.TIER_UNSTABLE:
        return _rank._unstable_phrase(row)
    if row["tier"] == _rank.TIER_SILENT:
        return f"finite on {n}/{n} {runs} but learns clearly worse than FP32 ({row['silent_reason']})"
    return f"stable on {n}/{n} {runs}"


def _summary(row: pd.Series) -> str:
    """One neighbour in words: state, clip, progress, rank."""
    bits = [_state(row)]
    if row["clip_class"] != _rank.CLIP_OFF and row["tier"] != _rank.TIER_UNSTABLE:
        bits.append(f"clip fires on {_pct(row['clip_rate_median'])} of steps ({row['clip_label']})")
    if row["tier"] in (_rank.TIER_STABLE, _rank.TIER_FP32):
        if np.isfinite(row["final_loss_median"]):
            bits.append(f"final loss {_num(row['final_loss_median'])}")
        if np.isfinite(row["steps_to_target_median"]):
            bits.append(f"{row['steps_to_target_median']:.0f} steps to target")
    bits.append(f"rank {int(row['rank'])}")
    return ", ".join(bits)


def _row_facts(row: pd.Series) -> dict[str, Any]:
    """The numbers of a ranking row that evidence entries repeat."""
    return {
        "config_id": row["config_id"],
        "config": config_dict(row),
        "rank": int(row["rank"]),
        "stability": row["stability"],
        "clip_label": row["clip_label"],
        "n_trials": int(row["n_trials"]),
        "n_seeds": int(row["n_seeds"]),
        "n_diverged": int(row["n_diverged"]),
        "n_failed": int(row["n_failed"]),
        "first_nonfinite_step_median": row["first_nonfinite_step_median"],
        "clip_rate_median": row["clip_rate_median"],
        "steps_to_target_median": row["steps_to_target_median"],
        "final_loss_median": row["final_loss_median"],
        "speed_vs_fp32_median": row["speed_vs_fp32_median"],
    }


def _match(ranking: pd.DataFrame, base: pd.Series, **changes: Any) -> pd.Series | None:
    """The ranking row equal to ``base`` except for ``changes`` (clip NaN = off)."""
    want = {
        "amp_level": base["amp_level"],
        "black_list_key": base["black_list_key"],
        "clip": base["clip"],
        "loss_scale": base["loss_scale"],
        "dtype": base["dtype"],
        "device_kind": base["device_kind"],
        **changes,
    }
    mask = np.ones(len(ranking), bool)
    for key, value in want.items():
        col = ranking[key]
        if key == "clip":
            mask &= col.isna().to_numpy() if pd.isna(value) else (col == value).fillna(False).to_numpy()
        else:
            mask &= (col == value).to_numpy()
    hits = ranking[mask]
    return None if hits.empty else hits.iloc[0]


def _clip_value(clip: float) -> float:
    return math.inf if pd.isna(clip) else float(clip)


def _clip_ladder(ranking: pd.DataFrame, best: pd.Series) -> list[float]:
    """Clip values tried with everything else equal, ascending; off is +inf."""
    same = np.ones(len(ranking), bool)
    for key in ("amp_level", "black_list_key", "loss_scale", "dtype", "device_kind"):
        same &= (ranking[key] == best[key]).to_numpy()
    return sorted({_clip_value(c) for c in ranking.loc[same, "clip"]})


def _clip_name(value: float) -> str:
    return "off" if math.isinf(value) else repr(float(value))


def _versus(best: pd.Series, other: pd.Series) -> str:
    """Where both are stable, the figures side by side."""
    if other["tier"] not in (_rank.TIER_STABLE, _rank.TIER_FP32):
        return ""
    bits = []
    if np.isfinite(other["final_loss_median"]) and np.isfinite(best["final_loss_median"]):
        bits.append(f"final loss {_num(other['final_loss_median'])} vs {_num(best['final_loss_median'])}")
    if np.isfinite(other["speed_vs_fp32_median"]) and np.isfinite(best["speed_vs_fp32_median"]):
        bits.append(f"speed {other['speed_vs_fp32_median']:.2f}x vs {best['speed_vs_fp32_median']:.2f}x FP32")
    return "; ".join(bits)


def _neighbours(ranking: pd.DataFrame, best: pd.Series) -> tuple[list[dict[str, Any]], list[str]]:
    """Clip and black-list neighbours of ``best``, and the gaps they leave undecided."""
    out: list[dict[str, Any]] = []
    undecided: list[str] = []
    ladder = _clip_ladder(ranking, best)
    here = _clip_value(best["clip"])
    pos = ladder.index(here)
    sides = []
    if pos > 0:
        sides.append(("clip_smaller", ladder[pos - 1]))
    if pos + 1 < len(ladder):
        sides.append(("clip_larger", ladder[pos + 1]))
    for relation, value in sides:
        other = _match(ranking, best, clip=math.nan if math.isinf(value) else value)
        if other is None:  # pragma: no cover - the ladder comes from the ranking itself
            continue
        label = "without clipping" if math.isinf(value) else f"clip {_clip_name(value)}"
        text = f"{label} instead of {_clip_name(here) if not math.isinf(here) else 'off'}: {_summary(other)}"
        versus = _versus(best, other)
        if versus:
            text += f" ({versus})"
        same_tier = other["tier"] == best["tier"]
        if same_tier and math.isinf(value):
            text += "; clipping is not needed for stability here, it ranks lower on rule 3 (clip rate)"
        elif same_tier and math.isinf(here):
            text += "; clipping does not change stability here"
        elif not same_tier and other["tier"] in (_rank.TIER_UNSTABLE, _rank.TIER_SILENT):
            text += f"; the threshold {_clip_name(here)} is what keeps this configuration stable"
        same_clip = other["clip_class"] == best["clip_class"]
        out.append(
            {
                "relation": relation,
                "label": label,
                "tried": True,
                "same_class": bool(same_tier and same_clip),
                **_row_facts(other),
                "text": text,
            }
        )
        low, high = sorted((here, value))
        if not same_tier:
            if math.isinf(high):
                undecided.append(
                    f"no clip threshold above {_clip_name(low)} was tried: at {_clip_name(low)} this "
                    f"configuration is {_state(_row_at_clip(best, other, low))}, without clipping it is "
                    f"{_state(_row_at_clip(best, other, high))}; whether a larger threshold would also hold is unknown"
                )
            else:
                undecided.append(
                    f"no clip threshold was tried between {_clip_name(low)} and {_clip_name(high)}: "
                    f"at {_clip_name(low)} this configuration is {_state(_row_at_clip(best, other, low))}, "
                    f"at {_clip_name(high)} {_state(_row_at_clip(best, other, high))}; where it changes is unknown"
                )
        elif not same_clip and not math.isinf(high):
            a, b = _row_at_clip(best, other, low), _row_at_clip(best, other, high)
            undecided.append(
                f"no clip threshold was tried between {_clip_name(low)} and {_clip_name(high)}: "
                f"{_clip_name(low)} fires on {_pct(a['clip_rate_median'])} of steps ({a['clip_label']}), "
                f"{_clip_name(high)} on {_pct(b['clip_rate_median'])} ({b['clip_label']}); a threshold in "
                "between may fit the healthy band better"
            )
    for cls in best["black_list"]:
        rest = tuple(c for c in best["black_list"] if c != cls)
        other = _match(ranking, best, black_list_key=black_list_label(rest))
        label = f"without {cls} in float32"
        if other is None:
            config = config_dict(best) | {"black_list": list(rest)}
            out.append(
                {
                    "relation": "black_list_without",
                    "class": cls,
                    "label": label,
                    "tried": False,
                    "same_class": None,
                    "config": config,
                    "text": f"{label}: not tried",
                }
            )
            undecided.append(
                f"whether {cls} needs float32 is undecided: {best['amp_level']} with black list "
                f"{black_list_label(rest)} and otherwise the same settings was not tried"
            )
            continue
        text = f"{label}: {_summary(other)}"
        if other["tier"] == best["tier"]:
            versus = _versus(best, other)
            text += f" ({versus})" if versus else ""
            text += f"; keeping {cls} in float32 is not needed for stability here"
        elif other["tier"] == _rank.TIER_UNSTABLE or other["tier"] == _rank.TIER_SILENT:
            text += f"; keeping {cls} in float32 is what makes this configuration work"
        out.append(
            {
                "relation": "black_list_without",
                "class": cls,
                "label": label,
                "tried": True,
                "same_class": bool(
                    other["tier"] == best["tier"] and other["clip_class"] == best["clip_class"]
                ),
                **_row_facts(other),
                "text": text,
            }
        )
    return out, undecided


def _row_at_clip(best: pd.Series, other: pd.Series, clip: float) -> pd.Series:
    """Whichever of the two rows has clip value ``clip`` (+inf = off)."""
    return best if _clip_value(best["clip"]) == clip else other


def fp32_row(ranking: pd.DataFrame, best: pd.Series | None = None) -> pd.Series | None:
    """The FP32 baseline row to compare with: O0, no clipping, empty black list.

    Prefers the loss scale and dtype of ``best`` (they do not change an uncast
    network, but the step times were measured with them), then any O0 row.
    """
    o0 = ranking[ranking["amp_level"] == "O0"]
    if o0.empty:
        return None
    plain = o0[o0["clip"].isna() & (o0["n_black_listed"] == 0)]
    pool = plain if len(plain) else o0
    if best is not None:
        same = pool[(pool["loss_scale"] == best["loss_scale"]) & (pool["dtype"] == best["dtype"])]
        if len(same):
            pool = same
    return pool.sort_values("rank").iloc[0]


def _fp32_comparison(best: pd.Series, fp32: pd.Series | None) -> tuple[dict[str, Any] | None, str]:
    if fp32 is None:
        return None, "no FP32 (O0) trial on this device kind: no comparison with FP32 is possible"
    delta = best["final_loss_median"] - fp32["final_loss_median"]
    rel = delta / fp32["final_loss_median"] if fp32["final_loss_median"] else np.nan
    bits = [f"final loss {_num(best['final_loss_median'])} vs {_num(fp32['final_loss_median'])}"]
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
    text = f"against FP32 ({fp32['config_id']}): " + "; ".join(bits)
    facts = {
        **_row_facts(fp32),
        "final_loss_delta": delta,
        "final_loss_delta_rel": rel,
        "steps_to_target_delta": best["steps_to_target_median"] - fp32["steps_to_target_median"],
        "text": text,
    }
    return facts, text


def _deciding_key(best: pd.Series, other: pd.Series) -> str | None:
    """The first ranking criterion on which ``other`` differs from ``best``."""

    def same(a: Any, b: Any) -> bool:
        return (pd.isna(a) and pd.isna(b)) or a == b

    for key in (
        "tier",
        "divergence_rate",
        "clip_class",
        "steps_to_target_median",
        "final_loss_median",
        "speed_vs_fp32_median",
        "n_black_listed",
    ):
        if not same(best[key], other[key]):
            return key
    return None


def _runner_up(ranking: pd.DataFrame, best: pd.Series) -> tuple[dict[str, Any] | None, list[str]]:
    """The next stable mixed-precision row, and whether the margin is inside seed noise.

    When the two differ first on final loss or speed and their ranges over
    seeds overlap, the order between them is not evidence of anything.
    """
    stable = ranking[(ranking["tier"] == _rank.TIER_STABLE) & (ranking["rank"] > best["rank"])]
    if stable.empty:
        return None, []
    other = stable.iloc[0]
    undecided = []
    key = _deciding_key(best, other)
    labels_ = {
        "final_loss_median": ("final_loss", "final loss"),
        "speed_vs_fp32_median": ("speed_vs_fp32", "speed vs FP32"),
    }
    if key in labels_:
        name, label = labels_[key]
        lo_b, hi_b, lo_o, hi_o = (
            best[f"{name}_min"],
            best[f"{name}_max"],
            other[f"{name}_min"],
            other[f"{name}_max"],
        )
        if all(np.isfinite([lo_b, hi_b, lo_o, hi_o])) and lo_b <= hi_o and lo_o <= hi_b:
            undecided.append(
                f"#{int(best['rank'])} and #{int(other['rank'])} ({other['config_id']}) differ only in {label} "
                f"({_num(best[f'{name}_median'])} vs {_num(other[f'{name}_median'])}), inside the spread over "
                f"seeds ({_num(lo_b)}-{_num(hi_b)} vs {_num(lo_o)}-{_num(hi_o)}): on this evidence they are "
                "equally good"
            )
    facts = {
        **_row_facts(other),
        "rule": other["rule"],
        "text": f"next stable configuration, #{int(other['rank'])} {other['config_id']}: {other['rule']}",
    }
    return facts, undecided


def _trial_config_ids(scores: pd.DataFrame) -> list[str]:
    return [
        config_label(*key)
        for key in zip(
            scores["amp_level"],
            scores["black_list_key"],
            scores["clip"],
            scores["loss_scale"],
            scores["dtype"],
            scores["device_kind"],
        )
    ]


def seed_picks(scores: pd.DataFrame, candidates: pd.DataFrame) -> list[dict[str, Any]]:
    """For each seed, the candidate that seed's own trials rank first.

    ``candidates`` are the ranking rows stable on every seed (tier 0); the
    per-seed order uses the same keys as the ranking after stability: clip
    class, steps to target, final loss, speed, black-list size, name. Vectorised
    because a big sweep has thousands of (configuration, seed) pairs.
    """
    if candidates.empty:
        return []
    frame = scores[scores["ranked"]].copy()
    frame["config_id"] = _trial_config_ids(frame)
    frame = frame[frame["config_id"].isin(set(candidates["config_id"]))]
    if frame.empty:
        return []
    frame["seed_key"] = frame["seed"].astype("object").where(frame["seed"].notna(), None)
    keyed = frame.groupby(["seed_key", "config_id"], dropna=False).agg(
        clip=("clip", "first"),
        clip_rate=("clip_rate", "median"),
        steps_to_target=("steps_to_target", "median"),
        final=("final", "median"),
        speed=("speed_vs_fp32", "median"),
        n_black=("black_list", lambda s: len(s.iloc[0])),
    )
    keyed = keyed.reset_index()
    keyed["_clip"] = [_rank.clip_class(c, r) for c, r in zip(keyed["clip"], keyed["clip_rate"])]
    keyed["_target"] = keyed["steps_to_target"].fillna(np.inf)
    keyed["_final"] = keyed["final"].fillna(np.inf)
    keyed["_speed"] = (-keyed["speed"]).fillna(np.inf)
    keyed = keyed.sort_values(
        ["seed_key", "_clip", "_target", "_final", "_speed", "n_black", "config_id"], kind="stable"
    )
    first = keyed.groupby("seed_key", dropna=False, sort=True).head(1)
    return [{"seed": s, "config_id": c} for s, c in zip(first["seed_key"], first["config_id"])]


def _dimension_gaps(ranking: pd.DataFrame, scores: pd.DataFrame, best: pd.Series | None) -> list[str]:
    """Choices the grid did not vary on this device kind."""
    notes = []
    mp = ranking[ranking["amp_level"] != "O0"]
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
        ids = str(best["trial_ids"]).split()
        steps = scores.loc[scores["trial_id"].isin(ids), "steps"].dropna()
        if len(steps):
            notes.append(
                f"trials ran {int(steps.max())} steps: instability that starts later in training is not covered"
            )
        if best["n_seeds"] < FEW_SEEDS:
            n = int(best["n_seeds"])
            notes.append(
                f"{n} seed{'s' if n != 1 else ''} per configuration: a divergence that hits fewer than about 1 run "
                f"in {n} can go unseen"
            )
    return notes


def next_steps(ranking: pd.DataFrame, scores: pd.DataFrame) -> list[str]:
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
    layers = sorted({t.split(" @ ")[0] for t in ranking.get("first_nonfinite_layers", []) if t})
    if layers:
        tips.append(
            "black-list the layer classes that hold the parameters whose gradients went non-finite first: "
            + "; ".join(layers)
        )
    if (ranking["tier"] == _rank.TIER_SILENT).any():
        tips.append(
            "finite-but-worse runs usually overflow a normalisation's variance or a softmax/exp: "
            "keep the normalisation and loss layers in float32"
        )
    if (ranking["clip_class"] == _rank.CLIP_TOO_SMALL).any():
        p90 = scores.loc[scores["reference"], "p90_grad_norm"].median()
        hint = f" (90th percentile of the FP32 pre-clip norm: {p90:.3g})" if np.isfinite(p90) else ""
        tips.append(f"raise the clip thresholds that fire on nearly every step{hint}")
    if "O1" not in set(scores["amp_level"]):
        tips.append("try `amp_level: [O1]`, which casts only matmul/conv-type layers")
    tips.append("run more steps or seeds if divergence is rare")
    return tips


def _agreement(
    scores: pd.DataFrame, ranking: pd.DataFrame, best: pd.Series
) -> tuple[int, int, list[dict[str, Any]], list[str]]:
    candidates = ranking[ranking["tier"] == _rank.TIER_STABLE]
    # only seeds on which the recommendation itself ran can agree or disagree with it
    ids = set(str(best["trial_ids"]).split())
    own = scores.loc[scores["trial_id"].isin(ids), "seed"]
    seeds = {None if pd.isna(x) else x for x in own}
    picks = [p for p in seed_picks(scores, candidates) if p["seed"] in seeds]
    for pick in picks:
        pick["agrees"] = pick["config_id"] == best["config_id"]
    agreeing = sum(p["agrees"] for p in picks)
    undecided = []
    others = [p for p in picks if not p["agrees"]]
    if others:
        shown = "; ".join(f"seed {p['seed']}: {p['config_id']}" for p in others[:3])
        more = f" and {len(others) - 3} more" if len(others) > 3 else ""
        undecided.append(
            f"{len(others)} of {len(picks)} seeds rank another stable configuration first on their own "
            f"({shown}{more}): the order among the stable configurations is partly seed noise"
        )
    return agreeing, len(picks), picks, undecided


def kind_recommendation(ranking: pd.DataFrame, scores: pd.DataFrame) -> dict[str, Any]:
    """The ``recommendations[]`` entry for one device kind (``ranking`` and
    ``scores`` restricted to that kind). Values are JSON-ready."""
    kind = str(ranking["device_kind"].iloc[0]) if len(ranking) else ""
    if ranking.empty:
        return clean(
            {
                "device_kind": kind,
                "status": STATUS_NO_TRIALS,
                "config": None,
                "text": "Nothing to recommend: no committed trial could be ranked.",
                "evidence": {"statements": []},
                "seeds_agreeing": 0,
                "seeds_total": 0,
                "seed_picks": [],
                "undecided": [],
                "next_steps": [],
                "code": None,
            }
        )
    recommended = ranking[ranking["recommended"]]
    fp32 = fp32_row(ranking)
    if recommended.empty:
        return _no_stable(ranking, scores, fp32, kind)
    best = recommended.iloc[0]
    fp32 = fp32_row(ranking, best)
    neighbours, undecided = _neighbours(ranking, best)
    fp32_facts, fp32_text = _fp32_comparison(best, fp32)
    runner, close_call = _runner_up(ranking, best)
    agreeing, total, picks, seed_notes = _agreement(scores, ranking, best)
    n = int(best["n_trials"])
    runs = "seeds" if best["n_trials"] == best["n_seeds"] else "trials"
    statements = [
        f"stable on {n}/{n} {runs}; " + _rank.clip_phrase(best) + "; " + (_rank._progress_phrase(best) or ""),
        fp32_text,
        *[nb["text"] for nb in neighbours],
    ]
    if total:
        statements.append(
            f"{agreeing} of {total} seeds rank it first among the stable configurations on their own"
        )
    if runner is not None:
        statements.append(runner["text"])
    undecided = undecided + close_call + seed_notes + _dimension_gaps(ranking, scores, best)
    return clean(
        {
            "device_kind": kind,
            "status": STATUS_RECOMMENDED,
            "config": config_dict(best),
            "config_id": best["config_id"],
            "text": f"Use {describe(best)}.",
            "rank": int(best["rank"]),
            "rule": best["rule"],
            "evidence": {
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
                "neighbours": neighbours,
                "runner_up": runner,
                "statements": [s for s in statements if s],
            },
            "seeds_agreeing": agreeing,
            "seeds_total": total,
            "seed_picks": picks,
            "undecided": undecided,
            "next_steps": [],
            "code": snippets(best),
        }
    )


def _no_stable(
    ranking: pd.DataFrame, scores: pd.DataFrame, fp32: pd.Series | None, kind: str
) -> dict[str, Any]:
    mp = ranking[ranking["amp_level"] != "O0"]
    counts = mp["stability"].value_counts()
    summary = ", ".join(f"{int(v)} {k}" for k, v in counts.items())
    statements = [
        f"no mixed-precision configuration was stable on every seed and as good as FP32 "
        f"({len(mp)} tried: {summary or 'none'})"
    ]
    closest = None
    if len(mp):
        top = mp.iloc[0]
        closest = {
            **_row_facts(top),
            "rule": top["rule"],
            "text": f"closest: {top['config_id']}: {top['rule']}",
        }
        statements.append(closest["text"])
    if fp32 is not None:
        statements.append(f"FP32 ({fp32['config_id']}): {_summary(fp32)}")
    text = (
        "No mixed-precision configuration was stable. Keep training in FP32 for now"
        + (" (code below) " if fp32 is not None else " ")
        + "and try the next steps listed."
    )
    return clean(
        {
            "device_kind": kind,
            "status": STATUS_NO_STABLE,
            "config": None,
            "config_id": None,
            "text": text,
            "fallback": None
            if fp32 is None
            else {"config": config_dict(fp32), "config_id": fp32["config_id"]},
            "evidence": {
                "closest": closest,
                "fp32": None if fp32 is None else _row_facts(fp32),
                "statements": statements,
            },
            "seeds_agreeing": 0,
            "seeds_total": 0,
            "seed_picks": [],
            "undecided": _dimension_gaps(ranking, scores, None),
            "next_steps": next_steps(ranking, scores),
            "code": None if fp32 is None else snippets(fp32),
        }
    )
