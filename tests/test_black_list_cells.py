"""A black list keeps every kind of Cell in float32 (issue 41).

``amp.custom_mixed_precision(black_list=...)`` wraps each listed Cell, which
broke on a Cell that returns a tuple or a dict and on a Cell whose parent reads
its attributes. ``apply_amp`` casts with ``ampsweep.amp.keep_in_float32``,
which wraps nothing: ``to_float(float32)`` on each listed instance and a
forward hook that hands its output back. Each kind of Cell below builds,
trains a few steps under O2 and computes in float32 while the rest computes in
float16.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("mindspore")

import mindspore as ms  # noqa: E402
from mindspore import Parameter, Tensor, nn, ops  # noqa: E402

from ampsweep.amp import listed_cells  # noqa: E402
from ampsweep.jobs.training._amp import (  # noqa: E402
    FP32_CELLS_MECHANISM,
    apply_amp,
    known_layer_types,
    resolve_black_list,
)
from tests._mindspore_versions import OLD_JIT_ATTENTION  # noqa: E402

WIDTH, TOKENS, CLASSES = 8, 4, 3


class AttentionNet(nn.Cell):
    """A direct ``nn.MultiheadAttention`` user: it returns a tuple and reads ``out_proj.weight``."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Dense(WIDTH, 16)
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.head = nn.Dense(16, CLASSES)

    def construct(self, x: Tensor) -> Tensor:
        h = self.embed(x)
        out, _ = self.attn(h, h, h)
        return self.head(ops.tanh(out.mean(1)))  # bounded logits: large inputs overflow only the attention


class EncoderNet(nn.Cell):
    """``nn.TransformerEncoderLayer`` in a classifier (its LayerNorms are on O2's default list)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Dense(WIDTH, 16)
        self.encoder = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, batch_first=True)
        self.head = nn.Dense(16, CLASSES)

    def construct(self, x: Tensor) -> Tensor:
        return self.head(self.encoder(self.embed(x)).mean(1))


class DictCell(nn.Cell):
    """Returns a dict."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Dense(WIDTH, WIDTH)

    def construct(self, x: Tensor) -> Any:
        y = self.fc(x)
        return {"out": y, "square": y * y}


class KeywordCell(nn.Cell):
    """Called with a keyword argument."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = Parameter(Tensor(np.ones(WIDTH, np.float32)), name="scale")

    def construct(self, x: Tensor, shift: Any = None) -> Tensor:
        if shift is None:
            return x * self.scale
        return x * self.scale + shift


class SharedCell(nn.Cell):
    """One instance, called twice."""

    def __init__(self) -> None:
        super().__init__()
        self.gain = Parameter(Tensor(np.ones(WIDTH, np.float32)), name="gain")

    def construct(self, x: Tensor) -> Tensor:
        return ops.tanh(x * self.gain)


class BaseNorm(nn.Cell):
    """One-pass normalization; the black list names this class."""

    def __init__(self) -> None:
        super().__init__()
        self.gamma = Parameter(Tensor(np.ones(WIDTH, np.float32)), name="gamma")

    def construct(self, x: Tensor) -> Tensor:
        mean = x.mean(-1, keep_dims=True)
        var = (x * x).mean(-1, keep_dims=True) - mean * mean
        return self.gamma * (x - mean) / ops.sqrt(ops.abs(var) + 1e-5)


class SubNorm(BaseNorm):
    """A subclass of a listed class: listed too (``isinstance``)."""


class KindsNet(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Dense(WIDTH, WIDTH)
        self.as_dict = DictCell()
        self.keyword = KeywordCell()
        self.shared = SharedCell()
        self.norm = SubNorm()
        self.head = nn.Dense(WIDTH, CLASSES)

    def construct(self, x: Tensor) -> Tensor:
        h = self.inp(x)
        parts = self.as_dict(h)
        h = parts["out"] + parts["square"]
        h = self.keyword(h, shift=h)
        h = self.shared(self.shared(h))
        return self.head(self.norm(h))


def _batch(net: nn.Cell, seed: int, scale: float = 1.0) -> tuple[Tensor, Tensor]:
    rng = np.random.default_rng(seed)
    shape = (4, WIDTH) if isinstance(net, KindsNet) else (4, TOKENS, WIDTH)
    x = rng.normal(size=shape) * scale
    return Tensor(x.astype(np.float32)), Tensor(rng.integers(0, CLASSES, 4).astype(np.int32))


def _cast(net: nn.Cell, level: str, names: tuple[str, ...]) -> Any:
    return apply_amp(net, level, resolve_black_list(names, known_layer_types([net])), "float16")


def _first_float_dtype(value: Any) -> str | None:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return next((d for d in map(_first_float_dtype, value) if d is not None), None)
    return str(value.dtype) if "Float" in str(getattr(value, "dtype", "")) else None


def _train(cast: Any, net: nn.Cell, steps: int, scale: float = 1.0, compiled: bool = False) -> list[float]:
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Adam(cast.trainable_params(), learning_rate=1e-3)

    def forward(x: Tensor, y: Tensor) -> Tensor:
        return loss_fn(cast(x), y)

    grad_fn = ms.value_and_grad(forward, None, opt.parameters)

    def step(x: Tensor, y: Tensor) -> Tensor:
        loss, grads = grad_fn(x, y)
        return ops.depend(loss, opt(grads))

    run = ms.jit(step) if compiled else step
    return [float(run(*_batch(net, i, scale)).asnumpy()) for i in range(steps)]


@pytest.fixture
def pynative():
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    yield
    ms.set_context(mode=mode)


# (network, black list, Cells that must compute in float32, Cells that must compute in float16)
KINDS: dict[str, tuple[Any, tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "tuple output": (AttentionNet, ("MultiheadAttention",), ("attn",), ("embed", "head")),
    # MultiheadAttention reads out_proj.weight; it never calls out_proj, so it computes in float16
    "attributes read by the parent": (AttentionNet, ("Dense",), ("embed", "head"), ("attn",)),
    "dict output, keywords, shared, subclass": (
        KindsNet,
        ("DictCell", "KeywordCell", "SharedCell", "BaseNorm"),
        ("as_dict", "as_dict.fc", "keyword", "shared", "norm"),
        ("inp", "head"),
    ),
    "a whole encoder layer": (
        EncoderNet,
        ("TransformerEncoderLayer",),
        ("encoder", "encoder.dense1"),
        ("embed", "head"),
    ),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_kind_of_listed_cell_trains_in_float32_under_o2(kind: str, pynative: None) -> None:
    build, names, fp32, fp16 = KINDS[kind]
    ms.set_seed(0)
    net = build()
    cells = dict(net.cells_and_names())
    seen: dict[str, list[str | None]] = {}
    for name in fp32 + fp16:  # before the cast: these hooks see what the Cell computed, before any
        # hook of the cast hands a listed Cell's output back to its parent in float16
        cells[name].register_forward_hook(
            lambda _c, _a, out, n=name: seen.setdefault(n, []).append(_first_float_dtype(out))
        )
    cast = _cast(net, "O2", names)
    after = dict(net.cells_and_names())
    assert after.keys() == cells.keys()  # nothing stands between the parent and a listed Cell
    assert all(after[name] is cells[name] for name in fp32 + fp16)
    losses = _train(cast, net, steps=3)
    assert np.isfinite(losses).all(), losses
    for name in fp32:
        assert cells[name].get_mixed_precision_type().name == "FP32", name
        assert set(seen[name]) == {"Float32"}, (name, seen[name])
    for name in fp16:
        assert cells[name].get_mixed_precision_type().name == "FP16", name
        assert set(seen[name]) == {"Float16"}, (name, seen[name])
    # Parameters are stored in float32 at every level; the cast happens where a Cell uses them
    assert {p.dtype for p in cast.trainable_params()} == {ms.float32}
    if kind == "dict output, keywords, shared, subclass":
        assert len(seen["shared"]) == 3 * 2  # called twice per step, in float32 both times


def test_parent_reads_a_listed_childs_attributes(pynative: None) -> None:
    """``custom_mixed_precision`` raised AttributeError on ``out_proj.weight`` through its wrapper."""
    net = AttentionNet()
    _cast(net, "O2", ("Dense",))
    assert isinstance(net.attn.out_proj, nn.Dense)
    assert net.attn.out_proj.weight.shape == (16, 16)
    assert net.attn.out_proj.get_mixed_precision_type().name == "FP32"


@pytest.mark.parametrize("level", ["O2", "O3"])
def test_float16_attention_overflow_trains_finite_with_multihead_attention_listed(
    level: str, pynative: None
) -> None:
    """Inputs whose attention scores pass 65504: float16 attention is NaN, a float32 one trains."""
    ms.set_seed(0)
    plain = AttentionNet()
    assert not np.isfinite(_train(_cast(plain, level, ()), plain, steps=1, scale=800.0)).all()
    ms.set_seed(0)
    kept = AttentionNet()
    losses = _train(_cast(kept, level, ("MultiheadAttention",)), kept, steps=4, scale=800.0)
    assert np.isfinite(losses).all(), losses


def test_o2_default_black_list_hands_on_float16_outside_a_listed_cell_and_float32_inside(
    pynative: None,
) -> None:
    """LayerNorm computes in float32 under O2, as MindSpore's own list has it, with no wrapper around it."""
    plain = EncoderNet()
    _cast(plain, "O2", ("Dense",))
    assert type(plain.encoder.norm1) is nn.LayerNorm
    assert plain.encoder.norm1.get_mixed_precision_type().name == "FP32"
    assert plain.encoder.norm1(_cast_input(plain)).dtype == ms.float16  # handed back, as O2 does

    listed = EncoderNet()
    _cast(listed, "O2", ("TransformerEncoderLayer",))
    # post-norm: norm2 is the encoder's last Cell; inside the listed encoder its output stays float32
    out = listed.encoder.norm2(listed.encoder.norm1(_cast_input(listed)))
    assert out.dtype == ms.float32
    # and the encoder hands its parent float16, as MindSpore's own black list does
    assert listed.encoder(_cast_input(listed)).dtype == ms.float16


def _cast_input(net: EncoderNet) -> Tensor:
    return net.embed(_batch(net, 0)[0])


def test_a_black_list_selects_instances_and_subclasses_and_nothing_when_empty() -> None:
    net = KindsNet()
    assert listed_cells(net, []) == []
    # SubNorm counts (a subclass of BaseNorm); the shared instance once
    assert [name for name, _ in listed_cells(net, [BaseNorm, SharedCell])] == ["shared", "norm"]
    assert FP32_CELLS_MECHANISM == "to_float"


def test_o1_keeps_a_listed_dense_in_float32(pynative: None) -> None:
    """O1's rewrite leaves a Cell whose precision was set alone; removing Dense from the white list did not.

    The old route (``custom_mixed_precision(white_list=white - {Dense})``)
    still cast Dense's MatMul primitive, so ``fc1`` overflowed on 7e4.
    """
    from ampsweep.jobs import build_workload
    from ampsweep.jobs.training._loss_cell import NetworkWithLoss

    workload = build_workload("ampsweep.jobs.workloads.seed_repro:make", 0, {"hidden": 8})
    known = known_layer_types([workload.network, workload.loss_fn])
    apply_amp(
        NetworkWithLoss(workload.network, workload.loss_fn),
        "O1",
        resolve_black_list(("Dense",), known),
        "float16",
    )
    beyond_fp16 = Tensor(np.full((6, 17), 7e4, np.float32))
    assert np.isfinite(workload.network.fc1(beyond_fp16).asnumpy()).all()


def test_o1_leaves_the_inside_of_a_listed_cell_uncast(pynative: None) -> None:
    """O1 rewrites the user's Cells into copies; inside a listed one it inserts no cast."""
    net = KindsNet()
    _cast(net, "O1", ("DictCell",))
    assert type(net.as_dict).__name__ == "DictCellOpt"  # the rewrite's copy, sharing the child Cells
    beyond_fp16 = Tensor(np.full((4, WIDTH), 7e4, np.float32))
    assert np.isfinite(net.as_dict(beyond_fp16)["out"].asnumpy()).all()
    assert not np.isfinite(net.inp(beyond_fp16).asnumpy()).all()  # a Dense outside it: float16


JIT_CASES = [
    ("O2", AttentionNet, ("MultiheadAttention",)),
    pytest.param("O2", AttentionNet, ("Dense",), marks=OLD_JIT_ATTENTION),
    ("O2", KindsNet, ("DictCell", "KeywordCell", "SharedCell", "BaseNorm")),
    ("O3", EncoderNet, ("TransformerEncoderLayer",)),
    # O1 rewrites the network; the listed instances were marked before, and it leaves them alone
    ("O1", KindsNet, ("DictCell", "KeywordCell", "SharedCell", "BaseNorm")),
    ("O1", EncoderNet, ("MultiheadAttention",)),
]


@pytest.mark.parametrize(("level", "build", "names"), JIT_CASES)
def test_listed_cells_train_under_jit(level: str, build: Any, names: tuple[str, ...]) -> None:
    """The trainer compiles its step with ``mindspore.jit`` (about 2 s a case here)."""
    ms.set_seed(0)
    net = build()
    cast = _cast(net, level, names)
    if level != "O1":  # O1's copies of the user's Cells keep no mark: it inserts casts instead
        listed = tuple(resolve_black_list(names, known_layer_types([net])))
        marks = {
            c.get_mixed_precision_type().name for _, c in cast.cells_and_names() if isinstance(c, listed)
        }
        assert marks == {"FP32"}
    losses = _train(cast, net, steps=3, compiled=True)
    assert np.isfinite(losses).all(), losses
