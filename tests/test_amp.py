"""Which cells really compute in float16 under each AMP policy."""

from __future__ import annotations

import numpy as np
import pytest

from ampsweep.jobs import build_workload
from ampsweep.jobs.training._amp import apply_amp, known_layer_types, resolve_black_list
from ampsweep.jobs.training._loss_cell import NetworkWithLoss
from tests._trial import trial_config


def _cast(level: str, black: tuple[str, ...]):
    workload = build_workload("ampsweep.jobs.workloads.seed_repro:make", 0, {"hidden": 8})
    known = known_layer_types([workload.network, workload.loss_fn])
    cell = apply_amp(
        NetworkWithLoss(workload.network, workload.loss_fn),
        level,
        resolve_black_list(black, known),
        "float16",
    )
    return cell, workload


def _computes_in_float16(cell, *inputs) -> bool:
    """Probe with inputs that float32 handles and float16 cannot: a non-finite output means float16.

    The output dtype alone says nothing: AMP casts a black-listed cell's output
    back to float16 for its neighbours while the cell itself computes in float32.
    """
    out = cell(*inputs)
    return not bool(np.isfinite(out.astype(np.float32).asnumpy() if hasattr(out, "asnumpy") else out).all())


def _float16_cells(level: str, black: tuple[str, ...]) -> dict[str, bool]:
    import mindspore as ms

    _, workload = _cast(level, black)
    net = workload.network  # AMP casts in place; the returned cell may be a wrapper
    rng = np.random.default_rng(0)
    beyond_fp16 = ms.Tensor(np.full((6, 17), 7e4, np.float32))  # 70000 > 65504
    offset = ms.Tensor((300 + rng.normal(size=(6, 8))).astype(np.float32))  # squares overflow float16
    # a confident, correct prediction beyond float16's range: loss 0 in float32, NaN in float16
    big_logits = ms.Tensor(np.array([[7e4, 0.0, -7e4] + [0.0] * 7] * 6, np.float32))
    labels = ms.Tensor(np.zeros(6, np.int32))
    return {
        "fc1": _computes_in_float16(net.fc1, beyond_fp16),
        "norm1": _computes_in_float16(net.norm1, offset),
        "loss": _computes_in_float16(workload.loss_fn, big_logits, labels),
    }


@pytest.mark.parametrize(
    ("level", "black", "expected"),
    [
        ("O0", (), {"fc1": False, "norm1": False, "loss": False}),
        ("O2", (), {"fc1": True, "norm1": True, "loss": True}),
        ("O2", ("CustomNorm",), {"fc1": True, "norm1": False, "loss": True}),
        ("O2", ("CustomNorm", "SoftmaxCrossEntropyWithLogits"), {"fc1": True, "norm1": False, "loss": False}),
        ("O3", ("CustomNorm",), {"fc1": True, "norm1": False, "loss": True}),
        ("O1", (), {"fc1": True, "norm1": False, "loss": False}),
    ],
)
def test_policy_decides_which_cells_compute_in_float16(level, black, expected):
    assert _float16_cells(level, black) == expected


def _norm_net():
    """A LayerNorm (on O2's default black list) beside a Cell class to list; returns (net, that class)."""
    from mindspore import nn, ops

    class Block(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Dense(8, 8)

        def construct(self, x):
            return ops.tanh(self.fc(x))

    class Net(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Dense(4, 8)
            self.norm = nn.LayerNorm((8,))
            self.block = Block()
            self.head = nn.Dense(8, 3)

        def construct(self, x):
            return self.head(self.block(self.norm(self.fc1(x))))

    return Net(), Block


def test_o2_black_list_extends_mindspore_default():
    """A black list adds to O2's own default list (LayerNorm, BatchNorm), it does not replace it."""
    import mindspore as ms
    from mindspore import amp, nn

    net, block = _norm_net()
    apply_amp(net, "O2", [block], "float16")
    # the default list is still O2's: LayerNorm kept in float32, handing on float16; nothing wraps it
    assert nn.LayerNorm in amp.get_black_list()
    assert type(net.norm) is nn.LayerNorm and net.norm.get_mixed_precision_type().name == "FP32"
    # the listed class computes in float32, the rest in float16
    assert net.block.get_mixed_precision_type().name == "FP32"
    assert net.block.fc.get_mixed_precision_type().name == "FP32"
    assert net.fc1.get_mixed_precision_type().name == "FP16"
    assert net.head.get_mixed_precision_type().name == "FP16"
    x = ms.Tensor(np.ones((2, 4), np.float32))
    assert net.block.fc(ms.Tensor(np.ones((2, 8), np.float16))).dtype == ms.float32  # inside: float32
    assert net.block(ms.Tensor(np.ones((2, 8), np.float16))).dtype == ms.float16  # handed back, as O2 does
    assert net.fc1(x).dtype == ms.float16 and net.norm(net.fc1(x)).dtype == ms.float16
    # on the workload: CustomNorm listed, and O2's default list is as it is without a black list
    _, workload = _cast("O2", ("CustomNorm",))
    assert workload.network.norm1.get_mixed_precision_type().name == "FP32"
    assert workload.network.fc1.get_mixed_precision_type().name == "FP16"


@pytest.mark.parametrize(
    ("level", "black", "recorded"),
    [
        ("O2", ("CustomNorm",), "to_float"),
        ("O1", ("Dense",), "to_float"),
        ("O2", (), None),
        ("O0", ("Dense",), None),
    ],
)
def test_the_trials_table_records_how_the_black_list_was_kept(level, black, recorded):
    from ampsweep.contracts import FP32_CELLS_MECHANISM
    from ampsweep.jobs import Outcome, Placement, TrialResult

    assert FP32_CELLS_MECHANISM == "to_float"
    result = TrialResult(
        trial_config(amp_level=level, black_list=black), Outcome.COMPLETED, Placement("cpu", "CPU")
    )
    row = result.trial_row(sweep="s", equivalent_to=None, attempts=1).to_pylist()[0]
    assert row["fp32_cells"] == recorded


def test_black_list_names_come_from_network_and_mindspore_nn():
    workload = build_workload("ampsweep.jobs.workloads.seed_repro:make", 0, {"hidden": 8})
    known = known_layer_types([workload.network, workload.loss_fn])
    assert {
        "CustomNorm",
        "Classifier",
        "SoftmaxCrossEntropyWithLogits",
        "Dense",
        "LayerNorm",
        "GroupNorm",
    } <= set(known)
