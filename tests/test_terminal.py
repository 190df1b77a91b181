"""What a person sees first: the answer, a table that fits, honest labels in every output.

The sweeps are synthetic (``tests.test_analysis`` writers): O0 trials with and
without a black list, a recommended O2 configuration with a black-listed
class, and O2/O3 configurations that diverge after reaching a low loss (the
losses before their NaN look like a converged run's).
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ampsweep import analysis
from ampsweep.analysis.render._terminal import render_terminal
from tests.test_analysis import CURVE, STEPS, build_ranked_sweep, write_anomaly, write_trial

LONG_CLASS = "SoftmaxCrossEntropyWithLogitsButLonger"


def build_late_sweep(root: Path) -> None:
    """FP32; O2 + [ExpSoftmax] (and + a long class name) clip 1.0 stable; O2 that learns to a low loss, then NaN at 150."""
    late = np.where(np.arange(STEPS) < 150, CURVE * 0.01, np.nan)[:160]
    every_tenth = np.where(np.arange(STEPS) % 10 == 0, 2.0, 0.5)
    for seed in range(3):
        write_trial(root, f"fp32-{seed}", loss=CURVE, amp_level="O0", seed=seed)
        write_trial(
            root, f"o0bl-{seed}", loss=CURVE, amp_level="O0", black_list=["ExpSoftmax"], seed=seed, clip=1.0
        )
        for name, black_list in (("best", ["ExpSoftmax"]), ("long", ["ExpSoftmax", LONG_CLASS])):
            write_trial(
                root,
                f"{name}-{seed}",
                loss=CURVE,
                black_list=black_list,
                clip=1.0,
                seed=seed,
                grad_norm=every_tenth,
            )
        write_trial(root, f"late-{seed}", loss=late, clip=1.0, seed=seed, grad_norm=every_tenth[:160])
        write_trial(root, f"late-noclip-{seed}", loss=late, seed=seed)
        write_anomaly(
            root,
            f"late-{seed}",
            cell="blocks.0.attn.softmax",
            cell_class="ExpSoftmax",
            max_abs=1.0,
            fp32_max_abs=1.0,
            replay_step=150,
        )


@pytest.fixture(scope="module")
def late(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, analysis.Analysis]:
    root = tmp_path_factory.mktemp("late") / "late-sweep"
    build_late_sweep(root)
    result = analysis.analyze(root)
    result.report()
    return root, result


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("width", [80, 100, 120])
def test_no_line_is_wider_than_the_terminal(late, tmp_path: Path, width: int) -> None:
    root, result = late
    out = render_terminal(result, 8, root / "report" / "report.md", width)
    assert max(len(line) for line in out.splitlines()) <= width
    ranked = tmp_path / "ranked"
    build_ranked_sweep(ranked)
    out = render_terminal(analysis.analyze(ranked, figures=False), 8, ranked / "report" / "report.md", width)
    assert max(len(line) for line in out.splitlines()) <= width


def test_the_answer_comes_first(late) -> None:
    root, result = late
    lines = _lines(render_terminal(result, 8, root / "report" / "report.md", 100))
    assert lines[0] == "Use O2, keep ExpSoftmax in FP32, clip 1.0."
    assert lines[1].startswith("Why: without ExpSoftmax in FP32, the overflow happened inside ExpSoftmax")
    head = " ".join(lines[:6])
    assert "How sure: stable on 3/3 seeds" in head
    assert f"Report: {root / 'report' / 'report.html'}" in head
    # the table comes after the answer
    assert next(i for i, line in enumerate(lines) if line.lstrip().startswith("#")) > 2


def test_honest_rows_in_the_terminal(late) -> None:
    root, result = late
    out = render_terminal(result, 10, None, 120)
    rows = [line for line in out.splitlines() if line[:4].strip().rstrip("=").strip().isdigit()]
    fp32 = [line for line in rows if "FP32 baseline" in line]
    assert fp32 and all("black list" not in line for line in fp32)
    assert all(" FP32 " in line or "FP32 ·" in line for line in fp32)
    broken = [line for line in rows if "diverged" in line]
    assert len(broken) == 2
    for line in broken:
        assert "NaN at ~150" in line
        assert "0.00" not in line, "a diverged row shows a final loss that reads like convergence"


def test_honest_rows_in_every_file(late) -> None:
    root, result = late
    report = root / "report"
    rows = list(csv.DictReader(io.StringIO((report / "ranking.csv").read_text())))
    broken = [r for r in rows if r["stability"] == "unstable"]
    assert broken and all(r["broke_at"] == "NaN at ~150" for r in broken)
    assert all(r["final_loss_median"] == "" and r["steps_to_target_median"] == "" for r in broken)
    assert all(r["label"].startswith("FP32") for r in rows if r["amp_level"] == "O0")
    markdown = (report / "report.md").read_text()
    table = markdown[markdown.index("## Ranking") :]
    table = table[: table.index("\n\n")]
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if "FP32 baseline" in cells[0]:
            assert cells[1].startswith("FP32") and "black list" not in line
        if cells[2].endswith("NaN"):
            assert cells[4] == "NaN at ~150" and cells[5] == "-"
    page = (report / "report.html").read_text()
    assert "NaN at ~150" in page and "default black list" not in page
    doc = json.loads((report / "recommendation.json").read_text())
    neighbours = doc["recommendations"][0]["evidence"]["neighbours"]
    broken_json = [n for n in neighbours if n.get("broke_at")]
    assert broken_json and all(n["final_loss_median"] is None for n in broken_json)
    assert doc["recommendations"][0]["answer"][0].startswith("Use O2, keep ExpSoftmax")


def test_report_command_piped_fits_100(late) -> None:
    root, _ = late
    ran = subprocess.run(
        [sys.executable, "-m", "ampsweep", "report", str(root)], capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    lines = _lines(ran.stdout)
    assert lines[0].startswith("Use O2, keep ExpSoftmax")
    assert max(len(line) for line in ran.stdout.splitlines()) <= 100
