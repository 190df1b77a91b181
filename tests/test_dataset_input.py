"""A workload may hand over a mindspore.dataset pipeline; ampsweep repeats it over epochs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ampsweep.jobs import TrialConfig, build_workload
from ampsweep.jobs.training._batches import batch_stream, is_dataset
from ampsweep.jobs.training._trainer import run_trial

EXAMPLE = Path(__file__).parent.parent / "examples" / "dataset_workload.py"
REFERENCE = f"{EXAMPLE}:make"


def _config(steps: int, seed: int = 0, level: str = "O0") -> TrialConfig:
    return TrialConfig(
        workload=REFERENCE,
        steps=steps,
        abort_after=5,
        amp_level=level,
        black_list=(),
        clip=1.0,
        loss_scale="none",
        dtype="float16",
        seed=seed,
    )


def test_a_pipeline_shorter_than_steps_is_repeated_over_epochs():
    workload = build_workload(REFERENCE, 0, {})
    assert is_dataset(workload.batches)
    per_epoch = workload.batches.get_dataset_size()
    assert per_epoch == 6
    batches = list(batch_stream(workload.batches, 3 * per_epoch + 2))
    assert len(batches) == 3 * per_epoch + 2
    assert [tuple(b[0].shape) for b in batches[:2]] == [(16, 8), (16, 8)]
    # the map ran: features are scaled by 0.5 (no |x| near the unscaled tails)
    first_epoch = np.concatenate([b[0].asnumpy() for b in batches[:per_epoch]])
    second_epoch = np.concatenate([b[0].asnumpy() for b in batches[per_epoch : 2 * per_epoch]])
    assert sorted(first_epoch.sum(1).round(4)) == sorted(second_epoch.sum(1).round(4)), "same rows each epoch"


def test_a_trial_longer_than_the_pipeline_completes_and_learns():
    result = run_trial(_config(steps=40), REFERENCE)
    assert result.outcome == "completed", result.error
    losses = result.steps.column("loss").to_numpy()
    assert len(losses) == 40 and np.isfinite(losses).all()
    assert losses[-5:].mean() < losses[:5].mean()


def test_the_same_seed_gives_the_same_epochs():
    first = run_trial(_config(steps=14, seed=3), REFERENCE).steps.column("loss").to_pylist()
    again = run_trial(_config(steps=14, seed=3), REFERENCE).steps.column("loss").to_pylist()
    assert first == again
