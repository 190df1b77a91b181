"""A smoke sweep over mindcv's own VisionTransformer: black lists of library Cells train (issue 41, item 3).

mindcv's ``Attention`` computes ``q @ k`` with a primitive and reads its
children's outputs, ``Block`` nests it with an ``Mlp`` and LayerNorms; every
black list its Cells suggest must train under O2 and O3: completed or
diverged, never failed and never "not applicable".
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ampsweep.analysis import analyze, load_trials
from ampsweep.sweep import Sweep

pytest.importorskip("mindcv")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mindcv_vit.yaml"


@pytest.mark.slow
def test_every_black_list_of_mindcvs_vit_trains(tmp_path: Path) -> None:
    spec = yaml.safe_load(EXAMPLE.read_text())
    spec["steps"] = 8
    Sweep(spec).run(tmp_path, workers=2, progress=False)
    root = tmp_path / spec["name"]
    trials = load_trials(root)
    assert len(trials) == 15
    assert set(trials["outcome"]) <= {"completed", "diverged"}, trials[["black_list", "outcome", "error"]]
    listed = trials[(trials["amp_level"] != "O0") & (trials["black_list"].map(len) > 0)]
    assert (listed["fp32_cells"].notna()).all() and (listed["fp32_params"] > 0).all()
    # the Block contains its Attention: more of the network in FP32
    params = {(r.amp_level, r.black_list): r.fp32_params for r in listed.itertuples()}
    assert params[("O2", ("Block",))] > params[("O2", ("Attention",))]
    assert analyze(root, figures=False).kinds[0].recommendation.status == "recommended"
