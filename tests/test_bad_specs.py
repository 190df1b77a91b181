"""A corpus of malformed sweep files: each exits 2 with one line naming the field and what is allowed
(or, where the workload could not be imported or called, what happened).

Run through ``ampsweep run`` itself (in-process), so the check covers the
whole path a user takes, and writes nothing: not the output folder, not a lock.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import ray
import yaml

from ampsweep.sweep.cli import main

TESTS = Path(__file__).parent
TINY = TESTS / "workloads" / "tiny_mlp.py"
GOOD = {"name": "bad", "workload": f"{TINY}:make", "steps": 5, "grid": {"seed": [0]}}


def _with(**changes) -> dict:
    spec = {**GOOD, "grid": dict(GOOD["grid"])}
    for key, value in changes.items():
        if key.startswith("grid_"):
            spec["grid"][key[5:]] = value
        elif value is _DROP:
            spec.pop(key)
        else:
            spec[key] = value
    return spec


_DROP = object()
RAISING = "raise RuntimeError('cannot find the dataset on /data')\n"
WRONG_TYPE = "def make(seed):\n    return {'network': None}\n"
SHORT = (
    "from tests.linear_workload import make as base\n"
    "def make(seed):\n"
    "    w = base(seed)\n"
    "    w.batches = [next(iter(w.batches))] * 3\n"
    "    return w\n"
)
FILES = {"raising.py": RAISING, "short.py": SHORT}
#: cases where nothing was disallowed: the workload's import failed or its factory is missing
FAILED = {"workload-no-module", "workload-no-factory", "workload-raises-on-import"}

#: (id, spec mapping or raw text, field the message must start with, words it must contain)
CASES = [
    ("yaml-syntax", "name: [unclosed\n", "spec", "not valid YAML at line"),
    ("not-a-mapping", "- name: x\n", "spec", "YAML mapping"),
    ("empty-file", "", "spec", "YAML mapping"),
    ("missing-name", _with(name=_DROP), "name", "required"),
    ("missing-workload", _with(workload=_DROP), "workload", "required"),
    ("missing-steps", _with(steps=_DROP), "steps", "required"),
    ("steps-zero", _with(steps=0), "steps", "greater than 0"),
    ("steps-text", _with(steps="many"), "steps", "integer"),
    ("steps-fraction", _with(steps=2.5), "steps", "integer"),
    ("unknown-key", _with(stepz=5), "stepz", "unknown key"),
    ("unknown-axis", _with(grid_lr=[0.1]), "grid.lr", "unknown key"),
    ("grid-not-mapping", _with(grid=[1, 2]), "grid", "valid dictionary"),
    ("amp-level", _with(grid_amp_level=["O4"]), "grid.amp_level[0]", "'O0', 'O1', 'O2' or 'O3'"),
    ("amp-level-not-list", _with(grid_amp_level="O2"), "grid.amp_level", "valid list"),
    ("dtype", _with(grid_dtype=["float8"]), "grid.dtype[0]", "'float16' or 'bfloat16'"),
    ("loss-scale-word", _with(grid_loss_scale=["auto"]), "grid.loss_scale", "allowed: none, static:<value>"),
    ("loss-scale-negative", _with(grid_loss_scale=["static:-1"]), "grid.loss_scale", "allowed: none"),
    ("loss-scale-zero", _with(grid_loss_scale=["static:0"]), "grid.loss_scale", "finite number > 0"),
    ("clip-zero", _with(grid_clip=[0]), "grid.clip", "must be a number > 0 or null"),
    ("clip-negative", _with(grid_clip=[-1.0]), "grid.clip", "must be a number > 0 or null"),
    ("clip-text", _with(grid_clip=["big"]), "grid.clip[0]", "number"),
    ("empty-axis", _with(grid_seed=[]), "grid.seed", "at least one value"),
    ("repeated-clip", _with(grid_clip=[1.0, 1.0]), "grid.clip", "appears twice"),
    (
        "repeated-black-list",
        _with(grid_black_list=[["Scaler"], ["Scaler"]]),
        "grid.black_list",
        "appears twice",
    ),
    ("repeated-seed", _with(grid_seed=[0, 0]), "grid.seed", "appears twice"),
    ("seed-fraction", _with(grid_seed=[1.5]), "grid.seed[0]", "integer"),
    ("seed-boolean", _with(grid_seed=[True]), "grid.seed[0]", "integer"),
    ("black-list-not-nested", _with(grid_black_list=["Scaler"]), "grid.black_list[0]", "valid list"),
    ("unknown-layer", _with(grid_black_list=[["Scalar"]]), "grid.black_list[0][0]", "known layer types: "),
    (
        "layer-not-in-network",
        _with(grid_black_list=[[], ["Scaler", "Conv2d"]]),
        "grid.black_list[1][1]",
        "no Cell of the workload's network or loss is a Conv2d, so keeping it in FP32 would change nothing",
    ),
    ("name-traversal", _with(name="../escape"), "name", "letters, digits"),
    ("name-slash", _with(name="a/b"), "name", "letters, digits"),
    ("name-hidden", _with(name=".hidden"), "name", "letters, digits"),
    (
        "workload-form",
        _with(workload="my_model"),
        "workload",
        "'package.module:make' or 'path/to/file.py:make'",
    ),
    ("workload-no-module", _with(workload="no_such_package_xyz:make"), "workload", "importing"),
    ("workload-no-file", _with(workload="missing_model.py:make"), "workload", "does not exist"),
    (
        "workload-no-factory",
        _with(workload="ampsweep.jobs.workloads.seed_repro:nope"),
        "workload",
        "no callable 'nope'",
    ),
    ("workload-raises-on-import", "raising.py", "workload", "RuntimeError: cannot find the dataset"),
    ("factory-wrong-type", "wrong_type.py", "workload", "expected ampsweep.Workload"),
    (
        "workload-args-unknown",
        _with(workload_args={"hiden": 3}),
        "workload_args",
        "the factory rejected them",
    ),
    ("workload-args-not-mapping", _with(workload_args=[1]), "workload_args", "valid dictionary"),
    ("devices-unknown", _with(devices="tpu"), "devices", "allowed: auto, ascend, gpu, cpu"),
    ("devices-repeated", _with(devices=["cpu", "cpu"]), "devices", "distinct"),
    ("abort-after-zero", _with(abort_after=0), "abort_after", "greater than 0"),
    ("max-attempts-zero", _with(max_attempts=0), "max_attempts", "greater than 0"),
    ("layer-every-negative", _with(layer_every=-5), "layer_every", "greater than 0"),
    ("batches-fewer-than-steps", "short.py", "steps", "a list of 3 and a trial needs 5"),
    ("avoid-devices-form", _with(avoid_devices=["n7:0", "n7/3"]), "avoid_devices", "'node:device_id'"),
    ("avoid-devices-not-list", _with(avoid_devices="n7:3"), "avoid_devices", "valid list"),
]


#: cases refused by the workload check, which runs while a local Ray and the first actors start
#: (seconds each on 2 cores): one stays in the fast suite, the rest run in ``make test-slow``
RAY_STARTED = {
    "unknown-layer",
    "layer-not-in-network",
    "workload-no-module",
    "workload-no-factory",
    "workload-raises-on-import",
    "factory-wrong-type",
    "batches-fewer-than-steps",
}


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [pytest.param(*c[1:], id=c[0], marks=[pytest.mark.slow] if c[0] in RAY_STARTED else []) for c in CASES],
)
def test_bad_spec_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys, request, spec, field, words):
    path = tmp_path / "spec.yaml"
    if isinstance(spec, str) and spec.endswith(".py"):
        (tmp_path / spec).write_text(FILES.get(spec, WRONG_TYPE))
        spec = _with(workload=f"{spec}:make")
    path.write_text(spec if isinstance(spec, str) else yaml.safe_dump(spec))
    out = tmp_path / "out"
    code = main(["run", str(path), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"ampsweep: error: {field}: "), lines[0]
    assert words in lines[0], lines[0]
    failed = request.node.callspec.id in FAILED
    assert ("is not allowed" not in lines[0]) if failed else ("is not allowed;" in lines[0]), lines[0]
    assert not out.exists(), "nothing is written for a bad spec"
    assert not ray.is_initialized(), "a Ray started while the workload was checked is shut down again"


def test_the_corpus_is_large_enough():
    assert len(CASES) >= 30
