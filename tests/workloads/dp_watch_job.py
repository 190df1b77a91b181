"""One rank of a 2-rank data-parallel job (msrun on CPU) whose loss breaks under O2, with a Watch on every rank.

Run by tests/test_watch_data_parallel.py: ``msrun ... dp_watch_job.py OUT ROOT [MODE [SCRATCH]]``. By default
every rank trains ``watch_overflow`` on the whole batch; with ``rows`` the factory (``rows_overflow``, whose
overflow starts in the second half of each batch) yields the global batch and rank r trains on part r,
as a sweep's gang does. With a SCRATCH folder for the snapshots, each written at once: ``budget`` gives
every rank a disk budget that holds one snapshot, and ``unwritable`` makes rank 1's folder one that
cannot be made (it lies under a file). ``replay_fails``: the Watch names this file's ``make``, which rank
1's replay cannot build.
"""

import sys
from pathlib import Path

import mindspore as ms
from mindspore import amp, nn
from mindspore.communication import get_group_size, get_rank, init

import ampsweep
from ampsweep.jobs import build_workload
from ampsweep.jobs.watch import _watch_snapshots

out = Path(sys.argv[1])
root = Path(sys.argv[2])
mode, scratch = (sys.argv[3:] + ["", ""])[:2]
rows = mode == "rows"
ms.set_device("CPU")
init()
ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
rank, size = get_rank(), get_group_size()

name, args, every, steps = (
    ("rows_overflow", {"ramp": 30}, 5, 100) if rows else ("watch_overflow", {}, 20, 200)
)
WORKLOAD = f"{root / 'tests' / 'workloads' / name}.py:make"
built = []


def make(seed, start_step=0):
    """``watch_overflow``; built again on rank 1 (the replay's build), it raises."""
    built.append(seed)
    if len(built) > 1 and rank == 1:
        raise RuntimeError("the factory fails on rank 1")
    return build_workload(WORKLOAD, seed, {}, start_step)


ms.set_seed(0)
workload = make(0) if mode == "replay_fails" else build_workload(WORKLOAD, 0, args)
network = amp.auto_mixed_precision(workload.network, "O2")
optimizer = workload.optimizer(network.trainable_params())
reducer = nn.DistributedGradReducer(optimizer.parameters, mean=True)
folders = {}
if scratch:
    _watch_snapshots.IN_MEMORY_BYTES = 0  # every snapshot is written when it is taken
    state = _watch_snapshots.named_state(network, optimizer).values()
    one = sum(param.asnumpy().nbytes for param in state)
    folders = {"snapshot_dir": Path(scratch), "disk_budget": one * 3 // 2 if mode == "budget" else None}
    if mode == "unwritable" and rank == 1:
        (out.parent / "file").write_text("")
        folders["snapshot_dir"] = out.parent / "file" / "scratch"
watch = ampsweep.Watch(
    workload=f"{__file__}:make" if mode == "replay_fails" else WORKLOAD,
    workload_args=args,
    out=out,
    snapshot_every=every,
    planned_steps=steps,
    **folders,
)


def forward(x, y):
    return workload.loss_fn(network(x).astype(ms.float32), y)


grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
with watch:
    for step, (x, y) in zip(range(steps), workload.batches):
        part = slice(rank * len(x) // size, (rank + 1) * len(x) // size) if rows else slice(None)
        loss, grads = grad_fn(ms.Tensor(x[part]), ms.Tensor(y[part]))
        optimizer(reducer(grads))
        if watch.step(step, loss, network=network, optimizer=optimizer):
            break
print(f"rank {rank} group {watch.group_size} stopped at {watch.first_nonfinite_step}", flush=True)
