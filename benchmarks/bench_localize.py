"""What localizing a broken trial costs, with and without the worker's compiled graph of it.

A diverged trial is replayed in PyNative with hooks on every Cell
(``jobs.localization._localize``); the steps before the overflow need no hooks. The
worker has just compiled the trial's own graph, so those steps can run on it
(``GraphCache.compiled_for``) instead of in PyNative or on a fresh compile.
This measures both ways on the same trials in one process, alternating which
goes first, the way the actor runs them: one CPU core, one op thread, the
FP32 trials of the grid first (so the worker also holds the FP32 graph the
FP32 twin needs).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from ._common import as_a_cpu_worker, log

NAME = "bench_localize"
WORKLOAD = f"{Path(__file__).resolve().with_name('mlp_workload.py')}:make"
_SAME = ("kind", "cell", "cell_class", "phase")


def _configs(tiny: bool) -> tuple[list[Any], list[Any]]:
    from ampsweep.jobs import TrialConfig

    clips = [None] if tiny else [None, 1.0, 5.0]
    seeds = [0] if tiny else [0, 1]
    common = {"workload": WORKLOAD, "steps": 60, "abort_after": 10, "loss_scale": "none", "dtype": "float16"}

    def config(amp_level: str, clip: float | None, seed: int) -> Any:
        return TrialConfig(
            amp_level=amp_level, black_list=(), clip=clip, seed=seed, loss_placement="inside", **common
        )

    fp32 = [config("O0", clip, seed) for clip in clips for seed in seeds]
    mixed = [config("O2", clip, seed) for clip in clips for seed in seeds]
    return fp32, mixed


def run(tiny: bool = False) -> str:

    from ampsweep.jobs.localization._diagnose import diagnose
    from ampsweep.jobs.training._step import GraphCache
    from ampsweep.jobs.training._trainer import run_trial

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {(os.cpu_count() or 1) - 1})
    as_a_cpu_worker()
    graphs = GraphCache()
    fp32, mixed = _configs(tiny)
    log(NAME, f"{len(fp32)} FP32 and {len(mixed)} O2 trials of {WORKLOAD.rsplit('/', 1)[-1]}")
    for config in fp32:
        run_trial(config, WORKLOAD, None, graphs)
    rows: list[dict[str, Any]] = []
    for index, config in enumerate(mixed):
        result = run_trial(config, WORKLOAD, None, graphs)
        if result.outcome != "diverged":
            continue
        timed: dict[str, tuple[float, dict[str, Any] | None]] = {}
        order = ("cached", "plain") if index % 2 else ("plain", "cached")
        for way in order:
            started = time.perf_counter()
            table = diagnose(result, WORKLOAD, None, graphs if way == "cached" else None)
            timed[way] = (time.perf_counter() - started, table.to_pylist()[0] if table.num_rows else None)
        plain, cached = timed["plain"][1], timed["cached"][1]
        same = plain is not None and cached is not None and all(plain[k] == cached[k] for k in _SAME)
        rows.append(
            {
                "trial": f"clip={config.clip} seed={config.seed}",
                "step": result.first_nonfinite_step,
                "trial_s": result.wall_s,
                "plain_s": timed["plain"][0],
                "cached_s": timed["cached"][0],
                "cell": "-"
                if cached is None
                else f"{cached['cell']} ({cached['cell_class']}, {cached['phase']})",
                "same": same,
            }
        )
    lines = ["## Localizing a broken trial (bench_localize)", ""]
    if not rows:
        return "\n".join([*lines, "No trial diverged, so nothing was localized.", ""])
    ratio = statistics.median(r["plain_s"] / r["cached_s"] for r in rows)
    lines += [
        f"{len(rows)} diverged O2 trials of `benchmarks/mlp_workload.py` (its hand-written cross entropy "
        "cast with the network overflows float16), 60 steps, localized twice each in one process on one "
        "core with one op thread, the order alternating: **plain** replays every step before the overflow "
        "in PyNative (a fresh compile of them would cost more than it saves at this length); **cached** runs "
        "them on the worker's own compiled graph of the trial and continues in PyNative from its state, as "
        "the actor does. Both end with the same hooked steps and the FP32 twin."
        + (" _Tiny smoke-test size._" if tiny else ""),
        "",
        "| trial | first non-finite step | trial s | localize, plain s | localize, cached s | culprit | same culprit |",
        "|---|---:|---:|---:|---:|---|---|",
        *(
            f"| {r['trial']} | {r['step']} | {r['trial_s']:.2f} | {r['plain_s']:.2f} | {r['cached_s']:.2f} "
            f"| {r['cell']} | {'yes' if r['same'] else '**no**'} |"
            for r in rows
        ),
        "",
        f"**Median plain / cached: {ratio:.2f}×** faster with the trial's own graph; "
        f"{sum(r['same'] for r in rows)} of {len(rows)} trials name the same culprit both ways. "
        "What remains is the hooked PyNative steps around the overflow, the FP32 twin's step, and "
        "building the workload for the replay.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(run(tiny="--tiny" in sys.argv))
