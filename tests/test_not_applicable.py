"""A black list that cannot be applied is never a 'failed' trial (issue 41, item 4).

Where it shows before training (no Cell of the network is of the class) the
plan refuses it (``tests/test_bad_specs.py``). Where only the cast finds out
(``keep_in_float32`` raises), the trial's outcome is ``not_applicable``: not a
failure, never ranked, listed under what could not be tried, and the adaptive
search tries the next class instead of concluding the class did not help.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ampsweep.contracts import (
    LocalizedCell,
    Outcome,
    TrialVerdict,
    Verdict,
    configuration_verdict,
    trial_verdict,
)
from ampsweep.jobs.training._trainer import run_trial
from ampsweep.sweep.search._search_rules import SeedEvidence, next_class, not_applicable, stability_phrase
from tests._trial import trial_config

STUBBORN = f"{Path(__file__).parent / 'workloads' / 'stubborn_mlp.py'}:make"


def test_a_listed_cell_that_refuses_float32_makes_the_trial_not_applicable_with_one_line() -> None:
    result = run_trial(trial_config(workload=STUBBORN, black_list=("Stubborn",), steps=5), STUBBORN)
    row = result.trial_row(sweep="s", equivalent_to=None, attempts=1).to_pylist()[0]
    assert row["outcome"] == Outcome.NOT_APPLICABLE.value
    assert (
        row["error"]
        == "Stubborn cannot be kept in FP32 (odd): RuntimeError: Stubborn has a float16 kernel only"
    )
    assert row["traceback"] is None and row["steps_run"] == 0


def test_the_same_network_without_it_or_with_another_class_trains() -> None:
    for black_list, params, paths in (((), 0, []), (("Dense",), 8 * 16 + 16 + 16 * 3 + 3, ["fc1", "fc2"])):
        result = run_trial(trial_config(workload=STUBBORN, black_list=black_list, steps=5), STUBBORN)
        row = result.trial_row(sweep="s", equivalent_to=None, attempts=1).to_pylist()[0]
        assert row["outcome"] == "completed", row["error"]
        assert (row["fp32_params"], row["fp32_cell_paths"]) == (params, paths)


def test_the_verdict_is_not_applicable_and_it_wins_over_the_other_seeds() -> None:
    verdict = trial_verdict("not_applicable", None, None)  # type: ignore[arg-type]
    assert verdict.verdict is Verdict.NOT_APPLICABLE and not verdict.learns_like_fp32
    assert configuration_verdict([Verdict.STABLE, Verdict.NOT_APPLICABLE]) is Verdict.NOT_APPLICABLE
    assert configuration_verdict([Verdict.DIVERGED, Verdict.NOT_APPLICABLE]) is Verdict.NOT_APPLICABLE


def _seed(verdict: Verdict, cls: str | None = None, reason: str = "") -> SeedEvidence:
    cell = LocalizedCell(f"net.{cls}", cls, "forward") if cls else None
    return SeedEvidence(0, TrialVerdict(verdict, reason), cell)


def test_the_search_skips_a_class_that_could_not_be_applied_and_tries_the_next_one() -> None:
    unstable = [
        _seed(Verdict.DIVERGED, "Inner"),
        _seed(Verdict.DIVERGED, "Inner"),
        _seed(Verdict.DIVERGED, "Outer"),
    ]
    assert next_class([], unstable, 4).add == "Inner"
    refused = [_seed(Verdict.NOT_APPLICABLE, reason="Inner cannot be kept in FP32 (a.b): RuntimeError: no")]
    assert not_applicable(refused) == "Inner cannot be kept in FP32 (a.b): RuntimeError: no"
    assert stability_phrase(refused).startswith("not applicable: Inner cannot be kept in FP32")
    step = next_class([], unstable, 4, refused=["Inner"])
    assert step.add == "Outer"
    stop = next_class([], [_seed(Verdict.DIVERGED, "Inner")], 4, refused=["Inner"])
    assert stop.add is None and "Inner cannot be kept in FP32 (not applicable)" in stop.decision
    assert "failed" not in stop.decision


@pytest.mark.slow
def test_a_sweep_lists_it_under_what_could_not_be_tried_and_never_ranks_it(tmp_path: Path) -> None:
    spec = {
        "name": "na",
        "workload": STUBBORN,
        "steps": 20,
        "abort_after": 3,
        "grid": {"amp_level": ["O0", "O2"], "black_list": [[], ["Stubborn"], ["Dense"]], "seed": [0]},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, "-m", "ampsweep", "run", str(path), "--out", str(out), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    root = out / "na"
    trials = pd.read_parquet(root / "trials")
    assert "failed" not in set(trials["outcome"])
    refused = trials[trials["outcome"] == "not_applicable"]
    assert len(refused) == 1 and list(refused.iloc[0]["black_list"]) == ["Stubborn"]
    assert refused.iloc[0]["amp_level"] == "O2"
    reason = "Stubborn cannot be kept in FP32 (odd): RuntimeError: Stubborn has a float16 kernel only"
    assert refused.iloc[0]["error"] == reason
    report = (root / "report" / "report.md").read_text()
    section = report.split("## What could not be tried", 1)[1].split("\n## ", 1)[0]
    assert f"O2 · FP32: Stubborn · no clip: {reason}" in section
    ranking = pd.read_csv(root / "report" / "ranking.csv")
    assert not ranking["config_id"].str.contains("Stubborn").any(), "never ranked"
    assert f"Could not be tried: O2 · FP32: Stubborn · no clip: {reason}" in run.stdout.replace("\n", " ")


def test_one_refused_trial_is_listed_under_its_own_configuration() -> None:
    """A single not_applicable trial (pandas reads a one-element grouping list as key names)."""
    from ampsweep.analysis.compute._configs import not_applicable as not_tried

    scores = pd.DataFrame(
        {
            "trial_id": ["t1", "t2"],
            "amp_level": ["O2", "O0"],
            "black_list": [["Stubborn"], []],
            "clip": [None, None],
            "outcome": ["not_applicable", "completed"],
            "ranked": [True, True],
            "error": ["Stubborn cannot be kept in FP32 (odd): RuntimeError: no", None],
        }
    )
    listed = not_tried(scores)
    assert listed["name"].tolist() == ["O2 · FP32: Stubborn · no clip"]
    assert listed["trial_ids"].tolist() == ["t1"]
    assert not_tried(scores.iloc[:1])["trial_ids"].tolist() == ["t1"]
