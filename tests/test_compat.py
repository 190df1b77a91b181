"""The MindSpore this suite runs on is one ampsweep supports, and behaves as ampsweep assumes.

CI runs the fast suite twice: on the newest MindSpore that ``pyproject.toml``
admits (``.venv``) and on the oldest (``make test-oldest``, ``.venv-oldest``).
These tests name the MindSpore behaviour the trainer, AMP casting and
localization rely on, so that a version difference fails here, by name, rather
than as a wrong verdict somewhere downstream. Measured identical on 2.7.0,
2.7.2 and 2.10.0.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from mindspore import amp, nn, ops
from mindspore.common import dtype as mstype
from packaging.requirements import Requirement
from packaging.version import Version

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent


def _requirement(name: str) -> Requirement:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (req,) = [Requirement(d) for d in deps if Requirement(d).name == name]
    return req


def _lower_bound(req: Requirement) -> Version:
    (bound,) = [Version(s.version) for s in req.specifier if s.operator == ">="]
    return bound


def test_installed_mindspore_is_in_the_supported_range() -> None:
    req = _requirement("mindspore")
    assert req.specifier.contains(ms.__version__, prereleases=True), (
        f"MindSpore {ms.__version__} is outside what pyproject.toml supports ({req.specifier})"
    )


def test_numpy_is_below_2() -> None:
    # MindSpore 2.10 crashes on NumPy 2 without declaring it (2.7 declares numpy<2.0.0)
    assert Version(np.__version__) < Version("2")
    assert _requirement("numpy").specifier.contains("1.26.4")


def test_ci_tests_the_lower_bound_of_the_range() -> None:
    """``make test-oldest`` installs exactly the oldest version pyproject.toml admits."""
    oldest = re.search(r"^OLDEST_MINDSPORE \?= (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert oldest is not None
    assert Version(oldest.group(1)) == _lower_bound(_requirement("mindspore"))


def test_readme_states_the_supported_range() -> None:
    spec = str(_requirement("mindspore").specifier)  # e.g. "<2.11,>=2.7"
    readme = (ROOT / "README.md").read_text()
    for clause in spec.split(","):
        assert clause in readme.replace(" ", ""), f"README does not state mindspore {clause}"


def test_readme_lists_every_other_dependency_for_a_no_deps_install() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    readme = (ROOT / "README.md").read_text()
    missing = [d for d in deps if Requirement(d).name != "mindspore" and f"'{d}'" not in readme]
    assert not missing, f"README's --no-deps install does not list {missing}"


def test_api_signatures_ampsweep_calls() -> None:
    """The call forms jobs/ uses, checked without running them."""
    params = inspect.signature(amp.custom_mixed_precision).parameters
    assert {"white_list", "black_list", "dtype"} <= set(params)
    assert "dtype" in inspect.signature(amp.auto_mixed_precision).parameters
    assert len(inspect.signature(amp.DynamicLossScaler).parameters) == 3  # scale, factor, window
    assert callable(ms.device_context.cpu.op_tuning.threads_num)
    assert list(inspect.signature(ms.set_device).parameters)[:2] == ["device_target", "device_id"]
    for name in ("unsorted_segment_sum", "unsorted_segment_max", "assign", "depend", "isfinite"):
        assert callable(getattr(ops, name)), name
    assert callable(ms.jit) and callable(ms.value_and_grad)


def test_default_lists_are_classes_and_o2_keeps_norms_in_fp32() -> None:
    black = {c.__name__ for c in amp.get_black_list()}
    assert {"LayerNorm", "BatchNorm1d", "BatchNorm2d"} <= black
    assert "Dense" in {c.__name__ for c in amp.get_white_list()}


class _Net(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Dense(4, 8)
        self.norm = nn.LayerNorm((8,))
        self.fc2 = nn.Dense(8, 3)

    def construct(self, x):
        return self.fc2(ops.relu(self.norm(self.fc1(x))))


def _wrapped(cell: nn.Cell) -> dict[str, str]:
    return {name: type(c).__name__ for name, c in cell.cells_and_names() if name}


def test_custom_black_list_wraps_cells_as_the_hooks_expect() -> None:
    """jobs/localization/_hooks.py unwraps ``_OutputTo16._backbone``; ``black_list=`` replaces the default list."""
    inner = _Net()
    net = amp.custom_mixed_precision(inner, black_list=[nn.Dense], dtype=mstype.float16)
    assert type(net).__name__ == "_OutputTo32" and net._backbone is inner
    kinds = _wrapped(inner)
    assert kinds.get("fc1") == "_OutputTo16" and isinstance(inner.fc1._backbone, nn.Dense)
    # LayerNorm is on the default list, but a custom list replaces it
    assert kinds.get("norm") == "LayerNorm"
    x = ms.Tensor(np.ones((2, 4), np.float32))
    assert inner(x).dtype == mstype.float16  # a black-listed cell's output is float16 again
    assert net(x).dtype == mstype.float32


def test_auto_o2_casts_in_place_and_returns_float32() -> None:
    plain = _Net()
    cast = amp.auto_mixed_precision(plain, "O2", dtype=mstype.float16)
    assert type(cast).__name__ == "_OutputTo32"
    assert _wrapped(plain).get("norm") == "_OutputTo16"  # in place: build a fresh network per policy
    assert cast(ms.Tensor(np.ones((2, 4), np.float32))).dtype == mstype.float32


@pytest.fixture
def pynative():
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    yield
    ms.set_context(mode=mode)


def test_hooks_fire_innermost_first_and_see_gradients(pynative) -> None:
    net = _Net()
    forward: list[str] = []
    backward: list[str] = []
    handles = []
    for name, cell in net.cells_and_names():
        label = name or "net"
        handles.append(cell.register_forward_hook(lambda c, args, out, label=label: forward.append(label)))
        handles.append(cell.register_backward_hook(lambda c, gin, gout, label=label: backward.append(label)))
    x = ms.Tensor(np.ones((2, 4), np.float32))
    ms.value_and_grad(lambda v: net(v).sum(), None, net.trainable_params())(x)
    assert forward == ["fc1", "norm", "fc2", "net"]
    # reverse execution order; a Cell whose input needs no gradient (fc1 on raw data) still reports
    assert backward[:2] == ["fc2", "norm"]
    assert sorted(backward) == ["fc1", "fc2", "net", "norm"]
    for handle in handles:
        handle.remove()
    net(x)
    assert len(forward) == 4  # removed hooks stay silent


def test_eager_assign_reaches_a_compiled_graph() -> None:
    """The trainer resets a compiled step by an eager ``ops.assign`` into the Parameters it reads."""
    p = ms.Parameter(ms.Tensor(np.zeros(3, np.float32)), name="p")

    @ms.jit
    def read():
        return p * 1

    read()
    ops.assign(p, ms.Tensor(np.arange(3, dtype=np.float32)))
    np.testing.assert_array_equal(read().asnumpy(), [0.0, 1.0, 2.0])


def test_segment_reductions_under_jit() -> None:
    segments = ms.Tensor(np.array([0, 0, 1, 2, 2], np.int32))

    @ms.jit
    def stats(flat):
        return ops.concat(
            [
                ops.unsorted_segment_sum(flat * flat, segments, 3),
                ops.unsorted_segment_max(ops.abs(flat), segments, 3),
            ]
        )

    out = stats(ms.Tensor(np.array([1, -2, 3, 0, -4], np.float32))).asnumpy()
    np.testing.assert_array_equal(out, [5, 9, 16, 2, 3, 4])


def test_loss_scalers_unscale_and_adjust() -> None:
    static = amp.StaticLossScaler(8.0)
    assert float(static.unscale(static.scale(ms.Tensor(2.0, mstype.float32)))) == 2.0
    dynamic = amp.DynamicLossScaler(1024.0, 2, 1000)
    dynamic.adjust(ms.Tensor(False))
    assert float(dynamic.scale_value) == 512.0
    assert bool(amp.all_finite((ms.Tensor(np.ones(2, np.float32)),)))


def test_generator_dataset_yields_one_epoch_of_tensors() -> None:
    import mindspore.dataset as ds

    data = ds.GeneratorDataset(
        [(np.full(2, i, np.float32),) for i in range(3)], column_names=["x"], shuffle=False
    ).batch(1)
    epoch = list(iter(data))
    assert len(epoch) == 3 and isinstance(epoch[0][0], ms.Tensor)
