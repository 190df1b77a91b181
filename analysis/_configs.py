"""Fold per-trial scores into one row per configuration (over seeds).

A configuration is everything the user can choose except the seed:
``CONFIG_KEYS``. Seeds exist to expose luck, so every figure is reported as a
median with its min/max spread, and a single bad seed makes a configuration
unstable.

Steps to target is a median in which a seed that never reached the target
counts as infinitely slow: a configuration where most seeds never get there
has no median (NaN) rather than the flattering median of its lucky seeds.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ._scores import BASELINE_LEVEL

CONFIG_KEYS = (
    "amp_level",
    "black_list_key",
    "clip",
    "loss_scale",
    "dtype",
    "device_kind",
)
#: trial-score column -> prefix of its ``_median``/``_min``/``_max`` columns.
SPREAD_FIGURES = {
    "clip_rate": "clip_rate",
    "steps_to_target": "steps_to_target",
    "final": "final_loss",
    "speed_vs_fp32": "speed_vs_fp32",
}


def config_label(
    amp_level: str,
    black_list_key: str,
    clip: float,
    loss_scale: str,
    dtype: str,
    device_kind: str,
) -> str:
    """One readable identifier, also the last-resort tie-breaker in the ranking."""
    clip_text = "off" if pd.isna(clip) else str(float(clip))
    return f"{amp_level} bl={black_list_key} clip={clip_text} ls={loss_scale} {dtype} {device_kind}"


def _median_never_counts(values: pd.Series) -> float:
    filled = values.astype("float64").fillna(np.inf).to_numpy()
    if filled.size == 0:
        return float("nan")
    median = float(np.median(filled))
    return median if np.isfinite(median) else float("nan")


def first_line(text: object) -> str:
    """The error's headline; tracebacks stay in the trials table, not the report."""
    if text is None or (isinstance(text, float) and np.isnan(text)):
        return ""
    for line in str(text).splitlines():
        if line.strip():
            return line.strip()
    return ""


def _first_error(errors: pd.Series) -> str:
    for text in errors.dropna():
        if first_line(text):
            return first_line(text)
    return ""


def config_scores(scores: pd.DataFrame, layers: dict[str, str] | None = None) -> pd.DataFrame:
    """Return one row per configuration from :func:`analysis.trial_scores` output.

    Only ranked trials are used (equivalent duplicates are not counted twice).
    ``layers`` optionally maps trial ids to their first non-finite layers,
    quoted as evidence for unstable configurations.
    """
    layers = layers or {}
    ranked = scores[scores["ranked"]]
    rows = []
    for key, group in ranked.groupby(list(CONFIG_KEYS), dropna=False, sort=True):
        row = dict(zip(CONFIG_KEYS, key))
        row["black_list"] = group["black_list"].iloc[0]
        row["config_id"] = config_label(*key)
        row["baseline"] = row["amp_level"] == BASELINE_LEVEL
        row["n_trials"] = len(group)
        row["n_seeds"] = int(group["seed"].nunique(dropna=False))
        row["n_completed"] = int((group["outcome"] == "completed").sum())
        row["n_diverged"] = int((group["outcome"] == "diverged").sum())
        row["n_failed"] = int((group["outcome"] == "failed").sum())
        row["divergence_rate"] = (row["n_diverged"] + row["n_failed"]) / len(group)
        bad = group[group["unstable"]]
        row["first_nonfinite_step_median"] = float(bad["first_nonfinite"].median()) if len(bad) else np.nan
        row["error"] = _first_error(group.loc[group["outcome"] == "failed", "error"])
        evidence = [layers[t] for t in bad["trial_id"] if t in layers]
        row["first_nonfinite_layers"] = evidence[0] if evidence else ""
        for figure, name in SPREAD_FIGURES.items():
            values = group[figure].astype("float64")
            finite = values[np.isfinite(values)]
            if figure == "steps_to_target":
                row[f"{name}_median"] = _median_never_counts(values)
            else:
                row[f"{name}_median"] = float(finite.median()) if len(finite) else np.nan
            row[f"{name}_min"] = float(finite.min()) if len(finite) else np.nan
            row[f"{name}_max"] = float(finite.max()) if len(finite) else np.nan
        row["n_reached_target"] = int(group["steps_to_target"].notna().sum())
        row["target_median"] = float(group["target"].median())
        row["steps_per_s_median"] = float(group["steps_per_s"].median())
        row["skipped_steps_median"] = float(group["skipped_steps"].median())
        row["loss_spikes_median"] = float(group["loss_spikes"].median())
        row["p90_grad_norm_median"] = float(group["p90_grad_norm"].median())
        row["n_black_listed"] = len(row["black_list"])
        row["trial_ids"] = " ".join(group["trial_id"])
        rows.append(row)
    return pd.DataFrame(rows)
