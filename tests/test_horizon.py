"""``horizon:``: the answer is continued to the length of the user's training before it is final (issue 42)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ampsweep.analysis import analyze
from ampsweep.analysis.compute._horizon import merge_continuations
from ampsweep.sweep import Sweep
from ampsweep.sweep.planning._grid import expand_grid
from ampsweep.sweep.planning._spec import parse_spec

LATE = "ampsweep.jobs.workloads.late_softmax:make"


def _spec(**overrides):
    spec = {
        "name": "h",
        "workload": LATE,
        "steps": 600,
        "grid": {"amp_level": ["O0", "O2"], "black_list": [[], ["ExpSoftmax"]], "seed": [0]},
    }
    spec.update(overrides)
    return parse_spec(spec)


def test_default_horizon_is_the_trials_end_and_changes_no_trial_id():
    plain = _spec()
    assert plain.horizon == 600
    same = _spec(horizon=600)
    assert [t.trial_id for t in expand_grid(plain)] == [t.trial_id for t in expand_grid(same)]
    assert not any(t.save_snapshot for t in expand_grid(plain))


def test_a_horizon_past_the_trials_keeps_every_trials_end_state():
    trials = expand_grid(_spec(horizon=1800))
    assert trials and all(t.save_snapshot for t in trials)


def test_forked_trials_end_later_so_the_horizon_counts_from_there():
    spec = _spec(start_from={"steps": 1200}, horizon=1800)
    assert spec.horizon == 1800
    with pytest.raises(ValueError, match="horizon: 1500 is not allowed; a global step >= 1,800"):
        _spec(start_from={"steps": 1200}, horizon=1500)
    assert _spec(start_from={"steps": 1200}).horizon == 1800


def test_adaptive_search_refuses_a_horizon_it_cannot_continue_to():
    with pytest.raises(ValueError, match="search: grid"):
        _spec(search="adaptive", grid={"amp_level": ["O2"], "seed": [0]}, horizon=1800)


def _row(trial_id, black_list, outcome="completed", first=None, start=0, steps=600, seed=0):
    return {
        "trial_id": trial_id,
        "amp_level": "O2",
        "black_list": tuple(black_list),
        "clip": float("nan"),
        "loss_scale": "none",
        "dtype": "float16",
        "loss_placement": "outside",
        "seed": seed,
        "outcome": outcome,
        "first_nonfinite_step": first,
        "start_step": start,
        "steps": steps,
        "steps_run": steps if first is None else first - start,
        "error": None,
    }


def test_a_continuation_that_broke_makes_its_trial_broken_at_that_step():
    sweep = pd.DataFrame([_row("a", []), _row("b", ["ExpSoftmax"]), _row("c", [], seed=1)])
    continued = pd.DataFrame(
        [
            _row("a2", [], "diverged", first=1417, start=600, steps=1200),
            _row("b2", ["ExpSoftmax"], start=600, steps=1200),
        ]
    )
    merged = merge_continuations(sweep, continued).set_index("trial_id")
    assert merged.loc["a", "outcome"] == "diverged"
    assert merged.loc["a", "first_nonfinite_step"] == 1417
    assert merged.loc["a", "held_to"] == 1417 and merged.loc["a", "continued_by"] == "a2"
    assert merged.loc["b", "outcome"] == "completed" and merged.loc["b", "held_to"] == 1800
    # not continued: known only to the trials' end
    assert merged.loc["c", "held_to"] == 600 and merged.loc["c", "continued_by"] is None


def test_the_answer_says_how_far_it_held_and_what_lies_past_it():
    from ampsweep.analysis._model import HeldTo
    from ampsweep.analysis.wording._held import held_line, past_the_horizon

    held = HeldTo(
        1800,
        3,
        3,
        1800,
        600,
        ("O2 · no clip broke at ~1,417 on 3/3 seeds (ExpSoftmax, forward)",),
        ("O2 · clip 1.0",),
    )
    line = held_line(held)
    assert line.startswith("Held to step 1,800 (the horizon: your training's length) on 3/3 seeds")
    assert "at step 600" in line and "O2 · no clip broke at ~1,417" in line
    undecided = past_the_horizon(held)
    assert "past step 1,800" in undecided[0] and "O2 · clip 1.0" in undecided[1]
    # no horizon past the trials: no extra first line, but the report says nothing ran longer
    plain = HeldTo(300, 3, 3, 300, 300)
    assert held_line(plain) is None
    assert "past step 300" in past_the_horizon(plain)[0] and "horizon:" in past_the_horizon(plain)[0]


@pytest.mark.slow
def test_late_break_past_the_trials_moves_the_answer_to_what_held(tmp_path: Path):
    """late_softmax at 600 steps: every O2 list looks stable; continued to 1,800 only ExpSoftmax in FP32 holds."""
    spec = {
        "name": "late",
        "workload": LATE,
        "steps": 600,
        "horizon": 1800,
        "grid": {
            "amp_level": ["O0", "O2"],
            "black_list": [[], ["ExpSoftmax"]],
            "clip": [None],
            "seed": [0, 1],
        },
    }
    Sweep(spec).run(tmp_path / "out", workers=2, progress=False)
    root = tmp_path / "out" / "late"
    log = json.loads((root / "horizon.json").read_text())
    assert log["horizon"] == 1800 and log["trials_end"] == 600
    continued = {c["label"]: c for c in log["continued"]}
    # the 600-step winner (fewest classes in FP32) was continued and broke between the trials' end and the horizon
    assert "O2 · no clip" in continued
    broke = continued["O2 · no clip"]["broke_at"]
    assert broke and all(600 < step < 1800 for step in broke.values())
    assert {c["cell_class"] for c in continued["O2 · no clip"]["localized"]} == {"ExpSoftmax"}
    analysis = analyze(root, figures=False)
    answer = analysis.ranking.query("recommended").iloc[0]
    assert list(answer["black_list"]) == ["ExpSoftmax"] and answer["amp_level"] == "O2"
    # the first lines say how far it held, and what broke on the way
    lines = analysis.kinds[0].recommendation.answer
    assert lines[0].startswith("Use O2, keep ExpSoftmax in FP32")
    assert lines[1].startswith("Held to step 1,800 (the horizon") and "on 2/2 seeds" in lines[1]
    assert "O2 · no clip broke at ~" in lines[1] and "(ExpSoftmax, forward)" in lines[1]
    assert log["answer"] == answer["label"]
    assert continued[answer["label"]]["held_to"] == {"0": 1800, "1": 1800}
    # the resolved spec keeps the horizon
    assert yaml.safe_load((root / "sweep.yaml").read_text())["horizon"] == 1800


def test_plan_says_the_answer_will_be_continued_to_the_horizon(tmp_path: Path, capsys):
    from ampsweep.sweep.cli import main

    spec = tmp_path / "late.yaml"
    spec.write_text(
        yaml.safe_dump(
            {"name": "late", "workload": LATE, "steps": 600, "horizon": 1800, "grid": {"amp_level": ["O2"]}}
        )
    )
    assert main(["plan", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "to the horizon, step 1,800" in out and "at step 600" in out


@pytest.mark.slow
def test_a_break_that_names_a_class_the_grid_kept_in_no_configuration_adds_it(tmp_path: Path):
    """The grid has no black list: the break names ExpSoftmax, the next round adds O2 with it in FP32
    (its own trials from the seed's start, as ``search: adaptive`` would), and that one is continued."""
    spec = {
        "name": "lacks",
        "workload": LATE,
        "steps": 600,
        "horizon": 1800,
        "grid": {"amp_level": ["O0", "O2"], "clip": [None], "seed": [0]},
    }
    Sweep(spec).run(tmp_path / "out", workers=2, progress=False)
    root = tmp_path / "out" / "lacks"
    log = json.loads((root / "horizon.json").read_text())
    continued = {c["label"]: c for c in log["continued"]}
    assert continued["O2 · no clip"]["broke_at"], "the grid's answer broke before the horizon"
    assert list(log["added"]) == ["O2 · FP32: ExpSoftmax · no clip"]
    added = continued["O2 · FP32: ExpSoftmax · no clip"]
    assert "added: O2 · no clip broke in ExpSoftmax" in added["why"]
    assert added["held_to"] == {"0": 1800} and log["answer"] == "O2 · FP32: ExpSoftmax · no clip"
    trials = pd.read_parquet(root / "trials")
    mine = trials[[list(black) == ["ExpSoftmax"] for black in trials["black_list"]]]
    assert len(mine) == 1 and int(mine["steps"].iloc[0]) == 600 and int(mine["start_step"].iloc[0]) == 0
    planned = json.loads((root / "plan.json").read_text())
    assert mine["trial_id"].iloc[0] in json.dumps(planned), "plan.json lists the added trial"
