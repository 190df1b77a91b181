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
* steady state, from each worker's consecutive ``finished_at`` stamps: the gap
  between one trial's end and the next one's end, minus the next trial's own
  ``wall_s``. It is what each further trial costs once the actors are up.

The yardstick is one training step of ``seed_repro`` (O2, ``CustomNorm`` in
FP32), measured the way the sweep measures it: by a 200-step trial of the same
launcher on one worker, median of its ``steps.step_ms``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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
    """Per worker: end-to-end gap between consecutive trials minus the later trial's wall_s."""
    gaps: list[float] = []
    for _, group in trials.sort_values("finished_at").groupby("worker_index"):
        ends = [stamp.timestamp() for stamp in group["finished_at"]]  # ms-resolution stamps
        walls = group["wall_s"].to_numpy()
        gaps += [float(ends[i] - ends[i - 1] - walls[i]) for i in range(1, len(ends))]
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
            "**Launcher cost per trial, steady state** (median gap between a worker's trials − wall_s)",
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

SCALE_NODES = 4
SCALE_PER_NODE = (4, 16)  # 16 and 64 fake NPUs on SCALE_NODES nodes
SCALE_TRIALS = 1500
PROJECT_DEVICES = 1000


def _actor_class_users() -> list[Any]:
    """The driver modules that create actors from ``jobs.TrialWorker`` (found, not named)."""
    import importlib
    import pkgutil

    from ampsweep import sweep
    from ampsweep.jobs import TrialWorker

    users = []
    for info in pkgutil.iter_modules(sweep.__path__):
        if info.name.startswith("__") or info.name == "cli":  # __main__ would run the CLI
            continue
        module = importlib.import_module(f"ampsweep.sweep.{info.name}")
        if getattr(module, "TrialWorker", None) is TrialWorker:
            users.append(module)
    if not users:
        raise RuntimeError("no sweep module creates actors from jobs.TrialWorker; update _actor_class_users")
    return users


def _dispatch_rate(nodes: int, per_node: int, trials: int, tmp: str) -> dict[str, float]:
    """Sustained trials/s of the real launcher on ``nodes`` × ``per_node`` fake NPUs with no-op actors.

    The launcher is the real one; only the actor class is replaced (``_noop_actor``:
    same constructor and ``run`` arguments, no MindSpore, an immediate one-step
    result), because 64 MindSpore processes on a 2-core machine would measure the
    machine. Commit times are recorded in the driver around ``SweepStore.commit``.
    """
    import ray
    from ray.cluster_utils import Cluster

    from ampsweep.jobs import TrialWorker as real_worker
    from ampsweep.sweep import SweepStore

    from ._noop_actor import NoopTrialWorker

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"NPU": per_node}})
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=1, resources={"NPU": per_node})
    cluster.wait_for_nodes()
    stamps: list[float] = []
    original_commit = SweepStore.commit
    patched = _actor_class_users()

    def timed_commit(self: Any, *args: Any, **kwargs: Any) -> Any:
        done = original_commit(self, *args, **kwargs)
        stamps.append(time.perf_counter())
        return done

    try:
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        devices = int(ray.cluster_resources().get("NPU", 0))
        SweepStore.commit = timed_commit
        for module in patched:
            module.TrialWorker = NoopTrialWorker
        raw = {
            "name": f"bench-dispatch-{devices}",
            "workload": f"{NOOP}:make",
            "steps": 1,
            "grid": {"amp_level": ["O0"], "clip": [None], "seed": list(range(trials))},
            "devices": "ascend",
        }
        wall, result = _sweep(raw, tmp, workers=None, devices="ascend")
    finally:
        SweepStore.commit = original_commit
        for module in patched:
            module.TrialWorker = real_worker
        ray.shutdown()
        cluster.shutdown()
    if result.ran != trials or len(stamps) != trials:
        raise RuntimeError(f"dispatch sweep ran {result.ran} of {trials} trials ({result.outcomes})")
    # steady state: after every actor has answered twice (actor start-up is not dispatch)
    warm = min(2 * devices, trials // 2)
    window = stamps[-1] - stamps[warm]
    rate = (len(stamps) - 1 - warm) / window if window > 0 else float("nan")
    return {
        "nodes": nodes,
        "devices": devices,
        "trials": trials,
        "wall_s": wall,
        "warm_s": stamps[warm] - (stamps[0] - (stamps[1] - stamps[0])),
        "rate": rate,
        "per_trial_ms": 1000.0 / rate,
    }


def run_scale(tiny: bool = False) -> str:
    per_nodes = (1, 2) if tiny else SCALE_PER_NODE
    nodes = 2 if tiny else SCALE_NODES
    trials = 40 if tiny else SCALE_TRIALS
    points = []
    with tempfile.TemporaryDirectory(prefix="ampsweep-bench-dispatch-") as tmp:
        for per_node in per_nodes:
            _log(f"dispatch: {trials} no-op trials on {nodes} nodes x {per_node} fake NPUs")
            points.append(_dispatch_rate(nodes, per_node, trials, tmp))
    small, big = points[0], points[-1]
    # per-trial driver time grows with the number of devices (ray.wait over every in-flight
    # ref, the graph-affinity scan): a straight line through the two measured points
    slope = (big["per_trial_ms"] - small["per_trial_ms"]) / max(big["devices"] - small["devices"], 1)
    latency_bound = slope < 0  # more devices, more trials/s: the small cluster did not saturate the driver
    slope = max(slope, 0.0)
    at_1000 = big["per_trial_ms"] + slope * (PROJECT_DEVICES - big["devices"])
    busy_s = PROJECT_DEVICES * at_1000 / 1000.0  # shortest trial that keeps 1000 devices fed
    table = [
        "| nodes × fake NPUs | devices | no-op trials | wall s (incl. actor start) | sustained trials/s | driver ms per trial |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for p in points:
        table.append(
            f"| {p['nodes']} × {p['devices'] // p['nodes']} | {p['devices']} | {p['trials']} | "
            f"{p['wall_s']:.1f} | **{p['rate']:.0f}** | {p['per_trial_ms']:.1f} |"
        )
    examples = []
    for label, trial_s in (
        ("a 300-step seed_repro trial (~2 s)", 2.0),
        ("a 300-step resnet18 trial at 1.3 s/step (~390 s)", 390.0),
    ):
        share = busy_s / trial_s
        examples.append(
            f"{label}: the driver would need {share * 100:.0f} % of its time to keep 1,000 devices fed"
            + (" — it cannot; the devices would wait on it" if share > 1 else "")
        )
    lines = [
        "### Dispatch at scale (simulated cluster)",
        "",
        ("_Tiny smoke-test size: the figures mean nothing._\n\n" if tiny else "")
        + "The real launcher (`sweep.Sweep(...).run`, devices `ascend`) on a `ray.cluster_utils.Cluster` "
        f"of {nodes} nodes with fake `NPU` resources, one actor per fake device. The actors are "
        "`benchmarks/_noop_actor.py`: `TrialWorker`'s constructor and `run` arguments, no MindSpore, an "
        "immediate one-step `completed` result, so everything measured is the launcher's: dispatch, "
        "`ray.wait`/`ray.get`, the driver's Parquet commit of three files per trial. Sustained rate: "
        "commits after every actor has answered twice, over the time they took (driver-side stamps "
        "around `SweepStore.commit`). All of it shares this machine's 2 cores with the actor processes.",
        "",
        *table,
        "",
        f"**Projection to {PROJECT_DEVICES:,} devices**: driver time per trial rises "
        f"{slope * 1000:.1f} µs per extra device between the two points (one `ray.wait` over every "
        "in-flight trial and the graph-affinity scan of the queue per dispatch), so a straight line "
        f"gives ≈ {at_1000:.1f} ms per trial at {PROJECT_DEVICES:,} devices, "
        f"≈ {1000.0 / at_1000:.0f} trials/s. One driver keeps {PROJECT_DEVICES:,} devices busy only if "
        f"trials last at least ≈ {busy_s:.1f} s; " + "; ".join(examples) + ". The launcher's overhead "
        f"per trial at that scale is then {at_1000:.1f} ms of driver time, "
        f"{at_1000 / 390_000 * 100:.3f} % of a 390 s trial.",
        "",
    ]
    if latency_bound:
        lines += [
            f"The rate rose from {small['devices']} to {big['devices']} devices, so the smaller cluster was "
            "bound by each actor's round trip, not by the driver; the projection then assumes no growth "
            f"with devices beyond {big['devices']} and is a lower bound on the driver's cost.",
            "",
        ]
    return "\n".join(lines)
