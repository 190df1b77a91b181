"""The per-step metric arrays of one trial, laid out as the ``steps`` and ``layers`` tables."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ampsweep.contracts import FLOAT16_MAX, FP32_LEVEL, LAYERS_SCHEMA, STEPS_SCHEMA

from .._config import TrialConfig


def loss_ok(config: TrialConfig, loss: np.ndarray) -> np.ndarray:
    """Per step, whether the loss is a real number: finite, and under float16 not at ±65504.

    On a chip that saturates, a float16 loss that overflowed reads 65504 instead
    of inf; a trial computing in float16 counts that value as an overflow.
    """
    loss = np.asarray(loss, dtype=np.float64)
    ok = np.isfinite(loss)
    if config.amp_level != FP32_LEVEL and config.dtype == "float16":
        ok &= np.abs(loss) != FLOAT16_MAX
    return ok


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
    """One row per step that ran; ``step`` is global: a trial forked at N starts at N."""
    return pa.table(
        {
            "step": config.start_step + np.arange(len(metrics.loss), dtype=np.int64),
            "loss": metrics.loss,
            "grad_norm": metrics.grad_norm,
            "clipped": is_clipped(metrics.grad_norm, config.clip),
            "nonfinite": ~metrics.finite | ~loss_ok(config, metrics.loss),
            "skipped": skipped_steps(config, metrics.finite),
            "loss_scale": metrics.scale,
            "step_ms": metrics.step_ms.astype(np.float64),
        },
        schema=STEPS_SCHEMA,
    )


def layers_table(config: TrialConfig, metrics: Any) -> pa.Table:
    """Per-parameter gradient statistics of the sampled steps the trainer measured.

    ``metrics.layer_steps`` names the steps (counted from the trial's start; the
    table holds global steps, ``config.start_step`` added) the rows of ``layer_norm``,
    ``layer_absmax`` and ``layer_nonfinite`` belong to: every ``layer_every``-th step,
    and only these. A clipped, skipped or non-finite step is flagged in ``steps`` and
    explained by localization; statistics on every step cost +120-190 % of a bare step.
    """
    steps = np.asarray(metrics.layer_steps, dtype=np.int64)
    params = len(metrics.layer_names)
    sizes = np.maximum(np.asarray(metrics.layer_sizes, np.float64), 1.0)
    zeros = np.asarray(metrics.layer_zeros, np.float64).reshape(len(steps), params)
    return pa.table(
        {
            "step": np.repeat(config.start_step + steps, params),
            "layer": pa.array(metrics.layer_names * len(steps), pa.string()),
            "grad_norm": np.asarray(metrics.layer_norm).reshape(-1).astype(np.float64),
            "grad_absmax": np.asarray(metrics.layer_absmax).reshape(-1).astype(np.float64),
            "nonfinite": np.asarray(metrics.layer_nonfinite).reshape(-1).astype(np.int64),
            "zero_fraction": (zeros / sizes).reshape(-1),
            "underflow_fraction": ((zeros + np.asarray(metrics.layer_tiny, np.float64)) / sizes).reshape(-1),
        },
        schema=LAYERS_SCHEMA,
    )
