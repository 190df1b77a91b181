"""What telling a fault from numerics costs: the exact replay plus the rerun, against one trial.

A trial whose loss broke is first rerun from its own start on its own compiled graph
(``jobs.localization._cause.cause_of``, called by ``diagnose``); when that rerun matches the trial
bit for bit up to the step before and stays finite at the failing step, the cause is
``not_reproduced`` and the driver runs the whole trial once more, on another device where one is
free (``sweep.scheduling._reruns``). The issue's target: the replay plus the rerun cost at most
1.5 times one trial.

Here, in one process on one pinned CPU core as a sweep's CPU worker runs (one ``GraphCache``, the
graph compiled once by an untimed warm-up trial), each round times:

- **clean**: one trial to its end (``run_trial``), nothing armed: the denominator;
- **faulty**: the same trial with the workload's own transient fault armed for step ``FAULT_STEP``
  (``benchmarks/fault_workload.py``: one NaN in a hidden activation, once); it diverges there and
  stops ``abort_after`` steps later;
- **diagnose**: ``diagnose`` of the faulty result, as the worker calls it, which must return one
  ``not_reproduced`` row at ``FAULT_STEP``;
- **rerun**: ``run_trial`` of the same trial again, which must complete with the clean trial's losses
  bit for bit (the rerun's result is the trial's).

The figure is (diagnose + rerun) / clean, per round, the median over rounds; which of clean and
faulty goes first alternates. The rerun here runs on the same worker, whose graph is compiled; a rerun
on a device that never ran this graph pays one compile more, shown apart. The full-size run also writes
``benchmarks/results/bench_faults.json`` (machine, date, every round's phases, the checks).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from ._common import as_a_cpu_worker, log
from ._machine import machine_rows, now_utc

NAME = "bench_faults"
WORKLOAD = f"{Path(__file__).resolve().with_name('fault_workload.py')}:make"
TARGET = 1.5
FAULT_STEP = 20
#: two timings of the same steps differ by noise (on a shared machine, by a fifth): the median ``diagnose``
#: may be this much shorter than the median of its rerun's steps timed bare
NOISE = 0.8
RESULTS_JSON = Path(__file__).resolve().parent / "results" / f"{NAME}.json"


def _config(steps: int) -> Any:
    from ampsweep.contracts import Configuration
    from ampsweep.jobs import TrialConfig

    return TrialConfig.of(Configuration("O2"), 0, WORKLOAD, steps)


def _timed(body: Any) -> tuple[Any, float, int]:
    """``body()``, its seconds, and the steps it ran (the workload's op counts its calls)."""
    from .fault_workload import calls

    before = calls()
    started = time.perf_counter()
    value = body()
    return value, time.perf_counter() - started, calls() - before


def _losses(result: Any) -> Any:
    return result.steps.column("loss").to_numpy(zero_copy_only=False)


def _steps_s(result: Any) -> float:
    """Σ of the trial's own step times (its steps table): the training inside ``run_trial``."""
    return float(result.steps.column("step_ms").to_numpy(zero_copy_only=False).sum()) / 1000.0


def run(tiny: bool = False) -> str:
    import numpy as np

    from ampsweep.contracts import NOT_REPRODUCED, Outcome
    from ampsweep.jobs.localization._diagnose import diagnose
    from ampsweep.jobs.training._step import GraphCache
    from ampsweep.jobs.training._trainer import run_trial

    from .fault_workload import arm, armed

    machine = dict(machine_rows())  # before pinning: the machine, not this process's share of it
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {(os.cpu_count() or 1) - 1})
    as_a_cpu_worker()
    steps, fault_step, rounds = (40, 10, 2) if tiny else (200, FAULT_STEP, 7)
    config = _config(steps)
    graphs = GraphCache()
    log(NAME, f"warm-up: {steps} steps of fault_workload.py under O2 float16, compiling its graph")
    warm_up = run_trial(config, WORKLOAD, None, graphs)
    if warm_up.outcome != Outcome.COMPLETED:
        raise RuntimeError(f"the clean warm-up trial ended {warm_up.outcome}: {warm_up.error}")

    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for index in range(rounds):
        row: dict[str, Any] = {"round": index + 1}

        def clean(row: dict[str, Any] = row) -> None:
            result, row["clean_s"], row["clean_ran"] = _timed(
                lambda: run_trial(config, WORKLOAD, None, graphs)
            )
            row["clean_wall_s"], row["clean_steps_s"] = result.wall_s, _steps_s(result)
            row["clean_losses"] = _losses(result)

        def faulty(row: dict[str, Any] = row) -> None:
            started = time.perf_counter()
            arm(fault_step)
            broken, row["faulty_s"], row["faulty_ran"] = _timed(
                lambda: run_trial(config, WORKLOAD, None, graphs)
            )
            if armed() or broken.outcome != Outcome.DIVERGED or broken.first_nonfinite_step != fault_step:
                raise RuntimeError(
                    f"the armed fault did not break step {fault_step}: {broken.outcome}, first non-finite "
                    f"step {broken.first_nonfinite_step}"
                )
            table, row["diagnose_s"], row["diagnose_ran"] = _timed(
                lambda: diagnose(broken, WORKLOAD, None, graphs)
            )
            found = table.to_pylist()
            if [(r["cause"], r["replay_step"]) for r in found] != [(NOT_REPRODUCED, fault_step)]:
                raise RuntimeError(f"diagnose did not call step {fault_step} not_reproduced: {found}")
            again, row["rerun_s"], row["rerun_ran"] = _timed(
                lambda: run_trial(config, WORKLOAD, None, graphs)
            )
            if again.outcome != Outcome.COMPLETED:
                raise RuntimeError(f"the rerun ended {again.outcome}: {again.error}")
            row["total_s"] = time.perf_counter() - started
            row["faulty_wall_s"], row["faulty_steps_s"] = broken.wall_s, _steps_s(broken)
            row["rerun_wall_s"], row["rerun_steps_s"] = again.wall_s, _steps_s(again)
            row["rerun_losses"] = _losses(again)
            row["faulty_steps"] = broken.steps.num_rows

        first, second = (clean, faulty) if index % 2 == 0 else (faulty, clean)
        first()
        second()
        row["replay_steps_s"] = _replay_steps_s(config, graphs, fault_step + 1)
        row["order"] = "clean first" if index % 2 == 0 else "faulty first"
        row["ratio"] = (row["diagnose_s"] + row["rerun_s"]) / row["clean_s"]
        rows.append(row)
        log(
            NAME,
            f"round {index + 1}: clean {row['clean_s']:.2f} s, faulty {row['faulty_s']:.2f} s, diagnose "
            f"{row['diagnose_s']:.2f} s, rerun {row['rerun_s']:.2f} s: {row['ratio']:.2f}x",
        )
        problems += _checks(row, steps, fault_step, np)

    problems += _replay_check(rows, fault_step)
    figures = _figures(machine, rows, problems, warm_up.compile_s, steps, fault_step)
    if not tiny:
        RESULTS_JSON.parent.mkdir(parents=True, exist_ok=True)
        RESULTS_JSON.write_text(json.dumps(figures, indent=2, ensure_ascii=False) + "\n")
    return _section(figures, tiny)


_ROUND_KEYS = (
    "round",
    "order",
    "clean_s",
    "faulty_s",
    "diagnose_s",
    "rerun_s",
    "total_s",
    "ratio",
    "replay_steps_s",
    "clean_ran",
    "faulty_ran",
    "diagnose_ran",
    "rerun_ran",
)


def _figures(
    machine: dict[str, str],
    rows: list[dict[str, Any]],
    problems: list[str],
    compile_s: float,
    steps: int,
    fault_step: int,
) -> dict[str, Any]:
    """Everything the section says, as ``results/bench_faults.json`` holds it."""

    def median(values: Any) -> float:
        return float(statistics.median(values))

    return {
        "machine": machine,
        "date": now_utc(),
        "workload": "benchmarks/fault_workload.py",
        "steps": steps,
        "fault_step": fault_step,
        "faulty_steps_recorded": rows[0]["faulty_steps"],
        "faulty_steps_run": max(r["faulty_ran"] for r in rows),
        "rounds": [{key: row[key] for key in _ROUND_KEYS} for row in rows],
        "medians_s": {
            phase: median(r[f"{phase}_s"] for r in rows)
            for phase in ("clean", "faulty", "diagnose", "rerun", "replay_steps")
        },
        "numerator": "diagnose_s + rerun_s",
        "denominator": "clean_s",
        "ratio_median": median(r["ratio"] for r in rows),
        "end_to_end_median": median(
            (r["faulty_s"] + r["diagnose_s"] + r["rerun_s"]) / r["clean_s"] for r in rows
        ),
        "bookkeeping_gap_max_s": max(
            r["total_s"] - (r["faulty_s"] + r["diagnose_s"] + r["rerun_s"]) for r in rows
        ),
        "compile_s": compile_s,
        "target": TARGET,
        "checks": problems or "ok",
    }


def _replay_steps_s(config: Any, graphs: Any, steps: int) -> float:
    """The steps of ``diagnose``'s exact rerun alone: ``steps`` calls of the trial's step on its held graph
    and batches, as ``cause_of`` makes them (the work inside ``diagnose``, timed bare)."""
    import itertools

    from ampsweep.jobs.training._trainer import begin_trial, trial_step

    step, reused, batches, _ = begin_trial(config, WORKLOAD, graphs, None, None)
    if not reused:
        raise RuntimeError("the worker's graph of the trial was not held: the bare replay would compile")
    drawn = list(itertools.islice(batches, steps))
    clip, every = step.clip_tensor(config.clip), max(1, config.layer_every)
    started = time.perf_counter()
    for index, batch in enumerate(drawn):
        trial_step(step, clip, batch, index, every).asnumpy()
    return time.perf_counter() - started


def _checks(row: dict[str, Any], steps: int, fault_step: int, np: Any) -> list[str]:
    """A phase shorter than the work inside it is a measuring bug; so is a phase that ran other steps than
    it must, or a rerun that is not the trial."""
    where = f"round {row['round']}"
    found = []
    for phase in ("clean", "faulty", "rerun"):
        outer, inner, stepped = row[f"{phase}_s"], row[f"{phase}_wall_s"], row[f"{phase}_steps_s"]
        if not outer >= inner >= stepped:
            found.append(
                f"{where}: {phase}: timed {outer:.3f} s, `run_trial`'s own wall {inner:.3f} s, "
                f"its steps {stepped:.3f} s: not in that order"
            )
    wanted = {"clean": steps, "diagnose": fault_step + 1, "rerun": steps}
    for phase, count in wanted.items():
        if row[f"{phase}_ran"] != count:
            found.append(f"{where}: {phase} ran {row[f'{phase}_ran']} steps, not {count}")
    if row["faulty_ran"] < row["faulty_steps"]:
        found.append(
            f"{where}: the faulty run ran {row['faulty_ran']} steps, fewer than its {row['faulty_steps']} rows"
        )
    parts = row["faulty_s"] + row["diagnose_s"] + row["rerun_s"]
    if parts > row["total_s"]:
        found.append(f"{where}: the phases sum to {parts:.3f} s, more than their span {row['total_s']:.3f} s")
    if not np.array_equal(row["rerun_losses"].view(np.uint64), row["clean_losses"].view(np.uint64)):
        found.append(f"{where}: the rerun's losses are not the clean trial's bit for bit")
    return found


def _replay_check(rows: list[dict[str, Any]], fault_step: int) -> list[str]:
    """``diagnose`` holds its exact rerun's steps: its median is not (beyond noise) below theirs timed bare."""
    diagnose = statistics.median(r["diagnose_s"] for r in rows)
    bare = statistics.median(r["replay_steps_s"] for r in rows)
    if diagnose >= NOISE * bare:
        return []
    return [
        f"median diagnose {diagnose:.3f} s is shorter than {NOISE} × the {fault_step + 1} steps of its "
        f"exact rerun timed bare ({bare:.3f} s)"
    ]


def _in_flight(figures: dict[str, Any]) -> str:
    """The steps the broken run ran past its last recorded one, where it ran any (steps in flight)."""
    extra = figures["faulty_steps_run"] - figures["faulty_steps_recorded"]
    return f", and ran up to {extra} more: the steps in flight when it stopped" if extra > 0 else ""


def _section(figures: dict[str, Any], tiny: bool) -> str:
    rounds, medians = figures["rounds"], figures["medians_s"]
    steps, fault_step, ratio = figures["steps"], figures["fault_step"], figures["ratio_median"]
    machine, problems = figures["machine"], figures["checks"]
    lines = [
        "## Telling a fault from numerics: the replay and the rerun against one trial (bench_faults)",
        "",
        f"One trial of `benchmarks/fault_workload.py` (an MLP, O2, float16, no loss scale, {steps} steps, "
        f"`abort_after` 10) with the workload's own transient fault: one NaN in a hidden activation at step "
        f"{fault_step}, once, as a flipped bit on a device would put it. In one process on one pinned core "
        f"({machine['CPU']}; {machine['Cores']}; MindSpore {machine['MindSpore']}), as a CPU worker runs "
        "trials: one graph cache, the graph compiled by an untimed warm-up trial. Each round times a "
        "**clean** trial to its end (`run_trial`) and the **faulty** one: its run (diverged at step "
        f"{fault_step}), `diagnose` (its exact rerun from the trial's start to step {fault_step}, found "
        "`not_reproduced`), and the **rerun** of the whole trial (`run_trial`, clean). "
        f"{len(rounds)} rounds, which goes first alternating." + (" _Tiny smoke-test size._" if tiny else ""),
        "",
        "| round | order | clean s | faulty run s | diagnose s | its rerun's steps, bare s | rerun s "
        "| (diagnose + rerun) / clean |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {r['round']} | {r['order']} | {r['clean_s']:.3f} | {r['faulty_s']:.3f} | {r['diagnose_s']:.3f} "
            f"| {r['replay_steps_s']:.3f} | {r['rerun_s']:.3f} | {r['ratio']:.2f} |"
            for r in rounds
        ),
        f"| **median** | | {medians['clean']:.3f} | {medians['faulty']:.3f} | {medians['diagnose']:.3f} "
        f"| {medians['replay_steps']:.3f} | {medians['rerun']:.3f} | **{ratio:.2f}** |",
        "",
        f"**(Diagnose + rerun) / one clean trial: {ratio:.2f}×** (median of the rounds' ratios; target ≤ "
        f"{TARGET}×: {'**met**' if ratio <= TARGET else '**missed**'}). The numerator is what telling the "
        "fault costs beyond the broken run itself: the exact replay (`diagnose`) plus the rerun that "
        "replaces the trial; the denominator is one clean trial's `run_trial`. With the broken run counted "
        f"too, (run + diagnose + rerun) / clean: {figures['end_to_end_median']:.2f}× (the broken run "
        f"recorded {figures['faulty_steps_recorded']} of {steps} steps, `abort_after` 10 past the fault"
        + _in_flight(figures)
        + ").",
        "",
        f"A rerun on a device that never ran this graph also compiles it: {figures['compile_s']:.2f} s here "
        "(the warm-up trial's `compile_s`), once per device and graph.",
        "",
        '"Its rerun\'s steps, bare": the '
        f"{fault_step + 1} steps `diagnose`'s exact rerun runs, timed alone after each round (the trial's "
        "step on the worker's held graph and batches, as `cause_of` calls it); the rest of `diagnose` is "
        "loading the trial's start into the graph, looking for a non-finite value in its batches, comparing "
        "the losses and writing the row.",
        "",
        "Checks: every faulty run diverged at the armed step, `diagnose` named it `not_reproduced` there, "
        "every rerun's losses equal the clean trial's bit for bit; each phase ran the steps it must (the "
        f"workload's op counts its calls: clean and rerun {steps}, `diagnose` {fault_step + 1}, the faulty "
        "run at least the steps it recorded); each `run_trial` timed from outside "
        "≥ its own `wall_s` ≥ the sum of its steps' `step_ms`; the median `diagnose` ≥ "
        f"{NOISE} × the median of its rerun's steps bare (two timings of the same steps differ by noise); "
        "the three phases of a faulty trial sum to no more than their span (largest gap "
        f"{figures['bookkeeping_gap_max_s'] * 1000:.1f} ms, the benchmark's own bookkeeping): "
        + ("**ok**." if problems == "ok" else "**failed**:"),
    ]
    if problems != "ok":
        lines += [f"- {problem}" for problem in problems]
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(run(tiny="--tiny" in sys.argv))
