"""Underflow evidence: gradients float16 cannot hold, measured per parameter and per trial.

``tiny_loss`` weights its loss by 1e-6, so its gradients sit below float16's smallest
subnormal: under O2 they flush to zero, and a loss scale lifts them back into range.
"""

from __future__ import annotations

import math

import pyarrow.compute as pc
import pytest

from ampsweep.contracts import UNDERFLOW_EVIDENCE, underflow_excess
from ampsweep.jobs.training._trainer import run_trial
from tests._trial import trial_config

TINY_LOSS = "ampsweep.jobs.workloads.tiny_loss:make"


def _run(amp_level: str, loss_scale: str = "none"):
    config = trial_config(
        workload=TINY_LOSS, amp_level=amp_level, loss_scale=loss_scale, steps=12, layer_every=4
    )
    result = run_trial(config, TINY_LOSS)
    assert result.outcome == "completed", result.error
    return result


@pytest.fixture(scope="module")
def runs():
    return {
        name: _run(*args)
        for name, args in {
            "fp32": ("O0",),
            "o2": ("O2",),
            "o2_scaled": ("O2", "static:65536"),
        }.items()
    }


def test_float16_loses_the_gradients_and_fp32_shows_they_would_be_lost(runs):
    fp32_zero, fp32_under = runs["fp32"].gradient_fractions
    o2_zero, o2_under = runs["o2"].gradient_fractions
    assert fp32_zero is not None and fp32_zero < 0.05, "FP32's gradients are not zero"
    assert fp32_under > 0.5, "but most lie below 2^-24: float16 would flush them"
    assert o2_zero > 0.5, "under O2 they are zero"
    evidence = underflow_excess(o2_under, fp32_zero)
    assert evidence is not None and evidence >= UNDERFLOW_EVIDENCE


def test_a_loss_scale_removes_the_evidence(runs):
    _, scaled = runs["o2_scaled"].gradient_fractions
    assert underflow_excess(scaled, runs["fp32"].gradient_fractions[0]) < UNDERFLOW_EVIDENCE


def test_the_fractions_reach_the_trials_and_layers_tables(runs):
    result = runs["o2"]
    row = result.trial_row(sweep="s", equivalent_to=None, attempts=1)
    assert math.isclose(row.column("underflow_fraction")[0].as_py(), result.gradient_fractions[1])
    layers = result.layers
    assert layers.num_rows == 3 * len(set(layers.column("layer").to_pylist()))  # steps 0, 4, 8
    under = layers.column("underflow_fraction")
    assert pc.min(under).as_py() >= 0.0 and pc.max(under).as_py() <= 1.0
    assert pc.max(layers.column("zero_fraction")).as_py() > 0.5
