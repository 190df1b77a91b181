"""ampsweep against Ray Tune: the same grid, the same training step, per-step metrics on both sides.

The grid: O0/O2 × black list ``[]`` / ``[NaiveCrossEntropy]`` × clip off/1.0/5.0
× seeds 0, 1 = 24 trials of 200 steps of ``benchmarks/mlp_workload.py`` (a
small MLP whose hand-written cross entropy overflows float16), 2 workers.

* **ampsweep**: the real CLI end to end, ``ampsweep run SPEC --out TMP
  --workers 2 --no-progress`` in a child process (Python start, validation,
  Ray start, two actors, 24 trials, the report).
* **Ray Tune**, idiomatic: ``tune.Tuner(trainable, param_space=…grid_search…,
  tune_config=TuneConfig(max_concurrent_trials=2),
  run_config=RunConfig(storage_path=TMP))``, also in a child process of its own
  (Python start, ``ray.init``, ``Tuner.fit``). The function trainable is what a
  user writes in plain MindSpore: build the workload, cast it the way ampsweep
  does (``WithLossCell`` so the loss is cast too; ampsweep's ``apply_amp``:
  ``auto_mixed_precision``, then ``to_float(float32)`` on each listed instance), one
  jitted step that clips by global norm with a Tensor threshold, and
  ``tune.report`` every step with the content of ampsweep's steps table (loss,
  grad_norm, clipped, nonfinite, skipped, scale, step time). It stops a trial
  after the same ``abort_after`` consecutive non-finite losses. It runs
  MindSpore with one op thread, as ampsweep's CPU workers do (two MindSpore
  processes on two cores thrash otherwise), and Tune's console output is off
  (``verbose=0``): both choices favour Tune.

Bytes are everything under each side's output folder (ampsweep: the sweep
folder with ``layers`` and the report; Tune: the whole ``storage_path``),
divided by the rows of per-step metrics each side wrote: one per step trained,
plus, on ampsweep's side, the rows of the trials it copied from a trial that
computes the same instead of training (the table says how many).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ._common import ROOT, child_env, log, mb, run_cli, verdict
from ._machine import wait_for_quiet

NAME = "bench_vs_tune"
WORKLOAD = Path(__file__).resolve().with_name("mlp_workload.py")
TARGET_SPEEDUP = 5.0
TARGET_BYTES = 8.0
WORKERS = 2
#: ampsweep and Tune alternate, the order reversed every round: this machine's speed drifts within
#: minutes (Tune's own wall time spread 68-99 s over runs of one day), and a single back-to-back pair
#: put the whole drift into the ratio
ROUNDS = 2
ABORT_AFTER = 10
FULL = {
    "steps": 200,
    "grid": {
        "amp_level": ["O0", "O2"],
        "black_list": [[], ["NaiveCrossEntropy"]],
        "clip": [None, 1.0, 5.0],
        "seed": [0, 1],
    },
}
TINY = {"steps": 10, "grid": {"amp_level": ["O0", "O2"], "black_list": [[]], "clip": [None], "seed": [0]}}


def _spec(size: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "vs-tune",
        "workload": f"{WORKLOAD}:make",
        "steps": size["steps"],
        "abort_after": ABORT_AFTER,
        # the loss cast with the network, as the Tune trainable does (a cast WithLossCell):
        # that is where the hand-written cross entropy overflows
        "grid": {**size["grid"], "loss_scale": ["none"], "dtype": ["float16"], "loss_placement": ["inside"]},
        "devices": "cpu",
    }


# --- the Ray Tune side ---------------------------------------------------------------------------


def tune_trainable(config: dict[str, Any]) -> None:
    """A Ray Tune function trainable: one trial of the grid, ``tune.report`` every step.

    The workload is ``benchmarks/mlp_workload.py`` unless ``config["workload"]``
    names another factory (``package.module:make``, built with
    ``config["workload_args"]``); ``config["loss_placement"]`` (``inside``, the
    default: the ``WithLossCell`` is cast; ``outside``: the network alone) and
    ``config["abort_after"]`` follow the spec keys of the same names.
    """
    entered = time.time()
    import importlib

    import mindspore as ms
    import numpy as np
    from mindspore import nn, ops
    from mindspore.common import dtype as mstype
    from ray import tune

    ms.set_device("CPU")
    ms.device_context.cpu.op_tuning.threads_num(1)
    seed = config["seed"]
    ms.set_seed(seed)
    np.random.seed(seed)
    module_name, _, factory = config.get("workload", "benchmarks.mlp_workload:make").partition(":")
    module = importlib.import_module(module_name)
    workload = getattr(module, factory)(seed, **config.get("workload_args", {}))
    abort_after = config.get("abort_after", ABORT_AFTER)

    def cast(cell: Any) -> Any:
        # ampsweep's own cast (auto_mixed_precision, then to_float(float32) on each listed
        # instance), so both sides compute the same
        from ampsweep.jobs.training._amp import apply_amp

        classes = [getattr(module, n, None) or getattr(nn, n) for n in config["black_list"]]
        return apply_amp(cell, config["amp_level"], classes, "float16")

    if config.get("loss_placement", "inside") == "outside":
        net = nn.WithLossCell(cast(workload.network), workload.loss_fn)
    else:
        net = cast(nn.WithLossCell(workload.network, workload.loss_fn))
    optimizer = workload.optimizer(workload.network.trainable_params())
    grad_fn = ms.value_and_grad(net, None, optimizer.parameters)
    one = ms.Tensor(1.0, mstype.float32)

    def step(clip: Any, x: Any, y: Any) -> Any:
        loss, grads = grad_fn(x, y)
        norm = ops.sqrt(
            ops.stack([ops.reduce_sum(ops.square(g.astype(mstype.float32))) for g in grads]).sum()
        )
        factor = ops.select(norm > clip, clip / (norm + 1e-6), one)
        loss = ops.depend(loss, optimizer(tuple(g * factor.astype(g.dtype) for g in grads)))
        return ops.stack([loss.astype(mstype.float32), norm])

    jitted = ms.jit(step)
    clip_value = config["clip"]
    clip = ms.Tensor(float(np.finfo(np.float32).max) if clip_value is None else clip_value, mstype.float32)
    source = iter(workload.batches)
    batches = [tuple(ms.Tensor(a) for a in next(source)) for _ in range(config["steps"])]
    ready = time.time()
    compile_s = report_s = 0.0
    bad_run = 0
    steps = 0
    for index, batch in enumerate(batches):
        started = time.perf_counter()
        loss, norm = (float(v) for v in jitted(clip, *batch).asnumpy())
        step_ms = (time.perf_counter() - started) * 1000.0
        if index == 0:
            compile_s = step_ms / 1000.0
        nonfinite = not (np.isfinite(loss) and np.isfinite(norm))
        reported = time.perf_counter()
        tune.report(
            {
                "step": index,
                "loss": loss,
                "grad_norm": norm,
                "clipped": bool(clip_value is not None and norm > clip_value),
                "nonfinite": nonfinite,
                "skipped": False,
                "loss_scale": 1.0,
                "step_ms": step_ms,
            }
        )
        report_s += time.perf_counter() - reported
        steps += 1
        bad_run = 0 if np.isfinite(loss) else bad_run + 1  # ampsweep's rule: the loss non-finite
        if bad_run >= abort_after:
            break
    done = time.time()
    # Timings for the breakdown go to a side folder, outside Tune's storage_path.
    side = Path(config["timings_dir"]) / f"{os.getpid()}-{entered:.6f}.json"
    side.write_text(
        json.dumps(
            {
                "entered": entered,
                "setup_s": ready - entered,
                "compile_s": compile_s,
                "loop_s": done - ready,
                "report_s": report_s,
                "steps": steps,
                "done": done,
            }
        )
    )


def _tune_side(args: dict[str, Any], out_json: Path) -> None:
    """Child process body: Ray start, Tuner.fit, counts; the parent times the whole process."""
    started = time.perf_counter()
    import ray
    from ray import tune

    imported = time.perf_counter()
    ray.init(address="local", num_cpus=WORKERS, include_dashboard=False, log_to_driver=False)
    ray_s = time.perf_counter() - imported
    grid = args["grid"]
    param_space = {
        "amp_level": tune.grid_search(grid["amp_level"]),
        "black_list": tune.grid_search(grid["black_list"]),
        "clip": tune.grid_search(grid["clip"]),
        "seed": tune.grid_search(grid["seed"]),
        "steps": args["steps"],
        "timings_dir": args["timings_dir"],
    }
    tuner = tune.Tuner(
        tune_trainable,
        param_space=param_space,
        tune_config=tune.TuneConfig(max_concurrent_trials=WORKERS),
        run_config=tune.RunConfig(storage_path=args["storage"], name="vs-tune", verbose=0),
    )
    fit_started = time.perf_counter()
    results = tuner.fit()
    fit_s = time.perf_counter() - fit_started
    errors = [str(r.error).splitlines()[0] for r in results if r.error]
    steps = sum(len(r.metrics_dataframe) for r in results if r.metrics_dataframe is not None)
    ray.shutdown()
    out_json.write_text(
        json.dumps(
            {
                "import_s": imported - started,
                "ray_init_s": ray_s,
                "fit_s": fit_s,
                "trials": len(results),
                "errors": errors,
                "steps": steps,
            }
        )
    )


def run_tune(size: dict[str, Any], tmp: Path) -> dict[str, Any]:
    storage = tmp / "tune-storage"
    timings = tmp / "tune-timings"
    timings.mkdir(parents=True)
    args = {
        "grid": size["grid"],
        "steps": size["steps"],
        "storage": str(storage),
        "timings_dir": str(timings),
    }
    out_json = tmp / "tune.json"
    started_at = time.time()
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_vs_tune", "--tune-side", json.dumps(args), str(out_json)],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0 or not out_json.is_file():
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"the Ray Tune side exited {done.returncode}:\n{tail}")
    result = json.loads(out_json.read_text())
    result["wall_s"] = wall
    result["started_at"] = started_at
    result["trainables"] = [json.loads(p.read_text()) for p in sorted(timings.glob("*.json"))]
    result["bytes_by_kind"] = _tune_bytes(storage)
    return result


def _tune_bytes(storage: Path) -> dict[str, int]:
    """Bytes under Tune's storage_path by kind of file (result.json, progress.csv, …)."""
    kinds: dict[str, int] = {}
    for file in storage.rglob("*"):
        if file.is_file():
            name = file.name
            if name.startswith("events.out.tfevents"):
                key = "events.out.tfevents (TensorBoard)"
            elif file.parent != storage / "vs-tune" and name in {
                "result.json",
                "progress.csv",
                "params.json",
                "params.pkl",
            }:
                key = f"{name} (per trial)"
            else:
                key = f"{name} (experiment)" if file.parent == storage / "vs-tune" else f"{name} (other)"
            kinds[key] = kinds.get(key, 0) + file.stat().st_size
    return kinds


# --- the section ---------------------------------------------------------------------------------


def run(tiny: bool = False) -> str:
    size = TINY if tiny else FULL
    n_trials = 1
    for values in size["grid"].values():
        n_trials *= len(values)
    rounds: list[tuple[Any, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="ampsweep-bench-tune-") as tmp_name:
        tmp = Path(tmp_name)
        for index in range(1 if tiny else ROUNDS):
            sides = ("ampsweep", "tune") if index % 2 == 0 else ("tune", "ampsweep")
            got: dict[str, Any] = {}
            for side in sides:
                # the other side's Ray processes may still wind down: each side starts on quiet CPUs
                waited, _ = wait_for_quiet()
                log(NAME, f"waited {waited:.0f} s for quiet CPUs")
                if side == "ampsweep":
                    log(NAME, f"round {index + 1}, ampsweep: {n_trials} trials x {size['steps']} steps")
                    got[side] = run_cli(_spec(size), tmp / f"ampsweep-{index}", WORKERS)
                    log(NAME, f"ampsweep took {got[side].wall_s:.1f} s")
                else:
                    log(NAME, f"round {index + 1}, Ray Tune on the same grid")
                    got[side] = run_tune(size, tmp / f"tune-{index}")
                    log(NAME, f"Ray Tune took {got[side]['wall_s']:.1f} s")
            rounds.append((got["ampsweep"], got["tune"]))
    return _section(size, n_trials, rounds, tiny)


def _rounds_table(rounds: list[tuple[Any, dict[str, Any]]]) -> list[str]:
    table = ["| round | first | ampsweep s | Ray Tune s | Ray Tune / ampsweep |", "|---:|---|---:|---:|---:|"]
    for index, (ours, theirs) in enumerate(rounds):
        first = "ampsweep" if index % 2 == 0 else "Ray Tune"
        table.append(
            f"| {index + 1} | {first} | {ours.wall_s:.1f} | {theirs['wall_s']:.1f} | "
            f"{theirs['wall_s'] / ours.wall_s:.2f}× |"
        )
    return table


def _section(
    size: dict[str, Any], n_trials: int, rounds: list[tuple[Any, dict[str, Any]]], tiny: bool
) -> str:
    ours, theirs = rounds[-1]  # the table and the breakdown: the last round
    t = ours.trials
    our_steps = ours.steps_rows
    tune_steps = theirs["steps"]
    our_per_k = ours.bytes_total / max(our_steps, 1) * 1000
    tune_bytes = sum(theirs["bytes_by_kind"].values())
    tune_per_k = tune_bytes / max(tune_steps, 1) * 1000
    # the verdict: Σ Tune / Σ ampsweep over the rounds
    speedup = sum(tune["wall_s"] for _, tune in rounds) / sum(mine.wall_s for mine, _ in rounds)
    fewer = tune_per_k / our_per_k if our_per_k else float("nan")
    outcomes = t["outcome"].value_counts().to_dict()

    # ampsweep's phases, from the child's wall clock and the trials table
    startup = ours.first_start - ours.started_at
    sweep_phase = ours.last_end - ours.first_start
    tail = ours.ended_at - ours.last_end
    per_worker = t.groupby("worker_index")["wall_s"].sum()
    our_compiles = ours.compiles
    copies = t[t["attempts"] == 0]  # copied from a trial that computes the same, not trained
    equivalents = int(copies["equivalent_to"].notna().sum())
    copied_rows = int(copies["steps_run"].sum())
    our_compile_s = float(t["compile_s"].sum())

    # Tune's: inside the trainables (side files) and outside them
    tr = theirs["trainables"]
    setup = sum(x["setup_s"] for x in tr)
    compile_s = sum(x["compile_s"] for x in tr)
    loop = sum(x["loop_s"] for x in tr)
    report = sum(x["report_s"] for x in tr)
    inside = setup + loop
    first_entered = min(x["entered"] for x in tr) - theirs["started_at"] if tr else float("nan")
    outside = theirs["fit_s"] - inside / WORKERS

    rows = [
        (
            "End-to-end wall time (child process start to exit)",
            f"{ours.wall_s:.1f} s",
            f"{theirs['wall_s']:.1f} s",
        ),
        (
            "Trials (outcomes)",
            f"{len(t)} ({', '.join(f'{k} {v}' for k, v in sorted(outcomes.items()))})",
            f"{theirs['trials']} ({len(theirs['errors'])} errors)",
        ),
        (
            "Rows of per-step metrics (steps trained)",
            f"{our_steps:,} ({our_steps - copied_rows:,}: {len(copies)} trials copied, not trained)",
            f"{tune_steps:,} ({tune_steps:,})",
        ),
        ("Bytes written", mb(ours.bytes_total), mb(tune_bytes)),
        ("**Bytes per 1000 rows**", f"**{our_per_k / 1e3:.1f} kB**", f"**{tune_per_k / 1e3:.1f} kB**"),
        ("Start to first trial's training", f"{startup:.1f} s", f"{first_entered:.1f} s (trainable entered)"),
        (
            "Compiles",
            f"{our_compiles} ({our_compile_s:.1f} s in all)",
            f"{len(tr)} ({compile_s:.1f} s in all, first step)",
        ),
    ]
    table = ["| | ampsweep | Ray Tune |", "|---|---:|---:|"] + [f"| {a} | {b} | {c} |" for a, b, c in rows]

    ours_bytes = ", ".join(
        f"`{k}` {mb(v)}" for k, v in sorted(ours.bytes_by_table.items(), key=lambda kv: -kv[1])
    )
    tune_kinds = ", ".join(
        f"{k} {mb(v)}" for k, v in sorted(theirs["bytes_by_kind"].items(), key=lambda kv: -kv[1])[:6]
    )
    met_speed = speedup >= TARGET_SPEEDUP
    met_bytes = fewer >= TARGET_BYTES
    lines = [
        "## Against Ray Tune (bench_vs_tune)",
        "",
        f"**Targets:** at least {TARGET_SPEEDUP:g}× faster end to end — {verdict(met_speed)} "
        f"(**{speedup:.2f}×**); at least {TARGET_BYTES:g}× fewer bytes per 1000 rows of per-step metrics — "
        f"{verdict(met_bytes)} (**{fewer:.1f}×**)."
        + (" _Tiny smoke-test size: the figures mean nothing._" if tiny else ""),
        "",
        f"The grid: {' × '.join(f'{k} {v}' for k, v in size['grid'].items())} = {n_trials} trials of "
        f"{size['steps']} steps of `benchmarks/mlp_workload.py` (an MLP 16→64→64→10 whose hand-written "
        "cross entropy overflows float16), loss scaling off, float16, the loss cast with the network (`loss_placement: inside`), "
        f"abort after {ABORT_AFTER} non-finite steps, {WORKERS} workers. ampsweep: `ampsweep run SPEC "
        f"--out TMP --workers {WORKERS} --no-progress` as a child process. Ray Tune {ray_version()}: "
        "`Tuner(trainable, param_space=grid_search…, TuneConfig(max_concurrent_trials=2), "
        "RunConfig(storage_path=TMP, verbose=0))` in a child process, a function trainable in plain "
        "MindSpore with the same AMP casting, global-norm clipping and abort rule, `tune.report` every "
        "step with the steps table's content, one op thread per trial. Both wall times run from starting "
        f"the child to its exit. The two alternate over {len(rounds)} round(s), the order reversed every "
        "round, each side started once the CPUs were quiet (the other side's Ray processes wind down "
        "after its exit); the speed figure is Σ Tune / Σ ampsweep over the rounds.",
        "",
        *_rounds_table(rounds),
        "",
        f"Round {len(rounds)} in detail:",
        "",
        *table,
        "",
        "### Where the difference comes from",
        "",
        f"- **ampsweep** ({ours.wall_s:.1f} s): {startup:.1f} s from the command to the first trial "
        f"starting on a worker (Python and imports, validation that builds the workload once, Ray start, "
        f"actor start with the MindSpore import); the sweep phase, first trial start to last trial end, "
        f"{sweep_phase:.1f} s, in which each worker trained for "
        + " and ".join(f"{v:.1f} s" for v in per_worker.to_numpy())
        + f" (Σ `wall_s` per worker, {our_compiles} compiles for "
        f"{t['graph_id'].nunique()} distinct graphs on {t['worker_index'].nunique()} workers; "
        f"{len(copies)} trials copied from a trial that computes the same when it finished, not trained: "
        f"{equivalents} equivalent to another on its graph (a black list under O0), "
        f"{len(copies) - equivalents} whose clip the same run without it never reached); "
        f"then {tail:.1f} s for the report and the exit. One long-lived actor per worker imports "
        "MindSpore once and compiles each graph once; metrics leave the graph in blocks of 25 steps "
        "and each trial is three Parquet files written by the driver.",
        f"- **Ray Tune** ({theirs['wall_s']:.1f} s): {theirs['import_s']:.1f} s importing Ray Tune, "
        f"{theirs['ray_init_s']:.1f} s `ray.init`, {theirs['fit_s']:.1f} s in `Tuner.fit`. Inside the "
        f"{len(tr)} trainables, summed: {setup:.1f} s importing MindSpore and building the workload "
        f"(every trial is a fresh actor process: Tune does not reuse actors by default), {compile_s:.1f} s "
        f"compiling (a new network instance per trial compiles again), and {loop:.1f} s in the step loop, "
        f"of which {report:.1f} s inside `tune.report` (every step's report is a round trip to Tune's "
        f"trial bookkeeping). Per worker that is {inside / WORKERS:.1f} s; the remaining "
        f"{outside:.1f} s of `fit` is Tune's own: starting a trial actor per trial, processing results, "
        "writing experiment state.",
        f"- **Bytes**: ampsweep {ours_bytes}. Ray Tune {tune_kinds}: every reported step is a JSON line "
        "in `result.json` and a row in `progress.csv` (each repeating the trial's config and Tune's "
        "bookkeeping fields), plus a TensorBoard event where tensorboardX is installed, while ampsweep "
        "writes one compressed, typed Parquet row per step.",
        "",
    ]
    if ours.error:
        lines += [f"**Note:** {ours.error} — the figures above include the failed step.", ""]
    if theirs["errors"]:
        lines += [f"Ray Tune trial errors: {theirs['errors'][:3]}", ""]
    if not met_speed:
        lines += [
            f"Speed target missed: {speedup:.2f}× < {TARGET_SPEEDUP:g}× over these rounds (see the breakdown).",
            "",
        ]
    if not met_bytes:
        lines += [f"Bytes target missed: {fewer:.1f}× < {TARGET_BYTES:g}×.", ""]
    return "\n".join(lines)


def ray_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("ray")
    except metadata.PackageNotFoundError:
        return "?"


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--tune-side":
        _tune_side(json.loads(sys.argv[2]), Path(sys.argv[3]))
    else:
        print(run(tiny="--tiny" in sys.argv))
