"""When FP32 itself breaks, the answer says so first and never offers "keep FP32" (issue 42, item 1).

The analysis tests build sweep folders by hand (each states the numbers its
assertions rest on); the localization tests replay a real FP32 run of
``tests/workloads/fp32_lr.py``, whose learning rate is past SGD's stability
limit, so FP32 diverges for a known reason within ~150 steps; the slow test
runs that sweep end to end.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from ampsweep import analysis
from ampsweep.jobs.localization._diagnose import diagnose, localize_mode
from ampsweep.jobs.training._trainer import run_trial
from tests._trial import trial_config
from tests.test_analysis import write_anomaly, write_trial

FP32_LR = f"{Path(__file__).parent / 'workloads' / 'fp32_lr.py'}:make"
STEPS = 200
SEEDS = (0, 1, 2)
#: FP32 learns to 0.5, then its loss blows up and goes NaN at this step (per seed)
BREAKS = {0: 150, 1: 140, 2: 160}
CURVE = 0.5 + 1.5 * np.exp(-np.arange(STEPS) / 20.0)


def _blow_up(at: int) -> np.ndarray:
    """A loss that learns, then grows geometrically from 40 steps before ``at`` and is NaN from ``at`` on."""
    loss = CURVE.copy()
    grow = np.arange(40)
    loss[at - 40 : at] = CURVE[at - 40 : at] * 1.9**grow
    return np.r_[loss[:at], [np.nan] * 5]


def _fp32_loc_note() -> str:
    return "FP32 itself (nothing cast to float16) went non-finite here; step of the PyNative replay"


def build_fp32_breaks(root: Path, *, clip_holds: bool) -> None:
    """FP32 diverges on every seed; FP32 and O2 with clip 1.0 stay finite (``clip_holds``) or break too."""
    for seed in SEEDS:
        write_trial(root, f"fp32-{seed}", loss=_blow_up(BREAKS[seed]), amp_level="O0", seed=seed)
        write_anomaly(
            root,
            f"fp32-{seed}",
            cell="norm1",
            cell_class="CustomNorm",
            replay_step=BREAKS[seed],
            input_dtype="Float32",
            output_dtype="Float32",
            max_abs=2.6,
            fp32_max_abs=None,
            inner_op="sqrt",
            inner_max_abs=352.0,
            finite=False,
            note=_fp32_loc_note(),
        )
        clipped = CURVE if clip_holds else _blow_up(BREAKS[seed] - 30)
        write_trial(root, f"fp32c-{seed}", loss=clipped, amp_level="O0", clip=1.0, seed=seed)
        write_trial(root, f"o2-{seed}", loss=np.r_[CURVE[:30], [np.nan] * 5], seed=seed)
        write_trial(
            root, f"o2c-{seed}", loss=CURVE * 1.01 if clip_holds else _blow_up(100), clip=1.0, seed=seed
        )


def _report_head(root: Path, lines: int = 8) -> str:
    analysis.write_report(root)
    return "\n".join((root / "report" / "report.md").read_text().splitlines()[:lines])


def test_the_first_line_says_fp32_breaks_and_a_clip_that_held_is_the_next_step(tmp_path):
    build_fp32_breaks(tmp_path, clip_holds=True)
    rec = analysis.analyze(tmp_path).kinds[0].recommendation
    first, *rest = rec.answer
    assert first == "FP32 itself breaks at step ~150 on 3/3 seeds: this is not a mixed-precision problem."
    assert rest[0].startswith("Where it breaks in FP32: the `sqrt` inside CustomNorm got a negative input")
    assert "float32" in rest[0] and "vs FP32" not in rest[0]
    assert rest[1].startswith(
        "Next: clip in FP32: FP32 · clip 1.0 stayed finite to step 200 on 3/3 seeds where FP32 without a "
        "clip broke at ~150"
    )
    assert "change CustomNorm" in rest[1] and "learning rate" in rest[1]
    head = _report_head(tmp_path)
    assert "FP32 itself breaks at step ~150 on 3/3 seeds" in head
    assert "keep fp32" not in head.lower() and "FP32 ?" not in head


def test_with_no_clip_that_holds_it_never_says_keep_fp32(tmp_path):
    build_fp32_breaks(tmp_path, clip_holds=False)
    a = analysis.analyze(tmp_path)
    rec = a.kinds[0].recommendation
    assert a.recommended is None and rec.fp32_break is not None
    assert rec.answer[0].startswith("FP32 itself breaks at step ~150 on 3/3 seeds")
    assert "clipping in FP32 did not help (FP32 · clip 1.0 broke at ~" in rec.answer[2]
    assert rec.next_sweep is not None and rec.next_sweep.cause == "fp32"
    text = analysis.render_markdown(a)
    assert "keep fp32" not in text.lower() and "keep training in fp32" not in text.lower()
    assert "Code (FP32)" not in text
    assert "judged against FP32 only on its steps before that step" in text


def test_a_trial_is_judged_against_fp32_only_before_fp32_broke(tmp_path):
    """A run that stays finite is judged on the steps before FP32's NaN, against the best FP32 reached there.

    ``late`` learns like FP32 up to step 150 and then drifts up: FP32 never ran
    past 150, so there is nothing it is worse than. ``flat`` never learns
    before 150: it is a silent failure, even though FP32's last losses (on
    their way to inf) are far above it.
    """
    for seed in SEEDS:
        write_trial(tmp_path, f"fp32-{seed}", loss=_blow_up(BREAKS[seed]), amp_level="O0", seed=seed)
        late = np.r_[CURVE[:160], np.linspace(0.5, 1.8, STEPS - 160)]
        write_trial(tmp_path, f"late-{seed}", loss=late, seed=seed, clip=1.0)
        write_trial(tmp_path, f"flat-{seed}", loss=np.full(STEPS, 2.0), seed=seed, clip=5.0)
    verdicts = analysis.trial_verdicts(tmp_path)  # what the adaptive search decides from
    assert {verdicts[f"late-{s}"].verdict.value for s in SEEDS} == {"stable"}
    assert {verdicts[f"flat-{s}"].verdict.value for s in SEEDS} == {"silent"}
    assert "where FP32 broke" in verdicts["flat-0"].reason
    rec = analysis.analyze(tmp_path).kinds[0].recommendation
    assert rec.answer[0].startswith("FP32 itself breaks")
    assert rec.config is not None and rec.config["clip"] == 1.0
    assert any("Mixed precision, judged against FP32 only before it broke" in line for line in rec.answer)


def test_an_fp32_run_that_stays_finite_changes_nothing(tmp_path):
    for seed in SEEDS:
        write_trial(tmp_path, f"fp32-{seed}", loss=CURVE, amp_level="O0", seed=seed)
        write_trial(tmp_path, f"o2-{seed}", loss=CURVE * 1.01, seed=seed)
    rec = analysis.analyze(tmp_path).kinds[0].recommendation
    assert rec.fp32_break is None and rec.answer[0].startswith("Use O2")


def _fp32_diverged(seed: int = 0):
    config = trial_config(workload=FP32_LR, amp_level="O0", seed=seed, steps=STEPS, workload_args={"lr": 1.0})
    result = run_trial(config, config.workload)
    assert result.outcome.value == "diverged", "lr 1.0 is past SGD's stability limit on this regression"
    return config, result


def test_an_fp32_trial_that_diverged_is_localized_in_float32():
    config, result = _fp32_diverged()
    assert localize_mode(result, None) == ("nonfinite", result.first_nonfinite_step)
    rows = diagnose(result, config.workload, None).to_pylist()
    assert len(rows) == 1
    row = rows[0]
    # the squared error passes float32's range inside the loss; nothing was cast
    assert (row["cell_class"], row["phase"], row["output_dtype"]) == ("MSELoss", "forward", "float32")
    assert row["fp32_max_abs"] is None and "FP32 itself" in row["note"]
    assert abs(row["replay_step"] - result.first_nonfinite_step) <= 2
    assert row["input_max_abs"] > 1e15


@pytest.mark.slow
def test_a_sweep_where_fp32_diverges_on_every_seed_opens_with_it(tmp_path):
    spec = {
        "name": "fp32-lr",
        "workload": FP32_LR,
        "workload_args": {"lr": 1.0},
        "steps": STEPS,
        "abort_after": 5,
        "grid": {"amp_level": ["O0", "O2"], "clip": [None, 1.0], "seed": list(SEEDS)},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "ampsweep",
            "run",
            str(path),
            "--out",
            str(out),
            "--workers",
            "2",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    head = "\n".join((out / "fp32-lr" / "report" / "report.md").read_text().splitlines()[:12])
    assert "FP32 itself breaks at step ~" in head and "on 3/3 seeds" in head
    assert "Where it breaks in FP32:" in head and "MSELoss" in head
    assert "FP32 · clip 1.0 stayed finite to step 200 on 3/3 seeds" in head
    assert "keep fp32" not in head.lower()
