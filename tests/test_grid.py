"""Trial ids are stable across runs and machines; equivalent trials are marked."""

from __future__ import annotations

import subprocess
import sys

from ampsweep.jobs import TrialConfig
from ampsweep.sweep import count_graphs, equivalents, expand_grid, parse_spec
from tests._trial import trial_config


def _config(**overrides) -> TrialConfig:
    return trial_config(
        **{"steps": 300, "abort_after": 10, "black_list": ("CustomNorm",), "clip": 1.0, **overrides}
    )


def test_trial_id_is_pinned():
    # a literal: if this changes, every existing results folder stops resuming
    assert _config().trial_id == TrialConfig(**{**_config().__dict__}).trial_id
    # ``inside`` was the only placement before the axis existed: its ids did not change. (The
    # literal moved once, when the built-in workloads became ``ampsweep.jobs.workloads.*``:
    # the workload reference is part of the id.)
    assert _config(loss_placement="inside").trial_id == "40d1e188694f"
    assert _config().loss_placement == "outside"
    assert _config().trial_id not in ("40d1e188694f", _config(loss_placement="inside").trial_id)
    assert _config().graph_id != _config(loss_placement="inside").graph_id


def test_trial_id_is_the_same_in_a_fresh_process():
    code = (
        "from ampsweep.jobs import TrialConfig;"
        "print(TrialConfig(workload='ampsweep.jobs.workloads.seed_repro:make', steps=300, abort_after=10,"
        " amp_level='O2', black_list=('CustomNorm',), clip=1.0, loss_scale='none', dtype='float16', seed=0).trial_id)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == _config().trial_id


def test_trial_id_ignores_black_list_order_but_not_values():
    assert _config(black_list=("A", "B")).trial_id == _config(black_list=("B", "A")).trial_id
    ids = {
        _config().trial_id,
        _config(clip=None).trial_id,
        _config(clip=1.5).trial_id,
        _config(seed=1).trial_id,
        _config(amp_level="O3").trial_id,
        _config(loss_scale="dynamic").trial_id,
        _config(workload_args={"hidden": 8}).trial_id,
    }
    assert len(ids) == 7


def test_graph_id_shared_by_clip_seed_and_static_scale_value():
    assert _config().graph_id == _config(clip=5.0, seed=2).graph_id
    assert _config(loss_scale="static:1024").graph_id == _config(loss_scale="static:8").graph_id
    assert _config().graph_id != _config(black_list=()).graph_id
    assert _config().graph_id != _config(loss_scale="dynamic").graph_id


def _spec(grid: dict) -> object:
    return parse_spec(
        {"name": "g", "workload": "ampsweep.jobs.workloads.seed_repro:make", "steps": 10, "grid": grid}
    )


def test_grid_is_the_product_with_stable_ids():
    spec = _spec(
        {
            "amp_level": ["O0", "O2"],
            "black_list": [[], ["CustomNorm"]],
            "clip": [None, 1.0],
            "seed": [0, 1],
        }
    )
    trials = expand_grid(spec)
    assert len(trials) == 2 * 2 * 2 * 2
    assert len({t.trial_id for t in trials}) == len(trials)
    assert count_graphs(trials) == 3  # O0 builds one FP32 graph whatever its black list
    assert [t.trial_id for t in trials] == [t.trial_id for t in expand_grid(spec)]


def test_black_list_under_o0_is_marked_equivalent():
    trials = expand_grid(
        _spec({"amp_level": ["O0", "O2"], "black_list": [[], ["CustomNorm"]], "seed": [0, 1]})
    )
    marked = equivalents(trials)
    by_id = {t.trial_id: t for t in trials}
    assert len(marked) == 2
    for duplicate, original in marked.items():
        assert by_id[duplicate].amp_level == "O0" and by_id[duplicate].black_list == ("CustomNorm",)
        assert by_id[original].black_list == () and by_id[original].seed == by_id[duplicate].seed
