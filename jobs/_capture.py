"""The per-step metric arrays of one trial, laid out as the ``steps`` and ``layers`` tables."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ampsweep_contracts import LAYERS_SCHEMA, STEPS_SCHEMA

from ._config import TrialConfig


def is_clipped(grad_norm: np.ndarray, clip: float | None) -> np.ndarray:
    """The exact clipping decision the compiled step made (``norm > clip``)."""
    if clip is None:
        return np.zeros(len(grad_norm), dtype=bool)
    return np.asarray(grad_norm > clip) & np.isfinite(grad_norm)


def skipped_steps(config: TrialConfig, finite: np.ndarray) -> np.ndarray:
    """Steps whose update loss scaling skipped: every non-finite step, when scaling is on."""
    if config.loss_scale == "none":
        return np.zeros(len(finite), dtype=bool)
    return ~finite


def steps_table(config: TrialConfig, metrics: Any) -> pa.Table:
    """One row per step that ran."""
    return pa.table(
        {
            "step": np.arange(len(metrics.loss), dtype=np.int64),
            "loss": metrics.loss,
            "grad_norm": metrics.grad_norm,
            "clipped": is_clipped(metrics.grad_norm, config.clip),
            "nonfinite": ~metrics.finite | ~np.isfinite(metrics.loss),
            "skipped": skipped_steps(config, metrics.finite),
            "loss_scale": metrics.scale,
            "step_ms": metrics.step_ms.astype(np.float64),
        },
        schema=STEPS_SCHEMA,
    )


def layer_steps(config: TrialConfig, metrics: Any) -> np.ndarray:
    """Steps that reach the ``layers`` table: every ``layer_every``-th, and every anomalous one."""
    n = len(metrics.loss)
    sampled = (np.arange(n) % max(1, config.layer_every)) == 0
    anomalous = (
        is_clipped(metrics.grad_norm, config.clip)
        | skipped_steps(config, metrics.finite)
        | ~metrics.finite
        | ~np.isfinite(metrics.loss)
    )
    return np.flatnonzero(sampled | anomalous)


def layers_table(config: TrialConfig, metrics: Any) -> pa.Table:
    """Per-parameter gradient statistics of the steps ``layer_steps`` selects."""
    steps = layer_steps(config, metrics)
    params = len(metrics.layer_names)
    return pa.table(
        {
            "step": np.repeat(steps, params).astype(np.int64),
            "layer": pa.array(metrics.layer_names * len(steps), pa.string()),
            "grad_norm": metrics.layer_norm[steps].reshape(-1).astype(np.float64),
            "grad_absmax": metrics.layer_absmax[steps].reshape(-1).astype(np.float64),
            "nonfinite": metrics.layer_nonfinite[steps].reshape(-1).astype(np.int64),
        },
        schema=LAYERS_SCHEMA,
    )
