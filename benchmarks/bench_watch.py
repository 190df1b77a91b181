"""What ``ampsweep.Watch`` costs a healthy training, and how long the NaN takes to become a spec.

1. **Cost on a healthy run.** The built-in late_softmax classifier in FP32
   (where it never breaks), trained with ``Model.train`` in graph mode, no
   dataset sink, ``STEPS`` steps, with and without
   ``Watch(snapshot_every=100)`` (the issue's acceptance setting: a snapshot
   every 100 steps, the loss looked at in blocks). The two arms alternate for
   ``ROUNDS`` rounds, each with a freshly built network (so each compiles
   once), and the figure is the median ratio of the ``model.train`` wall
   times. Beside it: the median time between two step ends (compile and the
   rare snapshot steps excluded), and Watch's own time per step, added up
   inside its callback (snapshots included), which the load of a shared
   machine does not blur. Target: at most 1.05×.
2. **NaN to spec.** The same classifier under O2 (``Model(...,
   amp_level="O2", loss_scale_manager=None)``), trained with Watch until its
   loss turns NaN (~1,300-1,500 steps); measured from the end of the step
   whose loss was first non-finite to ``OUT/spec.yaml`` on disk: the rest of
   the 50-step check block, the replay from the last snapshot (compiled, then
   PyNative with hooks) and the writing.

The section also writes ``benchmarks/results/bench_watch.json`` with the same
figures (not at the tiny smoke-test size).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from ._common import log, verdict
from ._machine import machine_rows, now_utc

NAME = "bench_watch"
HERE = Path(__file__).resolve().parent
RESULTS_JSON = HERE / "results" / "bench_watch.json"
WORKLOAD = "ampsweep.jobs.workloads.late_softmax:make"
STEPS = 2000
ROUNDS = 7
SNAPSHOT_EVERY = 100
TARGET = 1.05
NAN_STEPS = 2500


class _Batches:
    """A random-access source: ``GeneratorDataset`` would format a captured list of arrays (seconds)."""

    def __init__(self, batches: list[Any]) -> None:
        self._batches = batches

    def __getitem__(self, index: int) -> Any:
        return self._batches[index]

    def __len__(self) -> int:
        return len(self._batches)


def _dataset(batches: list[Any]) -> Any:
    import mindspore.dataset as ds

    return ds.GeneratorDataset(_Batches(batches), ["x", "label"], shuffle=False)


def _timed_watch(**kwargs: Any) -> Any:
    """A Watch that adds up the time spent in its own step-end callback: its cost, free of machine noise."""
    import ampsweep

    class TimedWatch(ampsweep.Watch):
        own_s = 0.0
        calls = 0

        def on_train_step_end(self, run_context: Any) -> None:
            started = time.perf_counter()
            super().on_train_step_end(run_context)
            self.own_s += time.perf_counter() - started
            self.calls += 1

    return TimedWatch(**kwargs)


def _stamps() -> Any:
    """A callback that notes when each step ended (wall clock), in both arms alike."""
    from mindspore.train import Callback

    class Stamps(Callback):
        def __init__(self) -> None:
            self.at: dict[int, float] = {}

        def on_train_step_end(self, run_context: Any) -> None:
            self.at[run_context.original_args().cur_step_num] = time.time()

    return Stamps()


def _train(level: str, steps: int, watch: Any, learning_rate: float = 1e-3) -> tuple[float, Any]:
    """One ``Model.train`` of late_softmax (seed 0); its wall time and the step stamps."""
    import itertools

    import mindspore as ms
    from mindspore.train import Model

    from ampsweep.jobs.workloads import late_softmax

    ms.set_seed(0)
    workload = late_softmax.make(seed=0, learning_rate=learning_rate)
    batches = list(itertools.islice(workload.batches, steps))
    optimizer = workload.optimizer(workload.network.trainable_params())
    if level == "O0":
        model = Model(workload.network, workload.loss_fn, optimizer)
    else:
        model = Model(workload.network, workload.loss_fn, optimizer, amp_level=level, loss_scale_manager=None)
    stamps = _stamps()
    callbacks = [stamps] if watch is None else [stamps, watch]
    started = time.perf_counter()
    model.train(1, _dataset(batches), callbacks=callbacks, dataset_sink_mode=False)
    return time.perf_counter() - started, stamps


def _step_ms(stamps: Any) -> float:
    """The median time between two step ends: robust to the other processes of a shared machine."""
    times = [stamps.at[step] for step in sorted(stamps.at)]
    return statistics.median(b - a for a, b in zip(times, times[1:])) * 1e3 if len(times) > 1 else 0.0


def healthy_cost(steps: int, rounds: int, out: Path) -> dict[str, Any]:
    """FP32 ``Model.train`` with and without Watch, alternating; walls, step times, ratios."""
    arms: dict[str, dict[str, list[float]]] = {
        "without": {"wall_s": [], "step_ms": []},
        "with": {"wall_s": [], "step_ms": []},
    }
    ratios, step_ratios, own_us = [], [], []
    for index in range(rounds):
        order = ["without", "with"] if index % 2 == 0 else ["with", "without"]
        walls: dict[str, float] = {}
        for arm in order:
            watch = None
            if arm == "with":
                watch = _timed_watch(
                    workload=WORKLOAD, out=out / f"healthy-{index}", snapshot_every=SNAPSHOT_EVERY
                )
            wall, stamps = _train("O0", steps, watch)
            if watch is not None and watch.first_nonfinite_step is not None:
                raise RuntimeError(f"the FP32 run broke at step {watch.first_nonfinite_step}")
            if watch is not None:
                own_us.append(round(watch.own_s / max(watch.calls, 1) * 1e6, 2))
            walls[arm] = wall
            arms[arm]["wall_s"].append(round(wall, 3))
            arms[arm]["step_ms"].append(round(_step_ms(stamps), 4))
        ratios.append(round(walls["with"] / walls["without"], 4))
        step_ratios.append(round(arms["with"]["step_ms"][-1] / arms["without"]["step_ms"][-1], 4))
        log(NAME, f"round {index + 1}/{rounds}: with/without {ratios[-1]:.3f}")
    return {
        "steps": steps,
        "rounds": rounds,
        "snapshot_every": SNAPSHOT_EVERY,
        "arms": arms,
        "ratio_per_round": ratios,
        "ratio_median": statistics.median(ratios),
        "step_ratio_per_round": step_ratios,
        "step_ratio_median": statistics.median(step_ratios),
        "snapshots_per_run": steps // SNAPSHOT_EVERY,
        "watch_own_us_per_step": own_us,
        "watch_own_us_per_step_median": statistics.median(own_us),
        "watch_own_share_of_step": round(
            statistics.median(own_us) / 1e3 / statistics.median(arms["without"]["step_ms"]), 4
        ),
    }


def nan_to_spec(steps: int, snapshot_every: int, learning_rate: float, out: Path) -> dict[str, Any]:
    """late_softmax under O2 with Watch until NaN; seconds from the NaN step's end to spec.yaml."""
    import ampsweep

    watch = ampsweep.Watch(
        workload=WORKLOAD,
        out=out,
        snapshot_every=snapshot_every,
        workload_args={"learning_rate": learning_rate} if learning_rate != 1e-3 else None,
    )
    wall, stamps = _train("O2", steps, watch, learning_rate)
    if watch.report is None:
        raise RuntimeError(f"late_softmax stayed finite for {steps} steps under O2")
    first = watch.report["first_nonfinite_step"]
    nan_at = stamps.at[first + 1]  # cur_step_num counts from 1
    spec = out / "spec.yaml"
    written = json.loads((out / "watch.json").read_text())
    return {
        "first_nonfinite_step": first,
        "snapshot_step": watch.report["snapshot_step"],
        "cell": watch.report["cell"],
        "class": watch.report["class"],
        "phase": watch.report["phase"],
        "compiled_step": written.get("compiled_step"),
        "replay_step": written.get("replay_step"),
        "steps_run": max(stamps.at),
        "nan_to_spec_s": round(spec.stat().st_mtime - nan_at, 2),
        "replay_and_write_s": written["seconds"],
        "spec_steps": _spec_steps(spec),
        "train_wall_s": round(wall, 2),
    }


def _spec_steps(path: Path) -> int:
    import yaml

    return int(yaml.safe_load(path.read_text())["steps"])


def run(tiny: bool = False) -> str:
    """The section; ``tiny=True`` (the smoke test) trains a few dozen steps, and its figures mean nothing."""
    import mindspore as ms

    ms.set_context(mode=ms.GRAPH_MODE)
    with tempfile.TemporaryDirectory(prefix="ampsweep-bench-watch-") as tmp:
        out = Path(tmp)
        healthy = healthy_cost(60 if tiny else STEPS, 1 if tiny else ROUNDS, out)
        log(NAME, "healthy arms done; now O2 until NaN")
        # tiny: a learning rate that breaks late_softmax in a few dozen steps
        nan = nan_to_spec(
            200 if tiny else NAN_STEPS, 10 if tiny else SNAPSHOT_EVERY, 1e-2 if tiny else 1e-3, out / "nan"
        )
    figures = {
        "machine": dict(machine_rows()),
        "date": now_utc(),
        "healthy": healthy,
        "nan": nan,
        "target": TARGET,
    }
    if not tiny:
        RESULTS_JSON.parent.mkdir(parents=True, exist_ok=True)
        RESULTS_JSON.write_text(json.dumps(figures, indent=2) + "\n")
    return _section(figures, tiny)


def _section(figures: dict[str, Any], tiny: bool) -> str:
    healthy, nan = figures["healthy"], figures["nan"]
    arms = healthy["arms"]
    ok = healthy["ratio_median"] <= TARGET
    rows = [
        "| arm | `model.train` wall, median (s) | per step, median (ms) |",
        "|---|---:|---:|",
    ]
    for arm, label in (
        ("without", "without Watch (**baseline**)"),
        ("with", f"with `Watch(snapshot_every={SNAPSHOT_EVERY})`"),
    ):
        rows.append(
            f"| {label} | {statistics.median(arms[arm]['wall_s']):.2f} | {statistics.median(arms[arm]['step_ms']):.3f} |"
        )
    lines = [
        "## Watch: cost on a healthy run, and NaN to spec (bench_watch)",
        "",
        f"late_softmax in FP32, `Model.train` (graph mode, no sink), {healthy['steps']} steps, a fresh network per "
        f"run; the arms alternate for {healthy['rounds']} rounds. Watch saves {healthy['snapshots_per_run']} "
        "snapshots per run and copies the losses to the host in blocks of 50.",
        "",
        *rows,
        "",
        f"**With / without Watch, `model.train` wall: {healthy['ratio_median']:.3f}×** (median of the rounds: "
        + ", ".join(f"{r:.3f}" for r in healthy["ratio_per_round"])
        + f"); median step, with / without: {healthy['step_ratio_median']:.3f}×. Target ≤ {TARGET:.2f}×: "
        + verdict(ok)
        + ".",
        "",
        f"A run's wall time follows the machine's other load: the rounds' ratios spread from "
        f"{min(healthy['ratio_per_round']):.2f} to {max(healthy['ratio_per_round']):.2f} here, so on a "
        "shared machine read the median with the next figure.",
        "",
        f"**Watch's own time per step: {healthy['watch_own_us_per_step_median']:.0f} µs**, "
        f"{healthy['watch_own_share_of_step']:.1%} of the baseline's step (the time inside its step-end "
        "callback, snapshots included, added up over the run: the figure the machine's load does not blur).",
        "",
        f"**NaN to spec: {nan['nan_to_spec_s']:.1f} s.** late_softmax under O2 went non-finite at step "
        f"{nan['first_nonfinite_step']}; Watch replayed from its snapshot at step {nan['snapshot_step']} "
        f"(the replay broke at step {nan['replay_step']}), named `{nan['cell']}` ({nan['class']}, {nan['phase']}) "
        f"and wrote a spec of {nan['spec_steps']} steps; of that time, {nan['replay_and_write_s']:.1f} s were the "
        f"replay and the writing, the rest the training running on to the end of its 50-step check block "
        f"(it stopped after step {nan['steps_run']}).",
    ]
    if tiny:
        lines += ["", "_Tiny smoke-test size: these figures mean nothing._"]
    return "\n".join(lines)
