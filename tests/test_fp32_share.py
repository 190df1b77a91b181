"""'Fewer in FP32' is how much of the network, not how many names (issue 41, item 6).

``[TransformerEncoderLayer]`` and ``[MultiheadAttention]`` are one class each,
but the first keeps the feed-forward layers and the norms in FP32 too. Each
trial records the parameter elements under the outermost listed Cells and
their paths; a stable configuration whose FP32 part contains another's ranks
below it, and says why.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from mindspore import nn

from ampsweep import analysis
from ampsweep.jobs.training._amp import Fp32Part, fp32_part
from tests.test_analysis import CURVE, write_trial


class Inner(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.dense = nn.Dense(4, 4)  # 20 elements

    def construct(self, x):
        return self.dense(x)


class Outer(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()
        self.proj = nn.Dense(4, 2)  # 10 elements

    def construct(self, x):
        return self.proj(self.inner(x))


def test_the_fp32_part_counts_elements_under_the_outermost_listed_cells() -> None:
    net, loss = Outer(), nn.MSELoss()
    assert fp32_part(net, loss, "O2", [Inner], "outside") == Fp32Part(20, ("inner",))
    assert fp32_part(net, loss, "O2", [nn.Dense], "outside") == Fp32Part(30, ("inner.dense", "proj"))
    # the whole network once, however many listed Cells lie inside it
    assert fp32_part(net, loss, "O2", [Outer, Inner], "outside") == Fp32Part(30, ("",))
    assert fp32_part(net, loss, "O0", [Outer], "outside") == Fp32Part(0, ())
    assert fp32_part(net, loss, "O2", [nn.MSELoss], "inside") == Fp32Part(0, ("loss_fn",))
    assert fp32_part(net, loss, "O2", [nn.MSELoss], "outside") == Fp32Part(0, ())


def _stable(
    root: Path, name: str, black_list: list[str], params: int, paths: list[str], final: float
) -> None:
    for seed in range(3):
        write_trial(
            root,
            f"{name}-{seed}",
            loss=CURVE * final,
            black_list=black_list,
            seed=seed,
            fp32_params=params,
            fp32_cell_paths=paths,
        )


def test_a_configuration_whose_fp32_part_contains_another_ranks_below_it_and_says_why(tmp_path: Path) -> None:
    for seed in range(3):
        write_trial(tmp_path, f"fp32-{seed}", loss=CURVE, amp_level="O0", seed=seed)
    # the enclosing block learns a little better on every seed, beyond seed noise: it still ranks below
    _stable(tmp_path, "block", ["TransformerEncoderLayer"], 8544, ["encoder"], 0.9)
    _stable(tmp_path, "attn", ["MultiheadAttention"], 4224, ["encoder.self_attn"], 1.0)
    a = analysis.analyze(tmp_path, figures=False)
    ranking = a.ranking.pipe(_by_black_list)
    attn, block = ranking.loc["[MultiheadAttention]"], ranking.loc["[TransformerEncoderLayer]"]
    assert attn["recommended"] and attn["rank"] == 1 and block["rank"] == 2
    assert block["decided_by"] == "n_black_listed" and block["fp32_contains"] == 1
    assert (
        "keeps more in FP32 than #1 (TransformerEncoderLayer contains MultiheadAttention: "
        "8,544 vs 4,224 parameters in FP32)" in block["phrase"]
    )
    assert block["reason"] == "more in FP32 than #1"


def test_without_containment_the_smaller_fp32_part_decides_a_tie(tmp_path: Path) -> None:
    for seed in range(3):
        write_trial(tmp_path, f"fp32-{seed}", loss=CURVE, amp_level="O0", seed=seed)
    _stable(tmp_path, "a", ["Attention"], 9000, ["encoder.attn"], 1.0)
    _stable(tmp_path, "b", ["FeedForward"], 3000, ["encoder.ff"], 1.0)
    ranking = analysis.analyze(tmp_path, figures=False).ranking.pipe(_by_black_list)
    big = ranking.loc["[Attention]"]
    assert ranking.loc["[FeedForward]"]["rank"] == 1 and big["rank"] == 2
    assert "below it on FP32 part: 9,000 vs 3,000 parameters" in big["phrase"]
    assert big["fp32_contains"] == 0


@pytest.mark.slow
def test_encoder_classifier_recommends_multihead_attention_and_ranks_the_block_below(tmp_path: Path) -> None:
    spec = {
        "name": "enc",
        "workload": "ampsweep.jobs.workloads.encoder_classifier:make",
        "steps": 300,
        "abort_after": 10,
        "grid": {
            "amp_level": ["O0", "O2"],
            "black_list": [[], ["MultiheadAttention"], ["TransformerEncoderLayer"]],
            "clip": [1.0],
            "seed": [0, 1],
        },
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, "-m", "ampsweep", "run", str(path), "--out", str(out), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    trials = pd.read_parquet(out / "enc" / "trials")
    assert "failed" not in set(trials["outcome"])
    a = analysis.analyze(out / "enc", figures=False)
    rec = a.kinds[0].recommendation.config
    assert rec["amp_level"] == "O2" and list(rec["black_list"]) == ["MultiheadAttention"]
    ranking = a.ranking.pipe(_by_black_list)
    attn, block = ranking.loc["[MultiheadAttention]"], ranking.loc["[TransformerEncoderLayer]"]
    mixed = ranking[ranking["amp_level"] == "O2"]
    assert block["rank"] > attn["rank"] and block["fp32_contains"] == attn["rank"]
    assert len(mixed) == 3
    assert (
        f"keeps more in FP32 than #{attn['rank']} (TransformerEncoderLayer contains MultiheadAttention"
        in (block["phrase"])
    )
    assert "contains MultiheadAttention" in (out / "enc" / "report" / "report.md").read_text()


def _by_black_list(ranking):
    """The ranking indexed '[A, B]' by its black list."""
    return ranking.set_index(pd.Index(["[" + ", ".join(b) + "]" for b in ranking["black_list"]]))
