"""Fold per-trial scores into one row per configuration (over seeds).

A configuration (:class:`~ampsweep.contracts.Configuration`) is everything but the seed: every figure is a
median with its min/max spread, kept per seed too (``per_seed``) for the tie rule, and one bad seed makes a
configuration unstable. A row is keyed by ``config_id`` (every choice spelled) and named by ``label`` (only
the choices that differ between the rows). In the steps-to-target median a seed that never reached the
target counts as infinitely slow, so most seeds missing it gives NaN, not the lucky seeds' median.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from ampsweep.contracts import (
    FP32_LEVEL,
    LOSS_INSIDE,
    NAME_SEPARATOR,
    Configuration,
    Outcome,
    Verdict,
    black_list_value,
    configuration_verdict,
    loss_placement_name,
    parse_loss_scale,
)

from ._anomalies import localizations
from ._load import configurations

#: how much a loss scale asks of the training script, for the ranking's last tie-break (``loss_scaling``)
LOSS_SCALING_ORDER = {"none": 0, "static": 1, "dynamic": 2}

#: per-trial score columns kept per seed for the tie rule (``per_seed[figure][seed]``)
PER_SEED_FIGURES = ("steps_to_target", "final", "speed_vs_fp32", "clip_rate")
#: trial-score column -> prefix of its ``_median``/``_min``/``_max`` columns.
SPREAD_FIGURES = {
    "clip_rate": "clip_rate",
    "steps_to_target": "steps_to_target",
    "final": "final_loss",
    "speed_vs_fp32": "speed_vs_fp32",
}
#: the choices a configuration's ``label`` names only when they differ between the rows
_MAY_VARY = ("dtype", "loss_placement", "device_kind")


def as_run(config: Configuration) -> str:
    """'as run: float16, black list CustomNorm, loss inside': what an O0 name leaves out, for O0 rows
    that would otherwise share one name."""
    return (
        f"as run: {config.dtype}, black list {black_list_value(config.black_list)}, "
        f"{loss_placement_name(config.loss_placement)}"
    )


def _unique_ids(configs: list[Configuration]) -> list[str]:
    """Each configuration's id. O0 rows that differ only in what O0 ignores (black list, dtype, loss
    placement) share a name; where the planner found no equivalent to fold such a row into, its id also
    says what it ran with."""
    ids = [c.id for c in configs]
    shared = {i for i, n in Counter(ids).items() if n > 1}
    return [f"{i}{NAME_SEPARATOR}{as_run(c)}" if i in shared else i for i, c in zip(ids, configs)]


def varying(ranking: pd.DataFrame) -> frozenset[str]:
    """Which of dtype, loss placement and device kind differ between the ranking's rows."""
    out = set()
    for column in _MAY_VARY:
        if column in ranking.columns and ranking[column].nunique(dropna=False) > 1:
            out.add(column)
    mixed = ranking[ranking["amp_level"] != FP32_LEVEL] if "amp_level" in ranking.columns else ranking
    if "dtype" in out and len(mixed) and mixed["dtype"].nunique() == 1:
        out.discard("dtype")  # O0 rows carry a dtype they never use
    return frozenset(out)


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


def _median_range(values: np.ndarray) -> tuple[float, float, float]:
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


def _fp32_part(ranked: pd.DataFrame, idx: np.ndarray) -> tuple[float, tuple[str, ...] | None]:
    """What the configuration keeps in FP32: parameter elements and outermost Cell paths (NaN, None: unknown).

    Its trials share one graph structure, so the first recorded value is
    every seed's; a sweep written before the columns has none.
    """
    params, paths = float("nan"), None
    if "fp32_params" in ranked.columns:
        known = ranked["fp32_params"].iloc[idx].astype("float64").dropna()
        params = float(known.max()) if len(known) else params
    if "fp32_cell_paths" in ranked.columns:
        for value in ranked["fp32_cell_paths"].iloc[idx]:
            if isinstance(value, (list, tuple, np.ndarray)):
                return params, tuple(sorted(str(v) for v in value))
    return params, paths


def _not_applicable_configs(scores: pd.DataFrame) -> pd.Series:
    """Trials of a configuration some of whose trials could not apply their black list.

    Such a configuration was never run as asked, so it is left out of the
    ranking altogether (its other seeds are not evidence about it) and listed
    by :func:`not_applicable` instead.
    """
    bad = scores["outcome"] == Outcome.NOT_APPLICABLE.value
    if not bad.any():
        return pd.Series(False, index=scores.index)
    return (
        bad.groupby(pd.Series(configurations(scores), index=scores.index), sort=False)
        .transform("any")
        .astype(bool)
    )


def not_applicable(scores: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration whose black list could not be applied: what could not be tried, and why.

    Columns: ``name`` (the configuration, in the one naming style),
    ``reason`` (the first trial's one-line reason), ``trial_ids``. Empty when
    every black list could be applied.
    """
    columns = ["name", "reason", "trial_ids"]
    if scores.empty or "outcome" not in scores.columns:
        return pd.DataFrame(columns=columns)
    bad = scores[(scores["outcome"] == Outcome.NOT_APPLICABLE.value) & scores["ranked"]]
    rows = []
    # a Series, not a list: pandas reads a one-element list as the names of grouping keys
    groups = bad.groupby(pd.Series(configurations(bad), index=bad.index), sort=False)
    for config, group in sorted(groups, key=lambda kv: kv[0].id):
        rows.append(
            {
                "name": config.name(),
                "reason": _first_error(group["error"]) or "its black list could not be applied",
                "trial_ids": " ".join(group["trial_id"]),
            }
        )
    return pd.DataFrame(rows, columns=columns)


def _largest(ranked: pd.DataFrame, idx: np.ndarray, column: str) -> int | None:
    """The largest value of an integer column over the configuration's trials; None where none has one."""
    if column not in ranked.columns:
        return None
    values = ranked[column].iloc[idx].astype("float64")
    return int(values.max()) if values.notna().any() else None


def config_scores(scores: pd.DataFrame, anomalies: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per configuration from the ranked trials of :func:`analysis.trial_scores`; ``anomalies`` gives
    each its ``localizations``. Groups are walked as index arrays over plain numpy columns: a sweep of
    thousands of trials would otherwise spend seconds in per-group pandas indexing.
    """
    by_trial = {} if anomalies is None or anomalies.empty else dict(tuple(anomalies.groupby("trial_id")))
    ranked = scores[scores["ranked"] & ~_not_applicable_configs(scores)].reset_index(drop=True)
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
    rows = []
    by_config: dict[Configuration, list[int]] = {}
    for i, config in enumerate(configurations(ranked)):
        by_config.setdefault(config, []).append(i)
    configs = sorted(by_config, key=lambda c: c.id)
    for config, identity in zip(configs, _unique_ids(configs)):
        idx = np.asarray(by_config[config])
        row = config.as_row()
        row["configuration"] = config
        row["config_id"] = identity
        row["baseline"] = config.computes_in_fp32
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
        # the devices each trial ran on (``devices_per_trial``; 1 before the column) and the global batch
        row["devices"] = _largest(ranked, idx, "devices") or 1
        row["global_batch"] = _largest(ranked, idx, "global_batch")
        rows_here = [by_trial[t] for t in trial_ids[idx] if t in by_trial]
        row["localizations"] = localizations(
            pd.concat(rows_here, ignore_index=True) if rows_here else pd.DataFrame(),
            dict(zip(trial_ids[idx], seeds[idx])),
            row["config_id"],
            int(row["devices"]),
        )
        row["per_seed"] = {f: _per_seed(num[f][idx], seeds[idx]) for f in PER_SEED_FIGURES}
        for figure, name in SPREAD_FIGURES.items():
            values = num[figure][idx]
            median, low, high = _median_range(values)
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
        row["fp32_params"], row["fp32_cell_paths"] = _fp32_part(ranked, idx)
        row["args_preference"] = ranked["args_preference"].iat[idx[0]] if "args_preference" in ranked else ""
        row["loss_inside"] = int(config.loss_placement == LOSS_INSIDE)
        row["loss_scaling"] = LOSS_SCALING_ORDER.get(parse_loss_scale(str(row["loss_scale"])).kind, 0)
        row["trial_ids"] = " ".join(trial_ids[idx])
        rows.append(row)
    frame = pd.DataFrame(rows)
    frame["clip"] = frame["clip"].astype("float64")  # no clip: NaN, as pandas reads it from a table
    varies = varying(frame)
    # the name a person reads: the optional parts only where they differ between the rows
    frame["label"] = [c.name(varies) for c in frame["configuration"]]
    return frame
