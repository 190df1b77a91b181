"""Tests for the offline analysis, on synthetic sweep folders written with pyarrow.

Every folder is built from scratch in ``tmp_path`` so each test states the
exact numbers its assertions depend on.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ampsweep import analysis
from ampsweep.analysis.compute import _steps
from ampsweep.analysis.compute._criteria import rules_text
from ampsweep.analysis.wording import _code
from ampsweep.contracts import (
    PLAN_FILE,
    STEPS_SCHEMA,
    TABLE_SCHEMAS,
    TRIALS_SCHEMA,
    PlanEntry,
    encode_plan,
    final_loss,
    part_path,
    trial_row_path,
)


def write_table(root: Path, table: str, trial_id: str, columns: dict) -> None:
    """One trial's partition of a per-trial table, typed by the contract's ``TABLE_SCHEMAS``.

    Columns left out are written as nulls, as an older or partial writer would.
    """
    schema = TABLE_SCHEMAS[table]
    n = len(next(iter(columns.values())))
    data = {f.name: columns.get(f.name, [None] * n) for f in schema}
    part = root / part_path(table, trial_id)
    part.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(data, schema=schema), part)


def write_row(root: Path, row: dict) -> None:
    """A committed ``trials/`` row; every ``TRIALS_SCHEMA`` column not given is null."""
    full = {f.name: row.get(f.name) for f in TRIALS_SCHEMA}
    path = root / trial_row_path(row["trial_id"])
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([full], schema=TRIALS_SCHEMA), path)


def write_steps(
    root: Path,
    trial_id: str,
    loss,
    grad_norm=None,
    clip=None,
    step_ms=10.0,
    skipped=None,
    order=None,
) -> None:
    """One trial's step partition; ``clipped``/``nonfinite`` follow the trainer's definitions."""
    loss = np.asarray(loss, dtype=float)
    n = len(loss)
    grad = np.full(n, 0.5) if grad_norm is None else np.asarray(grad_norm, dtype=float)
    nonfinite = ~np.isfinite(loss) | ~np.isfinite(grad)
    clipped = np.zeros(n, bool) if clip is None else grad > clip
    table = pa.table(
        {
            "step": np.arange(n, dtype=np.int64),
            "loss": loss,
            "grad_norm": grad,
            "clipped": clipped,
            "nonfinite": nonfinite,
            "skipped": np.zeros(n, bool) if skipped is None else np.asarray(skipped, bool),
            "loss_scale": np.ones(n),
            "step_ms": np.broadcast_to(np.asarray(step_ms, dtype=float), (n,)).copy(),
        },
        schema=STEPS_SCHEMA,
    )
    if order is not None:
        table = table.take(pa.array(order))
    part = root / part_path("steps", trial_id)
    part.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, part)


def write_trial(
    root: Path,
    trial_id: str,
    *,
    loss=None,
    amp_level: str = "O2",
    black_list=(),
    clip: float | None = None,
    loss_scale: str = "none",
    dtype: str = "float16",
    seed: int = 0,
    outcome: str | None = None,
    target_loss: float | None = None,
    equivalent_to: str | None = None,
    error: str | None = None,
    device_kind: str = "gpu",
    grad_norm=None,
    step_ms=10.0,
    skipped=None,
    order=None,
    sweep: str = "unit-sweep",
    workload: str = "toy",
    **extra,
) -> None:
    """A committed trial: its ``trials/`` row plus (when ``loss`` is given) its steps."""
    n = 0 if loss is None else len(loss)
    bad = [] if loss is None else np.flatnonzero(~np.isfinite(np.asarray(loss, float)))
    if outcome is None:
        outcome = "diverged" if len(bad) else "completed"
    row = {
        "trial_id": trial_id,
        "sweep": sweep,
        "workload": workload,
        "graph_id": "g",
        "amp_level": amp_level,
        "black_list": list(black_list),
        "clip": clip,
        "loss_scale": loss_scale,
        "dtype": dtype,
        "seed": seed,
        "steps": n,
        "outcome": outcome,
        "steps_run": n,
        "first_nonfinite_step": int(bad[0]) if len(bad) else None,
        "final_loss": None,
        "target_loss": target_loss,
        "equivalent_to": equivalent_to,
        "error": error,
        "traceback": None,
        "wall_s": 1.0,
        "compile_s": 0.1,
        "device_kind": device_kind,
        "node": "n0",
        "device_id": "0",
        "worker_index": 0,
        **extra,
    }
    write_row(root, row)
    if loss is not None:
        write_steps(
            root,
            trial_id,
            loss,
            grad_norm=grad_norm,
            clip=clip,
            step_ms=step_ms,
            skipped=skipped,
            order=order,
        )


def write_anomaly(
    root: Path, trial_id: str, *, cell: str = "norm1", cell_class: str = "CustomNorm", **values
) -> None:
    """One localized Cell of a trial (``anomalies`` table)."""
    row = {
        "kind": "nonfinite",
        "replay_step": 49,
        "cell": cell,
        "cell_class": cell_class,
        "phase": "forward",
        "input_dtype": "Float16",
        "output_dtype": "Float16",
        "max_abs": 65504.0,
        "fp32_max_abs": 310.0,
        **values,
    }
    write_table(root, "anomalies", trial_id, {k: [v] for k, v in row.items()})


STEPS = 200
CURVE = 0.2 + 1.8 * np.exp(-np.arange(STEPS) / 30.0)
SLOWER = 0.2 + 1.8 * np.exp(-np.arange(STEPS) / 40.0)


def build_ranked_sweep(root: Path) -> None:
    """FP32 baseline, an in-band clip config, a clip-every-step config, a silent
    failure, a diverging config, a failing config, O0 duplicates and debris."""
    for seed in range(3):
        write_trial(root, f"base{seed}", loss=CURVE, amp_level="O0", seed=seed, step_ms=20.0)
        write_trial(
            root,
            f"dup{seed}",
            loss=CURVE,
            amp_level="O0",
            black_list=["CustomNorm"],
            seed=seed,
            equivalent_to=f"base{seed}",
            step_ms=20.0,
        )
        # Norm above 1.0 on every 10th step: clip 1.0 fires on 10 % of steps.
        grad = np.where(np.arange(STEPS) % 10 == 0, 2.0, 0.5)
        write_trial(
            root,
            f"inband{seed}",
            loss=CURVE,
            black_list=["CustomNorm"],
            clip=1.0,
            seed=seed,
            grad_norm=grad,
        )
        # clipping every step slows learning: it reaches the target later than the in-band clip, beyond
        # seed noise, so its smaller FP32 part does not win (the FP32 part ranks before the clip band)
        write_trial(
            root,
            f"tiny{seed}",
            loss=SLOWER,
            clip=0.1,
            seed=seed,
            grad_norm=np.full(STEPS, 0.5),
        )
        write_trial(root, f"flat{seed}", loss=np.full(STEPS, 2.3), amp_level="O1", seed=seed)
        nan_from_50 = np.where(np.arange(STEPS) < 50, CURVE, np.nan)[:60]
        write_trial(root, f"div{seed}", loss=nan_from_50, amp_level="O3", seed=seed)
        write_trial(
            root,
            f"fail{seed}",
            amp_level="O2",
            black_list=["Softmax"],
            seed=seed,
            outcome="failed",
            error="RuntimeError: Out of memory on device 0\nsecond line",
        )
    write_table(
        root,
        "layers",
        "div0",
        {
            "step": [40, 50, 50],
            "layer": ["dense", "CustomNorm", "head"],
            "grad_norm": [1.0, np.nan, np.nan],
            "grad_absmax": [1.0, np.inf, np.inf],
            "nonfinite": [0, 3, 1],
        },
    )
    for seed in range(3):  # every seed of the diverging configuration agrees on the culprit
        write_anomaly(root, f"div{seed}", max_abs=65504.0 - seed, fp32_max_abs=310.0)
    # Debris: steps of an interrupted trial (no trials row) that would win if counted.
    write_steps(root, "debris", np.full(STEPS, 0.001))


@pytest.fixture
def ranked(tmp_path: Path) -> analysis.SweepAnalysis:
    root = tmp_path / "unit-sweep"
    build_ranked_sweep(root)
    return analysis.analyze(root)


def test_ranking_order_on_constructed_case(ranked: analysis.SweepAnalysis) -> None:
    assert list(ranked.ranking["label"]) == [
        "O2 · FP32: CustomNorm · clip 1.0",
        "O2 · clip 0.1",
        "FP32",
        "O1 · no clip",
        "O3 · no clip",
        "O2 · FP32: Softmax · no clip",
    ]
    # the stable key names every choice, in the same style
    assert (
        ranked.ranking["config_id"].iloc[0]
        == "O2 float16 · FP32: CustomNorm · clip 1.0 · loss inside · on gpu"
    )
    assert ranked.ranking["config_id"].is_unique
    assert list(ranked.ranking["stability"]) == [
        "stable",
        "stable",
        "fp32 baseline",
        "silent failure",
        "unstable",
        "unstable",
    ]
    best = ranked.recommended
    assert best is not None and best["amp_level"] == "O2" and best["clip"] == 1.0
    o0 = ranked.ranking[ranked.ranking["amp_level"] == "O0"].iloc[0]
    assert o0["baseline"] and not o0["recommended"]
    assert ranked.ranking["recommended"].sum() == 1


def test_rules_explain_placement(ranked: analysis.SweepAnalysis) -> None:
    rules = dict(zip(ranked.ranking["rank"], ranked.ranking["rule"]))
    assert "clip 1.0 fires on 10 % of steps" in rules[1] and "recommended" in rules[1]
    assert "clip 0.1 fires on 100 % of steps: threshold too small" in rules[2]
    assert "below #1 on steps to target: 179 vs 136" in rules[2]
    assert "FP32 baseline (O0), not recommended" in rules[3]
    assert "silent failure" in rules[4] and "of FP32's loss decrease" in rules[4]
    assert "diverged on 3/3 seeds (first non-finite step median 50)" in rules[5]
    assert (
        "localized to norm1 (CustomNorm), forward, float16 max|x| 6.55e4 vs FP32 310, seeds 0,1,2" in rules[5]
    )
    assert "failed on 3/3 seeds (RuntimeError: Out of memory on device 0)" in rules[6]
    # broken configurations are ordered by where they broke, never by their losses before the NaN
    assert "below #5 on where it broke: failed (no NaN step) vs NaN at ~50" in rules[6]
    phrases = dict(zip(ranked.ranking["rank"], ranked.ranking["phrase"]))
    assert phrases[1] == "ranked first" and rules[6].endswith(phrases[6])
    assert list(ranked.ranking["decided_by"])[1:3] == ["steps_to_target", "tier"]


def test_equivalent_trials_and_debris_not_counted(
    ranked: analysis.SweepAnalysis,
) -> None:
    scores = ranked.scores
    assert "debris" not in set(scores["trial_id"])
    assert ranked.inventory.debris_ids == ["debris"]
    assert set(scores.loc[~scores["ranked"], "trial_id"]) == {"dup0", "dup1", "dup2"}
    o0 = ranked.ranking[ranked.ranking["amp_level"] == "O0"]
    assert len(o0) == 1 and o0.iloc[0]["n_trials"] == 3


def test_fp32_relative_target_and_speed(ranked: analysis.SweepAnalysis) -> None:
    scores = ranked.scores.set_index("trial_id")
    final = CURVE[-20:].mean()
    assert scores.loc["base0", "final"] == pytest.approx(final)
    assert scores.loc["inband0", "target"] == pytest.approx(1.1 * final)
    assert scores.loc["inband0", "target_source"] == "1.1 x FP32 final loss"
    ma = pd.Series(CURVE).rolling(10).mean()
    expected = int(np.flatnonzero(ma.to_numpy() <= 1.1 * final)[0]) + 1
    assert scores.loc["inband0", "steps_to_target"] == expected
    assert scores.loc["base0", "steps_to_target"] == expected
    assert scores.loc["inband0", "speed_vs_fp32"] == pytest.approx(2.0)
    assert scores.loc["inband0", "steps_per_s"] == pytest.approx(100.0)


def test_clip_rate_arithmetic(tmp_path: Path) -> None:
    n = 100
    grad = np.full(n, 0.5)
    grad[:25] = 2.0  # 25 steps above the threshold ...
    loss = np.ones(n)
    loss[:5] = np.nan  # ... of which 5 are non-finite and do not count
    skipped = np.zeros(n, bool)
    skipped[:5] = True
    write_trial(
        tmp_path,
        "c",
        loss=loss,
        clip=1.0,
        grad_norm=grad,
        skipped=skipped,
        outcome="completed",
    )
    write_trial(tmp_path, "off", loss=np.ones(n), clip=None, seed=1)
    scores = analysis.trial_scores(tmp_path).set_index("trial_id")
    assert scores.loc["c", "finite_steps"] == 95
    assert scores.loc["c", "clipped_steps"] == 20
    assert scores.loc["c", "clip_rate"] == pytest.approx(20 / 95)
    assert scores.loc["c", "skipped_steps"] == 5
    assert scores.loc["c", "first_nonfinite"] == 0
    assert math.isnan(scores.loc["off", "clip_rate"])


def test_steps_to_target_spikes_and_final_loss(tmp_path: Path) -> None:
    loss = np.r_[np.ones(20), np.zeros(80)] + 0.01
    loss[60] = 5.0  # one spike: > 3 x median of the 20 finite losses before it
    write_trial(tmp_path, "t", loss=loss, target_loss=0.5 + 0.01)
    scores = analysis.trial_scores(tmp_path).set_index("trial_id")
    # A 10-step mean <= 0.51 needs 5 of its rows in the zero part: rows 20..24, i.e. step 25.
    assert scores.loc["t", "steps_to_target"] == 25
    assert scores.loc["t", "loss_spikes"] == 1
    assert scores.loc["t", "final"] == pytest.approx(0.01)
    assert scores.loc["t", "target_source"] == "workload target_loss"


def _reference_scores(loss: np.ndarray, target: float) -> dict[str, float]:
    """The documented rules, written the slow obvious way with pandas."""
    finite = pd.Series(loss[np.isfinite(loss)])
    median = finite.shift(1).rolling(_steps.SPIKE_WINDOW).median()
    spikes = int(((median > 0) & (finite > _steps.SPIKE_FACTOR * median)).sum())
    ma = pd.Series(loss).rolling(_steps.TARGET_WINDOW).mean().to_numpy()
    hits = np.flatnonzero(ma <= target)
    return {
        "loss_spikes": spikes,
        "steps_to_target": float(hits[0] + 1) if hits.size else float("nan"),
        "final_loss_steps": final_loss(loss),  # the contract's definition, not a copy of it
    }


@pytest.mark.parametrize("shuffled", [False, True])
def test_streaming_matches_reference_across_batches(tmp_path: Path, monkeypatch, shuffled: bool) -> None:
    rng = np.random.default_rng(0)
    n = 997
    loss = np.exp(-np.arange(n) / 300) + rng.gamma(1.0, 0.05, n)
    loss[rng.choice(n, 15, replace=False)] *= 6  # spikes
    loss[rng.choice(n, 7, replace=False)] = np.nan
    order = rng.permutation(n) if shuffled else None
    write_trial(tmp_path, "s", loss=loss, target_loss=0.3, order=order)
    monkeypatch.setattr(_steps, "BATCH_ROWS", 37)  # many batch boundaries inside every window
    got = _steps.aggregate_steps(tmp_path, {"s": 0.3}).set_index("trial_id").loc["s"]
    want = _reference_scores(loss, 0.3)
    assert got["loss_spikes"] == want["loss_spikes"] > 0
    assert got["steps_to_target"] == want["steps_to_target"]
    assert got["final_loss_steps"] == pytest.approx(want["final_loss_steps"])
    assert got["step_rows"] == n and got["nonfinite_steps"] == 7


def test_partial_sweep(tmp_path: Path) -> None:
    root = tmp_path / "partial"
    root.mkdir()
    write_plan(root, ["a", "b", "c", "d"])
    write_trial(root, "a", loss=CURVE, amp_level="O0")
    write_trial(root, "b", amp_level="O2", clip=1.0, outcome="completed")  # row, but no steps yet
    write_steps(root, "c", CURVE)  # steps, but no row yet
    (root / "steps" / "trial_id=c" / ".part-1.parquet.tmp").write_bytes(b"half written")
    a = analysis.analyze(root)
    assert a.inventory.expected_trials == 4 and a.inventory.missing_trials == 2
    assert a.inventory.trials_without_steps == ["b"]
    assert a.inventory.debris_ids == ["c"]
    text = analysis.render_markdown(a)
    assert "expected from `plan.json`: 4; missing: 2" in text and "without step data: 1" in text


def write_plan(root: Path, trial_ids: list[str]) -> None:
    """``plan.json`` as the driver writes it (through the contract's encoder)."""
    root.mkdir(parents=True, exist_ok=True)
    entries = [PlanEntry(trial_id=t, graph_id="g", label=t) for t in trial_ids]
    (root / PLAN_FILE).write_text(encode_plan(root.name, entries))


def test_expected_comes_from_the_plan_not_the_spec(tmp_path: Path) -> None:
    """A spec that omits ``amp_level`` ran as many trials as its plan lists: missing 0."""
    root = tmp_path / "no-level"
    (root / "trials").mkdir(parents=True)
    (root / "sweep.yaml").write_text("name: no-level\ngrid:\n  clip: [null, 1.0]\n  seed: [0]\n")
    write_plan(root, ["p", "q"])
    write_trial(root, "p", loss=CURVE, clip=None)
    write_trial(root, "q", loss=CURVE, clip=1.0)
    a = analysis.analyze(root)
    assert (a.inventory.expected_trials, a.inventory.missing_trials) == (2, 0)
    assert "expected from `plan.json`: 2; missing: 0" in analysis.render_markdown(a)
    (root / PLAN_FILE).unlink()
    a = analysis.analyze(root)
    assert a.inventory.expected_trials is None and a.inventory.missing_trials is None
    assert "expected: unknown (no readable `plan.json`)" in analysis.render_markdown(a)


def test_missing_folders(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    report = analysis.write_report(empty)
    text = report.read_text()
    assert "No `trials/` folder" in text and "committed: 0" in text
    rows_only = tmp_path / "rows-only"
    write_trial(rows_only, "x", amp_level="O2", outcome="completed")
    write_trial(rows_only, "y", amp_level="O0", outcome="completed", seed=1)
    text = analysis.write_report(rows_only).read_text()
    assert "No `steps/` folder" in text
    assert len(pd.read_csv(rows_only / "report" / "ranking.csv")) == 2


def test_nothing_stable_says_so(tmp_path: Path) -> None:
    write_trial(tmp_path, "b", loss=CURVE, amp_level="O0")
    write_trial(tmp_path, "d", loss=np.r_[CURVE[:30], [np.nan] * 5], amp_level="O2")
    a = analysis.analyze(tmp_path)
    assert a.recommended is None
    text = analysis.render_markdown(a)
    assert "No mixed-precision configuration was stable" in text
    assert "loss_scale: [dynamic]" in text and "bfloat16" in text


def test_write_report_files(tmp_path: Path) -> None:
    root = tmp_path / "unit-sweep"
    build_ranked_sweep(root)
    path = analysis.write_report(root)
    assert path == root / "report" / "report.md"
    text = path.read_text()
    assert text.startswith("# ampsweep report: unit-sweep")
    assert "committed: 21 (completed 15, diverged 3, failed 3)" in text
    assert 'net_with_loss = keep_in_float32(net_with_loss, (CustomNorm,), "O2", mstype.float16)' in text
    assert "ops.minimum(clip / (norm + 1e-6), 1.0)" in text
    assert "class TrainStep(nn.TrainOneStepCell):" in text and "model = Model(train_net)" in text
    assert "`fail0`" in text and "RuntimeError: Out of memory on device 0" in text
    csv = pd.read_csv(root / "report" / "ranking.csv")
    assert list(csv["rank"]) == list(range(1, 7)) and csv["rule"].notna().all()
    assert csv.loc[0, "recommended"] and csv.loc[2, "baseline"]
    assert not list((root / "report").glob(".*"))  # no temporaries left behind
    assert {p.name for p in (root / "report").iterdir()} == {
        "ranking.csv",
        "report.md",
        "report.html",
        "recommendation.json",
        "failure.png",  # a configuration diverged: report.md shows the failure
    }
    top = analysis.top_configs(root, n=2)
    assert len(top) == 2 and list(top["rank"]) == [1, 2]


def test_the_report_draws_each_figure_once_and_failure_png_is_the_embedded_one(tmp_path, monkeypatch) -> None:
    """``ampsweep run`` draws while its profile runs; a figure drawn twice was most of a report's time."""
    import base64

    from ampsweep.analysis.render import _figures, _plot

    root = tmp_path / "unit-sweep"
    build_ranked_sweep(root)
    a = analysis.analyze(root)
    drawn: list[str] = []
    real_png = _plot.png

    def counted(fig):
        drawn.append(fig.axes[0].get_title() if fig.axes else "")
        return real_png(fig)

    monkeypatch.setattr(_figures, "png", counted)
    images = _figures.report_figures(a)
    assert len(drawn) == sum(len(i) for i in images) > 0
    report = analysis.write_report(root, analysis=a, images=images)
    assert len(drawn) == sum(len(i) for i in images)  # the writer drew nothing again
    failure = next(i for i in images[0] if i.key.startswith("failure-"))
    assert (report.parent / "failure.png").read_bytes() == base64.b64decode(failure.png_base64)
    assert failure.png_base64 in (report.parent / "report.html").read_text()

    # one Agg draw gives the very file savefig (two draws, an RGBA PNG between) gave
    monkeypatch.setattr(_figures, "png", real_png)
    monkeypatch.setattr(_plot, "_drawn", lambda fig: None)
    assert [i.png_base64 for i in _figures.report_figures(a)[0]] == [i.png_base64 for i in images[0]]


def test_snippets() -> None:
    row = {
        "amp_level": "O2",
        "black_list": (),
        "clip": float("nan"),
        "loss_scale": "none",
        "dtype": "float16",
    }
    code = _code.train_step_snippet(row)
    assert 'amp.auto_mixed_precision(net_with_loss, "O2", dtype=mstype.float16)' in code
    model = _code.model_snippet(row)
    assert "model = Model(net_with_loss, optimizer=optimizer)\n" in model
    assert "DynamicLossScaleManager" in model and "did not use" in model  # what amp_level="O2" would add
    assert "keep_in_float32" not in model  # no black list, no loop
    row = {**row, "loss_scale": "dynamic", "clip": 1.0, "dtype": "bfloat16"}
    code = _code.train_step_snippet(row)
    assert "amp.DynamicLossScaler(" in code and "loss_scaler.adjust(is_finite)" in code
    assert "mstype.bfloat16" in code and "clip = ms.Tensor(1.0, mstype.float32)" in code
    compile(code, "<snippet>", "exec")
    model = _code.model_snippet(row)
    assert "self.loss_scaler.adjust(is_finite)" in model and "self.grad(self.network, self.weights)" in model
    compile(model, "<model snippet>", "exec")


def test_file_uri(tmp_path: Path) -> None:
    write_trial(tmp_path, "u", loss=CURVE, amp_level="O0")
    trials = analysis.load_trials(tmp_path.as_uri())
    assert list(trials["trial_id"]) == ["u"] and trials.loc[0, "black_list"] == ()


def test_no_mindspore_or_ray_imported(tmp_path: Path) -> None:
    root = tmp_path / "unit-sweep"
    build_ranked_sweep(root)
    code = (
        "import sys; from ampsweep import analysis; "
        f"analysis.write_report({str(root)!r}); "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('mindspore', 'ray')]; "
        "assert not bad, bad"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )


def test_module_entry_point(tmp_path: Path) -> None:
    root = tmp_path / "unit-sweep"
    build_ranked_sweep(root)
    done = subprocess.run(
        [sys.executable, "-m", "ampsweep.analysis", str(root)],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.stdout.strip() == str(root / "report" / "report.md")


def build_evidence_sweep(
    root: Path, kinds: tuple[str, ...] = ("gpu",), unstable_on: str | None = None
) -> None:
    """Around one recommendation: a smaller clip that fires on every step, clipping
    off (also stable), and the same config without its black-listed class (diverges).

    On the kind named ``unstable_on`` the would-be winner diverges instead.
    """
    every_tenth = np.where(np.arange(STEPS) % 10 == 0, 2.0, 0.5)
    nan_from_50 = np.where(np.arange(STEPS) < 50, CURVE, np.nan)[:60]
    for kind in kinds:
        for seed in range(3):
            tid = f"{kind}-{seed}"
            write_trial(
                root, f"fp32-{tid}", loss=CURVE, amp_level="O0", seed=seed, step_ms=20.0, device_kind=kind
            )
            winner = nan_from_50 if kind == unstable_on else CURVE
            write_trial(
                root,
                f"best-{tid}",
                loss=winner,
                black_list=["Norm"],
                clip=1.0,
                seed=seed,
                grad_norm=every_tenth[: len(winner)],
                device_kind=kind,
            )
            write_trial(
                root,
                f"small-{tid}",
                loss=CURVE,
                black_list=["Norm"],
                clip=0.25,
                seed=seed,
                grad_norm=every_tenth,
                device_kind=kind,
            )
            write_trial(root, f"off-{tid}", loss=CURVE, black_list=["Norm"], seed=seed, device_kind=kind)
            write_trial(root, f"bare-{tid}", loss=nan_from_50, clip=1.0, seed=seed, device_kind=kind)


def test_evidence_neighbours_and_undecided(tmp_path: Path) -> None:
    build_evidence_sweep(tmp_path)
    a = analysis.analyze(tmp_path)
    rec = a.kinds[0].recommendation
    assert rec.status == "recommended"
    assert rec.config == {
        "amp_level": "O2",
        "black_list": ["Norm"],
        "clip": 1.0,
        "loss_scale": "none",
        "dtype": "float16",
        "device_kind": "gpu",
        "loss_placement": "inside",
        "workload_args": {},
        "devices": 1,
    }
    by_relation = {n["relation"]: n for n in rec.evidence["neighbours"]}
    assert by_relation["clip_smaller"]["config"]["clip"] == 0.25
    assert by_relation["clip_smaller"]["clip_label"] == "threshold too small"
    assert by_relation["clip_larger"]["config"]["clip"] is None
    assert "clipping is not needed for stability" in by_relation["clip_larger"]["text"]
    # the rule it names is the clip-rate rule as the report numbers its rules
    clip_rule = next(i for i, rule in enumerate(rules_text(), start=1) if rule.startswith("Clip rate"))
    assert f"rule {clip_rule} (clip rate)" in by_relation["clip_larger"]["text"]
    without = by_relation["black_list_without"]
    assert without["class"] == "Norm" and without["stability"] == "unstable" and without["n_diverged"] == 3
    assert "keeping Norm in float32 is what makes this configuration work" in without["text"]
    fp32 = rec.evidence["fp32"]
    assert fp32["config"]["amp_level"] == "O0" and fp32["final_loss_delta"] == pytest.approx(0.0)
    assert "against FP32" in fp32["text"] and "2.00x FP32's speed (faster)" in fp32["text"]
    assert rec.seeds_agreeing == rec.seeds_total == 3
    assert any("no clip threshold was tried between 0.25 and 1.0" in u for u in rec.undecided)
    assert any("loss scaling was not tried" in u for u in rec.undecided)
    assert rec.evidence["runner_up"]["config"]["clip"] is None
    text = analysis.render_markdown(a)
    assert "### Evidence" in text and "### What this sweep could not decide" in text
    assert "no clip threshold was tried between 0.25 and 1.0" in text


def test_untried_black_list_removal_is_undecided(tmp_path: Path) -> None:
    for seed in range(2):
        write_trial(tmp_path, f"b{seed}", loss=CURVE, amp_level="O0", seed=seed)
        write_trial(tmp_path, f"r{seed}", loss=CURVE, black_list=["Norm", "Head"], seed=seed)
        write_trial(tmp_path, f"h{seed}", loss=nan_curve(), black_list=["Head"], seed=seed)
    rec = analysis.analyze(tmp_path).kinds[0].recommendation
    neighbours = {n.get("class"): n for n in rec.evidence["neighbours"]}
    assert neighbours["Head"]["tried"] is False  # [Norm] alone was never run
    assert neighbours["Norm"]["tried"] is True and neighbours["Norm"]["stability"] == "unstable"
    assert any("whether Head needs float32 is undecided" in u for u in rec.undecided)
    assert any("2 seeds per configuration" in u for u in rec.undecided)


def nan_curve() -> np.ndarray:
    return np.where(np.arange(STEPS) < 50, CURVE, np.nan)[:60]


def test_seed_disagreement_is_reported(tmp_path: Path) -> None:
    def tail(factor: float) -> np.ndarray:
        """Only the final-loss window changes, so steps to target stay equal."""
        loss = CURVE.copy()
        loss[-20:] *= factor
        return loss

    for seed in range(3):
        write_trial(tmp_path, f"b{seed}", loss=CURVE, amp_level="O0", seed=seed)
        # seeds 0 and 1 prefer "A" (lower final loss there); seed 2 prefers "B"
        write_trial(tmp_path, f"x{seed}", loss=tail(1.0 if seed < 2 else 1.02), black_list=["A"], seed=seed)
        write_trial(tmp_path, f"y{seed}", loss=tail(1.01), black_list=["B"], seed=seed)
    a = analysis.analyze(tmp_path)
    rec = a.kinds[0].recommendation
    assert rec.config["black_list"] == ["A"]
    assert (rec.seeds_agreeing, rec.seeds_total) == (2, 3)
    picks = {p["seed"]: p["agrees"] for p in rec.seed_picks}
    assert picks == {0: True, 1: True, 2: False}
    assert any("1 of 3 seeds rank another stable configuration first" in u for u in rec.undecided)
    # the seeds disagree in sign on final loss: a tie, so only the name orders A before B
    assert any("are tied within seed noise on final loss" in u for u in rec.undecided)
    second = a.ranking[a.ranking["black_list"].map(("B",).__eq__)].iloc[0]
    assert second["tied_with_above"] and second["decided_by"] == "config_id"
    assert "tied with #1 on final loss" in second["phrase"]


def test_per_device_kind_rankings(tmp_path: Path) -> None:
    build_evidence_sweep(tmp_path, kinds=("ascend", "gpu"), unstable_on="ascend")
    a = analysis.analyze(tmp_path)
    assert [k.device_kind for k in a.kinds] == ["ascend", "gpu"]
    for kind in a.kinds:
        assert set(kind.ranking["device_kind"]) == {kind.device_kind}
        assert list(kind.ranking["rank"]) == list(range(1, len(kind.ranking) + 1))
    ascend, gpu = (k.recommendation for k in a.kinds)
    assert gpu.config["clip"] == 1.0
    assert ascend.config["clip"] is None  # its clip-1.0 config diverged on ascend
    # the next smaller threshold diverges where "off" is stable: the boundary lies in an untried gap
    assert any("no clip threshold above 1.0 was tried" in u for u in ascend.undecided)
    doc = json.loads((Path(analysis.write_report(tmp_path)).parent / "recommendation.json").read_text())
    assert doc["status"] == "recommended" and doc["device_kinds"] == ["ascend", "gpu"]
    assert doc["config"] is None and len(doc["recommendations"]) == 2  # several kinds: read the list
    text = (tmp_path / "report" / "report.md").read_text()
    assert "## Recommendation (device kind: ascend)" in text and "## Ranking (device kind: gpu)" in text
    assert "each kind is ranked on its own" in text
    top = analysis.top_configs(a, n=2)
    assert list(zip(top["device_kind"], top["rank"])) == [
        ("ascend", 1),
        ("ascend", 2),
        ("gpu", 1),
        ("gpu", 2),
    ]


def test_recommendation_json_schema(tmp_path: Path) -> None:
    build_evidence_sweep(tmp_path)
    analysis.write_report(tmp_path)
    raw = (tmp_path / "report" / "recommendation.json").read_text()

    def no_constant(name: str) -> None:
        raise AssertionError(f"{name} is not JSON (text such as 'NaN at ~50' is fine)")

    doc = json.loads(raw, parse_constant=no_constant)
    assert list(doc) == [
        "schema",
        "sweep",
        "status",
        "device_kinds",
        "config",
        "evidence",
        "seeds_agreeing",
        "seeds_total",
        "undecided",
        "code",
        "recommendations",
        "not_applicable",
    ]
    assert doc["schema"] == analysis.RECOMMENDATION_SCHEMA == "ampsweep.recommendation/1"
    assert doc["sweep"] == "unit-sweep" and doc["status"] == "recommended"
    rec = doc["recommendations"][0]
    assert doc["config"] == rec["config"] and doc["code"] == rec["code"]
    assert set(rec["code"]) == {"train_step", "model"}
    for key in ("final_loss", "steps_to_target", "clip_rate", "speed_vs_fp32"):
        assert set(rec["evidence"][key]) == {"median", "min", "max"}
    documented = (Path(__file__).parent.parent / "docs" / "ranking.md").read_text(encoding="utf-8")
    for key in [*rec, *rec["evidence"], *rec["evidence"]["neighbours"][0]]:
        assert f'"{key}"' in documented, f"{key} is not in the schema (docs/ranking.md)"


def test_no_stable_recommendation_json(tmp_path: Path) -> None:
    write_trial(tmp_path, "b", loss=CURVE, amp_level="O0")
    write_trial(tmp_path, "d", loss=np.r_[CURVE[:30], [np.nan] * 5], amp_level="O2")
    analysis.write_report(tmp_path)
    doc = json.loads((tmp_path / "report" / "recommendation.json").read_text())
    assert doc["status"] == "no_stable_config" and doc["config"] is None
    rec = doc["recommendations"][0]
    assert rec["fallback"]["config"]["amp_level"] == "O0"
    assert "nothing is cast" in rec["code"]["train_step"]
    assert any("loss_scale: [dynamic]" in s for s in rec["next_steps"])
    assert "closest: O2" in " ".join(rec["evidence"]["statements"])
    text = (tmp_path / "report" / "report.md").read_text()
    assert "No mixed-precision configuration was stable" in text and "What to try next" in text


def test_equivalents_are_truncated(tmp_path: Path) -> None:
    write_trial(tmp_path, "base", loss=CURVE, amp_level="O0")
    for i in range(7):
        write_trial(
            tmp_path, f"dup{i}", loss=CURVE, amp_level="O0", black_list=[f"L{i}"], equivalent_to="base"
        )
    text = analysis.render_markdown(analysis.analyze(tmp_path))
    assert "equivalent configurations not counted twice: 7" in text
    assert "dup0 (FP32 with black list L0) = base" in text
    assert "dup3" not in text and "and 4 more" in text


def test_dynamic_scale_window_matches_trainer() -> None:
    """The scaler the report recommends is the one the trainer ran."""
    from ampsweep.jobs.training._step import make_scaler

    scaler = make_scaler("dynamic")
    row = {
        "amp_level": "O2",
        "black_list": (),
        "clip": float("nan"),
        "loss_scale": "dynamic",
        "dtype": "float16",
    }
    window = int(scaler.scale_window)
    assert f"amp.DynamicLossScaler(2**16, 2, {window})" in _code.train_step_snippet(row)


SNIPPET_NET = """
import numpy as np
import mindspore as ms
from mindspore import nn, ops


class CustomNorm(nn.Cell):
    def __init__(self, n):
        super().__init__()
        self.gamma = ms.Parameter(ms.Tensor(np.ones(n, np.float32)), name="gamma")

    def construct(self, x):
        mean = x.mean(-1, keep_dims=True)
        var = ((x - mean) ** 2).mean(-1, keep_dims=True)
        return (x - mean) / ops.sqrt(var + 1e-5) * self.gamma


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(4, 8)
        self.norm = CustomNorm(8)
        self.head = nn.Dense(8, 3)

    def construct(self, x):
        return self.head(ops.relu(self.norm(self.fc1(x))))
"""

SNIPPET_RUNNER = """
import importlib, sys, types
import numpy as np
import mindspore as ms
import mindspore.dataset as mds
from mindspore import nn
import snippet_net

ms.set_context(mode=ms.GRAPH_MODE)
rng = np.random.default_rng(0)
x = rng.normal(size=(8, 4)).astype(np.float32)
y = rng.integers(0, 3, 8).astype(np.int32)
for i, name in enumerate(sys.argv[1:]):
    net = snippet_net.Net()
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.1)
    ctx = types.ModuleType("snippet_ctx")
    ctx.__dict__.update(
        net=net, optimizer=optimizer, epochs=1, CustomNorm=snippet_net.CustomNorm,
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        dataset=mds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(4),
    )
    sys.modules["snippet_ctx"] = ctx
    before = net.fc1.weight.asnumpy().copy()
    importlib.import_module(name)  # a real module: MindSpore compiles a Cell from its source file
    assert np.abs(net.fc1.weight.asnumpy() - before).max() > 0, name
    print("ran", name)
"""


@pytest.mark.slow
def test_snippets_run_on_mindspore(tmp_path: Path) -> None:
    """Every form of the generated code trains a tiny network for two steps on MindSpore (CPU)."""
    configs = [
        {
            "amp_level": "O2",
            "black_list": ("CustomNorm",),
            "clip": 1.0,
            "loss_scale": "dynamic",
            "dtype": "float16",
        },
        {"amp_level": "O2", "black_list": (), "clip": float("nan"), "loss_scale": "none", "dtype": "float16"},
        {
            "amp_level": "O3",
            "black_list": ("CustomNorm",),
            "clip": float("nan"),
            "loss_scale": "static:128",
            "dtype": "float16",
        },
        # loss_placement outside: the network alone is cast, Model gets loss_fn itself
        {
            "amp_level": "O2",
            "black_list": ("CustomNorm",),
            "clip": float("nan"),
            "loss_scale": "none",
            "dtype": "float16",
            "loss_placement": "outside",
        },
        {
            "amp_level": "O2",
            "black_list": (),
            "clip": 1.0,
            "loss_scale": "dynamic",
            "dtype": "float16",
            "loss_placement": "outside",
        },
        {
            "amp_level": "O1",
            "black_list": ("CustomNorm",),
            "clip": float("nan"),
            "loss_scale": "none",
            "dtype": "float16",
            "loss_placement": "outside",
        },
    ]
    outside = analysis.snippets(configs[3])
    step = outside["train_step"]  # the listed instances are kept in float32 by the O2 cast itself
    assert 'net = keep_in_float32(net, (CustomNorm,), "O2", mstype.float16)' in step
    assert "model = Model(net, loss_fn=loss_fn, optimizer=optimizer)\n" in outside["model"]
    inside = analysis.snippets(configs[0])["model"]
    assert inside.index("nn.WithLossCell(net, loss_fn)") < inside.index("keep_in_float32(net_with_loss")
    o1 = analysis.snippets(configs[5])["train_step"]
    assert 'net = keep_in_float32(net, (CustomNorm,), "O1", mstype.float16)' in o1
    (tmp_path / "snippet_net.py").write_text(SNIPPET_NET)
    names = []
    for i, cfg in enumerate(configs):
        for form, code in analysis.snippets(cfg).items():
            code = code.replace(
                "model.train(epochs, dataset)", "model.train(epochs, dataset, dataset_sink_mode=False)"
            )
            name = f"snippet_{i}_{form}"
            (tmp_path / f"{name}.py").write_text("from snippet_ctx import *\n" + code + "\n")
            names.append(name)
    done = subprocess.run(
        [sys.executable, "-c", SNIPPET_RUNNER, *names],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path), "GLOG_v": "3"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert done.stdout.count("ran ") == len(names)


def test_the_fp32_profile_a_run_wrote_is_a_report_section(tmp_path: Path) -> None:
    root = tmp_path / "sweep"
    build_ranked_sweep(root)
    cells = [
        {
            "cell": "softmax",
            "class": "ExpSoftmax",
            "forward_max": 4.2e4,
            "backward_max": 0.03,
            "underflow_fraction": 0.1,
            "risk": "overflow",
            "passes_max_at": 1761,
        },
        {
            "cell": "fc1",
            "class": "Dense",
            "forward_max": 4.7,
            "backward_max": None,
            "underflow_fraction": None,
            "risk": None,
            "passes_max_at": None,
        },
    ]
    profile = {"cells": cells, "loss_scale": None, "start_step": 0, "steps": 300}
    (root / "profile.json").write_text(json.dumps(profile))
    text = analysis.render_markdown(analysis.analyze(root))
    section = text.split("## float16 headroom of the FP32 run", 1)[1].split("\n## ", 1)[0]
    assert "| ExpSoftmax | softmax | 4.2e4 | 0.03 | 10 % | overflow |" in section
    assert "| Dense | fc1 | 4.7 | - | - | - |" in section
    assert "passes 65504 near step 1,761" in section and "loss scale this profile calls for: none" in section
    (root / "profile.json").write_text("not json")
    assert "float16 headroom" not in analysis.render_markdown(analysis.analyze(root)), "unreadable: left out"


def test_diverged_trials_are_listed_with_their_clip(ranked: analysis.SweepAnalysis) -> None:
    text = analysis.render_markdown(ranked)
    listed = text[text.index("Diverged trials") :].split("\n\n")[1].splitlines()
    assert listed and all(" · no clip · seed " in line and "first non-finite step" in line for line in listed)


def test_a_failed_localization_is_undecided_never_a_cell_to_black_list(tmp_path: Path) -> None:
    """A localization that failed leaves an ``anomalies`` row of cause ``unknown``: the report lists it
    under what it could not decide, with the trial and the rank, and names no Cell for it."""
    root = tmp_path / "unit-sweep"
    build_ranked_sweep(root)
    note = "localization failed on rank 1 of 2: RuntimeError: rank 1 cannot rebuild its workload"
    write_anomaly(root, "div1", cell=None, cell_class=None, phase=None, cause="unknown", note=note)
    a = analysis.analyze(root)
    text = analysis.render_markdown(a)
    undecided = text.split("### What this sweep could not decide")[1].split("###")[0]
    assert f"O3 · no clip · seed 1: {note}" in undecided, undecided
    div = a.ranking[a.ranking["amp_level"] == "O3"].iloc[0]
    assert {loc.cell for loc in div["localizations"]} == {"norm1"}, "the failed row names no Cell"
    assert {seed for loc in div["localizations"] for seed in loc.seeds} == {0, 2}
