"""Order configurations and say, in words, why each sits where it does.

The ordering is lexicographic over these keys, first difference wins:

1. **Stability class** (``tier``):
   0 stable mixed precision (no diverged or failed seed, not a silent failure);
   1 FP32 baseline (``O0``) - shown for reference, never recommended while a
   class-0 configuration exists;
   2 silent failure - finite on every seed but learns clearly worse than FP32:
   median final loss > ``SILENT_LOSS_FACTOR`` x FP32 final loss +
   ``SILENT_LOSS_MARGIN``, or no seed reaches the target loss while FP32 does
   (on at least half its seeds);
   3 unstable - at least one seed diverged or failed.
2. **Divergence rate** (diverged + failed seeds / seeds), lower first.
3. **Clip class**, from the median clip rate over seeds:
   in band (0, ``HEALTHY_CLIP_MAX``] < no clipping < never fires (rate 0,
   the threshold is inert) < rate unknown < fires too often
   (``HEALTHY_CLIP_MAX``, ``TOO_SMALL_CLIP``] < threshold too small
   (> ``TOO_SMALL_CLIP``: it rescales nearly every step, i.e. it is a
   learning-rate cut, not a guard against rare spikes).
4. **Steps to target**, median over seeds, fewer first; never reached last.
5. **Final loss**, median, lower first.
6. **Speed vs FP32**, median, higher first.
7. **Black-listed layer types**, fewer first (fewer layers kept in FP32).
8. Configuration label, only so the order is deterministic.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ._scores import Fp32Reference

HEALTHY_CLIP_MAX = 0.3
TOO_SMALL_CLIP = 0.9
SILENT_LOSS_FACTOR = 2.0
SILENT_LOSS_MARGIN = 0.1

TIER_STABLE, TIER_FP32, TIER_SILENT, TIER_UNSTABLE = 0, 1, 2, 3
TIER_LABELS = {
    TIER_STABLE: "stable",
    TIER_FP32: "fp32 baseline",
    TIER_SILENT: "silent failure",
    TIER_UNSTABLE: "unstable",
}
CLIP_IN_BAND, CLIP_OFF, CLIP_NEVER, CLIP_UNKNOWN, CLIP_OFTEN, CLIP_TOO_SMALL = range(6)
CLIP_LABELS = {
    CLIP_IN_BAND: "in band",
    CLIP_OFF: "no clipping",
    CLIP_NEVER: "never fires",
    CLIP_UNKNOWN: "rate unknown",
    CLIP_OFTEN: "fires too often",
    CLIP_TOO_SMALL: "threshold too small",
}

_SORT_KEYS = (
    "_k_tier",
    "_k_div",
    "_k_clip",
    "_k_target",
    "_k_final",
    "_k_speed",
    "_k_black",
    "config_id",
)


def _pct(rate: float) -> str:
    if 0 < rate < 0.01:
        return "<1 %"
    return f"{rate * 100:.0f} %"


def _num(value: float) -> str:
    return f"{value:.3g}"


def clip_class(clip: float, rate: float) -> int:
    """Where a clip threshold's firing rate puts it in criterion 3."""
    if pd.isna(clip):
        return CLIP_OFF
    if pd.isna(rate):
        return CLIP_UNKNOWN
    if rate == 0:
        return CLIP_NEVER
    if rate <= HEALTHY_CLIP_MAX:
        return CLIP_IN_BAND
    if rate <= TOO_SMALL_CLIP:
        return CLIP_OFTEN
    return CLIP_TOO_SMALL


def clip_text(clip: float) -> str:
    """'1.0' rather than '1': reads as the threshold the user typed in the spec."""
    return "off" if pd.isna(clip) else str(float(clip))


def clip_phrase(row: pd.Series) -> str:
    """The clip figure in words, e.g. 'clip 1 fires on 97 % of steps: threshold too small'."""
    cls = row["clip_class"]
    if cls == CLIP_OFF:
        return "no clipping"
    head = f"clip {clip_text(row['clip'])}"
    rate = row["clip_rate_median"]
    if cls == CLIP_UNKNOWN:
        return f"{head}: clip rate unknown (no finite steps recorded)"
    if cls == CLIP_NEVER:
        return f"{head} never fires (inert)"
    spread = ""
    low, high = _pct(row["clip_rate_min"]), _pct(row["clip_rate_max"])
    if low != high:
        spread = f", {low}-{high} over {_runs(row)}"
    text = f"{head} fires on {_pct(rate)} of steps{spread}"
    if cls == CLIP_IN_BAND:
        return f"{text} (healthy band: up to {_pct(HEALTHY_CLIP_MAX)})"
    if cls == CLIP_OFTEN:
        return f"{text}: too often (healthy band: up to {_pct(HEALTHY_CLIP_MAX)})"
    return f"{text}: threshold too small"


def _runs(row: pd.Series) -> str:
    """'seeds' normally; 'trials' if a seed was run more than once in one configuration."""
    return "seeds" if row["n_trials"] == row["n_seeds"] else "trials"


def _silent_reason(row: pd.Series, ref: Fp32Reference) -> str:
    final = row["final_loss_median"]
    if np.isfinite(final) and np.isfinite(ref.final_loss):
        limit = SILENT_LOSS_FACTOR * ref.final_loss + SILENT_LOSS_MARGIN
        if final > limit:
            return (
                f"median final loss {_num(final)} > {SILENT_LOSS_FACTOR:g} x FP32 "
                f"{_num(ref.final_loss)} + {SILENT_LOSS_MARGIN:g}"
            )
    if row["n_reached_target"] == 0 and ref.reached_target and pd.notna(row["target_median"]):
        return f"never reaches the target loss {_num(row['target_median'])} while FP32 does"
    return ""


def _tier(row: pd.Series, ref: Fp32Reference) -> tuple[int, str]:
    if row["n_diverged"] + row["n_failed"] > 0:
        return TIER_UNSTABLE, ""
    reason = _silent_reason(row, ref)
    if reason:
        return TIER_SILENT, reason
    return (TIER_FP32 if row["baseline"] else TIER_STABLE), ""


def _unstable_phrase(row: pd.Series) -> str:
    n = row["n_trials"]
    parts = []
    if row["n_diverged"]:
        part = f"diverged on {row['n_diverged']}/{n} {_runs(row)}"
        if np.isfinite(row["first_nonfinite_step_median"]):
            part += f" (first non-finite step median {row['first_nonfinite_step_median']:.0f})"
        parts.append(part)
    if row["n_failed"]:
        part = f"failed on {row['n_failed']}/{n} {_runs(row)}"
        if row["error"]:
            part += f" ({row['error']})"
        parts.append(part)
    text = "; ".join(parts)
    if row["first_nonfinite_layers"]:
        text += f"; first non-finite gradients in {row['first_nonfinite_layers']}"
    return text


def _progress_phrase(row: pd.Series) -> str:
    bits = []
    if np.isfinite(row["steps_to_target_median"]):
        spread = ""
        if row["steps_to_target_min"] != row["steps_to_target_max"]:
            spread = f", {row['steps_to_target_min']:.0f}-{row['steps_to_target_max']:.0f}"
        bits.append(
            f"reaches target {_num(row['target_median'])} in {row['steps_to_target_median']:.0f} steps "
            f"(median{spread})"
        )
    elif pd.notna(row["target_median"]):
        bits.append(
            f"reaches target {_num(row['target_median'])} on only "
            f"{row['n_reached_target']}/{row['n_trials']} {_runs(row)}"
        )
    if np.isfinite(row["final_loss_median"]):
        bits.append(f"final loss {_num(row['final_loss_median'])}")
    if np.isfinite(row["speed_vs_fp32_median"]):
        bits.append(f"{row['speed_vs_fp32_median']:.2f}x FP32 speed")
    return ", ".join(bits)


def _description(row: pd.Series, any_stable_mp: bool) -> str:
    tier = row["tier"]
    clip = clip_phrase(row)
    if tier == TIER_UNSTABLE:
        text = _unstable_phrase(row)
        return f"{text}; {clip}" if row["clip_class"] in (CLIP_OFTEN, CLIP_TOO_SMALL) else text
    if tier == TIER_SILENT:
        text = f"finite on all {row['n_trials']} {_runs(row)} but learns clearly worse than FP32: {row['silent_reason']} (silent failure)"
        return f"{text}; {clip}" if row["clip_class"] in (CLIP_OFTEN, CLIP_TOO_SMALL) else text
    progress = _progress_phrase(row)
    head = f"stable on {row['n_trials']}/{row['n_trials']} {_runs(row)}; {clip}"
    if progress:
        head += f"; {progress}"
    if tier == TIER_FP32:
        why = (
            "not recommended because a stable mixed-precision configuration exists"
            if any_stable_mp
            else "no mixed-precision configuration is stable, so this is the fallback"
        )
        return f"FP32 baseline (O0), {why}; {head}"
    return head


def _placement(prev: pd.Series, row: pd.Series) -> str:
    """Name the first criterion that separates this row from the one above it."""
    k = int(prev["rank"])
    if row["_k_tier"] != prev["_k_tier"]:
        return f"after #{k} because '{row['stability']}' ranks below '{prev['stability']}'"
    if row["_k_div"] != prev["_k_div"]:
        return f"after #{k}: more seeds diverged or failed ({_pct(row['_k_div'])} vs {_pct(prev['_k_div'])})"
    if row["_k_clip"] != prev["_k_clip"]:
        return f"after #{k}: clipping '{row['clip_label']}' ranks below '{prev['clip_label']}'"
    if row["_k_target"] != prev["_k_target"]:
        if math.isinf(row["_k_target"]):
            return f"after #{k}: the median seed never reaches the target"
        return f"after #{k}: slower to target ({row['_k_target']:.0f} vs {prev['_k_target']:.0f} steps)"
    if row["_k_final"] != prev["_k_final"]:
        if math.isinf(row["_k_final"]):
            return f"after #{k}: final loss unknown"
        return f"after #{k}: higher final loss ({_num(row['final_loss_median'])} vs {_num(prev['final_loss_median'])})"
    if row["_k_speed"] != prev["_k_speed"]:
        if math.isinf(row["_k_speed"]):
            return f"after #{k}: speed vs FP32 unknown"
        return f"after #{k}: slower ({-row['_k_speed']:.2f}x vs {-prev['_k_speed']:.2f}x FP32)"
    if row["_k_black"] != prev["_k_black"]:
        return f"after #{k}: more layer types kept in FP32 ({row['_k_black']} vs {prev['_k_black']})"
    return f"tied with #{k} on every criterion; ordered by name"


def _inf_if_nan(values: pd.Series) -> pd.Series:
    return values.astype("float64").fillna(np.inf)


def rank_configs(configs: pd.DataFrame, reference: Fp32Reference) -> pd.DataFrame:
    """Return ``configs`` sorted by the module's criteria with ``rank``, ``rule``,
    ``stability``, ``clip_label`` and ``recommended`` added.

    ``recommended`` is true for at most one row: the best stable
    mixed-precision configuration. When there is none, no row is recommended
    and the report says so rather than promoting FP32 or an unstable one.
    """
    if configs.empty:
        return configs.assign(rank=[], rule=[], stability=[], recommended=[])
    frame = configs.copy()
    tiers = [_tier(row, reference) for _, row in frame.iterrows()]
    frame["tier"] = [t for t, _ in tiers]
    frame["silent_reason"] = [r for _, r in tiers]
    frame["stability"] = frame["tier"].map(TIER_LABELS)
    frame["clip_class"] = [clip_class(c, r) for c, r in zip(frame["clip"], frame["clip_rate_median"])]
    frame["clip_label"] = frame["clip_class"].map(CLIP_LABELS)
    frame["_k_tier"] = frame["tier"]
    frame["_k_div"] = frame["divergence_rate"]
    frame["_k_clip"] = frame["clip_class"]
    frame["_k_target"] = _inf_if_nan(frame["steps_to_target_median"])
    frame["_k_final"] = _inf_if_nan(frame["final_loss_median"])
    frame["_k_speed"] = _inf_if_nan(-frame["speed_vs_fp32_median"])
    frame["_k_black"] = frame["n_black_listed"]
    frame = frame.sort_values(list(_SORT_KEYS), kind="stable").reset_index(drop=True)
    frame["rank"] = np.arange(1, len(frame) + 1)
    any_stable_mp = bool((frame["tier"] == TIER_STABLE).any())
    frame["recommended"] = False
    if any_stable_mp:
        frame.loc[int(np.flatnonzero(frame["tier"] == TIER_STABLE)[0]), "recommended"] = True
    rules = []
    for i, row in frame.iterrows():
        text = _description(row, any_stable_mp)
        if i == 0:
            text += "; ranked first" + (" (recommended)" if row["recommended"] else "")
        else:
            text += "; " + _placement(frame.iloc[i - 1], row)
        rules.append(text)
    frame["rule"] = rules
    return frame.drop(columns=[c for c in _SORT_KEYS if c.startswith("_k_")])
