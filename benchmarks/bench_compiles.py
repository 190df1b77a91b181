"""Compiles per actor against distinct graphs, on a sweep with many seeds and thresholds.

Trials that differ only in clip threshold, seed or a static loss-scale value
share one compiled graph (``graph_id``); each actor should compile each graph
it runs exactly once and reset it for the next trial. The sweep runs through
the real CLI (``ampsweep run … --workers 2``); a trial compiled when its
``compile_s`` is above zero (the trainer records 0 for a reused graph). The
target: compiles = distinct (``worker_index``, ``graph_id``) pairs.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from ._common import compiles_per_worker_graph, log, run_cli, verdict

NAME = "bench_compiles"
WORKERS = 2


def spec(tiny: bool) -> dict[str, Any]:
    return {
        "name": "compiles",
        "workload": "ampsweep.jobs.workloads.seed_repro:make",
        "steps": 3 if tiny else 20,
        "grid": {
            "amp_level": ["O0", "O2"],
            "black_list": [[], ["CustomNorm"]],
            "clip": [None, 1.0] if tiny else [None, 0.5, 1.0, 2.0, 3.0, 5.0],
            "seed": [0, 1] if tiny else list(range(6)),
        },
        "devices": "cpu",
    }


def run(tiny: bool = False) -> str:
    raw = spec(tiny)
    with tempfile.TemporaryDirectory(prefix="ampsweep-bench-compiles-") as tmp:
        log(NAME, "sweep through the CLI")
        cli = run_cli(raw, Path(tmp), WORKERS)
    t = cli.trials
    compiles, pairs, extra = compiles_per_worker_graph(t)
    graphs = t["graph_id"].nunique()
    per_worker = t.groupby("worker_index").agg(
        trials=("trial_id", "size"),
        graphs=("graph_id", "nunique"),
        compiles=("compile_s", lambda c: int((c > 0).sum())),
    )
    compiled = t[t["compile_s"] > 0]["compile_s"]
    table = ["| worker | trials | distinct graphs | compiles |", "|---:|---:|---:|---:|"]
    table += [f"| {w} | {r.trials} | {r.graphs} | {r.compiles} |" for w, r in per_worker.iterrows()]
    ok = compiles == pairs
    lines = [
        "## Compiles per actor (bench_compiles)",
        "",
        f"**Target:** compiles = distinct (worker, graph) pairs — {verdict(ok)}: **{compiles} compiles** for "
        f"**{pairs} pairs** ({graphs} distinct graphs, {len(t)} trials on {t['worker_index'].nunique()} workers)."
        + (" _Tiny smoke-test size._" if tiny else ""),
        "",
        f"The sweep: `ampsweep.jobs.workloads.seed_repro:make`, {raw['steps']} steps, "
        + " × ".join(f"{k} {v}" for k, v in raw["grid"].items())
        + f", through `ampsweep run --workers {WORKERS}`. A trial counts as a compile when its `compile_s` > 0. "
        f"Each compile took {compiled.min():.1f} … {compiled.max():.1f} s; "
        f"the {len(t) - compiles} trials that reused a graph paid none.",
        "",
        *table,
        "",
    ]
    if extra:
        lines += [f"Compiled more than once: {'; '.join(extra[:5])}.", ""]
    if not ok and not extra:
        lines += [f"Missed: {pairs - compiles} (worker, graph) pairs recorded no compile at all.", ""]
    if cli.error:
        lines += [f"**Note:** {cli.error}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(run(tiny="--tiny" in sys.argv))
