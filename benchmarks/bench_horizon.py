"""Time to a confirmed answer: a short sweep with ``horizon:`` against the same grid run from zero to the horizon.

Issue 42, item 4. The workload is ``ampsweep.jobs.workloads.late_softmax``
(its hand-written ``ExpSoftmax`` overflows float16 late: under O2 the first
NaN comes at steps 1,417 / 1,506 / 1,582 for seeds 0 / 1 / 2). The grid, as
``examples/late_softmax.yaml``: O0/O2 × black list ``[]`` / ``[ExpSoftmax]`` /
``[ExpSoftmax, LayerNorm]`` × clip off/1.0 × seeds 0, 1, 2 = 36 trials, abort
after 10 non-finite steps, 2 workers. Two ways to an answer that holds to step
1,800, each the real CLI as a whole child process (``ampsweep run SPEC --out
TMP --workers 2 --no-progress``), back to back:

1. **from step 0**: ``steps: 1800``: every trial trains to the horizon.
2. **horizon**: ``steps: 600, horizon: 1800``: the grid trains 600 steps and
   keeps every trial's end state; the recommendation (and a runner-up the FP32
   profile's forecast favours) continues from its snapshots to 1,800 in
   ``horizon/``; where a continuation breaks, the recommendation moves and the
   next candidate is continued, until one holds (``horizon.json``).

The answer: ``report/recommendation.json``'s amp_level and black list; the
horizon way's must have held to 1,800 on every seed (``horizon.json``'s
``answer`` and that configuration's ``held_to``). Where the time goes comes
from the sweep folders' own stamps: the grid's trials (``trials/``) and each
horizon round's (``horizon/trials/``, rounds from ``horizon.json``), their
first ``started_at`` and last ``finished_at``, against the command's start and
exit. The section also writes ``benchmarks/results/bench_horizon.json`` (not
at the tiny smoke-test size).
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ._common import (
    CliRun,
    recommended_config,
    run_cli,
    timed,
    trial_ends,
    trial_starts,
    verdict,
    worker_busy_s,
)
from ._machine import machine_rows, now_utc

NAME = "bench_horizon"
HERE = Path(__file__).resolve().parent
RESULTS_JSON = HERE / "results" / f"{NAME}.json"
WORKLOAD = "ampsweep.jobs.workloads.late_softmax:make"
SOFTMAX = "ExpSoftmax"
WORKERS = 2
ABORT_AFTER = 10
TARGET_RATIO = 0.6  # horizon / from-zero wall time, the acceptance
FULL: dict[str, Any] = {
    "steps": 600,
    "horizon": 1800,
    "grid": {
        "amp_level": ["O0", "O2"],
        "black_list": [[], [SOFTMAX], [SOFTMAX, "LayerNorm"]],
        "clip": [None, 1.0],
        "seed": [0, 1, 2],
    },
}
TINY: dict[str, Any] = {
    "steps": 20,
    "horizon": 40,
    "grid": {"amp_level": ["O0", "O2"], "black_list": [[], [SOFTMAX]], "clip": [None], "seed": [0]},
}


def _n_trials(grid: dict[str, list[Any]]) -> int:
    n = 1
    for values in grid.values():
        n *= len(values)
    return n


def _spec(size: dict[str, Any], horizon: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "late-horizon" if horizon else "late-zero",
        "workload": WORKLOAD,
        "steps": size["steps"] if horizon else size["horizon"],
        "abort_after": ABORT_AFTER,
        "grid": {**size["grid"], "loss_scale": ["none"], "dtype": ["float16"]},
        "devices": "cpu",
    }
    if horizon:
        spec["horizon"] = size["horizon"]
    return spec


# --- what a sweep folder says ------------------------------------------------------------------------


def _steps_rows(folder: Path) -> int:
    import pandas as pd

    if not (folder / "steps").is_dir():
        return 0
    return len(pd.read_parquet(folder / "steps", columns=["step"]))


def _first_step(folder: Path) -> int | None:
    import pandas as pd

    if not (folder / "steps").is_dir():
        return None
    steps = pd.read_parquet(folder / "steps", columns=["step"])["step"]
    return int(steps.min()) if len(steps) else None


def _phase(trials: Any, label: str, after: float, started_at: float) -> dict[str, Any]:
    """One phase's trials: from the previous phase's end (``after``) to its first start, and its span."""
    starts, ends = trial_starts(trials), trial_ends(trials)
    first, last = float(starts.min()), float(ends.max())
    busy = worker_busy_s(trials)
    return {
        "phase": label,
        "trials": int(len(trials)),
        "gap_before_s": round(
            first - after, 2
        ),  # previous phase's last end (or the command's start) → first start
        "span_s": round(last - first, 2),  # first start → last end
        "starts_at_s": round(first - started_at, 2),  # since the command started
        "ends_at_s": round(last - started_at, 2),
        "busiest_worker_s": round(max(busy.values(), default=0.0), 2),
        "first_trial_span_s": round(float((ends - starts).loc[starts.idxmin()]), 2),
        "mean_trial_span_s": round(float((ends - starts).mean()), 2),
        # Σ over the phase's trials: spans, and inside them the worker's wall_s, compile_s, diagnose_s
        "sum_span_s": round(float((ends - starts).sum()), 2),
        "sum_wall_s": round(float(trials["wall_s"].fillna(0).sum()), 2),
        "sum_compile_s": round(float(trials["compile_s"].fillna(0).sum()), 2),
        "sum_diagnose_s": round(float(trials["diagnose_s"].fillna(0).sum()), 2)
        if "diagnose_s" in trials
        else None,
        "compiles": int((trials["compile_s"].fillna(0) > 0).sum()),
        "_last_end": last,
    }


def _timeline(run: CliRun, rounds: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """The grid, then each horizon round, then the tail to the command's exit."""
    phases = []
    after = run.started_at
    for label, trials in [("grid", run.trials), *rounds]:
        if trials is None or not len(trials):
            continue
        phase = _phase(trials, label, after, run.started_at)
        after = phase.pop("_last_end")
        phases.append(phase)
    phases.append(
        {
            "phase": "after the last trial (profile, analysis, report, exit)",
            "trials": 0,
            "gap_before_s": round(run.ended_at - after, 2),
            "span_s": 0.0,
            "starts_at_s": round(run.ended_at - run.started_at, 2),
            "ends_at_s": round(run.ended_at - run.started_at, 2),
            "busiest_worker_s": 0.0,
            "first_trial_span_s": None,
            "mean_trial_span_s": None,
        }
    )
    return phases


def _marks(run: CliRun) -> dict[str, float]:
    """When files were last written, in seconds since the command started: where a gap's time went.

    ``horizon/plan.json``: the (last) horizon round's ``run_sweep`` began, after the analysis; before
    its first trial start: new actors. ``horizon.json``: the last round was judged and the ranking redone.
    ``report/recommendation.json``: the report.
    """
    marks = {}
    for label, rel in (
        ("horizon/plan.json (last round's run_sweep began)", "horizon/plan.json"),
        ("horizon.json (last saved)", "horizon.json"),
        ("profile.json", "profile.json"),
        ("report/recommendation.json", "report/recommendation.json"),
    ):
        path = run.root / rel
        if path.is_file():
            marks[label] = round(path.stat().st_mtime - run.started_at, 2)
    return marks


def _trial_rows(trials: Any) -> list[dict[str, Any]]:
    """Each continuation: seed, configuration, worker, span and what the worker timed inside it."""
    rows = []
    spans = trial_ends(trials) - trial_starts(trials)
    for index, t in trials.sort_values("started_at").iterrows():
        first = t["first_nonfinite_step"]
        rows.append(
            {
                "trial_id": str(t["trial_id"]),
                "amp_level": str(t["amp_level"]),
                "black_list": list(t["black_list"]),
                "clip": None if t["clip"] != t["clip"] else float(t["clip"]),
                "seed": int(t["seed"]),
                "worker": None if t["worker_index"] != t["worker_index"] else int(t["worker_index"]),
                "outcome": str(t["outcome"]),
                "first_nonfinite_step": None if first != first or first is None else int(first),
                "steps_run": int(t["steps_run"]),
                "span_s": round(float(spans.loc[index]), 2),
                "wall_s": round(float(t["wall_s"]), 2),
                "compile_s": round(float(t["compile_s"]), 2),
                "diagnose_s": None
                if "diagnose_s" not in t or t["diagnose_s"] != t["diagnose_s"]
                else round(float(t["diagnose_s"]), 2),
            }
        )
    return rows


def _horizon_log(root: Path) -> dict[str, Any] | None:
    path = root / "horizon.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _held(
    log_: dict[str, Any] | None, answer: dict[str, Any] | None, horizon: int, seeds: int
) -> dict[str, Any]:
    """Whether the horizon way's answer held to the horizon on every seed, from ``horizon.json``."""
    if log_ is None or answer is None:
        return {"held": False, "why": "no horizon.json" if log_ is None else "no answer"}
    entry = next(
        (
            c
            for c in log_["continued"]
            if c["config"]["amp_level"] == answer["amp_level"]
            and sorted(c["config"]["black_list"]) == answer["black_list"]
            and c["config"]["clip"] == answer["clip"]
        ),
        None,
    )
    if entry is None:
        return {"held": False, "why": "the recommended configuration was never continued"}
    held_to = {int(seed): int(step) for seed, step in entry["held_to"].items()}
    ok = (
        log_.get("answer") == entry["label"]
        and not entry["broke_at"]
        and len(held_to) == seeds
        and all(step == horizon for step in held_to.values())
    )
    return {"held": ok, "label": entry["label"], "log_answer": log_.get("answer"), "held_to": held_to}


def _continued(log_: dict[str, Any] | None) -> list[dict[str, Any]]:
    if log_ is None:
        return []
    rows = []
    for c in log_["continued"]:
        rows.append(
            {
                "round": c["round"],
                "label": c["label"],
                "config": c["config"],
                "why": c["why"],
                "trials": len(c["trial_ids"]),
                "held_to": {int(k): v for k, v in c["held_to"].items()},
                "broke_at": {int(k): v for k, v in c["broke_at"].items()},
                "localized": sorted({cell["cell_class"] for cell in c["localized"]}),
            }
        )
    return rows


def _rounds(root: Path, log_: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """The horizon folder's trials, split by the round ``horizon.json`` ran them in."""
    import pandas as pd

    folder = root / "horizon" / "trials"
    if log_ is None or not folder.is_dir():
        return []
    trials = pd.read_parquet(folder)
    by_round: dict[int, list[str]] = {}
    for c in log_["continued"]:
        by_round.setdefault(int(c["round"]), []).extend(c["trial_ids"])
    return [
        (f"horizon round {r}", trials[trials["trial_id"].isin(ids)]) for r, ids in sorted(by_round.items())
    ]


def _way(name: str, run: CliRun, load: tuple[float, float], horizon: int, seeds: int) -> dict[str, Any]:
    import pandas as pd

    log_ = _horizon_log(run.root)
    rounds = _rounds(run.root, log_)
    cont = pd.concat([t for _, t in rounds]) if rounds else None
    grid_steps = int(run.steps_rows)
    horizon_steps = _steps_rows(run.root / "horizon")
    answer = recommended_config(run.root)
    t = run.trials
    mixed = t[t["amp_level"] != "O0"]
    nan_steps = sorted(int(v) for v in mixed["first_nonfinite_step"].dropna())
    busy = worker_busy_s(t)
    if cont is not None and len(cont):
        for worker, seconds in worker_busy_s(cont).items():
            busy[worker] = busy.get(worker, 0.0) + seconds
    way = {
        "name": name,
        "wall_s": round(run.wall_s, 2),
        "steps_trained": grid_steps + horizon_steps,
        "grid_steps": grid_steps,
        "horizon_steps": horizon_steps,
        "trials": int(len(t)),
        "continuations": int(len(cont)) if cont is not None else 0,
        "grid_nonfinite_trials": int(len(nan_steps)),
        "grid_first_nonfinite_steps": [nan_steps[0], nan_steps[-1]] if nan_steps else None,
        "answer": answer,
        "load": list(load),
        "timeline": _timeline(run, rounds),
        "busiest_worker_s": round(max(busy.values(), default=0.0), 2),
        "marks": _marks(run),
        "continuation_trials": _trial_rows(cont) if cont is not None and len(cont) else [],
        "error": run.error,
    }
    if log_ is not None:
        way["horizon_log"] = {
            "horizon": log_["horizon"],
            "trials_end": log_["trials_end"],
            "forecast": log_["forecast"],
            "answer": log_["answer"],
            "trials_run": log_["trials_run"],
        }
        way["continued"] = _continued(log_)
        way["held"] = _held(log_, answer["config"], horizon, seeds)
        way["continuation_first_step"] = _first_step(run.root / "horizon")
        way["continuation_start_steps"] = (
            sorted({int(s) for s in cont["start_step"]}) if cont is not None and len(cont) else []
        )
    return way


# --- the run ---------------------------------------------------------------------------------------


def run(tiny: bool = False) -> str:
    size = TINY if tiny else FULL
    n_trials = _n_trials(size["grid"])
    seeds = len(size["grid"]["seed"])
    steps, horizon = size["steps"], size["horizon"]
    with tempfile.TemporaryDirectory(prefix="ampsweep-bench-horizon-") as tmp_name:
        tmp = Path(tmp_name)
        plan: list[tuple[str, str, Callable[[], Any]]] = [
            (
                "zero",
                f"from step 0: {n_trials} trials x {horizon} steps",
                lambda: run_cli(_spec(size, horizon=False), tmp / "zero", WORKERS, timeout=3600),
            ),
            (
                "horizon",
                f"horizon: {n_trials} trials x {steps} steps, continued to {horizon}",
                lambda: run_cli(_spec(size, horizon=True), tmp / "horizon", WORKERS, timeout=3600),
            ),
        ]
        if tiny:  # the smoke test checks the plumbing, not the figures: both at once, no waiting
            with ThreadPoolExecutor(max_workers=2) as pool:
                futures = {key: pool.submit(timed, NAME, label, body, False) for key, label, body in plan}
                done = {key: future.result() for key, future in futures.items()}
        else:
            done = {key: timed(NAME, label, body, settle=True) for key, label, body in plan}
        (zero, zero_load), (hor, hor_load) = done["zero"], done["horizon"]
        ways = [
            _way("ampsweep from step 0", zero, zero_load, horizon, seeds),
            _way(f"ampsweep `horizon: {horizon}`", hor, hor_load, horizon, seeds),
        ]
    z, h = ways
    same = (
        z["answer"]["config"] is not None
        and h["answer"]["config"] is not None
        and all(z["answer"]["config"][k] == h["answer"]["config"][k] for k in ("amp_level", "black_list"))
    )
    ratios = {
        "horizon_over_from_zero": round(h["wall_s"] / z["wall_s"], 3),
        "steps_horizon_over_from_zero": round(h["steps_trained"] / max(z["steps_trained"], 1), 3),
    }
    checks = _checks(z, h, steps, horizon)
    figures = {
        "machine": dict(machine_rows()),
        "date": now_utc(),
        "grid": size["grid"],
        "steps": steps,
        "horizon": horizon,
        "workers": WORKERS,
        "ways": ways,
        "ratios": ratios,
        "same_answer": same,
        "held_to_horizon": bool(h.get("held", {}).get("held")),
        "target_ratio": TARGET_RATIO,
        "met": ratios["horizon_over_from_zero"] <= TARGET_RATIO
        and same
        and bool(h.get("held", {}).get("held")),
        "checks": checks,
    }
    if not tiny:
        RESULTS_JSON.parent.mkdir(parents=True, exist_ok=True)
        RESULTS_JSON.write_text(json.dumps(figures, indent=2) + "\n")
    return _section(size, n_trials, figures, tiny)


def _checks(z: dict[str, Any], h: dict[str, Any], steps: int, horizon: int) -> list[dict[str, Any]]:
    """Figures that must hold if the measuring is right: no phase shorter than the work inside it."""
    checks = []

    def check(what: str, ok: bool) -> None:
        checks.append({"check": what, "ok": bool(ok)})

    for way in (z, h):
        inside = sum(p["gap_before_s"] + p["span_s"] for p in way["timeline"])
        check(
            f"{way['name']}: start-up, phases and the gaps between them add up to the wall "
            f"({inside:.1f} s vs {way['wall_s']:.1f} s), none negative; the busiest worker's trials "
            f"(sum of started_at → finished_at) {way['busiest_worker_s']:.1f} s <= wall",
            abs(inside - way["wall_s"]) < 2.0
            and all(p["gap_before_s"] >= 0 and p["span_s"] >= 0 for p in way["timeline"])
            and way["busiest_worker_s"] <= way["wall_s"],
        )
    first, starts = h.get("continuation_first_step"), h.get("continuation_start_steps")
    check(
        f"every continuation's first step is {steps:,} or later (horizon/steps: first step "
        f"{first if first is not None else 'none'}; horizon/trials start_step {starts})",
        first is not None and first >= steps and starts == [steps],
    )
    hl = h.get("horizon_log") or {}
    check(
        f"horizon.json: horizon {hl.get('horizon')}, trials_end {hl.get('trials_end')}, trials_run "
        f"{hl.get('trials_run')} = the horizon/ folder's {h['continuations']} trials",
        hl.get("horizon") == horizon
        and hl.get("trials_end") == steps
        and hl.get("trials_run") == h["continuations"],
    )
    check(
        f"steps: horizon way {h['steps_trained']:,} = grid {h['grid_steps']:,} + continuations "
        f"{h['horizon_steps']:,} < from step 0 {z['steps_trained']:,}",
        h["steps_trained"] == h["grid_steps"] + h["horizon_steps"]
        and h["steps_trained"] < z["steps_trained"],
    )
    return checks


# --- the section -----------------------------------------------------------------------------------


def _config_text(config: dict[str, Any] | None) -> str:
    if config is None:
        return "none"
    clip = "off" if config["clip"] is None else f"{config['clip']:g}"
    return f"{config['amp_level']}, black_list {config['black_list']}, clip {clip}"


def _seeds(mapping: dict[int, int]) -> str:
    return ", ".join(f"seed {seed}: {step:,}" for seed, step in sorted(mapping.items())) or "–"


def _section(size: dict[str, Any], n_trials: int, figures: dict[str, Any], tiny: bool) -> str:
    z, h = figures["ways"]
    ratios, checks = figures["ratios"], figures["checks"]
    steps, horizon = size["steps"], size["horizon"]
    ratio_ok = ratios["horizon_over_from_zero"] <= TARGET_RATIO
    held = h.get("held", {})
    rows = []
    for way in (z, h):
        rows.append(
            f"| {way['name']} | {way['wall_s']:.1f} s | {way['steps_trained']:,} | {way['trials']} + "
            f"{way['continuations']} | {_config_text(way['answer']['config'])} | "
            f"{way['load'][0]:.1f} → {way['load'][1]:.1f} |"
        )
    grid = size["grid"]
    lines = [
        "## Time to a confirmed answer (bench_horizon)",
        "",
        f"**Target:** horizon / from step 0 wall time at most {TARGET_RATIO:g}× — {verdict(ratio_ok)} "
        f"(**{ratios['horizon_over_from_zero']:.2f}×**), with the same answer — {verdict(figures['same_answer'])}, "
        f"held to {horizon:,} on every seed — {verdict(bool(held.get('held')))}."
        + (" _Tiny smoke-test size: the figures mean nothing._" if tiny else ""),
        "",
        f"The grid: {' × '.join(f'{k} {v}' for k, v in grid.items())} = {n_trials} trials of `{WORKLOAD}`, "
        f"loss scaling off, float16, abort after {ABORT_AFTER} non-finite steps, {WORKERS} workers, each way "
        f"`ampsweep run SPEC --out TMP --workers {WORKERS} --no-progress` as a child process, back to back. "
        f"**From step 0**: `steps: {horizon}`. **Horizon**: `steps: {steps}, horizon: {horizon}` (the grid, "
        f"then the recommendation and a forecast-favoured runner-up continued from their snapshots to "
        f"{horizon:,} in `horizon/`, round after round until one holds). Steps trained: rows of the steps "
        "tables (with `horizon/`'s); localization's replays and the FP32 profile are not counted. The "
        'answer: `report/recommendation.json`; "same" compares amp_level and black list.',
        "",
        "| way | wall | steps trained | trials + continuations | answer | 1-min load before → after |",
        "|---|---:|---:|---:|---|---|",
        *rows,
        "",
        f"- **Horizon / from step 0: {ratios['horizon_over_from_zero']:.2f}×** wall ({h['wall_s']:.1f} s / "
        f"{z['wall_s']:.1f} s); steps {ratios['steps_horizon_over_from_zero']:.2f}× ({h['grid_steps']:,} grid + "
        f"{h['horizon_steps']:,} continued against {z['steps_trained']:,}).",
        f"- The horizon way's answer, `horizon.json`: {held.get('log_answer')!r}, held to "
        f"{_seeds(held.get('held_to', {}))}.",
        f"- The forecast that ordered the work: {'; '.join((h.get('horizon_log') or {}).get('forecast') or []) or 'none'}.",
        "",
        "### What the horizon way continued",
        "",
        "| round | configuration | why | seeds | broke at | held to | localized |",
        "|---:|---|---|---:|---|---|---|",
    ]
    for c in h.get("continued", []):
        lines.append(
            f"| {c['round']} | {_config_text(c['config'])} | {c['why']} | {c['trials']} | "
            f"{_seeds(c['broke_at'])} | {_seeds(c['held_to'])} | {', '.join(c['localized']) or '–'} |"
        )
    lines += [
        "",
        "### Where the time goes",
        "",
        "Per phase, from the sweep folders' stamps: the gap before it (the command's start, or the previous "
        "phase's last `finished_at`, to its first `started_at`: start-up, the FP32 profile, the analysis, "
        "new actors), its span (first `started_at` to last `finished_at`), its first trial's span "
        "(workload build and compile included) and the mean trial's.",
        "",
        "| way | phase | trials | gap before | span | starts at | first trial | mean trial | Σ trial spans "
        "| Σ wall_s | Σ compile_s (compiles) | Σ diagnose_s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def sec(value: float | None) -> str:
        return "–" if value is None else f"{value:.1f} s"

    for way in (z, h):
        for p in way["timeline"]:
            compiled = "–" if "sum_compile_s" not in p else f"{p['sum_compile_s']:.1f} s ({p['compiles']})"
            lines.append(
                f"| {way['name']} | {p['phase']} | {p['trials']} | {p['gap_before_s']:.1f} s | {p['span_s']:.1f} s | "
                f"{p['starts_at_s']:.1f} s | {sec(p['first_trial_span_s'])} | {sec(p['mean_trial_span_s'])} | "
                f"{sec(p.get('sum_span_s'))} | {sec(p.get('sum_wall_s'))} | {compiled} | {sec(p.get('sum_diagnose_s'))} |"
            )
    lines += [
        "",
        "Files' last writes, seconds after the command started (where a gap went): "
        + "; ".join(
            f"{way['name']}: " + ", ".join(f"{k} {v:.1f} s" for k, v in way["marks"].items())
            for way in (z, h)
        )
        + ".",
        "",
        "The continuations, one row each (span: the worker's `started_at` → `finished_at`; inside it "
        "`wall_s`, `compile_s`, `diagnose_s` as the worker timed them):",
        "",
        "| configuration | seed | worker | outcome | first non-finite | steps run | span | wall_s | compile_s | diagnose_s |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for t in h["continuation_trials"]:
        cfg = {"amp_level": t["amp_level"], "black_list": t["black_list"], "clip": t["clip"]}
        broke = "–" if t["first_nonfinite_step"] is None else f"{t['first_nonfinite_step']:,}"
        lines.append(
            f"| {_config_text(cfg)} | {t['seed']} | {t['worker']} | {t['outcome']} | "
            f"{broke} | "
            f"{t['steps_run']:,} | {t['span_s']:.1f} s | {t['wall_s']:.1f} s | {t['compile_s']:.1f} s | "
            f"{sec(t['diagnose_s'])} |"
        )
    gaps = sum(p["gap_before_s"] for p in h["timeline"])
    rounds = [p for p in h["timeline"] if p["phase"].startswith("horizon round")]
    round_span = sum(p["sum_span_s"] for p in rounds)

    def rate(steps_: int, seconds: float) -> str:
        return f"{steps_ / seconds:.0f}" if seconds > 0 else "–"

    lines += [
        "",
        f"- Steps per second of trial span (Σ steps / Σ spans): from step 0 "
        f"{rate(z['grid_steps'], z['timeline'][0]['sum_span_s'])}, the horizon way's grid "
        f"{rate(h['grid_steps'], h['timeline'][0]['sum_span_s'])}, its continuations "
        f"{rate(h['horizon_steps'], round_span)}.",
        f"- Horizon way: {gaps:.1f} s of its {h['wall_s']:.1f} s wall are outside any trial (gaps), against "
        f"{sum(p['gap_before_s'] for p in z['timeline']):.1f} s of {z['wall_s']:.1f} s from step 0.",
        "",
        "Consistency checks (a phase shorter than the work inside it would be a measuring bug):",
        "",
        *[f"- {'ok' if c['ok'] else '**failed**'}: {c['check']}" for c in checks],
        "",
    ]
    for way in (z, h):
        if way.get("error"):
            lines += [f"**Note ({way['name']}):** {way['error']}", ""]
    if not figures["met"]:
        lines += [
            f"Target missed: horizon / from step 0 = {ratios['horizon_over_from_zero']:.2f}× "
            f"(target {TARGET_RATIO:g}×), same answer {figures['same_answer']}, held "
            f"{bool(held.get('held'))}.",
            "",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(run(tiny="--tiny" in sys.argv))
