"""Smoke tests: every benchmark runs at its tiny size and produces its section, so none can rot.

Each benchmark runs the way ``make bench`` runs it, in a child process of its
own (``python -m benchmarks --child NAME OUT --tiny``), because MindSpore's
thread settings and a Ray session are process-wide. The children start
together, a few at a time, in one module fixture, so the file costs about the
slowest few of them rather than their sum. Nothing here asserts on a timing:
only that each section is produced and holds the rows it promises. Those runs
are ``slow`` (``make test-slow``): together they take minutes on 2 cores; the
runner's own helpers are tested here in the fast suite.
"""

from __future__ import annotations

import importlib.util
import json
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
    "bench_gang": [
        "## Trials on several devices: gangs (bench_gang)",
        "### Dispatch to gangs (driver side, in-process stand-in for the actors)",
        "| slots | devices per slot | trials | driver ms per trial | trials per s |",
    ],
    "bench_faults": [
        "## Telling a fault from numerics: the replay and the rerun against one trial (bench_faults)",
        "| round | order | clean s | faulty run s | diagnose s |",
        "**(Diagnose + rerun) / one clean trial:",
        "the three phases of a faulty trial sum to no more than their span",
    ],
    "bench_forecast": [
        "## Forecast quality: the profile's `passes_max_at` against runs from zero (bench_forecast)",
        "| late_softmax | 20 | O2 [], clip off (**short answer**) |",
        "| seed_repro | 20 | O2 [], clip off (**short answer**) |",
        "### The profiles",
    ],
    "bench_horizon": [
        "## Time to a confirmed answer (bench_horizon)",
        "| ampsweep from step 0 |",
        "| ampsweep `horizon: 40` |",
        "**Horizon / from step 0:",
        "### What the horizon way continued",
        "| 1 | O2, black_list [], clip off | the recommendation at the trials' end |",
        "### Where the time goes",
        "ok: every continuation's first step is 20 or later",
        "ok: horizon.json: horizon 40, trials_end 20",
    ],
    "bench_launch": [
        "## Op launch on one CPU core: synchronous against asynchronous (bench_launch)",
        "| PyNative step with hooks on every Cell |",
        "| Localizing the diverged trial, `loss_placement: inside` |",
        "Same culprit, phase and replay step in every process: yes",
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
        "**Flat in the device count:**",
        "#### The driver loop alone",
    ],
    "bench_limit": [
        "## Against the limit (bench_limit)",
        "**Limit**",
        "**Sweep phase / limit**",
        "busy per worker (Σ of its trials' `started_at` → `finished_at`)",
        "worker time between trials (workers × phase − Σ busy)",
        "command start → first trial started",
        "Compiles vs distinct (worker, graph) pairs",
        "### Where the start-up goes (demo)",
    ],
    "bench_startup": [
        "## Start-up by part, against Ray's own start (bench_startup)",
        "(the issue's yardstick) |",
        "**ampsweep's share beyond Ray's start and shutdown**",
        "| the workload check ran on the driver's main thread after `ray.init`, while the actor started |",
    ],
    "bench_watch": [
        "## Watch: cost on a healthy run, and NaN to spec (bench_watch)",
        "without Watch (**baseline**)",
        "**With / without Watch, `model.train` wall:",
        "**Watch's own time per step:",
        "**NaN to spec:",
    ],
    "bench_tensorboard": [
        "## TensorBoard: export, and the live export's cost to the driver (bench_tensorboard)",
        "| **first export** |",
        "| runs in LOGDIR | 20 |",
        "| steps of the first run, read back by TensorBoard's `EventAccumulator` | 50 |",
        "**With / without the live export:**",
    ],
    "bench_vs_tune": [
        "## Against Ray Tune (bench_vs_tune)",
        "End-to-end wall time",
        "**Bytes per 1000 rows**",
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


def _selected(session: pytest.Session) -> set[str]:
    """The benchmarks whose section test this session runs: ``-k limit`` starts bench_limit only."""
    return {
        item.callspec.params["name"]
        for item in session.items
        if item.originalname == "test_benchmark_produces_its_section" and hasattr(item, "callspec")
    }


@pytest.fixture(scope="module")
def sections(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> dict[str, Future]:
    out_dir = tmp_path_factory.mktemp("bench-sections")
    wanted = _selected(request.session)
    pool = ThreadPoolExecutor(max_workers=3)
    # the slowest first, so the pool's tail is short
    order = [
        "bench_vs_tune",
        "bench_late",
        "bench_horizon",
        "bench_limit",
        "bench_launcher",
        "bench_startup",
        "bench_capture",
        "bench_compiles",
        "bench_launch",
        "bench_localize",
        "bench_faults",
        "bench_forecast",
        "bench_watch",
        "bench_analysis",
        "bench_tensorboard",
        "bench_gang",
    ]
    futures = {
        name: pool.submit(_run_tiny, name, out_dir)
        for name in order
        if name not in SKIPPED and name in wanted
    }
    yield futures
    pool.shutdown(wait=True)


def test_every_benchmark_is_covered() -> None:
    from benchmarks.__main__ import discover

    assert set(discover()) == set(EXPECTED)


@pytest.mark.slow
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


def test_markdown_tables_become_json_figures_under_their_headings() -> None:
    """The runner's ``results/<name>.json`` for a module that writes none: its section's tables."""
    from benchmarks.__main__ import markdown_tables, section_figures

    body = "\n".join(
        [
            "## Against something (bench_x)",
            "",
            "| | value |",
            "|---|---:|",
            "| Trials, steps run | 144, 36,634 |",
            "| **Limit** | **65.0 s** |",
            "| plain | 12.5 |",
            "| count | 1,234 |",
            "| negative | -3 |",
            "| `a \\| b` | 2e-3 |",
            "",
            "### Where it goes",
            "",
            "```",
            "## not a heading",
            "| not | a table |",
            "|---|---|",
            "```",
            "",
            "| part | s |",
            "|---|---:|",
            "| import | 0.3 |",
            "#### deeper headings do not count",
            "",
            "| k | n |",
            "|:--|--:|",
            "| x | 7 |",
        ]
    )
    tables = markdown_tables(body)
    assert [t["heading"] for t in tables] == ["Against something (bench_x)", "Where it goes", "Where it goes"]
    assert tables[0]["columns"] == ["", "value"]
    assert tables[0]["rows"] == [
        ["Trials, steps run", "144, 36,634"],  # not one plain number: kept as written
        ["**Limit**", "**65.0 s**"],
        ["plain", 12.5],
        ["count", 1234],
        ["negative", -3],
        ["`a | b`", 0.002],  # an escaped pipe stays inside its cell
    ]
    assert tables[1] == {"heading": "Where it goes", "columns": ["part", "s"], "rows": [["import", 0.3]]}
    assert tables[2]["rows"] == [["x", 7]]
    figures = section_figures("bench_x", body, "2026-12-04 10:00 UTC", "1.2")
    assert figures == {
        "name": "bench_x",
        "measured_at": "2026-12-04 10:00 UTC",
        "load_average": "1.2",
        "tables": tables,
    }
    assert json.loads(json.dumps(figures)) == figures


def test_a_trials_span_is_its_workers_stamps_and_busy_time_sums_them() -> None:
    """Sweep phase and busy time come from ``started_at``/``finished_at``; ``wall_s`` only where no start."""
    import pandas as pd

    from benchmarks._common import CliRun, trial_spans

    at = pd.Timestamp("2026-12-04 10:00:00", tz="UTC")
    trials = pd.DataFrame(
        {
            "worker_index": [0, 0, 1, None],
            "started_at": [at, at + pd.Timedelta(seconds=5), at + pd.Timedelta(seconds=1), pd.NaT],
            "finished_at": [at + pd.Timedelta(seconds=s) for s in (4, 8.5, 9, 12)],
            # wall_s is training only: shorter than the span (localization, workload build)
            "wall_s": [3.0, 2.0, 6.0, 1.5],
        }
    )
    run = CliRun(
        wall_s=20.0, started_at=at.timestamp() - 2, ended_at=0.0, root=Path("."), trials=trials, steps_rows=0
    )
    assert list(trial_spans(trials)) == [4.0, 3.5, 8.0, 1.5]
    assert run.first_start == at.timestamp()
    assert run.last_end == at.timestamp() + 12
    assert run.worker_busy_s == {0: 7.5, 1: 8.0}  # the driver-made failure has no worker


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
