"""The compiled training steps of a sweep, timed bare: no launcher, no Ray, no bookkeeping.

``python -m benchmarks._bare REQUEST.json OUT.json [CORE]`` builds, for every
graph named in the request, the same ``jobs.training._trainer.CompiledStep`` a worker
builds, times its first call (compile + one step) and then ``steps`` further
steps on batches converted to Tensors beforehand, synchronising once per block
of 25 steps as the trainer does; with ``layer_every`` in the request, every
``layer_every``-th of those steps is sampled, as in a trial (its
first call, a compile, is left out of the step time). The process pins itself
to ``CORE``, uses one op thread and launches ops synchronously, as a CPU worker
does. What comes out per graph: compile seconds
(first call minus one step) and milliseconds per step.

It is a separate process so the parent can run two at once, one per core:
the pure step time is then measured under the same two-busy-cores conditions
the sweep's two workers run in.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

BLOCK = 25


def _config(graph: dict[str, Any]) -> Any:
    """The graph's trial on seed 0, unclipped: a configuration, and the spec's fixed ``workload_args``."""
    from ampsweep.contracts import Configuration
    from ampsweep.jobs import TrialConfig

    chosen = Configuration.from_row({**graph, "workload_args": ()})
    args = graph.get("workload_args") or {}
    return TrialConfig.of(chosen, 0, graph["workload"], graph["steps"], abort_after=10**6, workload_args=args)


def time_graph(graph: dict[str, Any], reference: str) -> dict[str, float]:
    import mindspore as ms
    import numpy as np

    from ampsweep.jobs import build_workload
    from ampsweep.jobs.training._batches import to_tensors

    try:  # the step moved to its own module; older trees keep it in the trainer
        from ampsweep.jobs.training._step import CompiledStep
    except ImportError:
        from ampsweep.jobs.training._trainer import CompiledStep

    config = _config(graph)
    steps = int(graph["steps"])
    # a trial samples the per-parameter statistics on every layer_every-th step
    every = int(graph.get("layer_every") or 0)
    ms.set_seed(0)
    np.random.seed(0)
    workload = build_workload(reference, 0, config.workload_args)
    source = iter(workload.batches)
    batches = [to_tensors(next(source)) for _ in range(steps + 2)]
    built = time.perf_counter()
    step = CompiledStep(config, workload)
    clip = step.clip_tensor(None)
    step(clip, batches[0]).asnumpy()
    first_s = time.perf_counter() - built
    if every:
        step.sampled_vector(clip, batches[1]).asnumpy()  # its compile is not a step
    started = time.perf_counter()
    out = None
    for index, batch in enumerate(batches[2:], start=1):
        out = step.sampled_vector(clip, batch) if every and index % every == 0 else step(clip, batch)
        if index % BLOCK == 0:
            out.asnumpy()
    if out is not None:
        out.asnumpy()
    ms_per_step = (time.perf_counter() - started) * 1000.0 / max(steps, 1)
    return {"compile_s": max(0.0, first_s - ms_per_step / 1000.0), "step_ms": ms_per_step}


def main(request_path: str, out_path: str, core: str | None = None) -> None:
    request = json.loads(Path(request_path).read_text())
    if core is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(core)})
    from ._common import as_a_cpu_worker

    as_a_cpu_worker()
    results = {gid: time_graph(graph, request["reference"]) for gid, graph in request["graphs"].items()}
    Path(out_path).write_text(json.dumps(results))


if __name__ == "__main__":
    main(*sys.argv[1:])
