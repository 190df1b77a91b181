"""``ampsweep.amp.keep_in_float32`` computes what MindSpore's own AMP API computes, bit for bit (issue 46 item 4).

The level is built from public parts (``to_float``, forward hooks,
``amp.get_black_list``) instead of reaching into MindSpore's private wrappers.
Wherever MindSpore's API also works (a Cell that returns one Tensor and whose
attributes its parent does not read), a few compiled training steps must give
the same losses and the same parameters, bit for bit: both ways run here, now,
in this process, from the same initial weights and batches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

pytest.importorskip("mindspore")

import mindspore as ms  # noqa: E402
from mindspore import Parameter, Tensor, amp, nn, ops  # noqa: E402

from ampsweep.amp import NotKeptInFloat32, keep_in_float32  # noqa: E402

WIDTH, CLASSES, BATCH, STEPS = 8, 3, 16, 6


class HandSoftmax(nn.Cell):
    """A hand-written softmax: ``exp`` overflows float16 far sooner than float32."""

    def construct(self, x: Tensor) -> Tensor:
        e = ops.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)


class Block(nn.Cell):
    """A Dense, a LayerNorm (on O2's default black list) and the softmax: listing it keeps all three in float32."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Dense(16, 16)
        self.norm = nn.LayerNorm((16,))
        self.soft = HandSoftmax()

    def construct(self, x: Tensor) -> Tensor:
        return self.soft(self.norm(self.fc(x))) * x


class Net(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Dense(WIDTH, 16)
        self.norm = nn.LayerNorm((16,))
        self.block = Block()
        self.gain = Parameter(Tensor(np.full(16, 1.5, np.float32)), name="gain")
        self.head = nn.Dense(16, CLASSES)

    def construct(self, x: Tensor) -> Tensor:
        h = self.norm(ops.tanh(self.inp(x)))
        return self.head(self.block(h * self.gain))


def _batches() -> list[tuple[Tensor, Tensor]]:
    rng = np.random.default_rng(0)
    return [
        (
            Tensor((rng.normal(size=(BATCH, WIDTH)) * 3).astype(np.float32)),
            Tensor(rng.integers(0, CLASSES, BATCH).astype(np.int32)),
        )
        for _ in range(STEPS)
    ]


def _train(cast: Callable[[nn.Cell], nn.Cell]) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """``STEPS`` jitted steps (loss outside the cast, as ``Model`` puts it) from seed 0; losses and parameters."""
    ms.set_seed(0)
    net = Net()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    cast_net = cast(net)
    opt = nn.Adam(net.trainable_params(), learning_rate=1e-2)

    def forward(x: Tensor, y: Tensor) -> Tensor:
        return loss_fn(cast_net(x), y)

    grad_fn = ms.value_and_grad(forward, None, opt.parameters)

    @ms.jit
    def step(x: Tensor, y: Tensor) -> Tensor:
        loss, grads = grad_fn(x, y)
        return ops.depend(loss, opt(grads))

    losses = [step(x, y).asnumpy() for x, y in _batches()]
    return losses, {p.name: p.asnumpy() for p in net.trainable_params()}


def _same(
    a: tuple[list[np.ndarray], dict[str, np.ndarray]], b: tuple[list[np.ndarray], dict[str, np.ndarray]]
) -> None:
    assert [x.tobytes() for x in a[0]] == [x.tobytes() for x in b[0]], (a[0], b[0])
    assert a[1].keys() == b[1].keys()
    for name in a[1]:
        assert a[1][name].tobytes() == b[1][name].tobytes(), name


CASES: dict[str, tuple[Callable[[nn.Cell], Any], Callable[[nn.Cell], Any]]] = {
    "O2, nothing listed": (
        lambda n: amp.auto_mixed_precision(n, "O2"),
        lambda n: keep_in_float32(n, (), "O2"),
    ),
    "O3, nothing listed": (
        lambda n: amp.auto_mixed_precision(n, "O3"),
        lambda n: keep_in_float32(n, (), "O3"),
    ),
    "O2, the hand-written softmax listed": (
        lambda n: amp.custom_mixed_precision(n, black_list=[*amp.get_black_list(), HandSoftmax]),
        lambda n: keep_in_float32(n, (HandSoftmax,), "O2"),
    ),
    "O2, a Cell holding a LayerNorm listed": (
        lambda n: amp.custom_mixed_precision(n, black_list=[*amp.get_black_list(), Block]),
        lambda n: keep_in_float32(n, (Block,), "O2"),
    ),
    "O3, the softmax and Dense listed": (
        lambda n: amp.custom_mixed_precision(n, black_list=[HandSoftmax, nn.Dense]),
        lambda n: keep_in_float32(n, (HandSoftmax, nn.Dense), "O3"),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_keep_in_float32_computes_what_mindspores_api_computes(case: str) -> None:
    mindspore_way, public_way = CASES[case]
    ours = _train(public_way)
    assert np.isfinite(ours[0]).all()
    _same(_train(mindspore_way), ours)


def test_o2_keeps_the_default_black_list_and_listed_cells_in_float32_without_wrappers() -> None:
    net = keep_in_float32(Net(), (HandSoftmax,), "O2")
    precision = {name: cell.get_mixed_precision_type().name for name, cell in net.cells_and_names()}
    assert precision["norm"] == precision["block.norm"] == precision["block.soft"] == "FP32"
    assert precision["inp"] == precision["block.fc"] == precision["head"] == "FP16"
    # nothing wraps a Cell: every path is the user's own
    assert set(precision) == {name for name, _ in Net().cells_and_names()}
    assert net(Tensor(np.ones((2, WIDTH), np.float32))).dtype == ms.float32


def test_a_cell_that_refuses_float32_is_named() -> None:
    class Stubborn(nn.Cell):
        def to_float(self, dst_type: Any) -> Any:
            if dst_type == ms.float32:
                raise RuntimeError("float16 kernel only")
            return super().to_float(dst_type)

    class Outer(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.odd = Stubborn()

    with pytest.raises(
        NotKeptInFloat32, match=r"^Stubborn cannot be kept in FP32 \(odd\): RuntimeError: float16"
    ):
        keep_in_float32(Outer(), (Stubborn,), "O2")
    with pytest.raises(ValueError, match="amp_level: 'O4' is not one of O0, O1, O2, O3"):
        keep_in_float32(Outer(), (), "O4")
