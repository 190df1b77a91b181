"""Forecast quality: the FP32 profile's ``passes_max_at`` against the first non-finite step of runs from zero.

Issue 42, item 3. ``ampsweep profile`` trains the spec's first seed in FP32
with hooks and, per Cell, fits log(max |x|) on the step over the later half of
its samples; ``passes_max_at`` is the step where that growing maximum would
pass 65504 (forecast at most ``EXTRAPOLATE_FACTOR`` = 10 profiled lengths
ahead). ``horizon:`` uses it to choose which runner-up to continue. How good
is it?

Per workload (the late ones: ``late_softmax``, whose ``ExpSoftmax`` overflows
float16 at steps ~1,400-1,600 under O2, and the demo ``seed_repro``, whose
300-step answer O2 ``[CustomNorm]`` clip 5.0 breaks past 1,000 steps):

1. ``ampsweep profile SPEC --steps N --json`` at a short length N (each a
   child process), every Cell's ``passes_max_at`` and risk;
2. the mixed-precision configurations, from step 0, long enough to break, as
   one ``ampsweep run SPEC --out TMP --workers 2 --no-progress``: the trials
   table's ``first_nonfinite_step`` per seed and the anomalies table's
   localized Cell (``cell``, ``cell_class``).

For each configuration the forecast is the earliest ``passes_max_at`` among
the Cells it leaves in float16 (class not on its black list), as
``sweep.search._horizon.forecast_risks`` reads the profile; a Cell whose FP32
maximum is past 65504 already (risk ``overflow``, no ``passes_max_at``) is
forecast to break "now". Error: forecast − measured, in steps and as a ratio.
The section also writes ``benchmarks/results/bench_forecast.json`` (not at the
tiny smoke-test size).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from ._common import ROOT, ampsweep_command, child_env, log, run_cli
from ._machine import machine_rows, now_utc, wait_for_quiet

NAME = "bench_forecast"
HERE = Path(__file__).resolve().parent
RESULTS_JSON = HERE / "results" / f"{NAME}.json"
WORKERS = 2
ABORT_AFTER = 10
LATE = "ampsweep.jobs.workloads.late_softmax:make"
DEMO = "ampsweep.jobs.workloads.seed_repro:make"

#: per workload: the profile lengths, the configurations run from zero (O2, float16, no loss scale),
#: how far, and the configuration its short sweep recommended (None: the default one)
FULL: dict[str, Any] = {
    "workloads": [
        {
            "key": "late_softmax",
            "workload": LATE,
            "profile_steps": [300, 600],
            "steps": 1800,
            "configs": [
                {"black_list": [], "clip": None},
                {"black_list": [], "clip": 1.0},
            ],  # as a grid product
            # examples/late_softmax.yaml's grid at 600 steps recommends O2 [] clip 1.0 (bench_horizon's grid:
            # every O2 list is stable there, the fewest FP32 classes win)
            "short_answer": {
                "black_list": [],
                "clip": 1.0,
                "at": "600 steps (bench_horizon's grid)",
                "profile": 600,
            },
        },
        {
            "key": "seed_repro",
            "workload": DEMO,
            "profile_steps": [300, 600],
            "steps": 3000,
            # black lists x clips: O2 [] breaks early; the 300-step answer is [CustomNorm] clip 5.0
            "configs": [{"black_list": [], "clip": None}, {"black_list": ["CustomNorm"], "clip": 5.0}],
            "short_answer": {
                "black_list": ["CustomNorm"],
                "clip": 5.0,
                "at": "300 steps (examples/seed_repro.yaml)",
                "profile": 300,
            },
        },
    ],
    "seeds": [0, 1, 2],
}
TINY: dict[str, Any] = {
    "workloads": [
        {
            "key": "late_softmax",
            "workload": LATE,
            "profile_steps": [20],
            "steps": 40,
            "configs": [{"black_list": [], "clip": None}],
            "short_answer": {"black_list": [], "clip": None, "at": "tiny", "profile": 20},
        },
        {
            "key": "seed_repro",
            "workload": DEMO,
            "profile_steps": [20],
            "steps": 60,
            "configs": [{"black_list": [], "clip": None}],
            "short_answer": {"black_list": [], "clip": None, "at": "tiny", "profile": 20},
        },
    ],
    "seeds": [0],
}


def _spec(
    w: dict[str, Any], seeds: list[int], steps: int, configs: list[dict[str, Any]], name: str
) -> dict[str, Any]:
    lists = [c["black_list"] for c in configs]
    clips = [c["clip"] for c in configs]
    return {
        "name": name,
        "workload": w["workload"],
        "steps": steps,
        "abort_after": ABORT_AFTER,
        "grid": {
            "amp_level": ["O0", "O2"],  # O0: whether FP32 itself breaks where O2 does
            "black_list": [list(x) for x in dict.fromkeys(tuple(x) for x in lists)],
            "clip": list(dict.fromkeys(clips)),
            "loss_scale": ["none"],
            "dtype": ["float16"],
            "seed": seeds,
        },
        "devices": "cpu",
    }


# --- the profile -----------------------------------------------------------------------------------


def run_profile(w: dict[str, Any], steps: int, tmp: Path) -> dict[str, Any]:
    """``ampsweep profile SPEC --steps N --json`` in a child process; its JSON and wall time."""
    tmp.mkdir(parents=True, exist_ok=True)
    spec = _spec(w, [0], steps, [{"black_list": [], "clip": None}], f"{w['key'].replace('_', '-')}-profile")
    path = tmp / f"profile-{steps}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    started = time.perf_counter()
    done = subprocess.run(
        [*ampsweep_command(), "profile", str(path), "--steps", str(steps), "--json"],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    wall = time.perf_counter() - started
    lines = [line for line in done.stdout.strip().splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"`ampsweep profile` exited {done.returncode}:\n{tail}")
    profile = json.loads(lines[-1])
    return {"steps": steps, "wall_s": round(wall, 2), "profile": profile}


def forecast_for(profile: dict[str, Any], black_list: list[str]) -> dict[str, Any] | None:
    """The earliest forecast among the Cells a configuration leaves in float16.

    ``at``: ``passes_max_at``, or the profile's start for a Cell past 65504 in FP32 already
    (``now``); None when no Cell it casts is forecast to pass 65504 within 10 profiled lengths.
    """
    kept = set(black_list)
    best = None
    for cell in profile["cells"]:
        if cell["class"] in kept:
            continue
        at, now = cell.get("passes_max_at"), False
        if at is None and cell.get("risk") == "overflow":
            at, now = profile["start_step"], True
        if at is None:
            continue
        if best is None or at < best["at"]:
            best = {"cell": cell["cell"], "class": cell["class"], "at": int(at), "now": now}
    return best


# --- the runs from zero ------------------------------------------------------------------------------


def _anomalies(root: Path) -> dict[str, dict[str, Any]]:
    """Per trial id, its localized Cell (the ``nonfinite`` row first)."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    if not (root / "anomalies").is_dir():
        return {}
    part = ds.partitioning(pa.schema([("trial_id", pa.string())]), flavor="hive")
    table = ds.dataset(root / "anomalies", format="parquet", partitioning=part).to_table(
        columns=["trial_id", "kind", "cell", "cell_class", "phase", "replay_step"]
    )
    found: dict[str, dict[str, Any]] = {}
    for row in sorted(table.to_pylist(), key=lambda r: r["kind"] != "nonfinite"):
        found.setdefault(row["trial_id"], row)
    return found


def measured(run: Any) -> list[dict[str, Any]]:
    """Per trial: configuration, seed, first non-finite step, the localized Cell."""
    cells = _anomalies(run.root)
    rows = []
    for _, t in run.trials.sort_values(["seed"]).iterrows():
        clip = t["clip"]
        clip = None if clip is None or clip != clip else float(clip)
        first = t["first_nonfinite_step"]
        cell = cells.get(str(t["trial_id"]))
        rows.append(
            {
                "amp_level": str(t["amp_level"]),
                "black_list": sorted(t["black_list"]),
                "clip": clip,
                "seed": int(t["seed"]),
                "outcome": str(t["outcome"]),
                "first_nonfinite_step": None if first is None or first != first else int(first),
                "cell": cell["cell"] if cell else None,
                "cell_class": cell["cell_class"] if cell else None,
                "phase": cell["phase"] if cell else None,
            }
        )
    return rows


def _compare(
    w: dict[str, Any], profiles: list[dict[str, Any]], rows: list[dict[str, Any]], steps: int
) -> list[dict[str, Any]]:
    """One row per (profile length, configuration, seed): forecast against measured."""
    out = []
    rows = [r for r in rows if r["amp_level"] != "O0"]  # the forecast is of float16: FP32 has none
    for p in profiles:
        configs = {(tuple(r["black_list"]), r["clip"]): None for r in rows}
        for black_list, clip in configs:
            config = {"black_list": list(black_list), "clip": clip}
            fc = forecast_for(p["profile"], config["black_list"])
            for r in rows:
                if r["black_list"] != sorted(config["black_list"]) or r["clip"] != config["clip"]:
                    continue
                m = r["first_nonfinite_step"]
                row = {
                    "profile_steps": p["steps"],
                    "black_list": config["black_list"],
                    "clip": config["clip"],
                    "seed": r["seed"],
                    "forecast_cell": fc["cell"] if fc else None,
                    "forecast_class": fc["class"] if fc else None,
                    "forecast_step": fc["at"] if fc else None,
                    "forecast_now": bool(fc and fc["now"]),
                    "measured_step": m,
                    "measured_cell": r["cell"],
                    "measured_phase": r["phase"],
                    "measured_class": r["cell_class"],
                    "error_steps": fc["at"] - m if fc and m is not None else None,
                    "ratio": round(fc["at"] / m, 3) if fc and m else None,
                    "cell_matches": (fc["cell"] == r["cell"]) if fc and r["cell"] else None,
                    "class_matches": (fc["class"] == r["cell_class"]) if fc and r["cell_class"] else None,
                    "ran_to": steps,
                }
                out.append(row)
    return out


def run(tiny: bool = False) -> str:
    size = TINY if tiny else FULL
    seeds = size["seeds"]
    results = []
    with tempfile.TemporaryDirectory(prefix="ampsweep-bench-forecast-") as tmp_name:
        tmp = Path(tmp_name)
        for w in size["workloads"]:
            profiles = []
            for steps in w["profile_steps"]:
                if not tiny:
                    wait_for_quiet(max_wait=10.0)
                log(NAME, f"{w['key']}: ampsweep profile --steps {steps}")
                profiles.append(run_profile(w, steps, tmp / w["key"]))
                log(NAME, f"{w['key']}: profile {steps} done in {profiles[-1]['wall_s']:.1f} s")
            spec = _spec(w, seeds, w["steps"], w["configs"], f"{w['key'].replace('_', '-')}-zero")
            log(NAME, f"{w['key']}: O0 and O2 from step 0 to {w['steps']} on seeds {seeds}")
            started = time.perf_counter()
            sweep = run_cli(spec, tmp / w["key"] / "zero", WORKERS, timeout=3600)
            log(NAME, f"{w['key']}: runs done in {time.perf_counter() - started:.1f} s")
            rows = measured(sweep)  # the grid is a product: every black list with every clip
            fp32 = [r for r in rows if r["amp_level"] == "O0"]
            results.append(
                {
                    "fp32_first_nonfinite": {
                        _clip(clip): {r["seed"]: r["first_nonfinite_step"] for r in fp32 if r["clip"] == clip}
                        for clip in dict.fromkeys(r["clip"] for r in fp32)
                    },
                    "workload": w["key"],
                    "ref": w["workload"],
                    "profiles": [
                        {
                            "steps": p["steps"],
                            "wall_s": p["wall_s"],
                            "start_step": p["profile"]["start_step"],
                            "cells": [
                                {k: c[k] for k in ("cell", "class", "forward_max", "risk", "passes_max_at")}
                                for c in p["profile"]["cells"]
                            ],
                        }
                        for p in profiles
                    ],
                    "runs_wall_s": round(sweep.wall_s, 2),
                    "steps": w["steps"],
                    "measured": rows,
                    "comparison": _compare(w, profiles, rows, w["steps"]),
                    "short_answer": w["short_answer"],
                    "error": sweep.error,
                }
            )
    figures = {"machine": dict(machine_rows()), "date": now_utc(), "seeds": seeds, "workloads": results}
    figures["summary"] = _summary(results)
    if not tiny:
        RESULTS_JSON.parent.mkdir(parents=True, exist_ok=True)
        RESULTS_JSON.write_text(json.dumps(figures, indent=2) + "\n")
    return _section(figures, tiny)


def _summary(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per workload, profile length and configuration: the forecast against the seeds' measured steps."""
    out = []
    for res in results:
        groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for row in res["comparison"]:
            key = (row["profile_steps"], tuple(row["black_list"]), row["clip"])
            groups.setdefault(key, []).append(row)
        for (steps, black_list, clip), rows in groups.items():
            broke = [r["measured_step"] for r in rows if r["measured_step"] is not None]
            errors = [r["error_steps"] for r in rows if r["error_steps"] is not None]
            ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
            short = res["short_answer"]
            out.append(
                {
                    "workload": res["workload"],
                    "profile_steps": steps,
                    "black_list": list(black_list),
                    "clip": clip,
                    "short_answer": sorted(short["black_list"]) == sorted(black_list)
                    and short["clip"] == clip,
                    "forecast": rows[0]["forecast_step"],
                    "forecast_now": rows[0]["forecast_now"],
                    "forecast_cell": (
                        f"{rows[0]['forecast_cell']} ({rows[0]['forecast_class']})"
                        if rows[0]["forecast_cell"]
                        else None
                    ),
                    "measured": {r["seed"]: r["measured_step"] for r in rows},
                    "measured_cells": sorted(
                        {
                            f"{r['measured_cell']} ({r['measured_class']}, {r['measured_phase']})"
                            for r in rows
                            if r["measured_cell"]
                        }
                    ),
                    "seeds_broke": len(broke),
                    "seeds": len(rows),
                    "error_steps": errors,
                    "ratios": ratios,
                    "mean_abs_error": round(sum(abs(e) for e in errors) / len(errors), 1) if errors else None,
                    "cell_matches": [r["cell_matches"] for r in rows],
                    # FP32 from step 0 with the same clip: where it breaks too, the break is not float16's
                    "fp32": res["fp32_first_nonfinite"].get(_clip(clip), {}),
                }
            )
    return out


# --- the section -----------------------------------------------------------------------------------


def _clip(clip: float | None) -> str:
    return "off" if clip is None else f"{clip:g}"


def _config(black_list: list[str], clip: float | None) -> str:
    return f"O2 {black_list}, clip {_clip(clip)}"


def _steps(values: list[Any]) -> str:
    return ", ".join("–" if v is None else f"{v:+,}" for v in values) or "–"


def _forecast_text(s: dict[str, Any]) -> str:
    if s["forecast"] is None:
        return "none (no Cell it casts is forecast to pass 65504)"
    when = "now (past 65504 in FP32 already)" if s["forecast_now"] else f"step {s['forecast']:,}"
    return f"{s['forecast_cell']} at {when}"


def _matches(s: dict[str, Any]) -> str:
    known = [m for m in s["cell_matches"] if m is not None]
    if s["forecast"] is None:
        return "n/a"
    if not known:
        return "n/a (nothing localized)"
    return f"{sum(known)} of {len(known)}"


def _per_seed(by_seed: dict[Any, int | None]) -> str:
    return (
        ", ".join(
            f"{seed}: {'held' if step is None else f'{step:,}'}" for seed, step in sorted(by_seed.items())
        )
        or "–"
    )


def _section(figures: dict[str, Any], tiny: bool) -> str:
    results, summary = figures["workloads"], figures["summary"]
    lines = [
        "## Forecast quality: the profile's `passes_max_at` against runs from zero (bench_forecast)",
        "",
        "Each workload: `ampsweep profile SPEC --steps N --json` (FP32, the first seed, 16 sampled steps; "
        "`passes_max_at` fits log max |x| over the later half of the samples, at most 10 profiled lengths "
        "ahead), then its O2 configurations (float16, no loss scale, abort after "
        f"{ABORT_AFTER} non-finite steps) from step 0 on seeds {figures['seeds']} as one `ampsweep run` with "
        f"{WORKERS} workers: the trials table's `first_nonfinite_step`, the anomalies table's localized Cell. "
        "The forecast for a configuration: the earliest `passes_max_at` among the Cells it leaves in "
        'float16 (a Cell past 65504 in FP32 already: "now"). Error = forecast − measured; ratio = '
        "forecast / measured (below 1: early, the safe side). Beside them, FP32 (O0) from step 0 with the "
        "same clip: where it breaks too, the configuration's break is the workload's, not float16's, and "
        "no float16 forecast could name it."
        + (" _Tiny smoke-test size: the figures mean nothing._" if tiny else ""),
        "",
        "| workload | profile steps | configuration | forecast | measured first non-finite step per seed "
        "| error (steps) | forecast / measured | localized Cell | forecast named it | FP32 (O0), same clip |",
        "|---|---:|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        measured_text = ", ".join(
            f"{seed}: {'held' if step is None else f'{step:,}'}"
            for seed, step in sorted(s["measured"].items())
        )
        ratios = ", ".join(f"{r:.2f}" for r in s["ratios"]) or "–"
        name = _config(s["black_list"], s["clip"]) + (" (**short answer**)" if s["short_answer"] else "")
        lines.append(
            f"| {s['workload']} | {s['profile_steps']} | {name} | {_forecast_text(s)} | {measured_text} | "
            f"{_steps(s['error_steps'])} | {ratios} | {', '.join(s['measured_cells']) or '–'} | {_matches(s)} | "
            f"{_per_seed(s['fp32'])} |"
        )
    lines += [
        "",
        "### The profiles",
        "",
        "| workload | profile steps | wall | Cells with a forecast or risk |",
        "|---|---:|---:|---|",
    ]
    for res in results:
        for p in res["profiles"]:
            named = [
                f"{c['cell']} ({c['class']}): "
                + (
                    f"passes at {c['passes_max_at']:,}"
                    if c["passes_max_at"] is not None
                    else f"risk {c['risk']}"
                )
                + f", FP32 max {c['forward_max']:.3g}"
                for c in p["cells"]
                if c["passes_max_at"] is not None or c["risk"] is not None
            ]
            lines.append(
                f"| {res['workload']} | {p['steps']} | {p['wall_s']:.1f} s | {'; '.join(named) or 'none'} |"
            )
    lines += [""]
    for res in results:
        short = res["short_answer"]
        s = next(
            (
                x
                for x in summary
                if x["workload"] == res["workload"]
                and x["short_answer"]
                and x["profile_steps"] == short["profile"]
            ),
            None,
        )
        lines.append(
            f"- {res['workload']}: the runs from step 0 to {res['steps']:,} took {res['runs_wall_s']:.1f} s. The "
            f"configuration recommended at {short['at']}, {_config(short['black_list'], short['clip'])}, "
            f"against the {short['profile']}-step profile: "
            + (
                "no forecast (no Cell it casts is forecast to pass 65504 within 10 profiled lengths)"
                if s is None or s["forecast"] is None
                else f"forecast {_forecast_text(s)}, measured {s['seeds_broke']} of {s['seeds']} seeds broke "
                f"(error {_steps(s['error_steps'])} steps; localized {', '.join(s['measured_cells']) or 'nowhere'}, "
                f"the forecast named it on {_matches(s)})"
            )
            + "."
        )
        fp32 = "; ".join(
            f"clip {clip}: "
            + ", ".join(
                f"{seed}: {'held' if step is None else f'{step:,}'}" for seed, step in sorted(by_seed.items())
            )
            for clip, by_seed in res["fp32_first_nonfinite"].items()
        )
        lines.append(f"  FP32 (O0) from step 0, first non-finite step per seed: {fp32 or '–'}.")
        if res.get("error"):
            lines.append(f"  **Note:** {res['error']}")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(run(tiny="--tiny" in sys.argv))
