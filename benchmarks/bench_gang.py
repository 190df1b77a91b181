"""Trials on several devices: what forming a gang costs, a 2-device step, and dispatch to gangs.

Three figures for issue 47, each measured, none asserted in a test:

* **Forming a gang**: a placement group, MindSpore's scheduler and 2 rank
  actors on this machine's 2 cores, until both ranks have joined the group
  (``communication.init()``); formed twice, the second after the first is
  ended, as the pool forms a gang again after a rank dies.
* **A 2-device step against a 1-device step at the same global batch**: the
  same FP32 trial of ``late_softmax`` (no batch statistics, so both train the
  same model) run by one pinned worker, then by the gang
  (each rank on its own core, half the batch each, gradients averaged): the
  median ``step_ms`` of each. On CPU this says what the collectives cost
  against the halved work, not what an NPU ring costs.
* **Localizing a broken trial on a gang against one device** (issue 53): the
  same diverged O2 trials of ``benchmarks/mlp_workload.py`` (its hand-written
  cross entropy cast with the network overflows float16) on the global batch,
  localized by the pinned worker and by the gang (every rank replays its own
  part; the steps before the break run on the trial's graph, all ranks
  together): each side's ``diagnose_s``, the worker's own clock around the
  replay.
* **Dispatch to gangs**: the driver's own per-trial path
  (``drive_trials``, as ``bench_launcher`` measures it) against an in-process
  stand-in for the actors, with 64 gangs of 8 simulated devices against 512
  single devices. A gang's trial is sent to each of its ranks and its answer
  combined (``_gang.all_ranks`` and ``answer_of``, the code a real gang uses).

At the tiny size (the test suite's smoke run) only the dispatch runs, on a
few devices: forming a gang costs tens of seconds.
"""

from __future__ import annotations

import itertools
import logging
import pickle
import statistics
import sys
import tempfile
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from ampsweep.jobs import RankAnswer

from ._noop_actor import NoopTrialWorker
from ._standin import InProcessActors
from .bench_launcher import drive_noop_grid

GANG_SIZE = 8
GANGS = 64
TRIALS_PER_SLOT = 4
STEP_TRIALS_STEPS = 200
GLOBAL_BATCH = 64


def _log(message: str) -> None:
    print(f"[bench_gang] {message}", file=sys.stderr, flush=True)


# --- dispatch to gangs, driver side only ----------------------------------------------------------


class _Answered:
    """A Ray reference stand-in whose ``future()`` is already answered."""

    def __init__(self, value: Any) -> None:
        self._future: Future[Any] = Future()
        self._future.set_result(value)

    def future(self) -> Future[Any]:
        return self._future


class CpuTimedActors(InProcessActors):
    """``InProcessActors`` that count the actors' share in this thread's CPU time, not wall time.

    The driver's figure is its CPU time less the actors' share: on a loaded
    machine wall time counts the time-slices other processes took, and a share
    taken in wall time overstated the actors' part (a gang's 8 ranks made the
    driver's remainder negative).
    """

    def _answer(self, work: Any, *args: Any) -> int:
        arguments = pickle.dumps(args, protocol=5)
        started = time.thread_time()
        sent = pickle.dumps(work(*pickle.loads(arguments)), protocol=5)
        self.actor_s += time.thread_time() - started
        call = next(self._ids)
        future: Future[Any] = Future()
        future.set_result(pickle.loads(sent))
        self.completions.put((call, future))
        return call


class GangStandIn(CpuTimedActors):
    """``InProcessActors`` whose every actor is a gang of ``size`` no-op ranks.

    A trial's call is sent to every rank (its arguments pickled per rank, as
    Ray serializes each call), each rank's answer comes back pickled (rank 0's
    result, the others' checksum only), and the driver combines them with the
    real gang's code.
    """

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self._keys = itertools.count()

    def start(self, index: int, setup: Any, options: dict[str, Any]) -> Any:
        return [NoopTrialWorker(index * self.size + rank, setup) for rank in range(self.size)]

    def probe(self, actor: Any) -> int:
        return self._answer(actor[0].info)

    def run(self, actor: Any, config: Any, workload_ref: str, hint: Any, start: Any) -> int:
        from ampsweep.sweep.cluster._gang import all_ranks, answer_of

        self.calls += 1
        refs = []
        for rank, worker in enumerate(actor):
            arguments = pickle.dumps((config, workload_ref, hint, start), protocol=5)
            started = time.thread_time()
            result = worker.run(*pickle.loads(arguments))
            sent = pickle.dumps(RankAnswer(result if rank == 0 else None, "checksum"), protocol=5)
            self.actor_s += time.thread_time() - started
            refs.append(_Answered(pickle.loads(sent)))
        key = next(self._keys)
        all_ranks(refs).add_done_callback(lambda done: self.completions.put((key, answer_of(done)[0])))
        return key


def _dispatch(slots: int, size: int, trials: int, tmp: str) -> dict[str, Any]:
    """The driver's ms per trial with ``slots`` slots of ``size`` simulated devices each."""
    actors = GangStandIn(size) if size > 1 else CpuTimedActors()
    planned, ran, clock, _ = drive_noop_grid(
        f"bench-gang-dispatch-{slots}x{size}", slots, trials, tmp, actors
    )
    if ran != planned:
        raise RuntimeError(f"dispatch ran {ran} of {planned} trials")
    return {"slots": slots, "devices_per_slot": size, "trials": planned, **clock.sustained(warm=slots)}


# --- a real gang on this machine ------------------------------------------------------------------


def _answer(actors: Any, key: Any, timeout_s: float = 600.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        call, future = actors.completions.get(timeout=timeout_s)
        if call is key:
            return future.result()
    raise TimeoutError("no answer")


def _step_trial(devices: int) -> Any:
    from ampsweep.jobs import TrialConfig

    return TrialConfig(
        workload="ampsweep.jobs.workloads.late_softmax:make",
        steps=STEP_TRIALS_STEPS,
        abort_after=10,
        amp_level="O0",
        black_list=(),
        clip=1.0,
        loss_scale="none",
        dtype="float32",
        seed=0,
        workload_args={"batch_size": GLOBAL_BATCH},
        localize=False,
        devices=devices,
    )


#: seeds of the broken trials localized on one device and on the gang
LOCALIZE_SEEDS = (0, 1, 2)
LOCALIZED = f"{Path(__file__).resolve().with_name('mlp_workload.py')}:make"


def _broken_trial(devices: int, seed: int) -> Any:
    """An O2 trial whose loss, cast with the network, overflows float16 within its 60 steps."""
    from ampsweep.jobs import TrialConfig

    return TrialConfig(
        workload=LOCALIZED,
        steps=60,
        abort_after=10,
        amp_level="O2",
        black_list=(),
        clip=None,
        loss_scale="none",
        dtype="float16",
        seed=seed,
        loss_placement="inside",
        devices=devices,
    )


def _localized(result: Any) -> dict[str, Any]:
    """What one broken trial's localization cost and found."""
    rows = result.anomalies.to_pylist()
    found = rows[0] if rows else {}
    return {
        "seed": result.config.seed,
        "outcome": str(result.outcome),
        "diagnose_s": result.diagnose_s,
        "cell": f"{found['cell']} ({found['cell_class']}, {found['phase']})" if found else "-",
        "rank": found.get("rank"),
    }


def _median_step_ms(result: Any) -> float:
    step_ms = result.steps.column("step_ms").to_pylist()
    return float(statistics.median(step_ms[1:]))  # the first step compiles


def _real_gang() -> dict[str, Any]:
    """Gang formation twice, then one 1-device and one 2-device trial at the same global batch."""
    import ray

    from ampsweep.jobs import TrialWorker
    from ampsweep.sweep.cluster._gang import GangActors
    from ampsweep.sweep.devices import CpuBackend, device_setup

    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.ERROR)
    try:
        backend = CpuBackend()
        setup = device_setup(backend, 0, None)
        _log("one worker: a 1-device trial")
        single = ray.remote(TrialWorker).options(num_cpus=1).remote(0, setup)
        config = _step_trial(1)
        one = ray.get(single.run.remote(config, config.workload, None, None))
        _log("one worker: localizing broken trials")
        alone = [
            _localized(ray.get(single.run.remote(c, c.workload, None, None)))
            for c in (_broken_trial(1, seed) for seed in LOCALIZE_SEEDS)
        ]
        ray.kill(single)
        forming: list[float] = []
        actors = GangActors(2)
        gang = None
        for attempt in range(2):
            if gang is not None:
                actors.kill(gang)
            _log(f"forming gang {attempt + 1} of 2")
            started = time.perf_counter()
            gang = actors.start(0, setup, backend.actor_options())
            _answer(actors, actors.probe(gang))
            forming.append(time.perf_counter() - started)
        _log("the gang: the same trial on 2 devices")
        config = _step_trial(2)
        two = _answer(actors, actors.run(gang, config, config.workload, None, None))
        _log("the gang: localizing the same broken trials on 2 devices")
        ganged = [
            _localized(_answer(actors, actors.run(gang, c, c.workload, None, None)))
            for c in (_broken_trial(2, seed) for seed in LOCALIZE_SEEDS)
        ]
        actors.kill(gang)
    finally:
        ray.shutdown()
    for result in (one, two):
        if result.outcome != "completed":
            raise RuntimeError(f"the step trial did not complete: {result.error}")
    return {
        "forming_s": forming,
        "step_ms_1_device": _median_step_ms(one),
        "step_ms_2_devices": _median_step_ms(two),
        "final_loss_1_device": one.final_loss,
        "final_loss_2_devices": two.final_loss,
        "localized_1_device": alone,
        "localized_2_devices": ganged,
    }


def _localize_lines(alone: list[dict[str, Any]], ganged: list[dict[str, Any]]) -> list[str]:
    """The localization table: each broken trial on one device and on the gang, and the ratio of medians."""
    lines = [
        "### Localizing a broken trial: a gang of 2 against one device",
        "",
        "| seed | 1 device: localize s | culprit | 2 devices: localize s | culprit | rank |",
        "|---|---:|---|---:|---|---:|",
    ]
    for one, two in zip(alone, ganged):
        lines.append(
            f"| {one['seed']} | {one['diagnose_s']:.2f} | {one['cell']} | {two['diagnose_s']:.2f} | {two['cell']} "
            f"| {two['rank']} |"
        )
    timed = [(a["diagnose_s"], g["diagnose_s"]) for a, g in zip(alone, ganged) if a["diagnose_s"] > 0]
    if not timed:
        return [*lines, "", "No trial was localized on both sides."]
    ratio = statistics.median(g for _, g in timed) / statistics.median(a for a, _ in timed)
    same = sum(a["cell"] == g["cell"] for a, g in zip(alone, ganged))
    return [
        *lines,
        "",
        f"O2 trials of `benchmarks/mlp_workload.py` (loss cast with the network), 60 steps, global batch 16, "
        f"localized by one pinned worker and by a gang of 2 (8 rows each): **gang / one device, median "
        f"localization time: {ratio:.2f}×** (target ≤ 1.5×); {same} of {len(alone)} name the same culprit.",
    ]


def run(tiny: bool = False) -> str:
    lines = ["## Trials on several devices: gangs (bench_gang)", ""]
    with tempfile.TemporaryDirectory(prefix="ampsweep-bench-gang-") as tmp:
        gangs, size = (4, 2) if tiny else (GANGS, GANG_SIZE)
        trials = max(TRIALS_PER_SLOT * gangs * size, 40)  # the same trials on either layout
        _log(f"dispatch: {trials} trials on {gangs} gangs of {size} against {gangs * size} single devices")
        on_gangs = _dispatch(gangs, size, trials, str(Path(tmp) / "gangs"))
        on_singles = _dispatch(gangs * size, 1, trials, str(Path(tmp) / "singles"))
        real = None if tiny else _real_gang()
    lines += [
        "### Dispatch to gangs (driver side, in-process stand-in for the actors)",
        "",
        "| slots | devices per slot | trials | driver ms per trial | trials per s |",
        "|---|---|---|---|---|",
    ]
    for point in (on_gangs, on_singles):
        lines.append(
            f"| {point['slots']} | {point['devices_per_slot']} | {point['trials']} | "
            f"{point['driver_ms_per_trial']:.2f} | {point['trials_per_s']:.0f} |"
        )
    lines += [
        "",
        f"A gang's trial costs the driver {on_gangs['driver_ms_per_trial'] / on_singles['driver_ms_per_trial']:.1f}x "
        "a single device's: it is sent to each of its ranks and their answers are combined.",
        "",
    ]
    if real is None:
        lines.append("The real gang (forming, a 2-device step) is skipped at the tiny size.")
    else:
        ratio = real["step_ms_2_devices"] / real["step_ms_1_device"]
        lines += [
            "### A real gang of 2 CPU ranks on this machine",
            "",
            "| figure | value |",
            "|---|---|",
            f"| forming a gang (first) s | {real['forming_s'][0]:.1f} |",
            f"| forming a gang (again, after ending it) s | {real['forming_s'][1]:.1f} |",
            f"| step ms, 1 device, global batch {GLOBAL_BATCH} | {real['step_ms_1_device']:.2f} |",
            f"| step ms, 2 devices, global batch {GLOBAL_BATCH} | {real['step_ms_2_devices']:.2f} |",
            f"| 2-device step / 1-device step | {ratio:.2f} |",
            "",
            f"late_softmax (no batch statistics), FP32, clip 1.0, {STEP_TRIALS_STEPS} steps; median step_ms without the compiling "
            f"first step. Final losses: {real['final_loss_1_device']:.4f} (1 device), "
            f"{real['final_loss_2_devices']:.4f} (2 devices).",
            "",
            *_localize_lines(real["localized_1_device"], real["localized_2_devices"]),
        ]
    return "\n".join(lines)
