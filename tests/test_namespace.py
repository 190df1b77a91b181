"""One import namespace (issue 18): everything is ``ampsweep.*``, the old names fail with one line.

Most checks run in a subprocess whose working directory is a temporary folder,
because in the repository root (and in this pytest process, which puts the root
on ``sys.path``) the bare folders ``sweep/``, ``jobs/`` and ``analysis/`` are
importable by their old names. The slow test builds the wheel, installs it into
a fresh virtual environment and plans an example from there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import ray
import yaml

from ampsweep.jobs import WorkloadError, build_workload, load_factory, resolve_reference
from ampsweep.sweep.cli import main

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
OLD_NAMES = ("sweep", "jobs", "analysis", "ampsweep_contracts")
OLD_BUILTIN = "jobs.workloads.seed_repro:make"
NEW_BUILTIN = "ampsweep.jobs.workloads.seed_repro:make"

#: a minimal workload body (see tests/linear_workload.py); ``Workload`` comes from the import above it
BODY = """
import numpy as np
from mindspore import nn


def make(seed):
    x = np.ones((8, 4), np.float32)
    y = np.ones((8, 3), np.float32)
    return Workload(
        network=nn.Dense(4, 3, has_bias=False),
        loss_fn=nn.MSELoss(),
        optimizer=lambda params: nn.SGD(params, learning_rate=0.1),
        batches=iter([(x, y)] * 1000),
    )
"""


def _env() -> dict[str, str]:
    env = {**os.environ, "GLOG_v": "3"}
    env.pop("PYTHONPATH", None)
    return env


def _run(args: list[str], cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, "-c", code], cwd)


def _spec(folder: Path, workload: str) -> Path:
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump({"name": "ns", "workload": workload, "steps": 2, "grid": {"seed": [0]}}))
    return path


def _plan(spec: Path, cwd: Path, launcher: str) -> subprocess.CompletedProcess[str]:
    """``ampsweep plan``: the console script (cwd not on sys.path) or ``python -m`` (cwd on sys.path)."""
    command = [str(BIN / "ampsweep")] if launcher == "script" else [sys.executable, "-m", "ampsweep"]
    return _run([*command, "plan", str(spec)], cwd)


def _one_error_line(ran: subprocess.CompletedProcess[str]) -> str:
    assert ran.returncode == 2, ran.stdout + ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1, ran.stderr
    assert lines[0].startswith("ampsweep: error: workload: "), lines[0]
    return lines[0]


# --- the namespace ----------------------------------------------------------


def test_public_names_import_from_anywhere(tmp_path):
    ran = _python(
        "from ampsweep import Sweep, Workload, RunConfig;"
        "print(Sweep.__module__, Workload.__module__, RunConfig.__module__)",
        tmp_path,
    )
    assert ran.returncode == 0, ran.stderr
    assert all(name.startswith("ampsweep.") for name in ran.stdout.split()), ran.stdout


def test_old_top_level_names_are_not_importable(tmp_path):
    code = (
        "import importlib, json\n"
        "result = {}\n"
        f"for name in {OLD_NAMES!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "        result[name] = 'imported'\n"
        "    except ModuleNotFoundError as exc:\n"
        "        result[name] = 'missing' if exc.name == name else repr(exc)\n"
        "print(json.dumps(result))\n"
    )
    ran = _python(code, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == dict.fromkeys(OLD_NAMES, "missing")


def test_analysis_imports_neither_mindspore_nor_ray(tmp_path):
    code = (
        "import runpy, sys\n"
        "import ampsweep.analysis\n"
        "from ampsweep import analyze, write_report\n"
        "sys.argv = ['python -m ampsweep.analysis', '--help']\n"
        "try:\n"
        "    runpy.run_module('ampsweep.analysis', run_name='__main__', alter_sys=True)\n"
        "except SystemExit as exc:\n"
        "    assert exc.code in (0, None), exc.code\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('mindspore', 'ray'))\n"
        "print('HEAVY', heavy)\n"
    )
    ran = _python(code, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "usage:" in ran.stdout
    assert "HEAVY []" in ran.stdout, ran.stdout.splitlines()[-1]
    direct = _run([sys.executable, "-m", "ampsweep.analysis", "--help"], tmp_path)
    assert direct.returncode == 0 and "usage: python -m ampsweep.analysis" in direct.stdout, direct.stderr


def test_python_m_ampsweep_is_the_command(tmp_path):
    ran = _run([sys.executable, "-m", "ampsweep", "--help"], tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "plan" in ran.stdout and "run" in ran.stdout and "report" in ran.stdout


def test_the_parts_sit_at_the_repository_root():
    for folder, module in (("sweep", "_api.py"), ("jobs", "_workload.py"), ("analysis", "__main__.py")):
        assert (ROOT / folder / module).is_file(), folder
        assert not (ROOT / "ampsweep" / folder).exists(), f"ampsweep/{folder} would shadow {folder}/"
    assert (ROOT / "ampsweep" / "contracts" / "__init__.py").is_file()
    assert not (ROOT / "ampsweep_contracts").exists()


# --- old names in a spec or a workload file ---------------------------------


@pytest.mark.parametrize(
    ("where", "launcher"),
    [("root", "python -m"), ("root", "script"), ("tmp", "script"), ("tmp", "python -m")],
)
def test_old_builtin_workload_name_exits_2_naming_the_new_one(tmp_path, where, launcher):
    """In the repository root with ``python -m`` the bare ``jobs`` is importable: it must fail all the same."""
    spec = _spec(tmp_path, OLD_BUILTIN)
    line = _one_error_line(_plan(spec, ROOT if where == "root" else tmp_path, launcher))
    assert f"{OLD_BUILTIN!r} is the old name; use {NEW_BUILTIN!r}" in line, line


def test_users_own_package_named_jobs_still_works(tmp_path):
    package = tmp_path / "jobs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "helpers.py").write_text("SEED_OFFSET = 0\n")
    (package / "mine.py").write_text(
        "from ampsweep import Workload\nfrom jobs.helpers import SEED_OFFSET\n" + BODY
    )
    spec = _spec(tmp_path, "jobs.mine:make")
    # ``python -m`` puts the cwd on sys.path, as a user running from their project expects
    ran = _plan(spec, tmp_path, "python -m")
    assert ran.returncode == 0, ran.stderr
    assert "ns: 2 trials" in ran.stdout, ran.stdout


@pytest.mark.parametrize(
    ("where", "launcher"), [("tmp", "script"), ("root", "python -m"), ("root", "script")]
)
def test_workload_file_with_the_old_import_says_what_to_write(tmp_path, where, launcher):
    """Outside the repository ``jobs`` is missing; in its root (``python -m``) it imports the bare twin."""
    model = tmp_path / "my_model.py"
    model.write_text("from jobs import Workload\n" + BODY)
    line = _one_error_line(
        _plan(_spec(tmp_path, f"{model}:make"), ROOT if where == "root" else tmp_path, launcher)
    )
    assert "my_model.py line 1: 'from jobs import Workload' uses the old name 'jobs'" in line, line
    assert line.endswith("write 'from ampsweep import Workload'"), line


# --- more of the bad-spec corpus (tests/test_bad_specs.py's style) ----------

FROM_AMPSWEEP = "from ampsweep import Workload\n"

#: (id, workload: a reference or the source of a workload file, words the one line must contain)
OLD_NAME_CASES = [
    ("old-builtin-name", OLD_BUILTIN, f"is the old name; use {NEW_BUILTIN!r}"),
    (
        "old-builtin-name-other",
        "jobs.workloads.naive_loss:make",
        "use 'ampsweep.jobs.workloads.naive_loss:make'",
    ),
    ("old-import-jobs", "from jobs import Workload\n" + BODY, "write 'from ampsweep import Workload'"),
    (
        "old-import-jobs-private",
        "from jobs import Workload, build_workload\n" + BODY,
        "write 'from ampsweep.jobs import Workload, build_workload'",
    ),
    (
        "old-import-contracts",
        "import ampsweep_contracts\n" + FROM_AMPSWEEP + BODY,
        "'import ampsweep_contracts' uses the old name 'ampsweep_contracts'; "
        "write 'import ampsweep.contracts as ampsweep_contracts'",
    ),
    (
        "old-import-contracts-from",
        FROM_AMPSWEEP + "from ampsweep_contracts import Outcome\n" + BODY,
        "line 2: 'from ampsweep_contracts import Outcome' uses the old name 'ampsweep_contracts'; "
        "write 'from ampsweep import Outcome'",
    ),
    (
        "old-import-sweep",
        FROM_AMPSWEEP + "from sweep import RunConfig\n" + BODY,
        "write 'from ampsweep import RunConfig'",
    ),
    (
        "old-import-analysis",
        FROM_AMPSWEEP + "from analysis import analyze\n" + BODY,
        "write 'from ampsweep import analyze'",
    ),
    (
        "old-import-module",
        "import jobs\nWorkload = jobs.Workload\n" + BODY,
        "write 'import ampsweep.jobs as jobs'",
    ),
    (
        "old-import-submodule",
        FROM_AMPSWEEP + "from jobs.workloads import seed_repro\n" + BODY,
        "write 'from ampsweep.jobs.workloads import seed_repro'",
    ),
    (
        "old-import-inside-factory",
        FROM_AMPSWEEP + BODY.replace("def make(seed):\n", "def make(seed):\n    from sweep import Sweep\n"),
        "'from sweep import Sweep' uses the old name 'sweep'; write 'from ampsweep import Sweep'",
    ),
    # a user's own missing ``analysis`` package is not one of ours: the usual message
    (
        "users-missing-analysis",
        FROM_AMPSWEEP + "from analysis import my_helper\n" + BODY,
        "failed: ModuleNotFoundError: No module named 'analysis'",
    ),
]


@pytest.fixture
def no_checkout_on_path(monkeypatch):
    """This pytest process has the repository root on sys.path; drop it, as an installed user has."""
    keep = [p for p in sys.path if p not in ("", ".") and Path(p).resolve() != ROOT]
    monkeypatch.setattr(sys, "path", keep)
    for name in [n for n in sys.modules if n.split(".")[0] in ("jobs", "sweep", "analysis")]:
        monkeypatch.delitem(sys.modules, name)  # put back afterwards


#: refused by name before anything starts; the others are refused by the workload check, which runs
#: while a local Ray starts (seconds each on 2 cores): ``make test-slow``. The fast suite also sees
#: the old imports refused by ``plan`` (above) and by load_factory (below)
REFUSED_BY_NAME = {"old-builtin-name", "old-builtin-name-other"}


@pytest.mark.parametrize(
    ("workload", "words"),
    [
        pytest.param(*c[1:], id=c[0], marks=[] if c[0] in REFUSED_BY_NAME else [pytest.mark.slow])
        for c in OLD_NAME_CASES
    ],
)
def test_old_names_exit_2_with_one_line_and_write_nothing(
    tmp_path, capsys, request, no_checkout_on_path, workload, words
):
    if "\n" in workload:
        (tmp_path / "model.py").write_text(workload)
        workload = f"{tmp_path / 'model.py'}:make"
    path = _spec(tmp_path, workload)
    out = tmp_path / "out"
    code = main(["run", str(path), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ampsweep: error: workload: "), lines[0]
    assert words in lines[0], lines[0]
    if request.node.callspec.id == "users-missing-analysis":  # nothing disallowed: the import failed
        assert "not allowed" not in lines[0], lines[0]
    else:
        assert "is not allowed;" in lines[0], lines[0]
    assert not out.exists(), "nothing is written for a bad spec"
    assert not ray.is_initialized()


# --- jobs/_workload.py directly ---------------------------------------------


def test_resolve_and_load_refuse_the_old_builtin_name():
    with pytest.raises(
        WorkloadError, match="is the old name; use 'ampsweep.jobs.workloads.silent_norm:make'"
    ):
        resolve_reference("jobs.workloads.silent_norm:make")
    with pytest.raises(WorkloadError, match="is the old name"):
        load_factory(OLD_BUILTIN)
    assert resolve_reference(NEW_BUILTIN) == NEW_BUILTIN


def test_old_import_in_a_users_package_module(tmp_path, no_checkout_on_path, monkeypatch):
    package = tmp_path / "ns_user_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text("from jobs import TrialConfig\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(
            WorkloadError,
            match="line 1: 'from jobs import TrialConfig' .* 'from ampsweep import TrialConfig'",
        ):
            load_factory("ns_user_pkg.model:make")
    finally:
        for name in [n for n in sys.modules if n.split(".")[0] == "ns_user_pkg"]:
            del sys.modules[name]


def test_a_workload_of_the_old_class_is_named(tmp_path):
    """What a factory returns when ``from jobs import Workload`` found the checkout's bare twin."""
    twin = tmp_path / "twin.py"
    twin.write_text(
        "class Workload:\n    pass\n\nWorkload.__module__ = 'jobs._workload'\n\n"
        "def make(seed):\n    return Workload()\n"
    )
    with pytest.raises(WorkloadError) as caught:
        build_workload(f"{twin}:make", 0, {})
    # Which of two checks names it depends on whether an earlier test imported the checkout's
    # bare ``jobs`` into this process; either way the one line names the old package and the fix.
    message = str(caught.value)
    assert "the old" in message and "'jobs'" in message, message
    assert "from ampsweep import Workload" in message, message


# --- the built wheel ----------------------------------------------------------

#: what a checkout has that a build must not see (the .gitignore's folders)
_NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", ".venv-*", "build", "dist", "site", "runs", "rank_0", "rewritten_network",
    "*.egg-info", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache",
)  # fmt: skip

#: repository folder -> its place in the wheel
_MAPPED = {
    "ampsweep": "ampsweep",
    "sweep": "ampsweep/sweep",
    "jobs": "ampsweep/jobs",
    "analysis": "ampsweep/analysis",
}


def _build_wheel(source: Path, dist: Path) -> Path:
    attempts = [
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(source)],
        # offline: the .venv's setuptools instead of a fresh isolated one
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--skip-dependency-check", "--outdir", str(dist), str(source)],
    ]  # fmt: skip
    if importlib.util.find_spec("build") is None:  # the [test] extra brings it; pip can do without
        attempts = [[sys.executable, "-m", "pip", "wheel", "--no-deps", str(source), "-w", str(dist)]]
    outputs = []
    for command in attempts:
        ran = _run(command, source, timeout=600)
        wheels = sorted(dist.glob("ampsweep-*.whl"))
        if ran.returncode == 0 and wheels:
            return wheels[-1]
        outputs.append(f"$ {' '.join(command)}\n{ran.stdout[-3000:]}\n{ran.stderr[-3000:]}")
    pytest.fail("building the wheel failed:\n" + "\n".join(outputs))


@pytest.mark.slow
def test_the_built_wheel_installs_and_plans_an_example(tmp_path):
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=_NOT_SOURCE)
    wheel = _build_wheel(source, tmp_path / "dist")

    names = zipfile.ZipFile(wheel).namelist()
    for required in (
        "ampsweep/sweep/_api.py",
        "ampsweep/jobs/workloads/seed_repro.py",
        "ampsweep/contracts/_tables.py",
    ):
        assert required in names, required
    tops = {name.split("/")[0] for name in names}
    assert not tops & {"sweep", "jobs", "analysis", "ampsweep_contracts"}, sorted(tops)
    top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
    assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["ampsweep"]
    # every module of the checkout made it in (a subpackage missing from pyproject's list would not)
    for folder, inside in _MAPPED.items():
        for module in (source / folder).rglob("*.py"):
            assert f"{inside}/{module.relative_to(source / folder).as_posix()}" in names, module

    # a fresh venv with only the wheel; the heavy dependencies (MindSpore, Ray, ...) are the
    # .venv's, made visible by a .pth line rather than downloaded again
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            "-q",
            str(wheel),
        ],
        tmp_path,
    )
    assert install.returncode == 0, install.stderr
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path
        ).stdout.strip()
    )
    assert (site / "ampsweep" / "sweep" / "_api.py").is_file()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "_ampsweep_test_dependencies.pth").write_text("".join(f"{p}\n" for p in sorted(ours)))

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = _run(
        [
            str(python),
            "-c",
            "import json, importlib, ampsweep, ampsweep.sweep, ampsweep.jobs.workloads.seed_repro, ampsweep.contracts\n"
            "missing = []\n"
            f"for name in {OLD_NAMES!r}:\n"
            "    try:\n"
            "        importlib.import_module(name)\n"
            "    except ModuleNotFoundError:\n"
            "        missing.append(name)\n"
            "print(json.dumps({'sweep': ampsweep.sweep.__file__, 'contracts': ampsweep.contracts.__file__,"
            " 'path': list(ampsweep.__path__), 'missing': missing}))",
        ],
        elsewhere,
    )
    assert where.returncode == 0, where.stderr
    found = json.loads(where.stdout)
    assert Path(found["sweep"]) == site / "ampsweep" / "sweep" / "__init__.py", found
    assert Path(found["contracts"]) == site / "ampsweep" / "contracts" / "__init__.py", found
    assert found["path"] == [str(site / "ampsweep")], "an installed ampsweep searches no checkout"
    assert found["missing"] == list(OLD_NAMES), found

    smoke = ROOT / "examples" / "smoke.yaml"
    assert yaml.safe_load(smoke.read_text())["workload"] == NEW_BUILTIN
    plan = _run([str(venv / "bin" / "ampsweep"), "plan", str(smoke)], elsewhere)
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.startswith("smoke: 4 trials"), plan.stdout

    old = _run([str(venv / "bin" / "ampsweep"), "plan", str(_spec(elsewhere, OLD_BUILTIN))], elsewhere)
    assert f"use {NEW_BUILTIN!r}" in _one_error_line(old)
