"""The failure figure: the top broken configuration around its first NaN, FP32 beside it, global steps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ampsweep import analysis
from ampsweep.contracts import STEPS_SCHEMA, part_path
from tests.test_analysis import CURVE, STEPS, write_anomaly, write_row

START = 1000


def write_forked(root: Path, trial_id: str, loss: np.ndarray, **row: object) -> None:
    """A trial forked at global step START: its steps are START, START + 1, ..."""
    n = len(loss)
    bad = np.flatnonzero(~np.isfinite(loss))
    write_row(
        root,
        {
            "trial_id": trial_id,
            "sweep": "forked",
            "workload": "toy",
            "graph_id": "g",
            "amp_level": "O2",
            "black_list": [],
            "loss_scale": "none",
            "dtype": "float16",
            "steps": n,
            "steps_run": n,
            "outcome": "diverged" if len(bad) else "completed",
            "first_nonfinite_step": START + int(bad[0]) if len(bad) else None,
            "device_kind": "gpu",
            "start_step": START,
            "start_from": "prefix-abc",
            **row,
        },
    )
    grad = np.where(np.isfinite(loss), 0.5, np.nan)
    table = pa.table(
        {
            "step": np.arange(START, START + n, dtype=np.int64),
            "loss": loss,
            "grad_norm": grad,
            "clipped": np.zeros(n, bool),
            "nonfinite": ~np.isfinite(loss),
            "skipped": np.zeros(n, bool),
            "loss_scale": np.ones(n),
            "step_ms": np.full(n, 10.0),
        },
        schema=STEPS_SCHEMA,
    )
    part = root / part_path("steps", trial_id)
    part.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, part)


def build(root: Path) -> None:
    broken = np.where(np.arange(STEPS) < 150, CURVE, np.nan)[:160]
    for seed in range(2):
        write_forked(root, f"fp32-{seed}", CURVE, amp_level="O0", seed=seed)
        write_forked(root, f"fixed-{seed}", CURVE, black_list=["ExpSoftmax"], seed=seed)
        write_forked(root, f"broken-{seed}", broken, seed=seed)
        write_anomaly(
            root,
            f"broken-{seed}",
            cell="attn.softmax",
            cell_class="ExpSoftmax",
            max_abs=1.0,
            fp32_max_abs=1.0,
            replay_step=START + 150,
        )


def test_failure_data_on_global_steps(tmp_path: Path) -> None:
    build(tmp_path)
    result = analysis.analyze(tmp_path)
    data = result.kinds[0].figures.failure
    assert data is not None and data.trial_id == "broken-0" and data.seed == 0
    assert data.first_nonfinite == START + 150 and data.start_step == START
    # global steps, a window around the first NaN, the NaN kept
    assert data.steps.min() >= START and data.steps.min() <= START + 150 <= data.steps.max()
    assert not np.isfinite(data.loss[data.steps == START + 150]).any()
    # FP32 of the same seed and start, over the same window
    assert data.fp32_steps.min() == data.steps.min() and np.isfinite(data.fp32_loss).all()
    assert data.cell == "attn.softmax (ExpSoftmax)"
    assert any(name.startswith("output (float16") for name, _ in data.maxima)


def test_failure_figure_in_html_and_markdown(tmp_path: Path) -> None:
    build(tmp_path)
    report = analysis.write_report(tmp_path)
    page = (report.parent / "report.html").read_text(encoding="utf-8")
    assert 'alt="The failure"' in page and 'id="failure-k0"' in page
    # in the answer section, before the ranking
    assert page.index('id="failure-k0"') < page.index('<table class="ranking">')
    assert "](failure.png)" in report.read_text(encoding="utf-8")
    png = report.parent / "failure.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_failure_figure_when_nothing_broke(tmp_path: Path) -> None:
    for seed in range(2):
        write_forked(tmp_path, f"fp32-{seed}", CURVE, amp_level="O0", seed=seed)
        write_forked(tmp_path, f"ok-{seed}", CURVE, seed=seed)
    report = analysis.write_report(tmp_path)
    assert not (report.parent / "failure.png").exists()
    assert "failure.png" not in report.read_text(encoding="utf-8")
