"""Watch a ``Model.train`` run until its loss turns NaN, then run the sweep it writes.

The training is the built-in late_softmax classifier under AMP level O2: it
trains normally and turns NaN after 1,300 to 1,500 steps (its hand-written
softmax overflows float16). ``ampsweep.Watch`` keeps a snapshot every 100
steps; at the NaN it names the Cell, writes ``OUT/watch.json`` and
``OUT/spec.yaml``, prints the command to run next, and stops the training::

    python examples/watch_model_train.py --out runs/watch      # ~20 s on a CPU
    ampsweep run runs/watch/spec.yaml --out runs/watch/runs    # ~2 minutes on 2 cores

The factory ``make`` below is what Watch and the sweep rebuild the training
from: the same network, loss, optimizer and data, positioned at ``start_step``.
Keep the training itself under ``if __name__ == "__main__":`` so that loading
the factory from this file does not start a second training.
"""

from __future__ import annotations

import argparse

import mindspore as ms
import mindspore.dataset as ds
from mindspore.train import Model

import ampsweep
from ampsweep.jobs.workloads import late_softmax


def make(seed: int, start_step: int = 0) -> ampsweep.Workload:
    """The workload factory: this script's network, loss, optimizer and data."""
    return late_softmax.make(seed=seed, start_step=start_step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="ampsweep-watch", help="folder for snapshots, watch.json, spec.yaml")
    parser.add_argument("--steps", type=int, default=2500, help="steps to train (the NaN comes first)")
    parser.add_argument("--snapshot-every", type=int, default=100)
    args = parser.parse_args()

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(0)
    workload = make(seed=0)
    batches = workload.batches
    dataset = ds.GeneratorDataset(
        lambda: (next(batches) for _ in range(args.steps)), ["x", "label"], shuffle=False
    )
    optimizer = workload.optimizer(workload.network.trainable_params())
    model = Model(workload.network, workload.loss_fn, optimizer, amp_level="O2", loss_scale_manager=None)
    watch = ampsweep.Watch(workload=f"{__file__}:make", out=args.out, snapshot_every=args.snapshot_every)
    model.train(1, dataset, callbacks=[watch], dataset_sink_mode=False)
    if watch.report is None:
        print(f"the loss stayed finite for {args.steps} steps")


if __name__ == "__main__":
    main()
