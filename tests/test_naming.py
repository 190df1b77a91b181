"""One name for a configuration in every output (``ampsweep.contracts._naming``).

The unit tests pin the style; the rest write a real report with the existing
sweep writers (``tests.test_analysis``, ``tests.test_terminal``) and check that
the terminal, report.md, report.html, ranking.csv and recommendation.json all
call each configuration by the name the naming module gives it, and that no
output falls back to the old ``O2 bl=[CustomNorm] clip=5.0 ls=none`` style or
prints a bare "FP32 ?" where a value is missing.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from ampsweep import analysis
from ampsweep.analysis.render._terminal import render_terminal
from ampsweep.contracts import (
    black_list_name,
    black_list_value,
    clip_name,
    clip_value,
    config_id,
    config_name,
    loss_scale_name,
    name_of,
    trial_name,
)
from ampsweep.jobs._config import TrialConfig
from tests.test_analysis import CURVE, build_ranked_sweep, write_anomaly, write_trial
from tests.test_terminal import build_late_sweep

#: what the old second style looked like ("O2 bl=[CustomNorm] clip=5.0 ls=none"): none of it may appear
#: in any output (the code snippets' ``clip=1.0`` keyword is Python, not a name)
OLD_STYLE = ("bl=", "ls=", "clip=off", "seed=")


# -- the style ------------------------------------------------------------------------------------------


def test_a_clip_is_written_one_way() -> None:
    assert clip_value(5) == clip_value(5.0) == "5.0"
    assert clip_value(0.25) == "0.25"
    assert clip_value(None) == clip_value(float("nan")) == clip_value(np.float32("nan")) == "off"
    assert clip_name(5.0) == "clip 5.0" and clip_name(None) == "no clip"


def test_black_lists_and_loss_scales() -> None:
    assert black_list_value(["CustomNorm", "ExpSoftmax"]) == "CustomNorm, ExpSoftmax"
    assert black_list_value(np.array([], dtype=object)) == "none"
    assert black_list_name(("CustomNorm",)) == "FP32: CustomNorm" and black_list_name(()) == ""
    assert loss_scale_name("dynamic") == "loss scale dynamic"
    assert loss_scale_name("none") == loss_scale_name(None) == "no loss scaling"


def test_the_readable_style() -> None:
    assert config_name("O2", ["CustomNorm"], 5.0) == "O2 · FP32: CustomNorm · clip 5.0"
    assert config_name("O2", [], math.nan, "dynamic") == "O2 · no clip · loss scale dynamic"
    assert config_name("O2", [], 1.0, dtype="bfloat16") == "O2 bfloat16 · clip 1.0", (
        "a non-default dtype shows"
    )
    spelled = config_name("O2", [], 1.0, loss_placement="inside", device_kind="gpu", spell={"loss_placement"})
    assert spelled == "O2 · clip 1.0 · loss inside"


def test_o0_is_fp32() -> None:
    """Under O0 nothing is cast: no black list, no dtype, no loss placement, no 'no clip'."""
    assert config_name("O0", ["CustomNorm"], None, dtype="bfloat16", loss_placement="inside") == "FP32"
    assert config_name("O0", [], 1.0, "dynamic") == "FP32 · clip 1.0 · loss scale dynamic"


def test_the_id_names_every_choice_in_the_same_style() -> None:
    assert (
        config_id("O2", ["CustomNorm"], 5.0, "none", "float16", "outside", "cpu")
        == "O2 float16 · FP32: CustomNorm · clip 5.0 · loss outside · on cpu"
    )
    assert config_id("O0", [], None, "none", "float16", "outside", "gpu") == "FP32 · on gpu"


def test_plan_lines_use_the_same_name() -> None:
    """``ampsweep plan`` lists each trial by ``TrialConfig.label``."""
    trial = TrialConfig("w.py", 10, 5, "O2", ("CustomNorm",), 5.0, "none", "float16", 3)
    assert trial.label == "O2 float16 · FP32: CustomNorm · clip 5.0 · loss outside · seed 3"
    assert trial.label == trial_name(
        {"amp_level": "O2", "black_list": ["CustomNorm"], "clip": 5.0, "dtype": "float16"},
        3,
        spell=("dtype", "loss_placement"),
    )
    fp32 = TrialConfig("w.py", 10, 5, "O0", ("CustomNorm",), None, "none", "float16", 0)
    assert fp32.label == "FP32 · seed 0"
    assert not any(old in trial.label or old in fp32.label for old in OLD_STYLE)


def test_two_o0_rows_that_share_a_name_keep_distinct_ids(tmp_path: Path) -> None:
    """O0 rows differing only in what O0 ignores share the name 'FP32' when the planner folded nothing
    (hand-written folders): their ``config_id`` still tells them apart."""
    write_trial(tmp_path, "a", loss=CURVE, amp_level="O0", black_list=["A"])
    write_trial(tmp_path, "b", loss=CURVE, amp_level="O0", black_list=["B"])
    write_trial(tmp_path, "m", loss=CURVE)
    ranking = analysis.analyze(tmp_path, figures=False).ranking
    fp32 = ranking[ranking["amp_level"] == "O0"]
    assert list(fp32["label"]) == ["FP32", "FP32"]
    assert fp32["config_id"].is_unique
    assert all("as run: float16, black list " in i for i in fp32["config_id"])


# -- every renderer, on a real report -------------------------------------------------------------------


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[analysis.Analysis, Path]:
    """The ranked test sweep, whose diverged configuration's replay recorded no FP32 maximum."""
    root = tmp_path_factory.mktemp("naming") / "unit-sweep"
    build_ranked_sweep(root)
    for seed in range(3):  # the replay ran, but FP32 has no value at that step
        write_anomaly(root, f"div{seed}", max_abs=65504.0 - seed, fp32_max_abs=None)
    result = analysis.analyze(root)
    return result, analysis.write_report(root, analysis=result)


def _names(result: analysis.SweepAnalysis) -> list[str]:
    """Every configuration's name, from the naming module: the optional parts where they vary."""
    ranking = result.ranking
    varies = {c for c in ("dtype", "loss_placement", "device_kind") if ranking[c].nunique() > 1}
    return [name_of(row, varies) for row in ranking.to_dict("records")]


def test_the_ranking_is_named_by_the_naming_module(report) -> None:
    result, _ = report
    names = _names(result)
    assert list(result.ranking["label"]) == names and len(set(names)) == len(names)
    assert "O2 · FP32: CustomNorm · clip 1.0" in names and "FP32" in names
    ids = [
        name_of(row, ("dtype", "loss_placement", "device_kind")) for row in result.ranking.to_dict("records")
    ]
    assert list(result.ranking["config_id"]) == ids


def test_terminal_names(report) -> None:
    result, path = report
    out = render_terminal(result, 10, path, 200)
    for name in _names(result):
        assert name in out, name
    assert not any(old in out for old in OLD_STYLE) and "FP32 ?" not in out


def test_markdown_names(report) -> None:
    result, path = report
    text = path.read_text(encoding="utf-8")
    for name in _names(result):
        assert f"| {name} |" in text, name
    evidence = text.split("### Evidence", 1)[1].split("\n## ", 1)[0]
    assert (
        "- against FP32: final loss" in evidence
        and "next stable configuration, #2 O2 · clip 0.1:" in evidence
    )
    # the failures list names each trial in the same style, with its seed
    assert "`div0` O3 · no clip · seed 0: first non-finite step 50" in text


def test_html_names(report) -> None:
    result, path = report
    page = (path.parent / "report.html").read_text(encoding="utf-8")
    for name in _names(result):
        assert html.escape(name) in page, name


def test_csv_names(report) -> None:
    result, path = report
    rows = list(csv.DictReader(io.StringIO((path.parent / "ranking.csv").read_text(encoding="utf-8"))))
    assert [r["label"] for r in rows] == _names(result)
    assert [r["config_id"] for r in rows] == list(result.ranking["config_id"])
    assert all(" · on " in r["config_id"] for r in rows), "the key names every choice, the device kind too"


def test_json_names(report) -> None:
    result, path = report
    doc = json.loads((path.parent / "recommendation.json").read_text(encoding="utf-8"))
    rec = doc["recommendations"][0]
    best = result.recommended
    assert best is not None
    assert rec["config_id"] == best["config_id"] == config_id(**rec["config"])
    assert rec["evidence"]["fp32"]["label"] == "FP32"
    assert rec["evidence"]["runner_up"]["label"] in _names(result)
    assert all(n["label"] for n in rec["evidence"]["neighbours"])


@pytest.mark.parametrize("name", ["report.md", "report.html", "ranking.csv", "recommendation.json"])
def test_no_old_style_and_no_question_mark_for_fp32(report, name: str) -> None:
    _, path = report
    text = (path.parent / name).read_text(encoding="utf-8")
    for old in OLD_STYLE:
        assert old not in text, f"{name} still writes {old!r}"
    assert not re.search(r"clip=[0-9.]+ ", text), f"{name} still writes the old clip="
    assert "FP32 ?" not in text and "FP32 ?" not in html.unescape(text)
    assert "?)" not in text


def test_a_missing_fp32_value_is_said_plainly(report) -> None:
    _, path = report
    text = path.read_text(encoding="utf-8")
    assert "float16 max|x| 6.55e4 (no FP32 value at that step)" in text


def test_the_answer_says_what_was_measured(tmp_path: Path) -> None:
    """'How sure' names the seeds it was stable on and how far the runner-up is, not a vote of seeds."""
    build_late_sweep(tmp_path)
    rec = analysis.analyze(tmp_path).kinds[0].recommendation
    sure = rec.answer[-1]
    assert sure.startswith("How sure: stable on 3/3 seeds; the runner-up (#2) is within seed noise of it")
    assert "rank it first" not in sure
    assert not any(old in line for line in rec.answer for old in OLD_STYLE)
