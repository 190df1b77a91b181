"""``search: adaptive`` end to end on real Ray and MindSpore: it finds the minimal black list itself (slow)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ampsweep.contracts import CONFIRM_FOLDER, SEARCH_FILE, decode_search
from ampsweep.sweep import RunConfig, Sweep

pytestmark = pytest.mark.slow


def _search(tmp_path: Path, name: str, workload: str, steps: int, seeds: list[int], **extra) -> Path:
    spec = {
        "name": name,
        "workload": workload,
        "steps": steps,
        "search": "adaptive",
        "grid": {"amp_level": ["O2"], "clip": [None, 5.0], "seed": seeds},
        "confirm": {"seeds": 1, "steps_factor": 2},
        **extra,
    }
    Sweep(spec).run(tmp_path, RunConfig(workers=2, progress=False))
    return tmp_path / name


def _check(root: Path, minimal: list[str]) -> None:
    log = decode_search((root / SEARCH_FILE).read_text())
    family = log.families[0]
    assert family.minimal_black_list == minimal, family.rounds
    assert family.confirmed is True, family.confirmation
    trials = pd.read_parquet(root / "trials")
    assert len(trials) == log.trials_run < log.grid_equivalent
    assert (root / CONFIRM_FOLDER / "trials").is_dir()
    from ampsweep.analysis import analyze, render_markdown

    a = analyze(root)
    best = a.recommended
    assert best is not None and tuple(best["black_list"]) == tuple(sorted(minimal))
    text = render_markdown(a)
    assert "How the answer was found (search: adaptive)" in text and "The recommendation held" in text


def test_seed_repro_search_finds_customnorm(tmp_path):
    root = _search(tmp_path, "search-seed", "ampsweep.jobs.workloads.seed_repro:make", 120, [0, 1])
    _check(root, ["CustomNorm"])
    grow = decode_search((root / SEARCH_FILE).read_text()).families[0].rounds[0]
    assert grow.phase == "grow" and set(grow.outcomes.values()) == {"diverged"}
    assert grow.localized and all(
        (cell.cell_class, cell.phase) == ("CustomNorm", "forward") for cell in grow.localized
    ), grow.localized


def test_a_silent_failure_is_found_and_fixed(tmp_path):
    root = _search(tmp_path, "search-silent", "ampsweep.jobs.workloads.silent_norm:make", 150, [0, 1])
    _check(root, ["FeatureNorm"])
    grow = decode_search((root / SEARCH_FILE).read_text()).families[0].rounds[0]
    assert set(grow.outcomes.values()) == {"silent"}, "finite, but far worse than FP32"
    assert grow.localized and all(cell.cell_class == "FeatureNorm" for cell in grow.localized)


def test_a_workload_it_has_never_seen(tmp_path):
    # the hand-written loss overflows only where the loss computes in float16
    root = _search(
        tmp_path,
        "search-loss",
        "ampsweep.jobs.workloads.naive_loss:make",
        120,
        [0, 1],
        grid={
            "amp_level": ["O2"],
            "clip": [None],
            "seed": [0, 1],
            "loss_placement": ["inside"],
        },
    )
    _check(root, ["LogSumExpLoss"])


def test_gradients_that_underflow_get_loss_scaling_not_a_black_list(tmp_path):
    # no loss_scale axis in the grid: the search adds scaling because the gradients underflow
    root = _search(
        tmp_path,
        "search-underflow",
        "ampsweep.jobs.workloads.tiny_loss:make",
        150,
        [0, 1],
        grid={"amp_level": ["O2"], "clip": [None], "seed": [0, 1]},
    )
    family = decode_search((root / SEARCH_FILE).read_text()).families[0]
    grow = family.rounds[0]
    assert set(grow.outcomes.values()) == {"silent"} and "loss scaling" in grow.decision
    assert min(grow.underflow.values()) > 0.5, grow.underflow
    assert family.minimal_black_list == [], "no extra class in FP32"
    assert family.loss_scale_added in {"dynamic"} | {f"static:{2**k}" for k in range(1, 25)}
    assert family.confirmed is True, family.confirmation
    from ampsweep.analysis import analyze

    best = analyze(root).recommended
    assert best is not None and best["amp_level"] == "O2" and best["loss_scale"] != "none"
    assert tuple(best["black_list"]) == ()


def test_mindspores_own_transformer_layer_gets_its_attention_not_the_layer(tmp_path):
    """nn.TransformerEncoderLayer whose scores overflow: the search keeps nn.MultiheadAttention in FP32 (issue 41)."""
    root = _search(
        tmp_path,
        "search-encoder",
        "ampsweep.jobs.workloads.encoder_classifier:make",
        60,
        [0, 1],
        grid={"amp_level": ["O2"], "clip": [None], "seed": [0, 1]},
    )
    _check(root, ["MultiheadAttention"])
    grow = decode_search((root / SEARCH_FILE).read_text()).families[0].rounds[0]
    assert {cell.cell_class for cell in grow.localized} == {"MultiheadAttention"}
    trials = pd.read_parquet(root / "trials")
    assert not (trials["outcome"] == "failed").any()
