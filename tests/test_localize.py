"""Localization against real MindSpore replays: the Cell that produced inf/NaN, or departed from FP32.

Every expectation here is about a failure built into a workload for a known
reason (see each workload's docstring), never a recorded result.
"""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pytest

from ampsweep.contracts import ANOMALIES_SCHEMA
from ampsweep.jobs import TrialConfig
from ampsweep.jobs.localization._localize import REL_ERROR_THRESHOLD, localize
from tests._trial import trial_config

WORKLOADS = Path(__file__).parent / "workloads"
FORWARD = f"{WORKLOADS / 'forward_overflow.py'}:make"
BACKWARD = f"{WORKLOADS / 'backward_overflow.py'}:make"
TINY = f"{WORKLOADS / 'tiny_mlp.py'}:make"
UPSTREAM = f"{WORKLOADS / 'upstream_precision.py'}:make"
SEED_REPRO = "ampsweep.jobs.workloads.seed_repro:make"
TRANSFORMER = "ampsweep.jobs.workloads.tiny_transformer:make"
SILENT = "ampsweep.jobs.workloads.silent_norm:make"


def _config(workload: str, **overrides) -> TrialConfig:
    return trial_config(workload=workload, **overrides)


def _one_row(table: pa.Table) -> dict:
    assert table.schema.equals(ANOMALIES_SCHEMA), table.schema
    assert table.num_rows == 1, table.to_pylist()
    return table.to_pylist()[0]


def test_forward_overflow_is_localized_to_the_cell():
    config = _config(FORWARD)
    row = _one_row(localize(config, config.workload, mode="nonfinite"))
    assert row["kind"] == "nonfinite"
    assert (row["cell"], row["cell_class"], row["phase"]) == ("sharpen", "Sharpen", "forward")
    assert row["replay_step"] == 0
    assert (row["input_dtype"], row["output_dtype"]) == ("float16", "float16")
    assert 0 < row["max_abs"] <= 65504  # the finite part of a float16 tensor
    # exp of the same scores in float32 is finite and beyond float16's range
    assert math.isfinite(row["fp32_max_abs"]) and row["fp32_max_abs"] > 65504
    assert row["rel_error"] is None
    assert "PyNative" in row["note"]


def test_backward_only_overflow_is_localized_in_backward():
    config = _config(BACKWARD, loss_scale="static:8192")
    row = _one_row(localize(config, config.workload, mode="nonfinite"))
    assert (row["cell"], row["cell_class"], row["phase"]) == ("gain", "Gain", "backward")
    assert row["replay_step"] == 0
    # the same gradient in FP32 is finite but past float16's largest value
    assert row["fp32_max_abs"] > 65504
    assert "forward output finite" in row["note"]


@pytest.mark.parametrize("placement", ["outside", "inside"])
def test_a_cell_that_loses_precision_upstream_is_named_not_the_loss_that_overflows_on_its_output(placement):
    config = _config(UPSTREAM, loss_placement=placement)
    row = _one_row(localize(config, config.workload, mode="nonfinite"))
    assert (row["cell"], row["cell_class"], row["phase"]) == ("norm", "OnePassNorm", "forward")
    assert row["output_dtype"] == "float16" and math.isfinite(row["max_abs"])
    assert row["max_abs"] >= 10 * row["fp32_max_abs"]  # finite, but hundreds of times FP32's
    assert row["inner_op"] is None and row["finite"] is True
    assert "loss_fn (SoftmaxCrossEntropyWithLogits) was the first Cell to go non-finite" in row["note"]


def test_a_run_that_never_overflows_has_no_row():
    config = _config(TINY, amp_level="O0", steps=5)
    table = localize(config, config.workload, mode="nonfinite")
    assert table.schema.equals(ANOMALIES_SCHEMA)
    assert table.num_rows == 0


def test_until_step_bounds_the_replay():
    # the overflow is at step 0, so a bound past it still finds it
    config = _config(FORWARD, steps=300)
    row = _one_row(localize(config, config.workload, mode="nonfinite", until_step=0))
    assert row["cell"] == "sharpen"


def test_unknown_mode_is_refused():
    config = _config(TINY)
    with pytest.raises(ValueError, match="mode"):
        localize(config, config.workload, mode="sideways")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_seed_repro_is_localized_to_customnorm(seed):
    # On seeds 1 and 2 the replay's first inf is CustomNorm's *input gradient*, one
    # step before its forward output turns NaN (the gradient of 1/sqrt(var) with a
    # float16 variance near zero). Its forward output at that step is finite but
    # hundreds of times FP32's, so the origin is reported as the forward pass.
    config = _config(SEED_REPRO, steps=300, seed=seed)
    row = _one_row(localize(config, SEED_REPRO, mode="nonfinite"))
    assert row["cell_class"] == "CustomNorm"
    assert row["cell"] in ("norm1", "norm2")
    assert row["input_dtype"] == "float16"
    assert row["phase"] == "forward"
    assert row["fp32_max_abs"] < row["max_abs"]  # the float16 normalization blew up before its NaN


@pytest.mark.slow
def test_tiny_transformer_is_localized_to_naive_softmax():
    config = _config(TRANSFORMER, steps=300)
    row = _one_row(localize(config, TRANSFORMER, mode="nonfinite"))
    assert row["cell_class"] == "NaiveSoftmax"
    assert row["cell"] == "blocks.0.attn.softmax"
    assert row["phase"] == "forward"


def test_silent_norm_departs_at_its_normalization():
    config = _config(SILENT, steps=200)
    row = _one_row(localize(config, SILENT, mode="departure"))
    assert row["kind"] == "departure"
    assert (row["cell"], row["cell_class"], row["phase"]) == ("norm", "FeatureNorm", "forward")
    assert row["rel_error"] > REL_ERROR_THRESHOLD
    assert row["zero_fraction"] > 0.5  # the float16 output collapsed to zeros ...
    assert row["max_abs"] < row["fp32_max_abs"]  # ... where FP32's is unit-scale


@pytest.mark.slow
@pytest.mark.parametrize(
    ("workload", "black_list"),
    [(SILENT, ("FeatureNorm",)), (SEED_REPRO, ("CustomNorm",)), (TINY, ())],
)
def test_a_healthy_policy_does_not_depart(workload, black_list):
    config = _config(workload, steps=200, black_list=black_list)
    table = localize(config, workload, mode="departure")
    assert table.schema.equals(ANOMALIES_SCHEMA)
    assert table.num_rows == 0, table.to_pylist()


MLP = f"{Path(__file__).parent.parent / 'benchmarks' / 'mlp_workload.py'}:make"


@pytest.mark.slow
def test_the_worker_replays_the_steps_before_the_overflow_on_the_trials_own_graph():
    # the hand-written cross entropy of this MLP overflows float16 after ~30 steps when cast
    # with the network: long enough for a prefix, too short for a compile to pay off
    from ampsweep.jobs.localization._diagnose import diagnose
    from ampsweep.jobs.training._step import GraphCache
    from ampsweep.jobs.training._trainer import run_trial

    config = _config(MLP, steps=60, abort_after=10, loss_placement="inside")
    graphs = GraphCache()
    result = run_trial(config, MLP, None, graphs)
    assert result.outcome == "diverged" and result.first_nonfinite_step is not None
    plain = _one_row(localize(config, MLP, mode="nonfinite", until_step=result.first_nonfinite_step))
    fast = _one_row(diagnose(result, MLP, None, graphs))
    same = ("kind", "cell", "cell_class", "phase")
    assert {k: fast[k] for k in same} == {k: plain[k] for k in same}
    assert "replayed compiled" in fast["note"] and "replayed compiled" not in plain["note"]
    assert abs(fast["replay_step"] - plain["replay_step"]) <= 5


def test_a_saturating_chip_is_caught_at_the_cell_that_reached_65504():
    # nothing is ever inf or NaN: the overflow shows only as a float16 value at the maximum
    config = _config(FORWARD, workload_args={"saturate": True})
    row = _one_row(localize(config, config.workload, mode="nonfinite"))
    assert (row["cell"], row["cell_class"], row["phase"]) == ("sharpen", "Sharpen", "forward")
    assert row["max_abs"] == 65504 and row["fp32_max_abs"] > 65504


def test_a_float16_loss_at_65504_counts_as_an_overflow():
    import numpy as np

    from ampsweep.jobs.training._capture import loss_ok

    loss = np.array([2.0, 65504.0, -65504.0, np.inf, 70000.0])
    assert loss_ok(_config(FORWARD), loss).tolist() == [True, False, False, False, True]
    assert loss_ok(_config(FORWARD, amp_level="O0"), loss).tolist() == [True, True, True, False, True]


def test_trials_record_what_an_overflow_becomes_on_their_device():
    from ampsweep.jobs._placement import ASCEND_OVERFLOW_ENV, overflow_mode

    assert overflow_mode("CPU", {}) == overflow_mode("GPU", {}) == "inf_nan"
    assert overflow_mode("Ascend", {ASCEND_OVERFLOW_ENV: "SATURATION_MODE"}) == "saturation"
    assert overflow_mode("Ascend", {ASCEND_OVERFLOW_ENV: "INFNAN_MODE"}) == "inf_nan"
    assert overflow_mode("Ascend", {}) == "ascend_default"


def test_pynative_steps_after_the_trials_own_graph_train_as_pynative_steps_from_the_start():
    # Adam's step count and beta powers: after a hand-over by set_data the PyNative optimizer went on
    # updating the old tensors, so every replayed step after a fast-forward was off
    import numpy as np

    from ampsweep.jobs.localization._replay import Replay, ensure_pynative, restore_mode
    from ampsweep.jobs.training._step import GraphCache
    from ampsweep.jobs.training._trainer import run_trial

    config = _config(MLP, steps=30, abort_after=30, amp_level="O0", localize=False)
    graphs = GraphCache()
    run_trial(config, MLP, None, graphs)
    compiled = graphs.compiled_for(config, MLP)
    mode = ensure_pynative()
    try:
        handed, plain = Replay(config, MLP, 30), Replay(config, MLP, 30)
        handed.step(next(handed.batches))
        handed.on_graph(compiled, 5)
        for _ in range(6):
            plain.step(next(plain.batches))
        for replay in (handed, plain):
            replay.step(next(replay.batches))
        weights = [[p.asnumpy() for p in r.network.trainable_params()] for r in (handed, plain)]
    finally:
        restore_mode(mode)
    assert all(np.array_equal(a, b) for a, b in zip(*weights))


@pytest.mark.slow
def test_a_workers_next_diagnosis_of_a_graph_restarts_its_replay_and_finds_the_same():
    # a kept replay keeps its optimizer's compiled construct; the fast-forward must give it the
    # new trial's whole state, so what it finds is what a newly built replay finds
    import re

    from ampsweep.jobs.localization._diagnose import diagnose
    from ampsweep.jobs.training._step import GraphCache
    from ampsweep.jobs.training._trainer import run_trial

    graphs = GraphCache()
    first, second = (_config(MLP, steps=60, abort_after=10, loss_placement="inside", seed=s) for s in (0, 1))
    results = [run_trial(config, MLP, None, graphs) for config in (first, second)]
    assert [r.outcome for r in results] == ["diverged", "diverged"]
    diagnose(results[0], MLP, None, graphs)
    kept = dict(graphs.replays)
    assert kept, "the first diagnosis kept no replay"
    again = _one_row(diagnose(results[1], MLP, None, graphs))
    assert all(graphs.replays.get(key) is replay for key, replay in kept.items()), "the replay was rebuilt"
    graphs.replays.clear()
    fresh = _one_row(diagnose(results[1], MLP, None, graphs))

    def timeless(row: dict) -> dict:
        return {**row, "note": re.sub(r"replayed on \w+ in [0-9.]+ s", "", row["note"] or "")}

    assert timeless(again) == timeless(fresh)


def test_a_dynamic_scalers_skipped_steps_do_not_hide_where_a_diverged_trial_broke():
    """The scaler skips its first step (2^16 overflows the gradients): the divergence comes later, in forward."""
    from ampsweep.jobs.localization._diagnose import diagnose
    from ampsweep.jobs.training._step import GraphCache
    from ampsweep.jobs.training._trainer import run_trial

    config = _config(MLP, steps=60, abort_after=10, loss_scale="dynamic", loss_placement="inside")
    graphs = GraphCache()
    result = run_trial(config, MLP, None, graphs)
    assert result.outcome == "diverged", result.error
    skipped = result.steps.column("skipped").to_pylist()
    assert skipped[0], "the scaler's first scale no longer overflows here: the test needs another case"
    row = _one_row(diagnose(result, MLP, None, graphs))
    assert (row["cell_class"], row["phase"]) == ("NaiveCrossEntropy", "forward")
    assert abs(row["replay_step"] - result.first_nonfinite_step) <= 5, "where the loss went non-finite"
    assert "only backward" not in row["note"] and "replayed compiled" in row["note"]


@pytest.mark.slow
def test_a_worker_without_the_fp32_graph_compiles_it_once_for_its_twins_and_finds_the_same(monkeypatch):
    # an actor that started while every FP32 trial was taken holds no FP32 graph; a twin far enough in
    # compiles it and the worker keeps it. This MLP breaks at about step 20, below the threshold
    # where a compile pays off, so the threshold is lowered: the rule is the same further in.
    import re

    import ampsweep.jobs.localization._fp32_twin as twin
    from ampsweep.jobs.localization._diagnose import diagnose
    from ampsweep.jobs.localization._replay import fp32_of
    from ampsweep.jobs.training._step import LEAN, GraphCache
    from ampsweep.jobs.training._trainer import run_trial

    monkeypatch.setattr(twin, "JIT_PREFIX_MIN_STEPS", 5)
    config = _config(MLP, steps=60, abort_after=10, loss_placement="inside")
    fp32 = fp32_of(config)
    lazy = GraphCache()
    result = run_trial(config, MLP, None, lazy)
    assert result.outcome == "diverged" and lazy.held(fp32, MLP) is None
    found = _one_row(diagnose(result, MLP, None, lazy))
    kept = lazy.compiled_for(fp32, MLP)
    assert kept is not None, "the twin's FP32 graph was not kept"
    diagnose(result, MLP, None, lazy)
    assert lazy.compiled_for(fp32, MLP) is kept and kept.compiled == {LEAN}, "a second twin compiled again"
    assert run_trial(fp32, MLP, None, lazy).compile_s == 0.0, "the FP32 trial after it compiled again"

    eager = GraphCache()  # the FP32 trial first, as an actor that compiled the FP32 graph first
    run_trial(fp32, MLP, None, eager)
    again = _one_row(diagnose(run_trial(config, MLP, None, eager), MLP, None, eager))

    def timeless(row: dict) -> dict:
        return {**row, "note": re.sub(r"replayed on \w+ in [0-9.]+ s", "", row["note"] or "")}

    assert timeless(found) == timeless(again)


FUNCTIONAL = f"{WORKLOADS / 'functional_overflow.py'}:make"
ENCODER = "ampsweep.jobs.workloads.encoder_classifier:make"


def test_an_overflow_in_a_functional_op_names_the_cell_that_ran_it_not_the_child_that_received_it():
    """mindcv's Attention shape: q @ k overflows, the NaN reaches a child Cell first (issue 41, item 5)."""
    config = _config(FUNCTIONAL)
    row = _one_row(localize(config, config.workload, mode="nonfinite"))
    assert (row["cell"], row["cell_class"], row["phase"]) == ("attention", "ScoredAttention", "forward")


def test_mindspores_own_attention_is_named_not_the_encoder_layer_around_it():
    """nn.TransformerEncoderLayer's scores overflow inside nn.MultiheadAttention (functional ops only)."""
    config = _config(ENCODER, steps=5)
    row = _one_row(localize(config, config.workload, mode="nonfinite"))
    assert (row["cell"], row["cell_class"], row["phase"]) == (
        "encoder.self_attn",
        "MultiheadAttention",
        "forward",
    )
