"""Internal overflow: a Cell whose output stays bounded while an op inside it overflowed."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ampsweep import analysis
from ampsweep.analysis._model import Localization
from ampsweep.analysis.compute._anomalies import overflowed_inside
from ampsweep.analysis.wording._answer import what_happened
from ampsweep.analysis.wording._localization import inner_sentence, localization_phrase
from tests.test_analysis import CURVE, write_anomaly, write_trial


def _localization(**fields: object) -> Localization:
    """One forward non-finite localization of a float16 Cell, changed by ``fields``."""
    base: dict = dict(
        kind="nonfinite",
        cell="norm",
        cell_class="OnePassNorm",
        phase="forward",
        seeds=(0,),
        n_trials=1,
        replay_step=0,
        input_dtype="float16",
        output_dtype="float16",
        max_abs=1.0,
        fp32_max_abs=1.0,
        rel_error=None,
        zero_fraction=None,
    )
    return Localization(**{**base, **fields})


def _sweep(root: Path, **anomaly: object) -> analysis.Analysis:
    for seed in range(2):
        write_trial(root, f"fp32-{seed}", loss=CURVE, amp_level="O0", seed=seed)
        write_trial(root, f"fixed-{seed}", loss=CURVE, black_list=["ExpSoftmax"], seed=seed)
        write_trial(root, f"broken-{seed}", loss=np.where(np.arange(60) < 50, CURVE[:60], np.nan), seed=seed)
        write_anomaly(
            root,
            f"broken-{seed}",
            cell="softmax",
            cell_class="ExpSoftmax",
            max_abs=1.0,
            fp32_max_abs=1.0,
            **anomaly,
        )
    return analysis.analyze(root, figures=False)


def test_the_op_inside_is_named(tmp_path: Path) -> None:
    a = _sweep(tmp_path, inner_op="exp", inner_max_abs=11.3, input_max_abs=11.3)
    why = a.kinds[0].recommendation.answer[1]
    assert "the `exp` inside ExpSoftmax overflowed float16 (input max 11.3 > ln 65504)" in why
    assert "max|x| 1 vs FP32 1" not in analysis.render_markdown(a)


def test_without_the_op_it_says_inside_the_cell(tmp_path: Path) -> None:
    a = _sweep(tmp_path, input_max_abs=11.3)
    why = a.kinds[0].recommendation.answer[1]
    assert "the overflow happened inside ExpSoftmax" in why and "input max|x| 11.3" in why


def test_replay_of_the_cell_finds_exp() -> None:
    import mindspore as ms
    from mindspore import Tensor

    from ampsweep.jobs.localization._hooks import Event, TensorStats
    from ampsweep.jobs.localization._inside import replay_inside
    from ampsweep.jobs.workloads.late_softmax import ExpSoftmax

    ms.set_context(mode=ms.PYNATIVE_MODE)
    # -1e4 is how an attention mask is often written: exp of it is 0, not the overflow
    z = Tensor(np.array([[1.0, 11.3, 2.0, -1e4]], np.float16))
    event = Event(
        "softmax",
        "ExpSoftmax",
        "forward",
        0,
        "float16",
        "float16",
        TensorStats(False, 1.0, 0.0, 3),
        cell=ExpSoftmax(),
        inputs=(z,),
    )
    inside = replay_inside(event)
    assert inside is not None and inside.op == "exp"
    assert inside.op_input_max_abs is not None and 11.2 < inside.op_input_max_abs < 11.4, (
        "the value that overflowed"
    )
    fine = Event(
        "softmax",
        "ExpSoftmax",
        "forward",
        0,
        "float16",
        "float16",
        TensorStats(True, 1.0, 0.0, 3),
        cell=ExpSoftmax(),
        inputs=(Tensor(np.array([[1.0, 2.0]], np.float16)),),
    )
    assert replay_inside(fine).op == ""


def test_a_cell_whose_output_dwarfs_fp32s_is_described_by_its_magnitudes() -> None:
    loc = _localization(max_abs=513.5, fp32_max_abs=2.74, input_max_abs=65.5, finite=True)
    assert not overflowed_inside(loc)
    assert "float16 output finite but max|x| 514 vs FP32 2.74" in localization_phrase(loc)
    assert "loses precision in float16" in what_happened(
        loc
    ) and "overflow happened inside" not in what_happened(loc)
    # the same magnitudes on a tensor that went non-finite: the overflow was inside the Cell
    assert overflowed_inside(_localization(max_abs=513.5, fp32_max_abs=2.74, finite=False))


def test_an_exp_that_overflows_float32_is_measured_against_float32s_limit() -> None:
    loc = _localization(inner_op="exp", inner_max_abs=131.0, output_dtype="float32", input_dtype="float32")
    assert "overflowed float32 (input max 131 > ln 3.4e38)" in inner_sentence(loc)
