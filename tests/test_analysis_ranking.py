"""Ranking by evidence: ties within seed noise, minimal black lists, CPU speed, the answer first.

Every sweep is written through the contract schemas (``tests.test_analysis``
helpers) with the exact per-seed numbers the assertions depend on.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from ampsweep import analysis
from ampsweep.analysis.compute._criteria import beyond_noise
from tests.test_analysis import CURVE, nan_curve, write_anomaly, write_trial

TARGET = 0.5


LONG = 300


def reaching(step: int, final: float = 0.1, n: int = LONG) -> np.ndarray:
    """A loss of 1.0 then ``final``, whose 10-step mean first reaches ``TARGET`` at 1-based ``step``.

    With ``final`` near 0.1, six low values bring a window's mean under 0.5.
    """
    return np.where(np.arange(n) < step - 6, 1.0, final)


def superset_sweep(root: Path, kind: str = "gpu", dense_ms: float = 10.0) -> None:
    """The issue's grid: ``[[], [X], [Dense], [X, Dense]]`` where X alone fixes the divergence.

    ``[X, Dense]`` has the better median steps to target (82 vs 96) but the
    seed ranges overlap (70-190 vs 65-101) and the seeds disagree in sign.
    """
    x_steps, xd_steps = (65, 96, 101), (190, 82, 70)
    for seed in range(3):
        write_trial(
            root, f"fp32-{seed}", loss=CURVE, amp_level="O0", seed=seed, device_kind=kind, step_ms=20.0
        )
        write_trial(root, f"none-{seed}", loss=nan_curve(), seed=seed, device_kind=kind)
        write_trial(
            root, f"dense-{seed}", loss=nan_curve(), black_list=["Dense"], seed=seed, device_kind=kind
        )
        write_trial(
            root,
            f"x-{seed}",
            loss=reaching(x_steps[seed], 0.1 + 0.001 * seed),
            black_list=["X"],
            seed=seed,
            device_kind=kind,
            target_loss=TARGET,
        )
        write_trial(
            root,
            f"xd-{seed}",
            loss=reaching(xd_steps[seed], 0.1 + 0.001 * (2 - seed)),
            black_list=["X", "Dense"],
            seed=seed,
            device_kind=kind,
            target_loss=TARGET,
            step_ms=dense_ms,
        )
        for name in ("none", "dense"):
            write_anomaly(
                root, f"{name}-{seed}", cell="attn.softmax", cell_class="X", max_abs=7.1e4, fp32_max_abs=95.0
            )


def by_list(a: analysis.SweepAnalysis) -> dict[str, pd.Series]:
    return {_key(row["black_list"]): row for _, row in a.ranking.iterrows()}


def _key(black_list: tuple[str, ...]) -> str:
    """'[Dense, X]': how these tests name a row by its black list."""
    return "[" + ", ".join(black_list) + "]"


@pytest.mark.parametrize("kind", ["gpu", "cpu"])
def test_superset_is_not_recommended(tmp_path: Path, kind: str) -> None:
    superset_sweep(tmp_path, kind)
    a = analysis.analyze(tmp_path)
    rows = by_list(a)
    assert (rows["[X]"]["steps_to_target_median"], rows["[Dense, X]"]["steps_to_target_median"]) == (96, 82)
    assert a.kinds[0].recommendation.config["black_list"] == ["X"]
    second = rows["[Dense, X]"]
    assert second["rank"] == rows["[X]"]["rank"] + 1 and second["tied_with_above"]
    assert second["decided_by"] == "n_black_listed"
    assert "tied with #1 on steps to target (82 vs 96, seeds 70-190 vs 65-101)" in second["phrase"]
    assert "below it on FP32 part: 2 vs 1" in second["phrase"]


def test_a_difference_beyond_seed_noise_still_decides(tmp_path: Path) -> None:
    """Worse on every seed and no overlap: the superset wins on steps to target (the rule can fail)."""
    for seed in range(3):
        write_trial(tmp_path, f"fp32-{seed}", loss=CURVE, amp_level="O0", seed=seed)
        write_trial(
            tmp_path, f"x-{seed}", loss=reaching(120 + seed), black_list=["X"], seed=seed, target_loss=TARGET
        )
        write_trial(
            tmp_path,
            f"xd-{seed}",
            loss=reaching(60 + seed),
            black_list=["X", "Dense"],
            seed=seed,
            target_loss=TARGET,
        )
    a = analysis.analyze(tmp_path)
    assert a.kinds[0].recommendation.config["black_list"] == ["Dense", "X"]
    below = by_list(a)["[X]"]
    assert below["decided_by"] == "steps_to_target" and not below["tied_with_above"]
    assert "below #1 on steps to target: 121 vs 61 (seeds 120-122 vs 60-62)" in below["phrase"]


def test_demo_final_loss_difference_is_noise(tmp_path: Path) -> None:
    """seed_repro's pattern: 0.636 vs 0.640 final loss, overlapping seeds, on CPU: [CustomNorm] wins."""
    finals = {"[CustomNorm]": (0.640, 0.636, 0.629), "[CustomNorm, SCE]": (0.631, 0.640, 0.645)}
    fp32 = CURVE.copy()
    fp32[-20:] = 0.63
    for seed in range(3):
        write_trial(tmp_path, f"fp32-{seed}", loss=fp32, amp_level="O0", seed=seed, device_kind="cpu")
        write_trial(tmp_path, f"bare-{seed}", loss=nan_curve(), seed=seed, device_kind="cpu")
        for i, (key, values) in enumerate(finals.items()):
            loss = CURVE.copy()
            loss[-20:] = values[seed]
            classes = key.strip("[]").split(", ")
            write_trial(tmp_path, f"c{i}-{seed}", loss=loss, black_list=classes, seed=seed, device_kind="cpu")
    a = analysis.analyze(tmp_path)
    rec = a.kinds[0].recommendation
    assert rec.config["black_list"] == ["CustomNorm"]
    rows = by_list(a)
    assert rows["[CustomNorm, SCE]"]["final_loss_median"] == pytest.approx(0.640)
    assert rows["[CustomNorm]"]["final_loss_median"] == pytest.approx(0.636)
    assert rows["[CustomNorm, SCE]"]["tied_with_above"]


def _speed_sweep(root: Path, kind: str, device_target: str | None) -> None:
    for seed in range(3):
        common = {"seed": seed, "device_kind": kind, "device_target": device_target}
        write_trial(root, f"fp32-{seed}", loss=CURVE, amp_level="O0", step_ms=20.0, **common)
        write_trial(root, f"slow-{seed}", loss=CURVE, black_list=["A"], step_ms=40.0 + seed, **common)
        write_trial(root, f"fast-{seed}", loss=CURVE, black_list=["B"], step_ms=10.0 + seed, **common)


@pytest.mark.parametrize(
    ("kind", "target", "decides"), [("gpu", "GPU", True), ("cpu", "CPU", False), ("gpu", "CPU", False)]
)
def test_speed_decides_only_on_an_accelerator(tmp_path: Path, kind: str, target: str, decides: bool) -> None:
    _speed_sweep(tmp_path, kind, target)
    a = analysis.analyze(tmp_path)
    assert a.kinds[0].speed_decides is decides
    best = a.kinds[0].recommendation.config["black_list"]
    second = a.ranking[a.ranking["rank"] == 2].iloc[0]
    if decides:
        assert best == ["B"] and second["decided_by"] == "speed"
    else:  # "A" < "B" by name; the faster B is shown, never decisive
        assert best == ["A"] and second["decided_by"] == "config_id"
        assert (
            "speed vs FP32 1.82x FP32 vs 0.49x FP32 (measured on CPU: shown, never decides)"
            in second["phrase"]
        )
        assert "measured on CPU (float16 is emulated): shown, never decisive" in analysis.render_markdown(a)


def test_minimal_even_when_the_groups_would_keep_a_superset(tmp_path: Path) -> None:
    """A tie with a group's leader is not transitive: [X] falls out of the group of
    [Dense, X, Z] although it is tied with [Dense, X]; the recommendation still drops Dense."""
    seeds = {"[Dense, X, Z]": (102, 103, 104), "[Dense, X]": (104, 105, 106), "[X]": (106, 107, 108)}
    for seed in range(3):
        write_trial(tmp_path, f"fp32-{seed}", loss=CURVE, amp_level="O0", seed=seed)
        for i, (key, steps) in enumerate(seeds.items()):
            bl = key.strip("[]").split(", ")
            write_trial(
                tmp_path,
                f"c{i}-{seed}",
                loss=reaching(steps[seed]),
                black_list=bl,
                seed=seed,
                target_loss=TARGET,
            )
    a = analysis.analyze(tmp_path)
    steps = next(c for c in analysis.CRITERIA if c.name == "steps_to_target")
    rows = by_list(a)
    leader, superset, minimal = (steps.seed_values(rows[k]) for k in seeds)
    assert beyond_noise(leader, minimal) and not beyond_noise(superset, minimal)
    assert [_key(b) for b in a.ranking["black_list"]][:3] == ["[X]", "[Dense, X]", "[Dense, X, Z]"]
    assert a.kinds[0].recommendation.config["black_list"] == ["X"]
    assert rows["[Dense, X]"]["tied_with_above"] and rows["[Dense, X]"]["decided_by"] == "n_black_listed"


def test_report_leads_with_the_answer(tmp_path: Path) -> None:
    superset_sweep(tmp_path)
    analysis.write_report(tmp_path)
    text = (tmp_path / "report" / "report.md").read_text()
    answer = text.index("## Recommendation")
    localized = text.index(
        "**Localized layer:** attn.softmax (X), forward, float16 max|x| 7.1e4 vs FP32 95, seeds 0,1,2"
    )
    heatmap = text.index("| AMP, black list | off |")
    assert (
        answer
        < localized
        < heatmap
        < text.index("### Evidence")
        < text.index("## Ranking")
        < text.index("## Trials")
    )
    assert "this change keeps X in float32" in text
    assert "first non-finite gradients" not in text
    html = (tmp_path / "report" / "report.html").read_text()
    assert (
        html.index('alt="Divergence map"') < html.index("<h2>Ranking</h2>") < html.index('alt="Loss curves"')
    )
    doc = pd.read_json(tmp_path / "report" / "recommendation.json", typ="series")
    loc = doc["recommendations"][0]["localization"]
    assert (loc["cell"], loc["cell_class"], loc["phase"], loc["seeds"]) == (
        "attn.softmax",
        "X",
        "forward",
        [0, 1, 2],
    )
    csv = pd.read_csv(tmp_path / "report" / "ranking.csv")
    assert {"phrase", "tied_with_above", "tied_on", "decided_by", "localized"} <= set(csv.columns)
    failing = csv[(csv["amp_level"] == "O2") & csv["stability"].eq("unstable")]
    assert len(failing) == 2 and failing["localized"].str.contains("attn.softmax").all()


def test_disagreeing_seeds_are_listed_apart(tmp_path: Path) -> None:
    for seed in range(3):
        write_trial(tmp_path, f"fp32-{seed}", loss=CURVE, amp_level="O0", seed=seed)
        write_trial(tmp_path, f"bad-{seed}", loss=nan_curve(), seed=seed)
        write_anomaly(tmp_path, f"bad-{seed}", cell="norm1" if seed < 2 else "head", cell_class="Norm")
    locs = analysis.analyze(tmp_path).ranking.set_index("amp_level").loc["O2", "localizations"]
    assert [(loc.cell, loc.seeds) for loc in locs] == [("norm1", (0, 1)), ("head", (2,))]


def test_no_anomalies_table_no_localized_line(tmp_path: Path) -> None:
    superset_sweep(tmp_path)
    for path in (tmp_path / "anomalies").rglob("*.parquet"):
        path.unlink()
    a = analysis.analyze(tmp_path)
    assert a.kinds[0].recommendation.localization is None
    assert "Localized layer" not in analysis.render_markdown(a)


def test_loss_placement_and_equivalence_note(tmp_path: Path) -> None:
    for seed in range(2):
        common = {"seed": seed, "loss_placement": "outside"}
        write_trial(tmp_path, f"fp32-{seed}", loss=CURVE, amp_level="O0", **common)
        write_trial(tmp_path, f"n-{seed}", loss=CURVE, black_list=["Norm"], **common)
        write_trial(
            tmp_path,
            f"ns-{seed}",
            loss=CURVE,
            black_list=["Norm", "SoftmaxCrossEntropyWithLogits"],
            equivalent_to=f"n-{seed}",
            **common,
        )
    a = analysis.analyze(tmp_path)
    rec = a.kinds[0].recommendation
    assert rec.loss_placement == "outside" and rec.config["loss_placement"] == "outside"
    assert rec.notes == [
        "black-listing SoftmaxCrossEntropyWithLogits changes nothing under `loss_placement: outside`: it "
        "already computes in float32 there (the loss runs on the network's float32 output), so those trials "
        "are marked `equivalent_to` the same configuration without it"
    ]
    text = analysis.render_markdown(a)
    assert "**Loss placement:** `outside`" in text and "already computes in float32" in text
    old = tmp_path / "old"
    write_trial(old, "b", loss=CURVE, amp_level="O0")
    write_trial(old, "m", loss=CURVE)
    assert analysis.analyze(old).kinds[0].recommendation.loss_placement is None


def test_terminal_table_from_the_model(tmp_path: Path) -> None:
    superset_sweep(tmp_path)
    a = analysis.analyze(tmp_path)
    table = analysis.terminal_table(a, 3, "REPORT.md")
    assert table.row_count == 3 and "top 3 of" in str(table.title)
    console = Console(file=io.StringIO(), width=200)
    console.print(table)
    out = console.file.getvalue()
    assert "FP32: X" in out and "recommended" in out and "tied; more in FP32" in out and "2 =" in out


def test_rules_text_follows_the_criteria(tmp_path: Path) -> None:
    write_trial(tmp_path, "b", loss=CURVE, amp_level="O0")
    text = analysis.render_markdown(analysis.analyze(tmp_path))
    positions = [text.index(f"{i}. {c.rule}") for i, c in enumerate(analysis.CRITERIA, start=1)]
    assert positions == sorted(positions)
    assert analysis.TIE_RULE in text


def test_of_two_equal_configurations_the_one_without_loss_scaling_ranks_first(tmp_path: Path) -> None:
    # the dynamic scaler's label sorts first ("ls=dynamic" < "ls=none"): only the criterion puts "none" ahead
    for seed in range(2):
        write_trial(tmp_path, f"fp32-{seed}", loss=CURVE, amp_level="O0", seed=seed)
        for scale in ("dynamic", "static:1024", "none"):
            write_trial(tmp_path, f"{scale}-{seed}", loss=CURVE, loss_scale=scale, seed=seed)
    a = analysis.analyze(tmp_path)
    mixed = a.ranking[a.ranking["amp_level"] == "O2"]
    assert list(mixed["loss_scale"]) == ["none", "static:1024", "dynamic"]
    assert list(mixed["decided_by"])[1:] == ["loss_scaling", "loss_scaling"]
    assert a.kinds[0].recommendation.config["loss_scale"] == "none"


def test_two_fp32_rows_under_different_loss_scaling_have_different_labels(tmp_path: Path) -> None:
    for seed in range(2):
        for scale in ("none", "dynamic"):
            write_trial(
                tmp_path, f"fp32-{scale}-{seed}", loss=CURVE, amp_level="O0", loss_scale=scale, seed=seed
            )
            write_trial(tmp_path, f"o2-{scale}-{seed}", loss=CURVE, loss_scale=scale, seed=seed)
    a = analysis.analyze(tmp_path)
    fp32 = a.ranking[a.ranking["amp_level"] == "O0"]
    assert sorted(fp32["label"]) == ["FP32", "FP32 · loss scale dynamic"]
    assert a.ranking["label"].is_unique
