"""One verdict for a trial and a configuration: the contracts' rule, and the search deciding by it."""

from __future__ import annotations

import math

import pytest

from ampsweep.contracts import (
    LEARNING_SHARE,
    LearningEvidence,
    LocalizedCell,
    Outcome,
    SearchFamily,
    SearchLog,
    SearchRound,
    TrialVerdict,
    Verdict,
    configuration_verdict,
    decode_search,
    encode_search,
    static_scale_for,
    steps_to_target,
    trial_verdict,
)
from ampsweep.sweep.search._search_rules import (
    SeedEvidence,
    is_stable,
    needs_loss_scaling,
    next_class,
    shrinkable,
)

FP32 = LearningEvidence(final_loss=0.5, reached_target=True, start_loss=2.5)


def test_outcomes_come_first():
    healthy = LearningEvidence(0.5, True)
    assert trial_verdict(Outcome.DIVERGED, healthy, FP32).verdict is Verdict.DIVERGED
    assert trial_verdict("failed", healthy, FP32).verdict is Verdict.FAILED
    assert trial_verdict("completed", healthy, FP32).verdict is Verdict.STABLE


def test_a_finite_trial_that_learns_too_little_of_fp32s_decrease_is_a_silent_failure_and_says_why():
    # FP32 goes 2.5 -> 0.5; the limit is the final loss that keeps LEARNING_SHARE of that decrease
    limit = 2.5 - LEARNING_SHARE * (2.5 - 0.5)
    just_below = trial_verdict("completed", LearningEvidence(limit * 0.99, True), FP32)
    above = trial_verdict("completed", LearningEvidence(limit * 1.01, True), FP32)
    assert just_below.learns_like_fp32 and not above.learns_like_fp32
    assert above.verdict is Verdict.SILENT and "of FP32's loss decrease" in above.reason


@pytest.mark.parametrize("scale", [1.0, 1e-6, 1e4])
def test_the_verdict_does_not_depend_on_the_losss_scale(scale):
    # the underflow case: FP32 learns 2.3 -> 0.35 (x scale), float16 stays at chance 2.1 (x scale)
    fp32 = LearningEvidence(0.35 * scale, True, start_loss=2.3 * scale)
    stuck = trial_verdict("completed", LearningEvidence(2.1 * scale, None, start_loss=2.3 * scale), fp32)
    healthy = trial_verdict("completed", LearningEvidence(0.37 * scale, None, start_loss=2.3 * scale), fp32)
    assert stuck.verdict is Verdict.SILENT and healthy.verdict is Verdict.STABLE


def test_noisy_fp32_seeds_widen_the_tolerance():
    # a trial at 60 % of FP32's decrease is silent against quiet FP32 seeds, stable when the
    # FP32 seeds themselves lie 25 % of their decrease apart
    trial = LearningEvidence(2.5 - 0.6 * 2.0, None, start_loss=2.5)
    quiet = LearningEvidence(0.5, None, start_loss=2.5, spread=0.0)
    noisy = LearningEvidence(0.5, None, start_loss=2.5, spread=0.25)
    assert trial_verdict("completed", trial, quiet).verdict is Verdict.SILENT
    assert trial_verdict("completed", trial, noisy).verdict is Verdict.STABLE


def test_never_reaching_a_target_fp32_reaches_is_a_silent_failure():
    verdict = trial_verdict("completed", LearningEvidence(0.6, reached_target=False), FP32)
    assert verdict.verdict is Verdict.SILENT and "target" in verdict.reason
    # FP32 did not get there either: nothing to be worse than
    fp32_short = LearningEvidence(0.5, reached_target=False)
    assert trial_verdict("completed", LearningEvidence(0.6, False), fp32_short).learns_like_fp32


def test_fp32_that_does_not_learn_leaves_only_the_target_rule():
    flat = LearningEvidence(2.5, reached_target=False, start_loss=2.4)
    assert trial_verdict("completed", LearningEvidence(3.0, False, start_loss=2.4), flat).learns_like_fp32


def test_without_fp32_a_completed_trial_is_stable():
    assert trial_verdict("completed", LearningEvidence(9.0, False), None).verdict is Verdict.STABLE
    unknown = LearningEvidence(None, None)
    assert trial_verdict("completed", LearningEvidence(math.nan, None), unknown).learns_like_fp32


@pytest.mark.parametrize(
    ("seeds", "expected"),
    [
        (["stable", "stable"], Verdict.STABLE),
        (["stable", "silent"], Verdict.SILENT),
        (["silent", "failed"], Verdict.FAILED),
        (["failed", "diverged", "stable"], Verdict.DIVERGED),
        ([], Verdict.FAILED),
    ],
)
def test_a_configuration_is_stable_only_when_every_seed_is(seeds, expected):
    assert configuration_verdict(seeds) is expected
    assert configuration_verdict(TrialVerdict(Verdict(s)) for s in seeds) is expected


def test_steps_to_target_is_the_step_completing_the_first_window():
    loss = [5.0] * 20 + [1.0] * 30
    assert steps_to_target(loss, 1.0) == 30  # 1-based end of the first all-1.0 window of 10
    assert steps_to_target(loss, 0.5) is None
    assert steps_to_target([math.nan] + [0.1] * 9, 1.0) is None  # a NaN fails its windows
    assert steps_to_target(loss, None) is None


def _seed(seed: int, verdict: str, cls: str | None = None) -> SeedEvidence:
    cell = LocalizedCell(f"layer{seed}", cls, "forward") if cls else None
    return SeedEvidence(seed, TrialVerdict(Verdict(verdict)), cell)


def test_the_search_grows_by_the_class_the_replays_named_most():
    step = next_class(
        [], [_seed(0, "diverged", "Norm"), _seed(1, "silent", "Norm"), _seed(2, "diverged", "Soft")], 6
    )
    assert step.add == "Norm" and "2 of 3 seeds" in step.decision


def test_a_silent_seed_stops_the_search_from_calling_a_probe_stable():
    # the search once called finite trials stable while the report called them silent failures
    assert not is_stable([_seed(0, "stable"), _seed(1, "silent", "FeatureNorm")])
    assert next_class([], [_seed(0, "stable"), _seed(1, "silent", "FeatureNorm")], 6).add == "FeatureNorm"


def test_the_search_stops_with_a_reason():
    assert "no Cell class" in next_class(["Norm"], [_seed(0, "diverged", "Norm")], 6).decision
    assert next_class(["A"], [_seed(0, "diverged", "B")], 1).add is None
    assert "exception" in next_class([], [_seed(0, "failed")], 6).decision
    assert not shrinkable(["Norm"]) and shrinkable(["Norm", "Soft"])


def test_the_localized_cell_round_trips_search_json_as_a_value():
    cell = LocalizedCell("norm1", "CustomNorm", "forward")
    log = SearchLog(sweep="s", families=[SearchFamily("O2", "float16", "none")])
    log.families[0].rounds.append(SearchRound(1, "grow", [], None, {"0": "diverged"}, localized=[cell]))
    again = decode_search(encode_search(log))
    assert again.families[0].rounds[0].localized == [cell]
    assert str(cell) == "norm1 (CustomNorm, forward)"


def test_the_ranking_and_the_search_read_the_same_verdicts(tmp_path):
    """One silent seed of two: the search's verdict, the ranking's tier and the report agree."""
    import numpy as np

    from ampsweep.analysis import analyze, trial_verdicts
    from tests.test_analysis import write_trial

    curve = np.linspace(2.0, 0.2, 200)
    stuck = np.full(200, 2.0)
    for seed in (0, 1):
        write_trial(tmp_path, f"fp32-{seed}", loss=curve, amp_level="O0", seed=seed)
    write_trial(tmp_path, "mp-0", loss=curve, seed=0)
    write_trial(tmp_path, "mp-1", loss=stuck, seed=1)
    verdicts = trial_verdicts(tmp_path)
    assert verdicts["mp-0"].verdict is Verdict.STABLE
    assert verdicts["mp-1"].verdict is Verdict.SILENT
    row = analyze(tmp_path).ranking.set_index("amp_level").loc["O2"]
    assert row["verdict"] == "silent" and row["stability"] == "silent failure"
    assert "1/2 seeds" in row["silent_reason"] and "seed 1" in row["silent_reason"]


def test_the_streaming_scan_and_the_contracts_agree_on_steps_to_target():
    """The analysis computes steps to target while streaming batches; the contracts own the formula."""
    import numpy as np

    from ampsweep.analysis.compute._steps import TrialAccumulator

    rng = np.random.default_rng(3)
    for _ in range(20):
        loss = np.abs(rng.normal(1.0, 0.5, 300)).cumsum()[::-1] / 100
        loss[rng.integers(0, 300, 3)] = np.nan
        target = float(np.nanquantile(loss, 0.3))
        acc = TrialAccumulator(len(loss), target)
        for start in range(0, len(loss), 64):  # in batches, as the scan reads them
            part = slice(start, start + 64)
            n = len(loss[part])
            acc.update(
                {
                    "step": np.arange(len(loss))[part],
                    "loss": loss[part],
                    "nonfinite": ~np.isfinite(loss[part]),
                    "skipped": np.zeros(n, bool),
                    "clipped": np.zeros(n, bool),
                    "grad_norm": np.ones(n),
                    "step_ms": np.ones(n),
                }
            )
        expected = steps_to_target(loss, target)
        got = acc.result()["steps_to_target"]
        assert (math.isnan(got) and expected is None) or got == expected


def _measured(
    seed: int, verdict: str, underflow: float | None = None, cell: str | None = None
) -> SeedEvidence:
    localized = LocalizedCell(cell.lower(), cell, "forward") if cell else None
    return SeedEvidence(seed, TrialVerdict(Verdict(verdict)), localized, underflow)


def test_a_silent_failure_with_underflow_asks_for_loss_scaling_not_a_black_list():
    seeds = [_measured(0, "silent", 0.97), _measured(1, "silent", 0.95)]
    decision = needs_loss_scaling(seeds, scaled=False)
    assert decision is not None and "underflow" in decision and "97 %" in decision
    assert needs_loss_scaling(seeds, scaled=True) is None, (
        "a family that already scales goes on to black lists"
    )


@pytest.mark.parametrize(
    "seeds",
    [
        [
            _measured(0, "silent", 0.01, "FeatureNorm"),
            _measured(1, "silent", 0.0, "FeatureNorm"),
        ],  # no underflow
        [_measured(0, "diverged", 0.9, "ExpSoftmax"), _measured(1, "silent", 0.9)],  # a NaN: black-list first
        [_measured(0, "stable", 0.0), _measured(1, "stable", 0.0)],
        [_measured(0, "silent", None), _measured(1, "silent", None)],  # not measured
    ],
)
def test_other_evidence_does_not_ask_for_loss_scaling(seeds):
    assert needs_loss_scaling(seeds, scaled=False) is None


def test_the_static_scale_lifts_the_largest_gradient_to_below_float16s_maximum():
    assert static_scale_for(1.0) == "static:16384"  # 65504 / 2 = 2^14.999 -> 2^14
    assert static_scale_for(1e-6) == f"static:{2**24}", "capped at 2^24"
    assert static_scale_for(1e6) == "static:2", "at least 2^1"
    assert static_scale_for(None) == "static:65536" and static_scale_for(math.nan) == "static:65536"
