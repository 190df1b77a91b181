"""TensorBoard: a large sweep exported whole, and what exporting while a sweep runs costs the driver.

Targets (issue 55): ``ampsweep export SWEEP --tensorboard LOGDIR`` on 1,000 trials × 1,000 steps takes at
most ``TARGET_S`` seconds on 2 cores; ``ampsweep run --tensorboard`` adds nothing measurable to the
driver's dispatch cost per trial.

Export: ``bench_analysis``'s synthetic sweep (laid out as the store writes it), exported by the command
in a fresh process (imports included), then once more (nothing new: it must write nothing), and one trial
read back with TensorBoard's own reader.

Live: ``bench_launcher``'s driver loop (``drive_trials``, the real queue, dispatch, Parquet commit and
heartbeat, on in-process stand-ins for the actors) over a grid of no-op trials, run by run with and
without the exporter following the folder (``sweep._tensorboard.exporting``), in alternating order. The
driver's CPU per trial is its own process's; the exporter is a process of its own, so its cost to the
driver is whatever it takes from the machine, which the wall time per trial shows.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from ._common import ampsweep_command, child_env, log, verdict

TARGET_S = 120.0
TRIALS, STEPS = 1_000, 1_000
#: the live comparison: runs of each kind, simulated devices, no-op trials per run
PAIRS, DEVICES, LIVE_TRIALS = 4, 100, 3_000


def _export(sweep: Path, logdir: Path) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(
        [*ampsweep_command(), "export", str(sweep), "--tensorboard", str(logdir)],
        capture_output=True,
        text=True,
        env=child_env(),
        check=True,
    )
    return time.perf_counter() - started, done.stdout.strip()


def export_case(tmp: Path, trials: int, steps: int) -> dict[str, Any]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from .bench_analysis import write_sweep

    sweep, logdir = tmp / "export-sweep", tmp / "tb"
    rows = write_sweep(sweep, trials, steps)
    first_s, first = _export(sweep, logdir)
    again_s, again = _export(sweep, logdir)
    runs = sorted(p for p in (logdir / sweep.name).iterdir() if p.is_dir())
    one = EventAccumulator(str(runs[0]), size_guidance={"scalars": 0}).Reload()
    return {
        "trials": trials,
        "rows": rows,
        "first_s": first_s,
        "first": first,
        "again_s": again_s,
        "again": again,
        "runs": len(runs),
        "events_mib": sum(p.stat().st_size for p in logdir.rglob("events.out.tfevents.*")) / 2**20,
        "read_back_steps": len(one.Scalars("loss")),
    }


def live_case(tmp: Path, pairs: int, devices: int, trials: int) -> list[dict[str, Any]]:
    from ampsweep.sweep._tensorboard import exporting

    from ._standin import InProcessActors
    from .bench_launcher import drive_noop_grid

    runs = []
    for pair in range(pairs):
        for live in (False, True) if pair % 2 == 0 else (True, False):
            folder = Path(tempfile.mkdtemp(prefix="live-", dir=tmp))
            log("bench_tensorboard", f"driver loop, {trials} no-op trials, export {'on' if live else 'off'}")
            with exporting(str(folder / "bench-live"), str(folder / "tb") if live else None):
                _, ran, clock, _ = drive_noop_grid(
                    "bench-live", devices, trials, str(folder), InProcessActors()
                )
                ended = time.perf_counter()
            runs.append(
                {"live": live, "ran": ran, "tail_s": time.perf_counter() - ended, **clock.sustained(devices)}
            )
    return runs


def run(tiny: bool = False) -> str:
    trials, steps = (20, 50) if tiny else (TRIALS, STEPS)
    pairs, trials_live = (1, 300) if tiny else (PAIRS, LIVE_TRIALS)
    with tempfile.TemporaryDirectory(prefix="ampsweep-bench-tensorboard-") as tmp:
        log("bench_tensorboard", f"export of {trials} trials x {steps} steps")
        export = export_case(Path(tmp), trials, steps)
        live = live_case(Path(tmp), pairs, DEVICES, trials_live)
    cores = len(os.sched_getaffinity(0))

    def median(live_on: bool, key: str) -> float:
        return statistics.median(r[key] for r in live if r["live"] == live_on)

    def spread(live_on: bool, key: str) -> str:
        return ", ".join(f"{r[key]:.2f}" for r in live if r["live"] == live_on)

    ratio_cpu = median(True, "driver_ms_per_trial") / median(False, "driver_ms_per_trial")
    ratio_wall = median(True, "wall_ms_per_trial") / median(False, "wall_ms_per_trial")
    off_wall = [r["wall_ms_per_trial"] for r in live if not r["live"]]
    noise = (max(off_wall) - min(off_wall)) / statistics.median(off_wall) if len(off_wall) > 1 else 0.0
    lines = [
        "## TensorBoard: export, and the live export's cost to the driver (bench_tensorboard)",
        "",
        "_Tiny smoke-test size: the figures mean nothing._" if tiny else "",
        "",
        f"### `ampsweep export` of {export['trials']:,} trials × {steps:,} steps ({export['rows']:,} step rows)",
        "",
        f"bench_analysis's synthetic sweep; the command in a fresh process, imports included, on {cores} cores.",
        "",
        "| | value |",
        "|---|---:|",
        f"| **first export** | **{export['first_s']:.1f} s** (target ≤ {TARGET_S:.0f} s: {verdict(export['first_s'] <= TARGET_S)}) |",
        f"| … it said | {export['first']} |",
        f"| second export | {export['again_s']:.1f} s |",
        f"| … it said | {export['again']} |",
        f"| runs in LOGDIR | {export['runs']:,} |",
        f"| event files | {export['events_mib']:.0f} MiB |",
        f"| steps of the first run, read back by TensorBoard's `EventAccumulator` | {export['read_back_steps']:,} |",
        "",
        f"### Live export: the driver loop with and without it ({trials_live:,} no-op trials, {DEVICES} simulated devices)",
        "",
        "bench_launcher's `drive_noop_grid` (the driver's real per-trial path, in-process stand-ins for the "
        f"actors), {pairs} runs each way in alternating order. Sustained figures after the first "
        f"{DEVICES} commits; the tail is the wait after the last commit for the exporter's last round.",
        "",
        "| export | driver ms per trial (each run) | wall ms per trial (each run) | median driver ms | median wall ms | tail s (median) |",
        "|---|---|---|---:|---:|---:|",
    ]
    for on in (False, True):
        tail = statistics.median(r["tail_s"] for r in live if r["live"] == on)
        lines.append(
            f"| {'on' if on else 'off'} | {spread(on, 'driver_ms_per_trial')} | {spread(on, 'wall_ms_per_trial')} "
            f"| {median(on, 'driver_ms_per_trial'):.2f} | {median(on, 'wall_ms_per_trial'):.2f} | {tail:.1f} |"
        )
    measurable = abs(ratio_wall - 1) > noise
    lines += [
        "",
        f"**With / without the live export:** driver CPU per trial {ratio_cpu:.2f}×, wall per trial "
        f"{ratio_wall:.2f}×; the runs without it differ among themselves by {noise:.0%} (wall). "
        f"{'Within' if not measurable else 'Beyond'} that noise: "
        f"{verdict(not measurable)} (target: no measurable cost).",
    ]
    return "\n".join(lines)
