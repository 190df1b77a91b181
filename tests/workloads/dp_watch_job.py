"""One rank of a 2-rank data-parallel job (msrun on CPU) whose loss breaks under O2, with a Watch on every rank.

Run by tests/test_watch_data_parallel.py: ``msrun ... dp_watch_job.py OUT ROOT``.
"""

import sys
from pathlib import Path

import mindspore as ms
from mindspore import amp, nn
from mindspore.communication import get_rank, init

import ampsweep
from ampsweep.jobs import build_workload

out = Path(sys.argv[1])
root = Path(sys.argv[2])
ms.set_device("CPU")
init()
ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)

OVERFLOW = f"{root / 'tests' / 'workloads' / 'watch_overflow.py'}:make"
watch = ampsweep.Watch(workload=OVERFLOW, out=out, snapshot_every=20, planned_steps=200)
ms.set_seed(0)
workload = build_workload(OVERFLOW, 0, {})
network = amp.auto_mixed_precision(workload.network, "O2")
optimizer = workload.optimizer(network.trainable_params())
reducer = nn.DistributedGradReducer(optimizer.parameters, mean=True)


def forward(x, y):
    return workload.loss_fn(network(x).astype(ms.float32), y)


grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
with watch:
    for step, (x, y) in zip(range(200), workload.batches):
        loss, grads = grad_fn(ms.Tensor(x), ms.Tensor(y))
        optimizer(reducer(grads))
        if watch.step(step, loss, network=network, optimizer=optimizer):
            break
print(f"rank {get_rank()} group {watch.group_size} stopped at {watch.first_nonfinite_step}", flush=True)
