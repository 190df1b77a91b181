"""Synchronous against asynchronous op launch, on one pinned CPU core: what a CPU worker pays either way.

A CPU actor is pinned to one core with one MindSpore op thread
(``sweep.devices.device_setup``). MindSpore launches ops asynchronously by
default: the Python thread queues each op for a launch thread. On one core
there is nothing for that hand-over to overlap with, and every op (PyNative)
or graph (compiled) pays a thread switch; ``mindspore.runtime.launch_blocking``
runs each op in the calling thread instead. ``launch_blocking`` is process-wide
and one-way, so each mode runs in child processes of its own, pinned to the
same core, alternating (async, sync, async, sync) so that a drift of this
shared machine's speed hits both alike.

Each child times, on ``seed_repro`` (the demo's workload):

* a **compiled trial**: 300 steps of O2 with ``CustomNorm`` black-listed, the
  graph already compiled (``run_trial`` on a ``GraphCache``), median of 5;
* a **PyNative step**, plain and with localization's hooks on every Cell
  (``jobs.localization._hooks.CellProbe``), median of 10 each;
* **localizing** the diverged O2 trial without a black list (seed 0, both
  loss placements): ``diagnose`` on the worker's compiled graphs, as an actor
  runs it, median of 3 per placement.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ._common import ROOT, child_env, log

NAME = "bench_launch"
WORKLOAD = "ampsweep.jobs.workloads.seed_repro:make"
MODES = ("async", "sync")
_SAME = ("cell", "phase", "replay_step")


def _median_s(work: Any, times: int) -> float:
    spans = []
    for _ in range(times):
        started = time.perf_counter()
        work()
        spans.append(time.perf_counter() - started)
    return statistics.median(spans)


def child(mode: str, tiny: bool) -> dict[str, Any]:
    """The figures of one process launching ops ``mode``-ly (the child's body)."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
    import dataclasses

    import mindspore as ms

    from ampsweep.sweep.devices import CpuBackend, device_setup

    worker = device_setup(CpuBackend(), 0, None)  # a CPU worker's setup, launch mode as asked
    dataclasses.replace(worker, launch_blocking=mode == "sync").configure_mindspore()
    from ampsweep.jobs import TrialConfig
    from ampsweep.jobs.localization._hooks import CellProbe
    from ampsweep.jobs.localization._replay import Replay
    from ampsweep.jobs.training._step import GraphCache
    from ampsweep.jobs.training._trainer import run_trial

    steps = 30 if tiny else 300
    common = {
        "workload": WORKLOAD,
        "steps": steps,
        "abort_after": 10,
        "loss_scale": "none",
        "dtype": "float16",
    }
    graphs = GraphCache()
    healthy = TrialConfig(amp_level="O2", black_list=("CustomNorm",), clip=None, seed=0, **common)
    run_trial(healthy, WORKLOAD, None, graphs)  # compiles
    figures: dict[str, Any] = {
        "trial_s": _median_s(lambda: run_trial(healthy, WORKLOAD, None, graphs), 2 if tiny else 5)
    }

    previous = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    replay = Replay(healthy, WORKLOAD, steps)
    batches = iter(list(replay.batches))
    times = 3 if tiny else 10
    replay.step(next(batches))
    figures["pynative_step_s"] = _median_s(lambda: replay.step(next(batches)), times)
    probe = replay.attach(CellProbe(backward=True))

    def hooked() -> None:
        probe.start()
        replay.step(next(batches))
        probe.stop()

    figures["hooked_step_s"] = _median_s(hooked, times)
    replay.close()
    ms.set_context(mode=previous)

    localized: dict[str, Any] = {}
    for placement in ("outside", "inside"):
        localized[placement] = _localize_one(placement, common, graphs, 1 if tiny else 3)
    figures["localize"] = localized
    return figures


def _localize_one(placement: str, common: dict[str, Any], graphs: Any, times: int) -> dict[str, Any]:
    """Median seconds of ``diagnose`` on the diverged O2 trial without a black list, and what it found."""
    from ampsweep.jobs import TrialConfig
    from ampsweep.jobs.localization._diagnose import diagnose
    from ampsweep.jobs.training._trainer import run_trial

    fp32 = TrialConfig(amp_level="O0", black_list=(), clip=None, seed=0, loss_placement=placement, **common)
    run_trial(fp32, WORKLOAD, None, graphs)  # the FP32 twin's graph, as the sweep's worker holds it
    broken = TrialConfig(amp_level="O2", black_list=(), clip=None, seed=0, loss_placement=placement, **common)
    result = run_trial(broken, WORKLOAD, None, graphs)
    rows: list[dict[str, Any]] = []
    spent = _median_s(lambda: rows.extend(diagnose(result, WORKLOAD, None, graphs).to_pylist()), times)
    row = rows[-1] if rows else {}
    return {"s": spent, **{key: row.get(key) for key in _SAME}}


def _one(mode: str, tiny: bool, out: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.bench_launch", "--child", mode, str(out)]
    if tiny:
        command.append("--tiny")
    done = subprocess.run(command, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"bench_launch child ({mode}) failed:\n" + done.stderr[-2000:])
    return json.loads(out.read_text())


def run(tiny: bool = False) -> str:
    rounds = 1 if tiny else 2
    seen: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="ampsweep-bench-launch-") as tmp:
        for index in range(rounds):
            for mode in MODES:
                log(NAME, f"round {index + 1}: {mode} launch")
                seen[mode].append(_one(mode, tiny, Path(tmp) / f"{mode}-{index}.json"))

    def med(mode: str, pick: Any) -> float:
        return statistics.median(pick(f) for f in seen[mode])

    rows = [
        ("Compiled trial, 300 steps (graph held)", lambda f: f["trial_s"], "s"),
        ("PyNative step", lambda f: f["pynative_step_s"], "ms"),
        ("PyNative step with hooks on every Cell", lambda f: f["hooked_step_s"], "ms"),
        (
            "Localizing the diverged trial, `loss_placement: outside`",
            lambda f: f["localize"]["outside"]["s"],
            "s",
        ),
        (
            "Localizing the diverged trial, `loss_placement: inside`",
            lambda f: f["localize"]["inside"]["s"],
            "s",
        ),
    ]
    table = [
        "| | asynchronous (default) | synchronous (`launch_blocking`) | sync / async |",
        "|---|---:|---:|---:|",
    ]
    for label, pick, unit in rows:
        scale = 1000.0 if unit == "ms" else 1.0
        a, s = med("async", pick) * scale, med("sync", pick) * scale
        table.append(f"| {label} | {a:.2f} {unit} | {s:.2f} {unit} | {s / a:.2f}× |")
    same = all(
        f["localize"][p][k] == seen["async"][0]["localize"][p][k]
        for mode in MODES
        for f in seen[mode]
        for p in ("outside", "inside")
        for k in _SAME
    )
    culprits = ", ".join(
        f"{p}: `{seen['sync'][0]['localize'][p]['cell']}` ({seen['sync'][0]['localize'][p]['phase']}, "
        f"step {seen['sync'][0]['localize'][p]['replay_step']})"
        for p in ("outside", "inside")
    )
    lines = [
        "## Op launch on one CPU core: synchronous against asynchronous (bench_launch)",
        "",
        ("_Tiny smoke-test size: the figures mean nothing._ " if tiny else "")
        + f"`{WORKLOAD}`, one process per mode and round, pinned to one core with one op thread as a CPU "
        f"worker is, {rounds} round(s) alternating the two modes; each figure is the median over rounds of "
        "each process's median (compiled trial: 5 runs; PyNative steps: 10; localization: 3 per placement, "
        "`diagnose` on the process's compiled graphs as an actor runs it).",
        "",
        *table,
        "",
        f"Same culprit, phase and replay step in every process: {'yes' if same else '**no**'} ({culprits}).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "--child":
        Path(sys.argv[3]).write_text(json.dumps(child(sys.argv[2], tiny="--tiny" in sys.argv)))
    else:
        print(run(tiny="--tiny" in sys.argv))
