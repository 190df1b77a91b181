"""A sweep without an answer says why and writes the next spec: loss scaling, a black list, or a search."""

from __future__ import annotations

import pandas as pd
import pytest

from ampsweep.analysis._model import Localization
from ampsweep.analysis.wording._next_sweep import diagnose, next_spec


def _scores(verdict: str, underflow: float, loss_scale: str = "none") -> pd.DataFrame:
    rows = []
    for seed in (0, 1, 2):
        rows.append(("O0", (), "stable", 0.0, True, 2e-6, seed, "none"))
        for black in ((), ("Dense",)):
            rows.append(("O2", black, verdict, underflow, False, 0.0, seed, loss_scale))
    columns = [
        "amp_level",
        "black_list",
        "verdict",
        "underflow",
        "reference",
        "max_grad_norm",
        "seed",
        "loss_scale",
    ]
    frame = pd.DataFrame(rows, columns=columns)
    frame["ranked"] = True
    frame["outcome"] = ["diverged" if v == "diverged" else "completed" for v in frame["verdict"]]
    frame["error"] = None
    return frame


def _cell(cls: str = "ExpSoftmax", kind: str = "nonfinite") -> Localization:
    return Localization(
        kind, "softmax", cls, "forward", (0, 1), 2, 1400.0, "float16", "float16", 1.0, 1.0, None, None
    )


def test_silent_trials_whose_gradients_float16_lost_get_loss_scaling():
    sweep = diagnose(_scores("silent", 0.98), None)
    assert sweep.cause == "underflow" and "underflow" in sweep.why and "98 %" in sweep.why
    scales = sweep.grid["loss_scale"]
    assert scales[0] == "dynamic" and scales[1].startswith("static:")
    assert int(scales[1].split(":")[1]) > 2**16, "tiny FP32 gradients call for a large static scale"


def test_a_localized_cell_without_underflow_is_kept_in_fp32_on_top_of_every_list():
    sweep = diagnose(_scores("silent", 0.01), _cell("FeatureNorm", "departure"))
    assert sweep.cause == "overflow" and "FeatureNorm" in sweep.why
    assert sweep.grid["black_list"] == [[], ["Dense"], ["FeatureNorm"], ["Dense", "FeatureNorm"]]


def test_diverged_trials_with_underflow_numbers_still_go_to_the_black_list():
    sweep = diagnose(_scores("diverged", 0.9), _cell())
    assert sweep.cause == "overflow" and sweep.grid["black_list"][-1] == ["Dense", "ExpSoftmax"]


def test_a_cell_the_grid_already_kept_in_fp32_everywhere_gets_no_spec_that_repeats_the_grid():
    scores = _scores("diverged", 0.0)
    scores["black_list"] = scores["black_list"].map(lambda b: ("ExpSoftmax",) if b else ())
    sweep = diagnose(scores, _cell())
    assert sweep.cause == "overflow" and "already kept ExpSoftmax in FP32" in sweep.why
    assert sweep.grid == {} and sweep.search is None and not sweep.has_spec
    assert "change ExpSoftmax" in sweep.change


def test_an_adaptive_sweeps_next_black_lists_run_as_a_grid():
    spec = {
        "name": "ad",
        "workload": "w.py:make",
        "steps": 50,
        "search": "adaptive",
        "grid": {"amp_level": ["O2"]},
    }
    out = next_spec(spec, diagnose(_scores("diverged", 0.0), _cell()))
    assert out["search"] == "grid" and out["grid"]["black_list"][-1] == ["Dense", "ExpSoftmax"]


def test_nothing_to_go_on_is_an_adaptive_search_with_localization():
    sweep = diagnose(_scores("diverged", 0.0), None)
    assert sweep.cause == "no_learning" and sweep.search == "adaptive"


def test_the_next_spec_is_the_sweeps_own_with_the_change_and_a_new_name():
    spec = {
        "name": "uf",
        "workload": "w.py:make",
        "steps": 150,
        "grid": {"amp_level": ["O0", "O2"], "seed": [0]},
    }
    out = next_spec(spec, diagnose(_scores("silent", 0.98), None))
    assert out["name"] == "uf-next" and out["steps"] == 150 and out["workload"] == "w.py:make"
    assert out["grid"]["amp_level"] == ["O0", "O2"] and out["grid"]["loss_scale"][0] == "dynamic"
    assert spec["grid"] == {"amp_level": ["O0", "O2"], "seed": [0]}, "the sweep's own spec is left alone"
    searched = next_spec(spec, diagnose(_scores("diverged", 0.0), None))
    assert searched["search"] == "adaptive" and searched["localize"] is True


@pytest.mark.slow
def test_a_grid_without_a_scale_axis_names_loss_scaling_and_its_next_spec_answers(tmp_path):
    import yaml

    from ampsweep.analysis import analyze, write_report
    from ampsweep.sweep import RunConfig, Sweep

    spec = {
        "name": "underflow",
        "workload": "ampsweep.jobs.workloads.tiny_loss:make",
        "steps": 120,
        "grid": {"amp_level": ["O0", "O2"], "black_list": [[], ["Dense"]], "clip": [None], "seed": [0, 1]},
    }
    Sweep(spec).run(tmp_path, RunConfig(workers=2, progress=False))
    root = tmp_path / "underflow"
    rec = analyze(root).kinds[0].recommendation
    assert rec.config is None or rec.config["amp_level"] == "O0", "never O2 without scaling"
    assert rec.next_sweep is not None and rec.next_sweep.cause == "underflow"
    assert "loss scaling" in rec.answer[0]
    report = write_report(root)
    following = yaml.safe_load((report.parent / "next-spec.yaml").read_text())
    assert "dynamic" in following["grid"]["loss_scale"]
    Sweep(following).run(tmp_path, RunConfig(workers=2, progress=False))
    best = analyze(tmp_path / following["name"]).recommended
    assert best is not None and best["amp_level"] == "O2" and best["loss_scale"] != "none"


def test_a_relative_workload_file_becomes_absolute_so_the_next_spec_runs_from_anywhere(tmp_path, monkeypatch):
    (tmp_path / "specs" / "wl").mkdir(parents=True)
    (tmp_path / "specs" / "wl" / "w.py").write_text("def make(seed):\n    pass\n")
    monkeypatch.chdir(tmp_path)  # the run's folder: the file is found beside the spec instead
    spec = {"name": "uf", "workload": "wl/w.py:make", "steps": 5, "grid": {"amp_level": ["O2"]}}
    sweep = diagnose(_scores("silent", 0.98), None)
    out = next_spec(spec, sweep, tmp_path / "specs")
    assert out["workload"] == f"{(tmp_path / 'specs' / 'wl' / 'w.py').resolve()}:make"
    assert next_spec(spec, sweep)["workload"] == "wl/w.py:make", (
        "without the spec's folder it stays as written"
    )
    module = {**spec, "workload": "ampsweep.jobs.workloads.tiny_loss:make"}
    assert next_spec(module, sweep, tmp_path)["workload"] == module["workload"]
