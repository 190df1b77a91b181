"""Which cells really compute in float16 under each AMP policy."""

from __future__ import annotations

import numpy as np
import pytest

from ampsweep.jobs import build_workload
from ampsweep.jobs.training._amp import apply_amp, known_layer_types, resolve_black_list
from ampsweep.jobs.training._loss_cell import NetworkWithLoss


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


def test_o2_black_list_extends_mindspore_default(monkeypatch):
    from mindspore import amp, nn

    seen = {}
    real = amp.custom_mixed_precision

    def spy(network, **kwargs):
        seen.update(kwargs)
        return real(network, **kwargs)

    monkeypatch.setattr(amp, "custom_mixed_precision", spy)
    _cast("O2", ("CustomNorm",))
    # custom_mixed_precision replaces the default list, so the defaults must be passed along
    assert set(amp.get_black_list()) <= set(seen["black_list"])
    assert "CustomNorm" in {c.__name__ for c in seen["black_list"]}
    assert nn.LayerNorm in seen["black_list"]


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
