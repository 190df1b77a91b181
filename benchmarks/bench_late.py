"""Time to answer a late divergence: the same late grid from step 0, forked from an FP32 prefix, and in Ray Tune.

The workload is ``ampsweep.jobs.workloads.late_softmax`` (a classifier whose
hand-written softmax, ``ExpSoftmax``, overflows float16 once training has
sharpened the logits: under O2 its first NaN comes at steps 1,417 / 1,506 /
1,582 for seeds 0 / 1 / 2, and at 1,002 to 1,105 with clip 1.0, as its
docstring measured). The grid, as ``examples/late_softmax.yaml``:
O0/O2 × black list ``[]`` / ``[ExpSoftmax]`` / ``[ExpSoftmax, LayerNorm]``
(LayerNorm is on MindSpore's default O2 black list already: the third list is
the second plus a no-op) × clip off/1.0 × seeds 0, 1, 2 = 36 trials, 2
workers. Four ways to the answer, each timed as a whole child process, back to
back:

1. **ampsweep from step 0**: ``steps: 1800``, the real CLI end to end
   (``ampsweep run SPEC --out TMP --workers 2 --no-progress``).
2. **ampsweep forked**: the same grid with ``start_from: {steps: 1200}`` and
   ``steps: 600``: one FP32 prefix of 1,200 steps per seed, then every trial
   trains steps 1,200 to 1,799 from its seed's snapshot.
3. **Ray Tune, idiomatic**: ``tune.Tuner`` with ``grid_search`` over the same
   axes, ``bench_vs_tune``'s function trainable (plain MindSpore, the same AMP
   casting, clipping and abort rule, ``tune.report`` every step), 1,800 steps
   from step 0.
4. **Ray Tune + ASHA**: the same with ``ASHAScheduler(metric="loss",
   mode="min")``. ASHA stops trials whose loss is behind at its rungs; that
   saves steps, but it judges the loss, and a late NaN is not a high loss
   before it happens.

The answer: ampsweep's ``report/recommendation.json`` (amp_level, black_list,
clip); Tune's, the best finite mixed-precision trial by final loss (what
``ResultGrid.get_best_result(metric="loss", mode="min", filter_nan_and_inf=True)``
gives over the O2 trials). The section also writes
``benchmarks/results/bench_late.json`` (not at the tiny smoke-test size).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ._common import ROOT, child_env, recommended_config, run_cli, timed, verdict
from ._machine import machine_rows, now_utc
from .bench_vs_tune import ray_version

NAME = "bench_late"
HERE = Path(__file__).resolve().parent
RESULTS_JSON = HERE / "results" / "bench_late.json"
WORKLOAD = "ampsweep.jobs.workloads.late_softmax:make"
SOFTMAX = "ExpSoftmax"
SECOND = "LayerNorm"  # the workload's other layer class (already FP32 under O2: a no-op beside ExpSoftmax)
WORKERS = 2
ABORT_AFTER = 10
TARGET_RATIO = 0.5  # forked / from-zero wall time, the acceptance
LOSS_PLACEMENT = "outside"
FULL: dict[str, Any] = {
    "steps": 1800,
    "fork": 1200,
    "grid": {
        "amp_level": ["O0", "O2"],
        "black_list": [[], [SOFTMAX], [SOFTMAX, SECOND]],
        "clip": [None, 1.0],
        "seed": [0, 1, 2],
    },
    "tune_grid": None,  # the same grid
    "asha": {"grace_period": 100, "reduction_factor": 3},
}
TINY: dict[str, Any] = {
    "steps": 40,
    "fork": 20,
    "grid": {"amp_level": ["O0", "O2"], "black_list": [[]], "clip": [None], "seed": [0, 1]},
    "tune_grid": {"amp_level": ["O2"], "black_list": [[]], "clip": [None], "seed": [0]},
    "asha": {"grace_period": 5, "reduction_factor": 3},
}


def _n_trials(grid: dict[str, list[Any]]) -> int:
    n = 1
    for values in grid.values():
        n *= len(values)
    return n


def _spec(size: dict[str, Any], forked: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "late-forked" if forked else "late-zero",
        "workload": WORKLOAD,
        "steps": size["steps"] - size["fork"] if forked else size["steps"],
        "abort_after": ABORT_AFTER,
        "grid": {
            **size["grid"],
            "loss_scale": ["none"],
            "dtype": ["float16"],
            "loss_placement": [LOSS_PLACEMENT],
        },
        "devices": "cpu",
    }
    if forked:
        spec["start_from"] = {"steps": size["fork"]}
    return spec


# --- ampsweep: what the sweep folder says ---------------------------------------------------------


def _first_steps(root: Path) -> dict[str, int]:
    """Each trial's first recorded step, from the steps table (hive partition ``trial_id`` as a string)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    part = ds.partitioning(pa.schema([("trial_id", pa.string())]), flavor="hive")
    table = ds.dataset(root / "steps", format="parquet", partitioning=part).to_table(
        columns=["trial_id", "step"]
    )
    grouped = table.group_by("trial_id").aggregate([("step", "min")])
    return dict(
        zip(
            grouped.column("trial_id").to_pylist(),
            pc.cast(grouped.column("step_min"), pa.int64()).to_pylist(),
        )
    )


def _ampsweep_way(name: str, run: Any, prefix_steps: int, load: tuple[float, float]) -> dict[str, Any]:
    t = run.trials
    mixed = t[t["amp_level"] != "O0"]
    diverged = int((mixed["outcome"] == "diverged").sum())
    per_worker = t.groupby("worker_index")["wall_s"].sum()
    nan_steps = sorted(int(v) for v in mixed["first_nonfinite_step"].dropna())
    return {
        "name": name,
        "wall_s": round(run.wall_s, 2),
        "steps_trained": int(run.steps_rows + prefix_steps),
        "trial_steps": int(run.steps_rows),
        "prefix_steps": int(prefix_steps),
        "trials": int(len(t)),
        "nonfinite_trials": diverged,
        "first_nonfinite_steps": [nan_steps[0], nan_steps[-1]] if nan_steps else None,
        "answer": recommended_config(run.root),
        "load": list(load),
        # for the consistency checks: the sweep phase and each worker's busy time lie inside the wall
        "sweep_phase_s": round(run.last_end - run.first_start, 2),
        "startup_s": round(run.first_start - run.started_at, 2),
        "busiest_worker_s": round(float(per_worker.max()), 2),
        "error": run.error,
    }


# --- Ray Tune --------------------------------------------------------------------------------------


def _tune_side(args: dict[str, Any], out_json: Path) -> None:
    """Child process body: Ray start, ``Tuner.fit`` (with ASHA when asked), one summary row per trial."""
    import numpy as np
    import ray
    from ray import tune

    from benchmarks.bench_vs_tune import tune_trainable

    ray.init(address="local", num_cpus=WORKERS, include_dashboard=False, log_to_driver=False)
    grid = args["grid"]
    param_space = {
        **{axis: tune.grid_search(values) for axis, values in grid.items()},
        "steps": args["steps"],
        "workload": args["workload"],
        "workload_args": {},
        "loss_placement": args["loss_placement"],
        "abort_after": ABORT_AFTER,
        "timings_dir": args["timings_dir"],
    }
    scheduler = None
    if args["asha"]:
        from ray.tune.schedulers import ASHAScheduler

        scheduler = ASHAScheduler(
            metric="loss",
            mode="min",
            max_t=args["steps"],
            grace_period=args["asha"]["grace_period"],
            reduction_factor=args["asha"]["reduction_factor"],
        )
    tuner = tune.Tuner(
        tune_trainable,
        param_space=param_space,
        tune_config=tune.TuneConfig(max_concurrent_trials=WORKERS, scheduler=scheduler),
        run_config=tune.RunConfig(storage_path=args["storage"], name="late", verbose=0),
    )
    fit_started = time.perf_counter()
    results = tuner.fit()
    fit_s = time.perf_counter() - fit_started
    trials = []
    for result in results:
        row = {axis: result.config[axis] for axis in grid}
        row["error"] = str(result.error).splitlines()[0] if result.error else None
        df = result.metrics_dataframe
        if df is None or not len(df):
            row.update(steps=0, final_loss=None, first_nonfinite=None)
        else:
            loss = df["loss"].astype(float).to_numpy()
            norm = df["grad_norm"].astype(float).to_numpy()
            bad = ~(np.isfinite(loss) & np.isfinite(norm))
            final = float(loss[-1])
            row.update(
                steps=int(len(df)),
                final_loss=final if math.isfinite(final) else None,
                first_nonfinite=int(df["step"].to_numpy()[bad][0]) if bad.any() else None,
            )
        trials.append(row)
    ray.shutdown()
    out_json.write_text(json.dumps({"fit_s": fit_s, "trials": trials}))


def run_tune(size: dict[str, Any], tmp: Path, asha: bool) -> dict[str, Any]:
    """One Tune way in a child process of its own, timed from start to exit."""
    tmp.mkdir(parents=True)
    timings = tmp / "timings"
    timings.mkdir()
    args = {
        "grid": size["tune_grid"] or size["grid"],
        "steps": size["steps"],
        "storage": str(tmp / "storage"),
        "timings_dir": str(timings),
        "asha": size["asha"] if asha else None,
        "workload": WORKLOAD,
        "loss_placement": LOSS_PLACEMENT,
    }
    out_json = tmp / "tune.json"
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_late", "--tune-side", json.dumps(args), str(out_json)],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=7200,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0 or not out_json.is_file():
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"the Ray Tune side exited {done.returncode}:\n{tail}")
    result = json.loads(out_json.read_text())
    result["wall_s"] = wall
    result["trainables"] = [json.loads(p.read_text()) for p in sorted(timings.glob("*.json"))]
    return result


def _trial_key(trial: dict[str, Any]) -> tuple[Any, ...]:
    return trial["amp_level"], tuple(trial["black_list"]), trial["clip"], trial["seed"]


def _tune_answer(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """The best finite mixed-precision trial by final loss, as ``get_best_result`` over the O2 trials picks it."""
    finite = [t for t in trials if t["amp_level"] != "O0" and t["final_loss"] is not None and not t["error"]]
    if not finite:
        return {"status": "no finite mixed-precision trial", "config": None}
    best = min(finite, key=lambda t: t["final_loss"])
    return {
        "status": "best final loss",
        "config": {
            "amp_level": best["amp_level"],
            "black_list": list(best["black_list"]),
            "clip": best["clip"],
        },
        "seed": best["seed"],
        "final_loss": best["final_loss"],
        "steps": best["steps"],
    }


def _tune_way(name: str, result: dict[str, Any], steps: int, load: tuple[float, float]) -> dict[str, Any]:
    trials = result["trials"]
    mixed = [t for t in trials if t["amp_level"] != "O0"]
    tr = result["trainables"]
    inside = sum(x["setup_s"] + x["loop_s"] for x in tr)
    nan_steps = sorted(t["first_nonfinite"] for t in mixed if t["first_nonfinite"] is not None)
    return {
        "name": name,
        "wall_s": round(result["wall_s"], 2),
        "steps_trained": int(sum(t["steps"] for t in trials)),
        "trials": len(trials),
        "nonfinite_trials": len(nan_steps),
        "first_nonfinite_steps": [nan_steps[0], nan_steps[-1]] if nan_steps else None,
        # stopped by the scheduler: neither all the steps nor a non-finite loss
        "stopped_early": sum(t["steps"] < steps and t["first_nonfinite"] is None for t in trials),
        "errors": [t["error"] for t in trials if t["error"]],
        "answer": _tune_answer(trials),
        "load": list(load),
        "fit_s": round(result["fit_s"], 2),
        # a trainable writes its timings when it returns; one Tune stops (ASHA, max_t) never returns
        "trainables_timed": len(tr),
        "trainables_s_per_worker": round(inside / WORKERS, 2),
        "longest_trainable_s": round(max((x["setup_s"] + x["loop_s"] for x in tr), default=0.0), 2),
    }


# --- the section -----------------------------------------------------------------------------------


def run(tiny: bool = False) -> str:
    size = TINY if tiny else FULL
    n_trials = _n_trials(size["grid"])
    tune_trials = _n_trials(size["tune_grid"] or size["grid"])
    fork, steps = size["fork"], size["steps"]
    with tempfile.TemporaryDirectory(prefix="ampsweep-bench-late-") as tmp_name:
        tmp = Path(tmp_name)
        plan: list[tuple[str, str, Callable[[], Any]]] = [
            (
                "zero",
                f"ampsweep from step 0: {n_trials} trials x {steps} steps",
                lambda: run_cli(_spec(size, forked=False), tmp / "zero", WORKERS, timeout=7200),
            ),
            (
                "forked",
                f"ampsweep forked at {fork}: {n_trials} trials x {steps - fork} steps",
                lambda: run_cli(_spec(size, forked=True), tmp / "forked", WORKERS, timeout=7200),
            ),
            (
                "tune",
                f"Ray Tune: {tune_trials} trials x {steps} steps",
                lambda: run_tune(size, tmp / "tune", asha=False),
            ),
            ("asha", "Ray Tune + ASHA", lambda: run_tune(size, tmp / "tune-asha", asha=True)),
        ]
        reused = _reused_tune() if not tiny else None
        if reused is not None:  # only the two ampsweep ways run again
            plan = plan[:2]
        if tiny:
            # the smoke test checks the plumbing, not the figures: two ways at a time, and
            # no waiting for quiet CPUs (it runs beside other benchmarks), so it stays short
            with ThreadPoolExecutor(max_workers=WORKERS) as pool:
                futures = {key: pool.submit(timed, NAME, label, body, False) for key, label, body in plan}
                done = {key: future.result() for key, future in futures.items()}
        else:  # back to back, each after the CPUs have settled
            done = {key: timed(NAME, label, body, settle=True) for key, label, body in plan}
        (zero, zero_load), (forked, forked_load) = done["zero"], done["forked"]
        from ampsweep.contracts import SNAPSHOT_FOLDER

        snapshots = len(list((tmp / "forked" / "out" / SNAPSHOT_FOLDER).glob("*.ckpt")))
        # read while the sweep folders exist
        ways = [
            _ampsweep_way("ampsweep from step 0", zero, 0, zero_load),
            _ampsweep_way(f"ampsweep forked at {fork}", forked, snapshots * fork, forked_load),
        ]
        if reused is None:
            (tune_plain, tune_load), (tune_asha, asha_load) = done["tune"], done["asha"]
            ways += [
                _tune_way("Ray Tune", tune_plain, steps, tune_load),
                _tune_way("Ray Tune + ASHA", tune_asha, steps, asha_load),
            ]
            # the trials that go non-finite without ASHA and that ASHA stopped before their NaN
            diverging = {_trial_key(t) for t in tune_plain["trials"] if t["first_nonfinite"] is not None}
            hidden = [
                t for t in tune_asha["trials"] if _trial_key(t) in diverging and t["first_nonfinite"] is None
            ]
            ways[3]["diverging_without_asha"] = len(diverging)
            ways[3]["stopped_before_nan"] = len(hidden)
            ways[3]["stopped_before_nan_at_steps"] = sorted({t["steps"] for t in hidden})
        else:
            ways += reused["ways"]
        first_steps = _first_steps(forked.root)
        start_steps = sorted(set(forked.trials["start_step"].astype(int)))

    reference = ways[0]["answer"]["config"]
    for way in ways:
        config = way["answer"]["config"]
        way["same_answer_as_from_zero"] = (
            None
            if config is None or reference is None
            else sorted(config["black_list"]) == sorted(reference["black_list"])
        )
        way["same_config_as_from_zero"] = None if config is None or reference is None else config == reference
    wall = {w["name"]: w["wall_s"] for w in ways}
    z, f, t, a = (w["wall_s"] for w in ways)
    ratios = {
        "forked_over_from_zero": round(f / z, 3),
        "tune_over_forked": round(t / f, 2),
        "tune_asha_over_forked": round(a / f, 2),
        "tune_over_from_zero": round(t / z, 2),
        "steps_forked_over_from_zero": round(ways[1]["steps_trained"] / max(ways[0]["steps_trained"], 1), 3),
    }
    forked_first = min(first_steps.values()) if first_steps else None
    checks = _checks(ways, forked_first, size["fork"], start_steps, len(first_steps), n_trials)
    figures = {
        "machine": dict(machine_rows()),
        "date": now_utc(),
        "grid": size["grid"],
        "steps": size["steps"],
        "start_from": size["fork"],
        "workers": WORKERS,
        "ways": ways,
        "ratios": ratios,
        "forked_first_step": forked_first,
        "forked_start_steps": start_steps,
        "checks": checks,
        "wall_s": wall,
        "tune_measured": reused["date"] if reused is not None else None,
    }
    if not tiny:
        RESULTS_JSON.parent.mkdir(parents=True, exist_ok=True)
        RESULTS_JSON.write_text(json.dumps(figures, indent=2) + "\n")
    return _section(size, n_trials, tune_trials, figures, tiny)


#: Set to reuse the Ray Tune rows of the last committed run (their own date stays on them):
#: the two Tune ways take about 40 minutes on two cores, the ampsweep ways about 6.
REUSE_TUNE_ENV = "BENCH_LATE_REUSE_TUNE"


def _reused_tune() -> dict[str, Any] | None:
    """The Ray Tune ways of ``results/bench_late.json`` when ``BENCH_LATE_REUSE_TUNE=1``."""
    if os.environ.get(REUSE_TUNE_ENV) != "1" or not RESULTS_JSON.exists():
        return None
    previous = json.loads(RESULTS_JSON.read_text())
    tune = [w for w in previous["ways"] if w["name"].startswith("Ray Tune")]
    if len(tune) != 2:
        return None
    return {"date": previous.get("tune_measured") or previous["date"], "ways": tune}


def _checks(
    ways: list[dict[str, Any]],
    first: int | None,
    fork: int,
    start_steps: list[int],
    n_forked: int,
    n_trials: int,
) -> list[dict[str, Any]]:
    """Figures that must hold if the measuring is right: no phase shorter than the work inside it."""
    checks = []

    def check(what: str, ok: bool) -> None:
        checks.append({"check": what, "ok": bool(ok)})

    check(
        f"every forked trial's first step is {fork:,} or later (steps table: first step {_value(first)}, "
        f"{n_forked} of {n_trials} trials; trials table start_step {start_steps})",
        first is not None and first >= fork and n_forked == n_trials and start_steps == [fork],
    )
    for way in ways[:2]:
        check(
            f"{way['name']}: command to first trial {way['startup_s']:.1f} s + sweep phase {way['sweep_phase_s']:.1f} s "
            f"<= wall {way['wall_s']:.1f} s; the busiest worker's trials (sum of wall_s) {way['busiest_worker_s']:.1f} s "
            "<= wall",
            way["startup_s"] + way["sweep_phase_s"] <= way["wall_s"]
            and way["busiest_worker_s"] <= way["wall_s"],
        )
    for way in ways[2:]:
        check(
            f"{way['name']}: Tuner.fit {way['fit_s']:.1f} s <= wall {way['wall_s']:.1f} s; the "
            f"{way['trainables_timed']} of {way['trials']} trainables that returned (a trial Tune stops does not): "
            f"{way['trainables_s_per_worker']:.1f} s per worker, the longest {way['longest_trainable_s']:.1f} s, <= fit",
            way["fit_s"] <= way["wall_s"]
            and way["trainables_s_per_worker"] <= way["fit_s"]
            and way["longest_trainable_s"] <= way["fit_s"],
        )
    z, f = ways[0], ways[1]
    check(
        f"steps: forked {f['steps_trained']:,} = prefix {f['prefix_steps']:,} + trials {f['trial_steps']:,} "
        f"< from step 0 {z['steps_trained']:,}",
        f["steps_trained"] == f["prefix_steps"] + f["trial_steps"]
        and f["steps_trained"] < z["steps_trained"],
    )
    return checks


def _config_text(config: dict[str, Any] | None) -> str:
    if config is None:
        return "none"
    clip = "off" if config["clip"] is None else f"{config['clip']:g}"
    return f"{config['amp_level']}, black_list {config['black_list']}, clip {clip}"


def _nonfinite_text(way: dict[str, Any]) -> str:
    steps = way["first_nonfinite_steps"]
    if not steps:
        return str(way["nonfinite_trials"])
    span = f"step {steps[0]:,}" if steps[0] == steps[1] else f"steps {steps[0]:,}–{steps[1]:,}"
    return f"{way['nonfinite_trials']} (first at {span})"


def _same(way: dict[str, Any], reference: dict[str, Any] | None) -> str:
    """Same black list as from step 0 (the answer); says so when the rest of the config differs."""
    if way["same_answer_as_from_zero"] is None:
        return "n/a"
    if not way["same_answer_as_from_zero"]:
        return "**no**"
    if way["same_config_as_from_zero"] or reference is None:
        return "yes"
    config = way["answer"]["config"]
    differ = [
        f"{key} {_value(config[key])} vs {_value(reference[key])}"
        for key in ("amp_level", "clip")
        if config[key] != reference[key]
    ]
    return f"yes ({'; '.join(differ)})"


def _value(value: Any) -> str:
    if value is None:
        return "off"
    if isinstance(value, float):
        return f"{value:g}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _section(
    size: dict[str, Any], n_trials: int, tune_trials: int, figures: dict[str, Any], tiny: bool
) -> str:
    ways, ratios, checks = figures["ways"], figures["ratios"], figures["checks"]
    zero, forked, tune_plain, tune_asha = ways
    met = ratios["forked_over_from_zero"] <= TARGET_RATIO
    fork, steps = size["fork"], size["steps"]
    rows = []
    for way in ways:
        answer = way["answer"]
        text = _config_text(answer["config"])
        if "seed" in answer:
            text += f" (seed {answer['seed']}, final loss {answer['final_loss']:.3g} after {answer['steps']:,} steps)"
        elif answer["config"] is None:
            text += f" ({answer['status']})"
        extra = f", {way['stopped_early']} stopped early" if "stopped_early" in way else ""
        rows.append(
            f"| {way['name']} | {way['wall_s']:.1f} s | {way['steps_trained']:,} | {way['trials']}{extra} | "
            f"{_nonfinite_text(way)} | {text} | {_same(way, zero['answer']['config'])} | "
            f"{way['load'][0]:.1f} → {way['load'][1]:.1f} |"
        )
    grid = size["grid"]
    lines = [
        "## Time to answer a late divergence (bench_late)",
        "",
        f"**Target:** forked / from step 0 wall time at most {TARGET_RATIO:g}× — {verdict(met)} "
        f"(**{ratios['forked_over_from_zero']:.2f}×**), with the same answer — "
        f"{verdict(bool(forked['same_answer_as_from_zero']))}."
        + (" _Tiny smoke-test size: the figures mean nothing._" if tiny else ""),
        "",
        f"The grid: {' × '.join(f'{k} {v}' for k, v in grid.items())} = {n_trials} trials of "
        f"`{WORKLOAD}` (a classifier whose hand-written softmax `{SOFTMAX}` overflows float16 late in "
        f"training), loss scaling off, float16, `loss_placement: {LOSS_PLACEMENT}`, abort after {ABORT_AFTER} "
        f"non-finite steps, {WORKERS} workers. **From step 0**: `steps: {steps}`, `ampsweep run SPEC --out TMP "
        f"--workers {WORKERS} --no-progress` as a child process. **Forked**: the same with `start_from: "
        f"{{steps: {fork}}}` and `steps: {steps - fork}` (one FP32 prefix per seed, then every trial trains "
        f"steps {fork:,} to {steps - 1:,}). **Ray Tune** {ray_version()}: `Tuner(trainable, "
        f"param_space=grid_search…, TuneConfig(max_concurrent_trials={WORKERS}), RunConfig(storage_path=TMP, "
        f"verbose=0))` over {tune_trials} trials of {steps} steps from step 0 in a child process, "
        "`bench_vs_tune`'s function trainable (plain MindSpore, the same casting, clipping and abort rule, "
        "`tune.report` every step); **+ ASHA**: the same with `ASHAScheduler(metric='loss', mode='min', "
        f"max_t={steps}, grace_period={size['asha']['grace_period']}, "
        f"reduction_factor={size['asha']['reduction_factor']})`. Every wall time runs from starting the child to "
        "its exit; "
        + (
            "the four ran back to back."
            if not figures.get("tune_measured")
            else f"the two ampsweep ways ran back to back; **the two Ray Tune rows are from the run of "
            f"{figures['tune_measured']}** (`{REUSE_TUNE_ENV}=1` reuses them: they take about 40 minutes), so "
            "the Tune ratios below compare runs of different times."
        )
        + " Steps trained: per-step rows written (ampsweep's steps table, "
        "Tune's reports) plus, forked, the FP32 prefixes; localization's replays are not counted. The answer: "
        "ampsweep's `report/recommendation.json`; Tune's, the best finite mixed-precision trial by final loss "
        "(`get_best_result(metric='loss', mode='min', filter_nan_and_inf=True)` over the O2 trials). "
        '"Same answer": the same black list as ampsweep from step 0.',
        "",
        "| way | wall | steps trained | trials | mixed-precision trials that went non-finite | answer "
        "| same answer | 1-min load before → after |",
        "|---|---:|---:|---:|---:|---|---|---|",
        *rows,
        "",
        f"- **Forked / from step 0: {ratios['forked_over_from_zero']:.2f}×** wall "
        f"({forked['wall_s']:.1f} s / {zero['wall_s']:.1f} s; steps {ratios['steps_forked_over_from_zero']:.2f}×: "
        f"{forked['prefix_steps']:,} prefix + {forked['trial_steps']:,} trial steps against "
        f"{zero['steps_trained']:,}).",
        f"- **Ray Tune / forked: {ratios['tune_over_forked']:.1f}×**; **Ray Tune + ASHA / forked: "
        f"{ratios['tune_asha_over_forked']:.1f}×** (Ray Tune / ampsweep from step 0: "
        f"{ratios['tune_over_from_zero']:.1f}×).",
        f"- ASHA stopped {tune_asha['stopped_early']} of {tune_asha['trials']} trials on their loss. Of the "
        f"{tune_asha['diverging_without_asha']} trials that go non-finite without it, it stopped "
        f"{tune_asha['stopped_before_nan']} before their NaN (after "
        f"{', '.join(f'{n:,}' for n in tune_asha['stopped_before_nan_at_steps']) or '–'} steps) and saw "
        f"{tune_asha['nonfinite_trials']} go non-finite: the loss before a late NaN does not say the NaN is "
        "coming, so ASHA's savings come from cutting trials short, which is also what hides the divergence "
        "(its answer is a trial that survived, not evidence that the configurations it stopped break).",
        f"- The answer: the same black list from step 0 and forked — "
        f"{_same(forked, zero['answer']['config'])}. Where the clip differs, both clips are stable with "
        f"`{SOFTMAX}` in FP32 and the ranking separates them on their losses.",
        f"- Forked trials start at step {_value(figures['forked_first_step'])} or later (first step per "
        "trial in the steps table, read with pyarrow, `trial_id` partition as a string; `start_step` "
        f"{figures['forked_start_steps']}); their first non-finite steps are global steps too.",
        "",
        "Consistency checks (a phase shorter than the work inside it would be a measuring bug):",
        "",
        *[f"- {'ok' if c['ok'] else '**failed**'}: {c['check']}" for c in checks],
        "",
    ]
    for way in ways:
        if way.get("error"):
            lines += [f"**Note ({way['name']}):** {way['error']}", ""]
        if way.get("errors"):
            lines += [f"{way['name']} trial errors: {way['errors'][:3]}", ""]
    if not met:
        lines += [
            f"Target missed: forked / from step 0 = {ratios['forked_over_from_zero']:.2f}× > {TARGET_RATIO:g}×.",
            "",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--tune-side":
        _tune_side(json.loads(sys.argv[2]), Path(sys.argv[3]))
    else:
        print(run(tiny="--tiny" in sys.argv))
