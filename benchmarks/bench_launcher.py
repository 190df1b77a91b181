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


def _sweep(raw: dict[str, Any], out: str, workers: int) -> tuple[float, Any]:
    """Run one sweep through the real launcher; returns its wall time and result."""
    import yaml

    from jobs import resolve_reference
    from sweep._launcher import run_sweep
    from sweep._spec import parse_spec

    spec = parse_spec(raw)
    reference = resolve_reference(spec.workload)
    started = time.perf_counter()
    result = run_sweep(
        spec,
        yaml.safe_dump(raw, sort_keys=False),
        reference,
        out,
        workers=workers,
        devices="cpu",
        progress=False,
    )
    return time.perf_counter() - started, result


def _steady_gaps(trials: Any) -> list[float]:
    """Per worker: end-to-end gap between consecutive trials minus the later trial's wall_s."""
    gaps: list[float] = []
    for _, group in trials.sort_values("finished_at").groupby("worker_index"):
        ends = [stamp.timestamp() for stamp in group["finished_at"]]  # ms-resolution stamps
        walls = group["wall_s"].to_numpy()
        gaps += [float(ends[i] - ends[i - 1] - walls[i]) for i in range(1, len(ends))]
    return gaps


def _reference_step_ms(out: str) -> tuple[float, float]:
    """Median ms per step of seed_repro under the launcher, and that trial's wall_s."""
    import pandas as pd

    raw = {
        "name": "bench-seed-repro-step",
        "workload": "jobs.workloads.seed_repro:make",
        "steps": REFERENCE_STEPS,
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


def run() -> str:
    """Run both sweeps on a private local Ray and return the Markdown section."""
    import pandas as pd
    import ray

    from sweep._launcher import start_ray

    with tempfile.TemporaryDirectory(prefix="ampsweep-bench-launcher-") as out:
        started = time.perf_counter()
        start_ray(None, WORKERS)
        ray_s = time.perf_counter() - started
        try:
            _log(f"{TRIALS} no-op trials on {WORKERS} CPU workers")
            raw = {
                "name": "bench-launcher",
                "workload": f"{NOOP}:make",
                "steps": 1,
                "grid": {"amp_level": ["O0"], "clip": [None], "seed": list(range(TRIALS))},
                "devices": "cpu",
            }
            sweep_s, result = _sweep(raw, out, workers=WORKERS)
            trials = pd.read_parquet(Path(result.root) / "trials")
            _log(f"reference: one {REFERENCE_STEPS}-step seed_repro trial on 1 worker")
            step_ms, reference_wall_s = _reference_step_ms(out)
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
            f"seed_repro step (O2, CustomNorm FP32), median of a {REFERENCE_STEPS}-step trial",
            f"{step_ms:.2f} ms",
            "1",
        ),
    ]
    table = ["| | value | in seed_repro steps |", "|---|---:|---:|"]
    table += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    lines = [
        "## Launcher cost per trial (bench_launcher)",
        "",
        f"`sweep.run_sweep` on a private local Ray, {TRIALS} trials of `benchmarks/noop_workload.py` "
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
