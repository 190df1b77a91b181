"""One rank of a 2-rank data-parallel job (msrun on CPU) whose overflow starts in rank 1's rows, with a Watch.

The factory yields the global batch; rank r trains on part r of it, as a sweep's gang does.
Run by tests/test_watch_data_parallel.py: ``msrun ... dp_rows_job.py OUT ROOT``.
"""

import sys
from pathlib import Path

import mindspore as ms
from mindspore import amp, nn
from mindspore.communication import get_group_size, get_rank, init

import ampsweep
from ampsweep.jobs import build_workload

out = Path(sys.argv[1])
root = Path(sys.argv[2])
ms.set_device("CPU")
init()
ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
rank, size = get_rank(), get_group_size()

ROWS = f"{root / 'tests' / 'workloads' / 'rows_overflow.py'}:make"
ARGS = {"ramp": 30}
watch = ampsweep.Watch(workload=ROWS, workload_args=ARGS, out=out, snapshot_every=5, planned_steps=100)
ms.set_seed(0)
workload = build_workload(ROWS, 0, ARGS)
network = amp.auto_mixed_precision(workload.network, "O2")
optimizer = workload.optimizer(network.trainable_params())
reducer = nn.DistributedGradReducer(optimizer.parameters, mean=True)


def forward(x, y):
    return workload.loss_fn(network(x).astype(ms.float32), y)


grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
with watch:
    for step, (x, y) in zip(range(100), workload.batches):
        part = slice(rank * len(x) // size, (rank + 1) * len(x) // size)
        loss, grads = grad_fn(ms.Tensor(x[part]), ms.Tensor(y[part]))
        optimizer(reducer(grads))
        if watch.step(step, loss, network=network, optimizer=optimizer):
            break
print(f"rank {rank} group {watch.group_size} stopped at {watch.first_nonfinite_step}", flush=True)
