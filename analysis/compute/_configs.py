"""Fold per-trial scores into one row per configuration (over seeds).

A configuration is everything the user can choose except the seed:
``CONFIG_KEYS``. Seeds exist to expose luck, so every figure is reported as a
median with its min/max spread, and a single bad seed makes a configuration
unstable.

Every per-seed score is also kept per seed (``per_seed``), because the
ranking's tie rule compares configurations seed by seed. Anomaly rows
(``anomalies`` table) become the configuration's localized Cells.

Steps to target is a median in which a seed that never reached the target
counts as infinitely slow: a configuration where most seeds never get there
has no median (NaN) rather than the flattering median of its lucky seeds.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ampsweep.contracts import FP32_LEVEL, Verdict, configuration_verdict, parse_loss_scale

from ._anomalies import localizations
from ._load import DEFAULT_LOSS_PLACEMENT

#: how much a loss scale asks of the training script, for the ranking's last tie-break (``loss_scaling``)
LOSS_SCALING_ORDER = {"none": 0, "static": 1, "dynamic": 2}

CONFIG_KEYS = (
    "amp_level",
    "black_list_key",
    "clip",
    "loss_scale",
    "dtype",
    "device_kind",
    "loss_placement",
)
#: per-trial score columns kept per seed for the tie rule (``per_seed[figure][seed]``)
PER_SEED_FIGURES = ("steps_to_target", "final", "speed_vs_fp32", "clip_rate")
#: trial-score column -> prefix of its ``_median``/``_min``/``_max`` columns.
SPREAD_FIGURES = {
    "clip_rate": "clip_rate",
    "steps_to_target": "steps_to_target",
    "final": "final_loss",
    "speed_vs_fp32": "speed_vs_fp32",
}


def trial_config_ids(frame: pd.DataFrame) -> list[str]:
    """The configuration label of every row of a trials or scores frame."""
    return [config_label(*key) for key in zip(*(frame[k] for k in CONFIG_KEYS))]


def config_label(
    amp_level: str,
    black_list_key: str,
    clip: float,
    loss_scale: str,
    dtype: str,
    device_kind: str,
    loss_placement: str = DEFAULT_LOSS_PLACEMENT,
) -> str:
    """One readable identifier, also the last-resort tie-breaker in the ranking.

    The loss placement is named only when it is not the default, so labels of
    sweeps that never varied it read as they always did.
    """
    clip_text = "off" if pd.isna(clip) else str(float(clip))
    label = f"{amp_level} bl={black_list_key} clip={clip_text} ls={loss_scale} {dtype} {device_kind}"
    return label if loss_placement == DEFAULT_LOSS_PLACEMENT else f"{label} loss={loss_placement}"


def _median_never_counts(values: np.ndarray) -> float:
    filled = np.where(np.isnan(values), np.inf, values)
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


def _spread(values: np.ndarray) -> tuple[float, float, float]:
    finite = values[np.isfinite(values)]
    if not finite.size:
        return np.nan, np.nan, np.nan
    return float(np.median(finite)), float(finite.min()), float(finite.max())


def _nanmedian(values: np.ndarray) -> float:
    values = values[~np.isnan(values)]
    return float(np.median(values)) if values.size else np.nan


def _per_seed(values: np.ndarray, seeds: np.ndarray) -> dict[object, float]:
    """Median per seed (a seed run twice in one configuration counts once)."""
    out: dict[object, list[float]] = {}
    for seed, value in zip(seeds, values):
        out.setdefault(seed, []).append(value)
    return {s: _nanmedian(np.asarray(v, dtype="float64")) for s, v in out.items()}


def _silent_reason(silent: list[int], reasons: np.ndarray, seeds: np.ndarray, n: int) -> str:
    """Why the configuration counts as a silent failure: its silent seeds, each with the verdict's reason."""
    if not silent:
        return ""
    each = "; ".join(f"seed {seeds[i]}: {reasons[i]}" for i in silent)
    return f"{len(silent)}/{n} seeds learn clearly worse than FP32 ({each})"


def config_scores(scores: pd.DataFrame, anomalies: pd.DataFrame | None = None) -> pd.DataFrame:
    """Return one row per configuration from :func:`analysis.trial_scores` output.

    Only ranked trials are used (equivalent duplicates are not counted twice).
    ``anomalies`` (see :func:`analysis.read_anomalies`) gives each
    configuration its ``localizations``: the Cells its trials were localized
    to, one entry when its seeds agree.

    Groups are walked as index arrays over plain numpy columns: a sweep of
    thousands of trials would otherwise spend seconds in per-group pandas
    indexing.
    """
    by_trial = {} if anomalies is None or anomalies.empty else dict(tuple(anomalies.groupby("trial_id")))
    ranked = scores[scores["ranked"]].reset_index(drop=True)
    if ranked.empty:
        return pd.DataFrame()
    num = {
        name: ranked[name].to_numpy(dtype="float64", na_value=np.nan)
        for name in (
            *SPREAD_FIGURES,
            *PER_SEED_FIGURES,
            "first_nonfinite",
            "target",
            "steps_per_s",
            "skipped_steps",
            "loss_spikes",
            "p90_grad_norm",
        )
    }
    outcome = ranked["outcome"].to_numpy(dtype=object)
    unstable = ranked["unstable"].to_numpy(dtype=bool)
    trial_ids = ranked["trial_id"].to_numpy(dtype=object)
    seeds = ranked["seed"].astype("object").where(ranked["seed"].notna(), None).to_numpy()
    errors = ranked["error"]
    verdicts = ranked["verdict"].to_numpy(dtype=object)
    reasons = ranked["verdict_reason"].to_numpy(dtype=object)
    black_lists = ranked["black_list"].to_numpy(dtype=object)
    rows = []
    groups = ranked.groupby(list(CONFIG_KEYS), dropna=False, sort=True).indices
    for key, idx in sorted(groups.items(), key=lambda kv: str(kv[0])):
        row = dict(zip(CONFIG_KEYS, key))
        row["black_list"] = black_lists[idx[0]]
        row["config_id"] = config_label(*key)
        row["baseline"] = row["amp_level"] == FP32_LEVEL
        row["n_trials"] = len(idx)
        row["n_seeds"] = len(set(seeds[idx]))
        out = outcome[idx]
        row["n_completed"] = int((out == "completed").sum())
        row["n_diverged"] = int((out == "diverged").sum())
        row["n_failed"] = int((out == "failed").sum())
        row["divergence_rate"] = (row["n_diverged"] + row["n_failed"]) / len(idx)
        row["verdict"] = configuration_verdict(verdicts[idx]).value
        silent = [i for i in idx if verdicts[i] == Verdict.SILENT.value]
        row["n_silent"] = len(silent)
        row["silent_reason"] = _silent_reason(silent, reasons, seeds, len(idx))
        bad = idx[unstable[idx]]
        row["first_nonfinite_step_median"] = _nanmedian(num["first_nonfinite"][bad]) if len(bad) else np.nan
        failed = idx[out == "failed"]
        row["error"] = _first_error(errors.iloc[failed]) if len(failed) else ""
        rows_here = [by_trial[t] for t in trial_ids[idx] if t in by_trial]
        row["localizations"] = localizations(
            pd.concat(rows_here, ignore_index=True) if rows_here else pd.DataFrame(),
            dict(zip(trial_ids[idx], seeds[idx])),
            row["config_id"],
        )
        row["per_seed"] = {f: _per_seed(num[f][idx], seeds[idx]) for f in PER_SEED_FIGURES}
        for figure, name in SPREAD_FIGURES.items():
            values = num[figure][idx]
            median, low, high = _spread(values)
            if figure == "steps_to_target":
                median = _median_never_counts(values)
            row[f"{name}_median"], row[f"{name}_min"], row[f"{name}_max"] = median, low, high
        row["n_reached_target"] = int((~np.isnan(num["steps_to_target"][idx])).sum())
        row["target_median"] = _nanmedian(num["target"][idx])
        row["steps_per_s_median"] = _nanmedian(num["steps_per_s"][idx])
        row["skipped_steps_median"] = _nanmedian(num["skipped_steps"][idx])
        row["loss_spikes_median"] = _nanmedian(num["loss_spikes"][idx])
        row["p90_grad_norm_median"] = _nanmedian(num["p90_grad_norm"][idx])
        row["n_black_listed"] = len(row["black_list"])
        row["loss_inside"] = int(row.get("loss_placement") == "inside")
        row["loss_scaling"] = LOSS_SCALING_ORDER.get(parse_loss_scale(str(row["loss_scale"])).kind, 0)
        row["trial_ids"] = " ".join(trial_ids[idx])
        rows.append(row)
    return pd.DataFrame(rows)
