"""The launcher's own cost per trial, next to the cost of one real training step.

A sweep of trials that do almost nothing (``noop_workload``: one step of a
two-weight model) runs through the real ``sweep.run_sweep`` on a private
local Ray with two CPU workers. Every trial reports how long it took on its
worker (``wall_s``); whatever a worker slot spends beyond that is the
launcher's: handing the trial to the actor, shipping the Arrow tables back,
the driver's Parquet commit, the next dispatch, and, once per worker, the
actor's start (Python, MindSpore import, device setup).

Two figures come out, because they answer different questions:

* amortized, ``(workers × sweep wall − Σ wall_s) / trials``: worker time per
  trial that is not training, start-up included, for a sweep of this size;
* steady state, from each worker's own ``started_at``/``finished_at`` stamps: the
  time between one trial's end and the next one's start on the same worker. It
  is what each further trial costs once the actors are up.

The yardstick is one training step of ``seed_repro`` (O2, ``CustomNorm`` in
FP32), measured the way the sweep measures it: by a 200-step trial of the same
launcher on one worker, median of its ``steps.step_ms``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ._common import verdict
from ._machine import load_average, now_utc

TRIALS = 40
WORKERS = 2
REFERENCE_STEPS = 200
NOOP = Path(__file__).resolve().with_name("noop_workload.py")


def _log(message: str) -> None:
    print(f"[bench_launcher] {message}", file=sys.stderr, flush=True)


def _sweep(raw: dict[str, Any], out: str, workers: int | None, **run: Any) -> tuple[float, Any]:
    """Run one sweep through the public API (``sweep.Sweep(...).run``); its wall time and result."""
    from ampsweep.sweep import Sweep

    sweep = Sweep(raw)
    started = time.perf_counter()
    result = sweep.run(out, workers=workers, progress=False, **run)
    return time.perf_counter() - started, result


def _steady_gaps(trials: Any) -> list[float]:
    """Per worker: the time it waited between one trial's end and the next one's start (its own clock)."""
    gaps: list[float] = []
    for _, group in trials.sort_values("started_at").groupby("worker_index"):
        starts = [stamp.timestamp() for stamp in group["started_at"]]  # ms-resolution stamps
        ends = [stamp.timestamp() for stamp in group["finished_at"]]
        gaps += [float(starts[i] - ends[i - 1]) for i in range(1, len(starts))]
    return gaps


def _reference_step_ms(out: str, steps: int = REFERENCE_STEPS) -> tuple[float, float]:
    """Median ms per step of seed_repro under the launcher, and that trial's wall_s."""
    import pandas as pd

    raw = {
        "name": "bench-seed-repro-step",
        "workload": "ampsweep.jobs.workloads.seed_repro:make",
        "steps": steps,
        "grid": {"amp_level": ["O2"], "black_list": [["CustomNorm"]], "clip": [None], "seed": [0]},
        "devices": "cpu",
    }
    _, result = _sweep(raw, out, workers=1)
    steps = pd.read_parquet(Path(result.root) / "steps")
    trial = pd.read_parquet(Path(result.root) / "trials")
    if trial["outcome"].iloc[0] != "completed":
        raise RuntimeError(f"the reference seed_repro trial ended {trial['outcome'].iloc[0]!r}")
    step_ms = steps.sort_values("step")["step_ms"].to_numpy()[1:]  # step 0 holds the compile
    return float(statistics.median(step_ms)), float(trial["wall_s"].iloc[0])


def run(tiny: bool = False) -> str:
    """The per-trial cost on real workers, then dispatch at scale on a simulated cluster."""
    local = run_local(tiny)
    scale = run_scale(tiny)
    head = "## Launcher: cost per trial, and dispatch at scale (bench_launcher)\n\n"
    return head + local + "\n" + scale


def run_local(tiny: bool = False) -> str:
    """Run both sweeps on a private local Ray and return the Markdown section."""
    import pandas as pd
    import ray

    from ampsweep.sweep import start_ray

    trials_n = 6 if tiny else TRIALS
    reference_steps = 10 if tiny else REFERENCE_STEPS

    with tempfile.TemporaryDirectory(prefix="ampsweep-bench-launcher-") as out:
        started = time.perf_counter()
        start_ray(None, WORKERS)
        ray_s = time.perf_counter() - started
        try:
            _log(f"{trials_n} no-op trials on {WORKERS} CPU workers")
            raw = {
                "name": "bench-launcher",
                "workload": f"{NOOP}:make",
                "steps": 1,
                "grid": {"amp_level": ["O0"], "clip": [None], "seed": list(range(trials_n))},
                "devices": "cpu",
            }
            sweep_s, result = _sweep(raw, out, workers=WORKERS)
            trials = pd.read_parquet(Path(result.root) / "trials")
            _log(f"reference: one {reference_steps}-step seed_repro trial on 1 worker")
            step_ms, reference_wall_s = _reference_step_ms(out, reference_steps)
        finally:
            ray.shutdown()

    n = len(trials)
    outcomes = trials["outcome"].value_counts().to_dict()
    workers_used = trials["worker_index"].nunique()
    own_s = float(trials["wall_s"].sum())
    amortized = (WORKERS * sweep_s - own_s) / n
    with_ray = (WORKERS * (sweep_s + ray_s) - own_s) / n
    gaps = _steady_gaps(trials)
    steady = statistics.median(gaps)
    trial_ms = step_ms * 300

    def steps_of(seconds: float) -> str:
        return f"{seconds * 1000 / step_ms:,.0f}"

    rows = [
        ("Trials (outcomes)", f"{n} ({', '.join(f'{k} {v}' for k, v in sorted(outcomes.items()))})", ""),
        ("Workers (that ran trials)", f"{WORKERS} ({workers_used})", ""),
        ("`ray.init` (local, once per sweep)", f"{ray_s:.2f} s", ""),
        ("`run_sweep` wall time", f"{sweep_s:.2f} s", ""),
        ("Wall time per trial, `run_sweep` / trials", f"{sweep_s / n * 1000:.0f} ms", ""),
        ("Trials' own `wall_s`, mean (compile + 1 step)", f"{own_s / n * 1000:.0f} ms", ""),
        (
            "**Launcher cost per trial, amortized** (workers × wall − Σ wall_s) / trials",
            f"**{amortized * 1000:.0f} ms**",
            steps_of(amortized),
        ),
        ("… the same with `ray.init` counted", f"{with_ray * 1000:.0f} ms", steps_of(with_ray)),
        (
            "**Launcher cost per trial, steady state** (median wait between a worker's trials)",
            f"**{steady * 1000:.0f} ms** (range {min(gaps) * 1000:.0f} … {max(gaps) * 1000:.0f})",
            steps_of(steady),
        ),
        (
            f"seed_repro step (O2, CustomNorm FP32), median of a {reference_steps}-step trial",
            f"{step_ms:.2f} ms",
            "1",
        ),
    ]
    table = ["| | value | in seed_repro steps |", "|---|---:|---:|"]
    table += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    lines = [
        "### Launcher cost per trial on real CPU workers",
        "",
        f"`sweep.Sweep(...).run` on a private local Ray, {n} trials of `benchmarks/noop_workload.py` "
        f"(steps=1, a Dense(2, 1) model) on {WORKERS} CPU workers (each pinned to one core, one op "
        "thread). A trial's `wall_s` is measured on the worker around `run_trial`; everything else a "
        "worker slot spends is the launcher's (dispatch, result transfer, the driver's Parquet commit, "
        "actor start-up).",
        "",
        *table,
        "",
        f"Reading: once the actors are up, each further trial costs the launcher about "
        f"{steady * 1000:.0f} ms of worker time, the time of {steps_of(steady)} seed_repro steps; with "
        f"the actors' start spread over this {n}-trial sweep it is {amortized * 1000:.0f} ms "
        f"({steps_of(amortized)} steps). Against a 300-step seed_repro trial "
        f"(≈ {trial_ms / 1000:.1f} s of steps, plus its compile; the 200-step reference trial took "
        f"{reference_wall_s:.1f} s in all) that is {steady * 1000 / trial_ms * 100:.1f} % steady-state "
        f"and {amortized * 1000 / trial_ms * 100:.1f} % amortized.",
        "",
    ]
    return "\n".join(lines)


# --- dispatch at scale: a simulated cluster of fake devices --------------------------------------

SCALE_POINTS = ((2, 8), (2, 32), (2, 64))  # nodes x fake NPUs: 16, 64 and 128 devices
SCALE_TRIALS = 1500
#: runs of each point, interleaved (16, 64, 128, 16, ...); the least disturbed one is reported
SCALE_REPEATS = 2
#: simulated devices for the driver loop alone, and trials beyond the first wave at each
LOOP_DEVICES = (1_000, 10_000)
LOOP_EXTRA_TRIALS = 8_000
FLAT_WITHIN = 1.5  # the bound: ms per trial at the most devices / at the fewest
LOOP_TARGET_PER_S = 100.0
RESULTS_JSON = Path(__file__).resolve().parent / "results" / "bench_launcher.json"


def _actor_class_users() -> list[Any]:
    """The driver modules that create actors from ``jobs.TrialWorker`` (found, not named)."""
    import importlib
    import pkgutil

    from ampsweep import sweep
    from ampsweep.jobs import TrialWorker

    users = []
    for info in pkgutil.walk_packages(sweep.__path__, "ampsweep.sweep."):
        leaf = info.name.rsplit(".", 1)[-1]
        if leaf.startswith("__") or leaf == "cli":  # __main__ would run the CLI
            continue
        module = importlib.import_module(info.name)
        if getattr(module, "TrialWorker", None) is TrialWorker:
            users.append(module)
    if not users:
        raise RuntimeError("no sweep module creates actors from jobs.TrialWorker; update _actor_class_users")
    return users


class _CommitClock:
    """Stamps each commit with the wall clock, the driver process's CPU time, and ``not_driver()``:
    seconds so far that ran in the driver's process but were not the driver's work (the
    in-process stand-in being the actors), taken off both figures."""

    def __init__(self, not_driver: Any = lambda: 0.0) -> None:
        self.not_driver = not_driver
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.thread: list[float] = []  # the driver loop's own thread (commits run on it)
        self.other: list[float] = []
        self.machine: list[tuple[int, int]] = []

    def wrap(self, commit: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            done = commit(*args, **kwargs)
            self.wall.append(time.perf_counter())
            self.cpu.append(time.process_time())
            self.thread.append(time.thread_time())
            self.other.append(self.not_driver())
            self.machine.append(_machine_ticks())
            return done

        return timed

    def sustained(self, warm: int) -> dict[str, float]:
        """Rate and cost per trial from commit ``warm`` to the last (start-up is not dispatch)."""
        n = len(self.wall) - 1 - warm
        deducted_s = self.other[-1] - self.other[warm]
        wall = self.wall[-1] - self.wall[warm] - deducted_s
        cpu = self.cpu[-1] - self.cpu[warm] - deducted_s
        thread = self.thread[-1] - self.thread[warm] - deducted_s
        (busy_0, all_0), (busy_1, all_1) = self.machine[warm], self.machine[-1]
        return {
            "trials_per_s": n / wall,
            "wall_ms_per_trial": 1000.0 * wall / n,
            "driver_ms_per_trial": 1000.0 * cpu / n,
            "driver_loop_thread_ms_per_trial": 1000.0 * thread / n,
            "machine_busy": (busy_1 - busy_0) / max(all_1 - all_0, 1),
        }


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine so far (``/proc/stat``; zeros elsewhere)."""
    try:
        with open("/proc/stat") as stat:
            ticks = [int(v) for v in stat.readline().split()[1:]]
    except OSError:
        return 0, 0
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


def _dispatch_rate(nodes: int, per_node: int, trials: int, tmp: str) -> dict[str, Any]:
    """Sustained trials/s of the real launcher on ``nodes`` × ``per_node`` fake NPUs with no-op actors.

    The launcher is the real one; only the actor class is replaced (``_noop_actor``:
    same constructor and ``run`` arguments, no MindSpore, an immediate one-step
    result), because 128 MindSpore processes on a 2-core machine would measure the
    machine. Commit times are recorded in the driver around ``SweepStore.commit``.

    Every actor holds its first trial until all of them have started (the
    barrier folder). Starting 128 actor processes takes this machine a minute
    or more; without the barrier the first actors up ran most of the trials
    while the rest were still starting, and the "sustained" figures measured
    that start-up (the driver's CPU per trial at 128 devices came out 1.2× to
    2× its value at 16 from run to run).
    """
    import ray
    from ray.cluster_utils import Cluster

    from ampsweep.jobs import TrialWorker as real_worker
    from ampsweep.sweep import SweepStore

    from ._noop_actor import BARRIER_ENV, NoopTrialWorker

    barrier = Path(tempfile.mkdtemp(prefix="started-", dir=tmp))
    os.environ[BARRIER_ENV] = f"{barrier}:{nodes * per_node}"  # the cluster's processes inherit it
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"NPU": per_node}})
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=1, resources={"NPU": per_node})
    cluster.wait_for_nodes()
    clock = _CommitClock()
    original_commit = SweepStore.commit
    patched = _actor_class_users()
    try:
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        devices = int(ray.cluster_resources().get("NPU", 0))
        SweepStore.commit = clock.wrap(original_commit)
        for module in patched:
            module.TrialWorker = NoopTrialWorker
        raw = {
            "name": f"bench-dispatch-{devices}",
            "workload": f"{NOOP}:make",
            "steps": 1,
            "grid": {"amp_level": ["O0"], "clip": [None], "seed": list(range(trials))},
            "devices": "ascend",
        }
        out = tempfile.mkdtemp(prefix="out-", dir=tmp)  # a second run of a point must not resume the first
        wall, result = _sweep(raw, out, workers=None, devices="ascend")
    finally:
        SweepStore.commit = original_commit
        for module in patched:
            module.TrialWorker = real_worker
        ray.shutdown()
        cluster.shutdown()
        os.environ.pop(BARRIER_ENV, None)
    if result.ran != trials or len(clock.wall) != trials:
        raise RuntimeError(f"dispatch sweep ran {result.ran} of {trials} trials ({result.outcomes})")
    # steady state: after the first two waves (every actor started before the first)
    warm = min(2 * devices, trials // 2)
    return {"nodes": nodes, "devices": devices, "trials": trials, "wall_s": wall, **clock.sustained(warm)}


def _driver_loop(devices: int, trials: int, tmp: str) -> dict[str, Any]:
    """The driver's own per-trial path on ``devices`` simulated devices, with no Ray at all.

    ``sweep.cluster._launcher.drive_trials`` (queue, dispatch, completions, baselines,
    the Parquet commit, the lock's heartbeat) runs against ``_standin``'s
    in-process actors, which answer every call at once; the time they spend
    being actors is deducted. FP32 and O2 trials alternate per seed, as in a
    real grid, so the baseline hints and both phases are exercised.
    """
    from ._standin import InProcessActors

    actors = InProcessActors()
    plan_size, ran, clock, wall = drive_noop_grid(
        f"bench-driver-loop-{devices}", devices, trials, tmp, actors
    )
    if ran != plan_size:
        raise RuntimeError(f"driver loop ran {ran} of {plan_size} trials")
    return {
        "devices": devices,
        "trials": plan_size,
        "wall_s": wall,
        "actor_standin_s": actors.actor_s,
        **clock.sustained(warm=devices),
    }


def drive_noop_grid(name: str, slots: int, trials: int, tmp: str, actors: Any) -> tuple[int, int, Any, float]:
    """``drive_trials`` over a grid of ``trials`` no-op trials on ``slots`` simulated Ascend slots served by
    ``actors`` (stand-ins with an ``actor_s`` clock); returns (trials planned, trials run, the commit
    clock, wall seconds). FP32 and O2 trials alternate per seed, as in a real grid."""
    from ampsweep.sweep import RunConfig, Sweep, SweepStore
    from ampsweep.sweep._result import SweepResult
    from ampsweep.sweep.cluster._launcher import drive_trials
    from ampsweep.sweep.cluster._pool import WorkerPool
    from ampsweep.sweep.devices import AscendBackend
    from ampsweep.sweep.store._lock import DriverLock

    from ._standin import QuietCluster

    raw = {
        "name": name,
        "workload": f"{NOOP}:make",
        "steps": 1,
        "grid": {"amp_level": ["O0", "O2"], "clip": [None], "seed": list(range(trials // 2))},
        "devices": "ascend",
    }
    plan = Sweep(raw).plan()
    store = SweepStore(tmp, plan.name)
    lock = DriverLock(store)
    lock.acquire()
    clock = _CommitClock(lambda: actors.actor_s)
    store.commit = clock.wrap(store.commit)  # type: ignore[method-assign]
    run = RunConfig(progress=False)
    pool = WorkerPool(run, backends=[AscendBackend()] * slots, actors=actors, watch=QuietCluster())
    result = SweepResult(root=store.root, total=len(plan), skipped=0, ran=0)
    started = time.perf_counter()
    try:
        drive_trials(plan, plan.workload_ref, store, plan.trials, pool, run, result, lock.beat)
    finally:
        lock.release()
    return len(plan), result.ran, clock, time.perf_counter() - started


def _least_disturbed(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of one point whose driver spent the least CPU per trial, with every run's figure.

    The machine is shared: another process's bursts only add to the driver's CPU
    time per trial (cold caches, time-slicing), never take from it, so the
    lesser figure is the closer one to the driver's own cost.
    """
    best = min(runs, key=lambda run: run["driver_ms_per_trial"])
    return {**best, "runs_driver_ms_per_trial": [run["driver_ms_per_trial"] for run in runs]}


def _flatness(points: list[dict[str, Any]], key: str) -> float:
    """ms per trial at the most devices over ms per trial at the fewest."""
    return points[-1][key] / points[0][key]


def run_scale(tiny: bool = False) -> str:
    scale_points = ((2, 1), (2, 2)) if tiny else SCALE_POINTS
    trials = 40 if tiny else SCALE_TRIALS
    loop_devices = (20, 50) if tiny else LOOP_DEVICES
    extra = 60 if tiny else LOOP_EXTRA_TRIALS
    loop = []
    with tempfile.TemporaryDirectory(prefix="ampsweep-bench-dispatch-") as tmp:
        runs: list[list[dict[str, Any]]] = [[] for _ in scale_points]
        for repeat in range(1 if tiny else SCALE_REPEATS):
            for point, (nodes, per_node) in enumerate(scale_points):
                _log(
                    f"dispatch, run {repeat + 1}: {trials} no-op trials on {nodes} nodes x {per_node} fake NPUs"
                )
                runs[point].append(_dispatch_rate(nodes, per_node, trials, tmp))
        dispatch = [_least_disturbed(point_runs) for point_runs in runs]
        for devices in loop_devices:
            n = 2 * devices + extra
            _log(f"driver loop: {n} trials on {devices:,} simulated devices, in-process stand-in for Ray")
            loop.append(_driver_loop(devices, n, tmp))
    flat_cpu = _flatness(dispatch, "driver_ms_per_trial")
    flat_thread = _flatness(dispatch, "driver_loop_thread_ms_per_trial")
    flat_wall = _flatness(dispatch, "wall_ms_per_trial")
    loop_rate = loop[-1]["trials_per_s"]
    if not tiny:
        keys = (
            "devices",
            "trials",
            "trials_per_s",
            "driver_ms_per_trial",
            "wall_ms_per_trial",
            "machine_busy",
        )
        figures = {
            "measured_at": now_utc(),
            "load_average": load_average(),
            "dispatch": [
                {
                    k: p[k]
                    for k in (
                        *keys,
                        "driver_loop_thread_ms_per_trial",
                        "nodes",
                        "wall_s",
                        "runs_driver_ms_per_trial",
                    )
                }
                for p in dispatch
            ],
            "driver_loop": [{k: p[k] for k in (*keys, "wall_s")} for p in loop],
            "dispatch_flatness": {
                "driver_ms": flat_cpu,
                "driver_loop_thread_ms": flat_thread,
                "wall_ms": flat_wall,
                "bound": FLAT_WITHIN,
            },
            "driver_loop_target_per_s": LOOP_TARGET_PER_S,
        }
        RESULTS_JSON.parent.mkdir(parents=True, exist_ok=True)
        RESULTS_JSON.write_text(json.dumps(figures, indent=2) + "\n")
    table = [
        "| nodes × fake NPUs | devices | no-op trials | wall s (incl. actor start) | sustained trials/s "
        "| wall ms per trial | **driver ms per trial** (driver CPU) | … every run | … of it on the driver "
        "loop's thread | machine CPUs busy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in dispatch:
        table.append(
            f"| {p['nodes']} × {p['devices'] // p['nodes']} | {p['devices']} | {p['trials']} | "
            f"{p['wall_s']:.1f} | {p['trials_per_s']:.0f} | {p['wall_ms_per_trial']:.2f} | "
            f"**{p['driver_ms_per_trial']:.2f}** | "
            f"{', '.join(f'{ms:.2f}' for ms in p['runs_driver_ms_per_trial'])} | "
            f"{p['driver_loop_thread_ms_per_trial']:.2f} | "
            f"{p['machine_busy']:.0%} |"
        )
    loop_table = [
        "| simulated devices | trials | wall s | **sustained trials/s** | wall ms per trial | driver CPU ms per trial |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for p in loop:
        loop_table.append(
            f"| {p['devices']:,} | {p['trials']:,} | {p['wall_s']:.1f} | **{p['trials_per_s']:.0f}** | "
            f"{p['wall_ms_per_trial']:.2f} | {p['driver_ms_per_trial']:.2f} |"
        )
    small, big = dispatch[0]["devices"], dispatch[-1]["devices"]
    lines = [
        "### Dispatch at scale (simulated cluster)",
        "",
        ("_Tiny smoke-test size: the figures mean nothing._\n\n" if tiny else "")
        + "The real launcher (`sweep.Sweep(...).run`, devices `ascend`) on a `ray.cluster_utils.Cluster` "
        "with fake `NPU` resources, one actor per fake device. The actors are `benchmarks/_noop_actor.py`: "
        "`TrialWorker`'s constructor and `run` arguments, no MindSpore, an immediate one-step `completed` "
        "result, so everything measured is the launcher's: dispatch, completions, result transfer, the "
        "driver's Parquet commit. Every actor holds its first trial until all of them have started, so no "
        "figure includes the start of the other actor processes. Sustained: the commits after the first "
        "two waves, over the time they took (driver-side stamps around `SweepStore.commit`); driver CPU "
        "is the driver process's CPU time over the same commits (Ray's threads in the driver included). "
        "All of it shares this machine's 2 cores with every actor process, raylet and GCS. Each point "
        f"ran {SCALE_REPEATS} times, interleaved with the others; the table shows the run whose driver "
        "spent the least CPU per trial (the machine's other load only adds to it), and every run's figure.",
        "",
        *table,
        "",
        f"**Flat in the device count:** the driver's ms per trial (its process's CPU time per committed "
        f"trial) at {big} devices / at {small}: **{flat_cpu:.2f}×** (bound ≤ {FLAT_WITHIN}×: "
        f"{verdict(flat_cpu <= FLAT_WITHIN)}); by wall clock {flat_wall:.2f}×"
        + (
            f" ({verdict(flat_wall <= FLAT_WITHIN)}; with the machine's CPUs "
            f"{dispatch[-1]['machine_busy']:.0%} busy at {big} devices, the wall rate there is what "
            f"{big} actor processes, their raylets and the driver leave each other on 2 cores)"
            if flat_wall > FLAT_WITHIN
            else ""
        )
        + f". The driver loop's own thread (dispatch, completions, the commit, Ray's task submission): "
        f"{flat_thread:.2f}× from {small} to {big} devices; the rest of the driver process's CPU ran on "
        "Ray's own threads in it. A finished call reaches the driver as a "
        "callback into a local queue (no `ray.wait` over every call in flight), the next trial comes from "
        "an index by phase and graph (no scan of the queue), and the lock's heartbeat is written at most "
        "once a second.",
        "",
        f"#### The driver loop alone, at {' and '.join(f'{d:,}' for d in loop_devices)} devices",
        "",
        "`sweep.cluster._launcher.drive_trials` (the driver's whole per-trial path: queue, dispatch, completions, "
        "FP32 baselines, the Parquet commit into a real folder, the lock's heartbeat) against "
        "`benchmarks/_standin.py`: one in-process object per simulated device that answers each call at "
        "once, with arguments and results pickled as Ray would; the stand-in's own time (being the actors) "
        "is deducted. Trials: O0 and O2 per seed; sustained over the commits after every device's first.",
        "",
        *loop_table,
        "",
        f"**At {loop[-1]['devices']:,} devices the driver sustains {loop_rate:.0f} trials/s** (target ≥ "
        f"{LOOP_TARGET_PER_S:.0f}: {verdict(loop_rate >= LOOP_TARGET_PER_S)}): one driver keeps "
        f"{loop[-1]['devices']:,} devices fed as long as trials last at least "
        f"{loop[-1]['devices'] / loop_rate:.0f} s. Most of a trial's driver time is its Parquet commit "
        "(two to four small files written and renamed into place).",
        "",
    ]
    return "\n".join(lines)
