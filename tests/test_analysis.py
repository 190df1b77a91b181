"""Tests for the offline analysis, on synthetic sweep folders written with pyarrow.

Every folder is built from scratch in ``tmp_path`` so each test states the
exact numbers its assertions depend on.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import analysis
from analysis import _steps

TRIAL_SCHEMA = pa.schema(
    [
        ("trial_id", pa.string()),
        ("sweep", pa.string()),
        ("workload", pa.string()),
        ("graph_id", pa.string()),
        ("amp_level", pa.string()),
        ("black_list", pa.list_(pa.string())),
        ("clip", pa.float64()),
        ("loss_scale", pa.string()),
        ("dtype", pa.string()),
        ("seed", pa.int64()),
        ("steps", pa.int64()),
        ("outcome", pa.string()),
        ("steps_run", pa.int64()),
        ("first_nonfinite_step", pa.int64()),
        ("final_loss", pa.float64()),
        ("target_loss", pa.float64()),
        ("equivalent_to", pa.string()),
        ("error", pa.string()),
        ("traceback", pa.string()),
        ("wall_s", pa.float64()),
        ("compile_s", pa.float64()),
        ("device_kind", pa.string()),
        ("node", pa.string()),
        ("device_id", pa.string()),
        ("worker_index", pa.int64()),
    ]
)

STEP_SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("loss", pa.float64()),
        ("grad_norm", pa.float64()),
        ("clipped", pa.bool_()),
        ("nonfinite", pa.bool_()),
        ("skipped", pa.bool_()),
        ("loss_scale", pa.float64()),
        ("step_ms", pa.float64()),
    ]
)


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
        schema=STEP_SCHEMA,
    )
    if order is not None:
        table = table.take(pa.array(order))
    part = root / "steps" / f"trial_id={trial_id}"
    part.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, part / "part-0.parquet")


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
) -> None:
    """A committed trial: its ``trials/`` row plus (when ``loss`` is given) its steps."""
    n = 0 if loss is None else len(loss)
    bad = [] if loss is None else np.flatnonzero(~np.isfinite(np.asarray(loss, float)))
    if outcome is None:
        outcome = "diverged" if len(bad) else "completed"
    row = {
        "trial_id": trial_id,
        "sweep": "unit-sweep",
        "workload": "toy",
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
    }
    (root / "trials").mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.Table.from_pylist([row], schema=TRIAL_SCHEMA),
        root / "trials" / f"{trial_id}.parquet",
    )
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


STEPS = 200
CURVE = 0.2 + 1.8 * np.exp(-np.arange(STEPS) / 30.0)


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
        write_trial(
            root,
            f"tiny{seed}",
            loss=CURVE,
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
    layers = root / "layers" / "trial_id=div0"
    layers.mkdir(parents=True)
    pq.write_table(
        pa.table(
            {
                "step": [40, 50, 50],
                "layer": ["dense", "CustomNorm", "head"],
                "grad_norm": [1.0, np.nan, np.nan],
                "grad_absmax": [1.0, np.inf, np.inf],
                "nonfinite": [0, 3, 1],
            }
        ),
        layers / "part-0.parquet",
    )
    # Debris: steps of an interrupted trial (no trials row) that would win if counted.
    write_steps(root, "debris", np.full(STEPS, 0.001))


@pytest.fixture
def ranked(tmp_path: Path) -> analysis.SweepAnalysis:
    root = tmp_path / "unit-sweep"
    build_ranked_sweep(root)
    return analysis.analyze(root)


def test_ranking_order_on_constructed_case(ranked: analysis.SweepAnalysis) -> None:
    order = list(ranked.ranking["config_id"].str.split(" ").str[:3].str.join(" "))
    assert order == [
        "O2 bl=[CustomNorm] clip=1.0",
        "O2 bl=[] clip=0.1",
        "O0 bl=[] clip=off",
        "O1 bl=[] clip=off",
        "O3 bl=[] clip=off",
        "O2 bl=[Softmax] clip=off",
    ]
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
    assert "after #1: clipping 'threshold too small' ranks below 'in band'" in rules[2]
    assert "FP32 baseline (O0), not recommended" in rules[3]
    assert "silent failure" in rules[4] and "2 x FP32" in rules[4]
    assert "diverged on 3/3 seeds (first non-finite step median 50)" in rules[5]
    assert "CustomNorm, head @ step 50" in rules[5]
    assert "failed on 3/3 seeds (RuntimeError: Out of memory on device 0)" in rules[6]
    assert "after #5: speed vs FP32 unknown" in rules[6]


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
    tail = loss[-max(1, math.ceil(0.1 * len(loss))) :]
    return {
        "loss_spikes": spikes,
        "steps_to_target": float(hits[0] + 1) if hits.size else float("nan"),
        "final_loss_steps": float(tail[np.isfinite(tail)].mean()),
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
    got = analysis.aggregate_steps(tmp_path, {"s": 0.3}).set_index("trial_id").loc["s"]
    want = _reference_scores(loss, 0.3)
    assert got["loss_spikes"] == want["loss_spikes"] > 0
    assert got["steps_to_target"] == want["steps_to_target"]
    assert got["final_loss_steps"] == pytest.approx(want["final_loss_steps"])
    assert got["step_rows"] == n and got["nonfinite_steps"] == 7


def test_partial_sweep(tmp_path: Path) -> None:
    root = tmp_path / "partial"
    root.mkdir()
    (root / "sweep.yaml").write_text(
        "name: partial\ngrid:\n  amp_level: [O0, O2]\n  clip: [null, 1.0]\n  seed: [0]\n"
    )
    write_trial(root, "a", loss=CURVE, amp_level="O0")
    write_trial(root, "b", amp_level="O2", clip=1.0, outcome="completed")  # row, but no steps yet
    write_steps(root, "c", CURVE)  # steps, but no row yet
    (root / "steps" / "trial_id=c" / ".part-1.parquet.tmp").write_bytes(b"half written")
    a = analysis.analyze(root)
    assert a.inventory.expected_trials == 4 and a.inventory.missing_trials == 2
    assert a.inventory.trials_without_steps == ["b"]
    assert a.inventory.debris_ids == ["c"]
    text = analysis.render_markdown(a)
    assert "missing: 2" in text and "without step data: 1" in text


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
    assert "amp.custom_mixed_precision(net, black_list=amp.get_black_list() + [CustomNorm]" in text
    assert "ops.minimum(clip / (norm + 1e-6), 1.0)" in text
    assert "`fail0`" in text and "RuntimeError: Out of memory on device 0" in text
    csv = pd.read_csv(root / "report" / "ranking.csv")
    assert list(csv["rank"]) == list(range(1, 7)) and csv["rule"].notna().all()
    assert csv.loc[0, "recommended"] and csv.loc[2, "baseline"]
    assert not list((root / "report").glob(".*"))  # no temporaries left behind
    top = analysis.top_configs(root, n=2)
    assert len(top) == 2 and list(top["rank"]) == [1, 2]


def test_snippets() -> None:
    row = {
        "amp_level": "O2",
        "black_list": (),
        "clip": float("nan"),
        "loss_scale": "none",
        "dtype": "float16",
    }
    assert 'amp.auto_mixed_precision(net, "O2", dtype=mstype.float16)' in analysis.mindspore_snippet(row)
    row = {**row, "loss_scale": "dynamic", "clip": 1.0, "dtype": "bfloat16"}
    code = analysis.mindspore_snippet(row)
    assert "amp.DynamicLossScaler(" in code and "loss_scaler.adjust(is_finite)" in code
    assert "mstype.bfloat16" in code and "clip = ms.Tensor(1.0, mstype.float32)" in code
    compile(code, "<snippet>", "exec")


def test_file_uri(tmp_path: Path) -> None:
    write_trial(tmp_path, "u", loss=CURVE, amp_level="O0")
    trials = analysis.load_trials(tmp_path.as_uri())
    assert list(trials["trial_id"]) == ["u"] and trials.loc[0, "black_list"] == ()


def test_no_mindspore_or_ray_imported(tmp_path: Path) -> None:
    root = tmp_path / "unit-sweep"
    build_ranked_sweep(root)
    code = (
        "import sys, analysis; "
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
        [sys.executable, "-m", "analysis", str(root)],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.stdout.strip() == str(root / "report" / "report.md")
