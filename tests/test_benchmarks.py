"""Smoke tests: every benchmark runs at its tiny size and produces its section, so none can rot.

Each benchmark runs the way ``make bench`` runs it, in a child process of its
own (``python -m benchmarks --child NAME OUT --tiny``), because MindSpore's
thread settings and a Ray session are process-wide. The children start
together, a few at a time, in one module fixture, so the file costs about the
slowest few of them rather than their sum. Nothing here asserts on a timing:
only that each section is produced and holds the rows it promises.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _importable(module: str) -> bool:
    """Really importable: ``ray.tune`` exists inside every Ray, but needs the ``ray[tune]`` extras to import."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


HAVE_TUNE = _importable("ray.tune")
HAVE_MINDCV = importlib.util.find_spec("mindcv") is not None

#: benchmark -> strings its tiny section must contain
EXPECTED: dict[str, list[str]] = {
    "bench_analysis": ["## Analysis: ranking large sweeps", "| 10M |", "| 100M |", "peak RSS"],
    "bench_capture": [
        "## Per-step capture cost (bench_capture)",
        "bare loop (**baseline**)",
        "bare + global norm + clipping",
        "ampsweep step + block copies",
        "### Realistic model: mindcv resnet18",
    ],
    "bench_compiles": ["## Compiles per actor (bench_compiles)", "compiles** for", "| worker | trials |"],
    "bench_late": [
        "## Time to answer a late divergence (bench_late)",
        "| ampsweep from step 0 |",
        "| ampsweep forked at 20 |",
        "| Ray Tune + ASHA |",
        "**Forked / from step 0:",
        "ok: every forked trial's first step is 20 or later",
    ],
    "bench_localize": [
        "## Localizing a broken trial (bench_localize)",
        "| trial | first non-finite step |",
        "**Median plain / cached:",
    ],
    "bench_launcher": [
        "## Launcher: cost per trial, and dispatch at scale (bench_launcher)",
        "Launcher cost per trial, steady state",
        "### Dispatch at scale (simulated cluster)",
        "sustained trials/s",
        "Projection to 1,000 devices",
    ],
    "bench_limit": [
        "## Against the limit (bench_limit)",
        "**Limit**",
        "**Sweep phase / limit**",
        "command start → first trial started",
        "Compiles vs distinct (worker, graph) pairs",
        "### Where the start-up goes (demo)",
    ],
    "bench_watch": [
        "## Watch: cost on a healthy run, and NaN to spec (bench_watch)",
        "without Watch (**baseline**)",
        "**With / without Watch, `model.train` wall:",
        "**Watch's own time per step:",
        "**NaN to spec:",
    ],
    "bench_vs_tune": [
        "## Against Ray Tune (bench_vs_tune)",
        "End-to-end wall time",
        "**Bytes per 1000 steps**",
        "### Where the difference comes from",
    ],
}
SKIPPED = {"bench_vs_tune", "bench_late"} if not HAVE_TUNE else set()


def _run_tiny(name: str, out_dir: Path) -> tuple[int, str, str]:
    out = out_dir / f"{name}.md"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("GLOG_v", "3")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--child", name, str(out), "--tiny"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    section = out.read_text() if out.is_file() else ""
    return done.returncode, section, done.stderr[-3000:]


@pytest.fixture(scope="module")
def sections(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Future]:
    out_dir = tmp_path_factory.mktemp("bench-sections")
    pool = ThreadPoolExecutor(max_workers=3)
    # the slowest first, so the pool's tail is short
    order = [
        "bench_vs_tune",
        "bench_late",
        "bench_limit",
        "bench_launcher",
        "bench_capture",
        "bench_compiles",
        "bench_localize",
        "bench_watch",
        "bench_analysis",
    ]
    futures = {name: pool.submit(_run_tiny, name, out_dir) for name in order if name not in SKIPPED}
    yield futures
    pool.shutdown(wait=True)


def test_every_benchmark_is_covered() -> None:
    from benchmarks.__main__ import discover

    assert set(discover()) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_benchmark_produces_its_section(name: str, sections: dict[str, Future]) -> None:
    if name in SKIPPED:
        pytest.skip("ray.tune is not installed (pip install -e '.[bench]')")
    code, section, stderr = sections[name].result()
    assert code == 0, f"{name} exited {code}:\n{stderr}"
    assert "Failed" not in section.splitlines()[0]
    for expected in EXPECTED[name]:
        assert expected in section, f"{name}: {expected!r} missing from\n{section}"
    if name == "bench_capture":
        if HAVE_MINDCV:
            assert "| O2, black_list=[], float16 |" in section
        else:
            assert "Skipped: mindcv is not installed" in section


@pytest.mark.skipif(not HAVE_MINDCV, reason="mindcv is not installed (pip install -e '.[models]')")
def test_mindcv_workload_builds_offline_and_runs_a_forward_pass() -> None:
    import numpy as np
    from mindspore import Tensor

    from ampsweep.jobs import Workload
    from ampsweep.jobs.workloads.mindcv import make

    workload = make(seed=0, batch=2, image=16, num_classes=4)
    assert isinstance(workload, Workload)
    images, labels = next(iter(workload.batches))
    assert images.shape == (2, 3, 16, 16) and images.dtype == np.float32
    assert labels.dtype == np.int32 and labels.max() < 4
    again, _ = next(iter(make(seed=0, batch=2, image=16, num_classes=4).batches))
    assert np.array_equal(images, again)  # deterministic per seed
    logits = workload.network(Tensor(images))
    assert logits.shape == (2, 4)
    loss = workload.loss_fn(logits, Tensor(labels))
    assert np.isfinite(loss.asnumpy()).all()


def test_waiting_for_quiet_cpus_ends_by_its_bound_and_reports_a_share(monkeypatch) -> None:
    from benchmarks import _machine

    # a clock of its own: each one-second sample advances it by exactly one second
    clock = [100.0]
    samples = []

    def sleep(seconds: float) -> None:
        samples.append(seconds)
        clock[0] += seconds

    # only the module's own view of `time`: the benchmark children's threads keep the real one
    monkeypatch.setattr(_machine, "time", SimpleNamespace(monotonic=lambda: clock[0], sleep=sleep))
    # 0 %: never quiet enough, however idle the real CPUs are
    waited, busy = _machine.wait_for_quiet(busy_below=0.0, quiet_seconds=1, max_wait=3.0)
    if busy is None:  # no /proc/stat: nothing to wait on
        assert waited == 0.0 and samples == []
        return
    assert samples == [1.0, 1.0, 1.0], "a machine that never quiets is sampled until max_wait"
    assert waited == 3.0, "and the wait reports max_wait"
    assert 0.0 <= busy <= 1.0
