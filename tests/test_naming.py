"""One name for a configuration in every output (``ampsweep.contracts.Configuration``).

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
from ampsweep.contracts import Configuration, black_list_value, clip_name, clip_value, loss_scale_name
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
    assert loss_scale_name("dynamic") == "loss scale dynamic"
    assert loss_scale_name("none") == loss_scale_name(None) == "no loss scaling"


def test_the_readable_style() -> None:
    assert Configuration("O2", ("CustomNorm",), 5.0).name() == "O2 · FP32: CustomNorm · clip 5.0"
    assert Configuration("O2", (), math.nan, "dynamic").name() == "O2 · no clip · loss scale dynamic"
    assert Configuration("O2", clip=1.0, dtype="bfloat16").name() == "O2 bfloat16 · clip 1.0", (
        "a non-default dtype shows"
    )
    spelled = Configuration("O2", clip=1.0, loss_placement="inside", device_kind="gpu").name(
        {"loss_placement"}
    )
    assert spelled == "O2 · clip 1.0 · loss inside"


def test_o0_is_fp32() -> None:
    """Under O0 nothing is cast: no black list, no dtype, no loss placement, no 'no clip'."""
    assert Configuration("O0", ("CustomNorm",), dtype="bfloat16", loss_placement="inside").name() == "FP32"
    assert Configuration("O0", (), 1.0, "dynamic").name() == "FP32 · clip 1.0 · loss scale dynamic"


def test_the_id_names_every_choice_in_the_same_style() -> None:
    assert (
        Configuration("O2", ("CustomNorm",), 5.0, "none", "float16", "outside", "cpu").id
        == "O2 float16 · FP32: CustomNorm · clip 5.0 · loss outside · on cpu"
    )
    assert Configuration("O0", device_kind="gpu").id == "FP32 · on gpu"


def test_one_configuration_whatever_form_its_row_holds() -> None:
    """A Parquet row (array, NaN clip), a ranking row (tuple, None) and a label read as one value."""
    parquet = {
        "amp_level": "O2",
        "black_list": np.array(["B", "A", "A"]),
        "clip": np.nan,
        "loss_scale": "none",
    }
    ranking = {
        "amp_level": "O2",
        "black_list": ("A", "B"),
        "clip": None,
        "dtype": "float16",
        "device_kind": "",
    }
    label = {"amp_level": "O2", "black_list_key": "[A, B]", "clip": float("nan")}
    same = {Configuration.from_row(r) for r in (parquet, ranking, label)}
    assert same == {Configuration("O2", ("B", "A"))}
    config = same.pop()
    assert config.black_list == ("A", "B") and config.clip is None
    assert Configuration.from_row(config.as_row()) == config and config.key == tuple(config.as_row().values())
    assert config.with_black_list(["A"]) == Configuration("O2", ("A",))
    assert Configuration("O2", "CustomNorm").black_list == ("CustomNorm",)


def test_graph_fields_ignore_what_o0_never_casts() -> None:
    o0 = [
        Configuration("O0", black, dtype=d, loss_placement=p)
        for black, d, p in [((), "float16", "outside"), (("X",), "bfloat16", "inside")]
    ]
    assert o0[0].graph_fields() == o0[1].graph_fields() == {"amp_level": "O0", "loss_scale": "none"}
    static = [
        Configuration("O2", clip=c, loss_scale=f"static:{v}").graph_fields()
        for c, v in [(1.0, 8), (None, 1024)]
    ]
    assert static[0] == static[1] and static[0]["loss_scale"] == "static"


def test_trial_and_graph_ids_are_those_sweeps_were_resumed_by() -> None:
    """The ids hash the canonical JSON as before :class:`Configuration` existed; these were computed by that code."""
    cases = [
        (
            TrialConfig(
                "examples/mlp.py", 100, 10, "O2", ("LayerNorm", "Dense"), 1.0, "dynamic", "float16", 0
            ),
            "ef19e76c915c",
            "c7d9e1d25109",
        ),
        (
            TrialConfig(
                "examples/mlp.py",
                100,
                10,
                "O2",
                (),
                None,
                "static:1024",
                "bfloat16",
                2,
                loss_placement="inside",
            ),
            "d80158708782",
            "f299b55f9a2f",
        ),
        (
            TrialConfig(
                "w.py:make", 50, 5, "O0", ("X",), 5.0, "none", "float16", 1, workload_args={"width": 8}
            ),
            "c1da2e888fe2",
            "838aac22ef40",
        ),
        (
            TrialConfig(
                "w.py:make",
                50,
                5,
                "O3",
                ("X",),
                0.25,
                "none",
                "float16",
                1,
                start_step=20,
                start_from="abc",
                save_snapshot=True,
            ),
            "1511705df8f8",
            "c80ccc2f6a0d",
        ),
    ]
    for trial, trial_id, graph_id in cases:
        assert (trial.trial_id, trial.graph_id) == (trial_id, graph_id), trial.label


def test_plan_lines_use_the_same_name() -> None:
    """``ampsweep plan`` lists each trial by ``TrialConfig.label``."""
    trial = TrialConfig("w.py", 10, 5, "O2", ("CustomNorm",), 5.0, "none", "float16", 3)
    assert trial.label == "O2 float16 · FP32: CustomNorm · clip 5.0 · loss outside · seed 3"
    assert trial.label == Configuration("O2", ["CustomNorm"], 5.0).trial_name(
        3, spell=("dtype", "loss_placement")
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
    return [Configuration.from_row(row).name(varies) for row in ranking.to_dict("records")]


def test_the_ranking_is_named_by_the_naming_module(report) -> None:
    result, _ = report
    names = _names(result)
    assert list(result.ranking["label"]) == names and len(set(names)) == len(names)
    assert "O2 · FP32: CustomNorm · clip 1.0" in names and "FP32" in names
    ids = [Configuration.from_row(row).id for row in result.ranking.to_dict("records")]
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
    assert rec["config_id"] == best["config_id"] == Configuration.from_row(rec["config"]).id
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
