"""The code the report gives is the code that ran, and it runs (issue 41).

The analysis writes the recommendation as text (it imports no MindSpore).
Here that text is executed, as a user would paste it, on a classifier built
from MindSpore's own ``nn.TransformerEncoderLayer``: it trains two steps, both
as a hand-written loop and with ``mindspore.train.Model``, and leaves the
network cast exactly as the sweep's ``apply_amp`` casts it.
"""

from __future__ import annotations

import math
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("mindspore")

import mindspore as ms  # noqa: E402
import mindspore.dataset as mds  # noqa: E402
from mindspore import Tensor, nn  # noqa: E402

from ampsweep import analysis  # noqa: E402
from ampsweep.jobs.training._amp import apply_amp, known_layer_types, resolve_black_list  # noqa: E402

WIDTH, TOKENS, CLASSES, SAMPLES, BATCH = 16, 4, 3, 8, 4  # two steps of one epoch


class Classifier(nn.Cell):
    """MindSpore's encoder layer (MultiheadAttention, two Dense, two LayerNorm) and a Dense head."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.TransformerEncoderLayer(
            d_model=WIDTH, nhead=2, dim_feedforward=32, batch_first=True
        )
        self.head = nn.Dense(WIDTH, CLASSES)

    def construct(self, x: Tensor) -> Tensor:
        return self.head(self.encoder(x).mean(1))


def _recommendation(black_list: tuple[str, ...]) -> dict[str, Any]:
    """A ranked configuration as the analysis reads it (see tests/test_analysis.py::test_snippets)."""
    return {
        "amp_level": "O2",
        "black_list": black_list,
        "clip": math.nan,
        "loss_scale": "none",
        "dtype": "float16",
        "loss_placement": "outside",
    }


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(SAMPLES, TOKENS, WIDTH)).astype(np.float32)
    return x, rng.integers(0, CLASSES, SAMPLES).astype(np.int32)


def _paste(code: str, path: Path, clf: Classifier) -> dict[str, Any]:
    """Run the pasted code with the user's names bound; returns its namespace."""
    x, y = _data()
    optimizer = nn.Adam(clf.trainable_params(), learning_rate=1e-3)
    namespace: dict[str, Any] = {
        "net": clf,
        "loss_fn": nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        "optimizer": optimizer,
        "MultiheadAttention": nn.MultiheadAttention,
        "TransformerEncoderLayer": nn.TransformerEncoderLayer,
        "epochs": 1,
        "dataset": mds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH),
    }
    code = code.replace(
        "model.train(epochs, dataset)", "model.train(epochs, dataset, dataset_sink_mode=False)"
    )
    path.write_text(code + "\n")
    # a module of its own, as a pasted script is: ms.jit names the step by its module and reads its source
    module = types.ModuleType(path.stem)
    module.__file__ = str(path)
    module.__dict__.update(namespace)
    sys.modules[path.stem] = module
    try:
        exec(compile(code, str(path), "exec"), module.__dict__)
    finally:
        del sys.modules[path.stem]
    return module.__dict__


def _output_dtypes(clf: Classifier, names: tuple[str, ...]) -> dict[str, set[str]]:
    """The dtype each named Cell hands on, seen by forward hooks on one PyNative forward pass."""
    cells = dict(clf.cells_and_names())
    seen: dict[str, set[str]] = {name: set() for name in names}
    handles = [
        cells[name].register_forward_hook(
            lambda _c, _a, out, n=name: seen[n].add(str((out[0] if isinstance(out, tuple) else out).dtype))
        )
        for name in names
    ]
    clf(Tensor(_data()[0][:BATCH]))
    for handle in handles:
        handle.remove()
    return seen


def _precision(root: nn.Cell) -> dict[str, tuple[str, str]]:
    return {name: (type(c).__name__, c.get_mixed_precision_type().name) for name, c in root.cells_and_names()}


@pytest.mark.parametrize("form", ["train_step", "model"])
def test_pasted_code_trains_with_multihead_attention_in_float32(form: str, tmp_path: Path) -> None:
    ms.set_seed(0)
    clf = Classifier()
    before = clf.head.weight.asnumpy().copy()
    code = analysis.snippets(_recommendation(("MultiheadAttention",)))[form]
    assert "amp_level=" not in code.split("model = Model(")[-1].split("\n")[0]  # Model casts nothing more
    _paste(code, tmp_path / f"pasted_{form}.py", clf)
    assert np.abs(clf.head.weight.asnumpy() - before).max() > 0, "the pasted code did not train"
    assert np.isfinite(clf.head.weight.asnumpy()).all()

    attention, feed_forward = "encoder.self_attn", ("encoder.dense1", "encoder.dense2", "head")
    cells = dict(clf.cells_and_names())
    assert cells[attention].get_mixed_precision_type().name == "FP32"
    assert {cells[n].get_mixed_precision_type().name for n in feed_forward} == {"FP16"}
    seen = _output_dtypes(clf, (attention, *feed_forward))
    # it computes in float32 (its mark) and hands its parent float16, as MindSpore's own black list does
    assert seen[attention] == {"Float16"}, seen
    assert all(seen[n] == {"Float16"} for n in feed_forward), seen


@pytest.mark.parametrize("black_list", [("MultiheadAttention",), ("TransformerEncoderLayer",)])
def test_pasted_code_casts_as_the_sweep_did(black_list: tuple[str, ...], tmp_path: Path) -> None:
    """Cell by Cell, the same class and precision as ``apply_amp``'s cast; nothing is wrapped.

    ``TransformerEncoderLayer`` holds two LayerNorms (O2's default black list):
    float32 inside it or not, handing on float16 only outside a listed Cell.
    """
    sweep = Classifier()
    apply_amp(sweep, "O2", resolve_black_list(black_list, known_layer_types([sweep])), "float16")
    pasted = Classifier()
    _paste(analysis.snippets(_recommendation(black_list))["train_step"], tmp_path / "pasted.py", pasted)
    assert _precision(pasted) == _precision(sweep)
    assert _precision(pasted)["encoder.norm1"] == ("LayerNorm", "FP32")


def _pasted_keep_in_float32(path: Path) -> Any:
    """The report's ``keep_in_float32``, pasted into a module of its own (``ms.jit`` reads its source)."""
    from ampsweep.analysis.wording._code import _HEADER, KEEP_IN_FLOAT32

    code = "\n".join([*_HEADER, "", *KEEP_IN_FLOAT32, ""])
    path.write_text(code)
    module = types.ModuleType(path.stem)
    module.__file__ = str(path)
    sys.modules[path.stem] = module
    exec(compile(code, str(path), "exec"), module.__dict__)
    return module.keep_in_float32


@pytest.mark.parametrize("level", ["O1", "O2", "O3"])
def test_the_pasted_function_computes_what_the_imported_one_computes(level: str, tmp_path: Path) -> None:
    """Pasted or ``from ampsweep.amp import keep_in_float32``: the same steps, bit for bit, both run here."""
    from ampsweep.amp import keep_in_float32
    from tests.test_keep_in_float32 import Block, HandSoftmax, _same, _train

    pasted = _pasted_keep_in_float32(tmp_path / f"pasted_keep_{level}.py")
    try:
        classes = (HandSoftmax,) if level == "O1" else (HandSoftmax, Block)
        _same(
            _train(lambda n: pasted(n, classes, level)), _train(lambda n: keep_in_float32(n, classes, level))
        )
    finally:
        del sys.modules[f"pasted_keep_{level}"]


def test_the_report_shows_both_ways_with_public_names_only() -> None:
    import re

    for form, code in analysis.snippets(_recommendation(("MultiheadAttention",))).items():
        assert "from ampsweep.amp import keep_in_float32" in code and "def keep_in_float32(" in code, form
        assert not re.search(r"\._[A-Za-z]|_OutputTo|_backbone", code), form


def test_a_data_parallel_recommendation_pastes_its_data_parallel_setup():
    """devices_per_trial > 1: the code sets up the job as the trials ran (init, DATA_PARALLEL, the
    gradients' mean over the ranks before the clip), in both forms, and it is valid Python."""
    from ampsweep.analysis.wording._code import snippets
    from ampsweep.contracts import Configuration

    configuration = Configuration("O2", clip=1.0, loss_scale="dynamic")
    row = {**configuration.as_row(), "devices": 2}
    for form, text in snippets(row).items():
        compile(text, form, "exec")
        assert "init()" in text and "ParallelMode.DATA_PARALLEL" in text, form
        lines = text.splitlines()
        reduced = next(i for i, line in enumerate(lines) if "grad_reducer(grads)" in line)
        clipped = next(i for i, line in enumerate(lines) if "clip / (norm" in line)
        assert reduced < clipped, form
    single = snippets({**row, "devices": 1})
    assert all("init()" not in text and "grad_reducer(grads)" not in text for text in single.values())
