"""The localized Cell of each configuration, from the ``anomalies`` table (docs/localization.md).

The table may be absent: older sweeps and completed trials have none. A configuration's seeds that agree
on (cell, class, phase, kind) are reported once; wording words them (:mod:`analysis.wording._localization`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from ampsweep.contracts import ANOMALIES_SCHEMA, FLOAT16_MAX, NUMERICS, number

from .._model import Localization
from ._load import files_by_trial, resolve

TABLE = "anomalies"
_AGREE_ON = ("cell", "cell_class", "phase", "kind")


def anomaly_rows(sweep_dir: str | Path, trial_ids: list[str]) -> pd.DataFrame:
    """Every anomaly row of the given trials, with a ``trial_id`` column (empty if none)."""
    loc = resolve(sweep_dir)
    frames = []
    for trial_id, paths in files_by_trial(loc, TABLE, set(trial_ids)).items():
        for path in paths:
            with loc.fs.open_input_file(path) as handle:
                table = pq.ParquetFile(handle).read()
            frame = table.to_pandas()
            frame.insert(0, "trial_id", trial_id)
            frames.append(frame)
    columns = ["trial_id", *ANOMALIES_SCHEMA.names]
    if not frames:
        return pd.DataFrame({c: pd.Series([], dtype="object") for c in columns})
    return pd.concat(frames, ignore_index=True).reindex(columns=columns)


def read_anomalies(sweep_dir: str | Path, trial_ids: list[str]) -> pd.DataFrame:
    """Each trial's culprit: the row that names a Cell (cause ``numerics``, or none recorded: older
    sweeps) of its last run, the first Cell caught (later rows are consequences). Rows of other causes
    are faults (``analysis.compute._faults``), which no configuration is judged by."""
    out = anomaly_rows(sweep_dir, trial_ids)
    out = out[out["cause"].isna() | (out["cause"] == NUMERICS)]
    attempt = pd.to_numeric(out["attempt"], errors="coerce").fillna(1)
    out = out.assign(_attempt=-attempt).sort_values(["trial_id", "_attempt", "replay_step"], kind="stable")
    return out.drop_duplicates("trial_id", keep="first").drop(columns="_attempt").reset_index(drop=True)


def _median(values: pd.Series) -> float | None:
    finite = pd.to_numeric(values, errors="coerce").to_numpy(dtype="float64")
    finite = finite[np.isfinite(finite)]
    return float(np.median(finite)) if finite.size else None


def _text(value: object) -> str:
    return "" if value is None or (isinstance(value, float) and np.isnan(value)) else str(value)


def _int(value: object) -> int | None:
    found = number(value)
    return None if found is None else int(found)


def localizations(
    rows: pd.DataFrame, seeds: dict[str, object], config_id: str = "", devices: int = 1
) -> list[Localization]:
    """Fold one configuration's anomaly rows: one :class:`Localization` per agreeing group.

    ``seeds`` maps trial id to seed; ``devices``: the devices each trial ran on
    (a gang's rank is named only above 1). Groups with more seeds come first;
    in a group, the rank is its earliest row's.
    """
    if rows.empty:
        return []
    keyed = rows.assign(**{k: rows[k].map(_text) for k in _AGREE_ON})
    out: list[Localization] = []
    for key, group in keyed.groupby(list(_AGREE_ON), sort=True, dropna=False):
        cell, cell_class, phase, kind = key
        group_seeds = tuple(sorted({seeds.get(t) for t in group["trial_id"]}, key=str))
        out.append(
            Localization(
                kind=kind,
                cell=cell,
                cell_class=cell_class,
                phase=phase,
                seeds=group_seeds,
                n_trials=len(group),
                replay_step=_median(group["replay_step"]),
                input_dtype=_text(group["input_dtype"].iloc[0]),
                output_dtype=_text(group["output_dtype"].iloc[0]),
                max_abs=_median(group["max_abs"]),
                fp32_max_abs=_median(group["fp32_max_abs"]),
                rel_error=_median(group["rel_error"]),
                zero_fraction=_median(group["zero_fraction"]),
                note=_text(group["note"].iloc[0]),
                config_id=config_id,
                inner_op=_text(group["inner_op"].iloc[0]),
                input_max_abs=_median(group["input_max_abs"]),
                inner_max_abs=_median(group["inner_max_abs"]),
                finite=None if (finite := _int(group["finite"].iloc[0])) is None else bool(finite),
                rank=_int(group["rank"].iloc[0]),
                ranks_broken=_int(group["ranks_broken"].iloc[0]),
                devices=devices,
            )
        )
    return sorted(out, key=lambda loc: (-loc.n_trials, loc.cell))


#: The replay's notes (``jobs.localization``) that say why there is no FP32 value: the trial was FP32
#: itself, or its FP32 twin broke first. The analysis reads only Parquet, so it matches the words.
_NOTE_FP32_ITSELF = "FP32 itself"
_NOTE_FP32_BROKE_FIRST = "FP32 replay went non-finite before this step"


def in_fp32(loc: Localization) -> bool:
    """Whether the localized trial was FP32 itself (O0): there is no FP32 to compare it with."""
    return _NOTE_FP32_ITSELF in loc.note


def fp32_broke_first(loc: Localization | None) -> bool:
    """Whether the replay has no FP32 value because the FP32 replay had gone non-finite first."""
    return loc is not None and _NOTE_FP32_BROKE_FIRST in loc.note


#: A non-finite output whose finite part stays below this share of float16's
#: maximum did not overflow at the output: something inside the Cell did.
BOUNDED_SHARE = 0.5
#: The largest finite value of each dtype a Cell may compute in, and how the limits below name it.
_DTYPE_MAX = {"float16": (FLOAT16_MAX, "65504"), "float32": (float(np.finfo(np.float32).max), "3.4e38")}
#: Inner primitives: the input beyond which they overflow a dtype, as a function of its maximum.
_OVERFLOW_AT = {
    "exp": (math.log, "ln"),
    "square": (math.sqrt, "sqrt"),
    "pow": (math.sqrt, "sqrt"),
    "mul": (math.sqrt, "sqrt"),
}


def overflow_limit(op: str, dtype: str) -> tuple[float, str] | None:
    """The input beyond which ``op`` overflows ``dtype`` and its words: (11.09, 'ln 65504'); None if unknown."""
    at, words = _OVERFLOW_AT.get(op.lower(), (None, ""))
    largest = _DTYPE_MAX.get(dtype)
    if at is None or largest is None:
        return None
    return at(largest[0]), f"{words} {largest[1]}"


def lost_precision(loc: Localization) -> bool:
    """A forward output that stayed finite but far from FP32's: precision was lost here, a later Cell overflowed."""
    return loc.kind == "nonfinite" and loc.phase == "forward" and loc.finite is True


def overflowed_inside(loc: Localization) -> bool:
    """A forward non-finite output whose finite values stay bounded: the overflow was inside the Cell."""
    if loc.kind != "nonfinite" or loc.phase != "forward" or lost_precision(loc):
        return False
    if loc.inner_op:
        return True
    return loc.max_abs is not None and loc.max_abs < BOUNDED_SHARE * FLOAT16_MAX
