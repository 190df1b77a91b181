"""The tiny decoder: mindformers' dtype fields as arguments; O2 breaks its RMSNorm, layernorm_compute_type fixes it."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from ampsweep.jobs import TrialConfig, TrialResult, Workload
from ampsweep.jobs.workloads import tiny_decoder


def _run(level: str, steps: int, abort_after: int = 10, **workload_args: Any) -> TrialResult:
    from ampsweep.jobs.training._trainer import run_trial

    config = TrialConfig(
        workload="ampsweep.jobs.workloads.tiny_decoder:make",
        steps=steps,
        abort_after=abort_after,
        amp_level=level,
        black_list=(),
        clip=None,
        loss_scale="none",
        dtype="float16",
        seed=0,
        workload_args=workload_args,
        localize=False,
    )
    return run_trial(config, config.workload)


def test_the_factory_builds_a_llama_shaped_decoder_on_a_deterministic_stream():
    workload = tiny_decoder.make(seed=0)
    assert isinstance(workload, Workload)
    names = {name for name, _ in workload.network.cells_and_names()}
    assert {"tok_embeddings", "layers.0.attention_norm", "layers.0.attention.wq", "norm", "lm_head"} <= names
    assert "layers.1.feed_forward.w3" in names

    first = list(itertools.islice(workload.batches, 3))
    again = list(itertools.islice(tiny_decoder.make(seed=0).batches, 3))
    for (tokens, labels), (tokens_again, labels_again) in zip(first, again, strict=True):
        assert tokens.dtype == np.int32 and tokens.shape == (8, 32)
        np.testing.assert_array_equal(tokens, tokens_again)
        np.testing.assert_array_equal(labels, labels_again)
        np.testing.assert_array_equal(tokens[:, 1:], labels[:, :-1])  # labels are the next tokens
    assert not np.array_equal(first[0][0], next(iter(tiny_decoder.make(seed=1).batches))[0])

    forked = next(iter(tiny_decoder.make(seed=0, start_step=2).batches))
    np.testing.assert_array_equal(forked[0], first[2][0])


@pytest.mark.parametrize("name", tiny_decoder.PRECISION_ARGS)
def test_a_value_that_is_not_a_dtype_is_refused_naming_the_argument(name):
    with pytest.raises(ValueError, match=rf"{name}='fp16'.*float16"):
        tiny_decoder.make(seed=0, **{name: "fp16"})


@pytest.mark.slow
def test_o2_breaks_in_rmsnorm_and_float32_statistics_fix_it():
    broken = _run("O2", steps=8, abort_after=2)
    assert broken.outcome == "diverged", broken.error
    assert broken.first_nonfinite_step is not None and broken.first_nonfinite_step <= 2

    fixed = _run("O2", steps=60, layernorm_compute_type="float32")
    assert fixed.outcome == "completed", fixed.error
    loss = fixed.steps.column("loss").to_numpy()
    assert len(loss) == 60 and np.isfinite(loss).all()
    assert loss[-10:].mean() < 0.8 * loss[:10].mean()
