"""Finding a user's factory: module references, file paths outside the repository."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ampsweep.jobs import Workload, WorkloadError, build_workload, load_factory, resolve_reference

TINY = Path(__file__).parent / "workloads" / "tiny_mlp.py"


def test_file_reference_is_registered_in_sys_modules(tmp_path):
    copy = tmp_path / "my_model.py"
    copy.write_text(TINY.read_text())
    factory = load_factory(f"{copy}:make")
    module = sys.modules[factory.__module__]
    assert Path(module.__file__) == copy
    assert load_factory(f"{copy}:make") is factory, "a second load must not create a twin module"


def test_a_workload_file_imports_a_module_beside_it(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "beside_model_7f3a.py").write_text(TINY.read_text())
    (folder / "train.py").write_text("from beside_model_7f3a import make\n")
    assert isinstance(build_workload(f"{folder / 'train.py'}:make", 0, {}), Workload)


def test_relative_file_resolves_against_cwd_then_spec_dir(tmp_path, monkeypatch):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.py").write_text(TINY.read_text())
    monkeypatch.chdir(tmp_path)
    assert resolve_reference("models/m.py:make") == f"{tmp_path / 'models' / 'm.py'}:make"
    monkeypatch.chdir("/")
    assert resolve_reference("m.py:make", tmp_path / "models") == f"{tmp_path / 'models' / 'm.py'}:make"
    assert (
        resolve_reference("ampsweep.jobs.workloads.seed_repro:make")
        == "ampsweep.jobs.workloads.seed_repro:make"
    )
    with pytest.raises(WorkloadError, match="does not exist"):
        resolve_reference("nowhere.py:make")


def test_factory_must_return_a_workload(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def make(seed):\n    return 42\n")
    with pytest.raises(WorkloadError, match="returned int, expected ampsweep.Workload"):
        build_workload(f"{bad}:make", 0, {})


def test_import_error_is_reported(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("import not_a_real_package\n")
    with pytest.raises(WorkloadError, match="ModuleNotFoundError"):
        load_factory(f"{broken}:make")


def test_builtin_workload_meets_the_contract():
    workload = build_workload("ampsweep.jobs.workloads.seed_repro:make", 0, {"hidden": 8})
    assert isinstance(workload, Workload)
    x, y = next(iter(workload.batches))
    assert x.shape[0] == y.shape[0] and x.dtype.name == "float32"
