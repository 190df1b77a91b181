"""Start-up by part, against Ray's own start: how long before the first trial, and why.

Issue 46 item 7: ampsweep's own share of the time before the first trial is
at most 3 s beyond ``ray.init`` (the issue's figure was the command's start to
the first trial's start, against ``ray.init`` plus ``ray.shutdown`` alone).
Two kinds of child process, alternated on the same machine so that a change in
its load hits both alike:

* **Ray alone**: Python, ``import ray``, ``ray.init`` with the arguments
  ``start_ray`` passes for a local sweep, ``ray.shutdown`` (the issue's
  yardstick: "ray.init plus ray.shutdown alone"); and once more with
  protobuf's pure-Python backend, which MindSpore's import picks and a Ray
  started after it inherits, to show what that choice costs Ray's start.
* **ampsweep**: ``ampsweep run`` on a one-trial grid (the benchmarks' MLP,
  FP32, 20 steps, one worker), from the process start to the moment the
  driver has committed the first trial's result; then the child stops itself
  with Ctrl-C (the sweep's own stop path), since what follows is the report.

The ampsweep child runs the real CLI (``cli.main``) with stamps around its
parts, taken by wrapping public names after they are imported: ``ray.init``
(through an import hook, so that Ray is imported where ampsweep imports it),
``ray.remote`` (the first actor asked for), ``Sweep.__init__`` (the workload
check, which runs while that actor starts), ``RayActors.run`` (the first trial
sent) and ``SweepStore.commit``. The trial's own ``started_at``,
``finished_at`` and ``compile_s`` come from its row in ``trials/``. Every
figure is checked for being possible: a part cannot be shorter than the work
inside it, and the stamps must come in the order the code makes them.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ._common import ROOT, child_env, log
from ._machine import load_average, now_utc

PROTOBUF_ENV = "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"

NAME = "bench_startup"
RESULTS_JSON = Path(__file__).resolve().parent / "results" / f"{NAME}.json"
TARGET_S = 3.0
WORKLOAD = Path(__file__).resolve().parent / "mlp_workload.py"

#: ``ray.init`` as ``sweep.cluster._ray_start.start_ray`` calls it for a local sweep of one worker
RAY_ALONE = """
import json, os, sys, time
out = sys.argv[1]
stamps = {"python_up": time.time()}
import ray
stamps["imported"] = time.time()
ray.init(address="local", num_cpus=max(os.cpu_count() or 1, 1), include_dashboard=False,
         logging_level="ERROR", log_to_driver=False)
stamps["init_end"] = time.time()
ray.shutdown()
stamps["shutdown_end"] = time.time()
open(out, "w").write(json.dumps(stamps))
"""

#: ``ampsweep run`` in this process, with a stamp line appended to ``argv[1]`` at each part
AMPSWEEP = """
import importlib.abc, importlib.util, json, os, signal, sys, threading, time
out = sys.argv[1]

def stamp(event, **extra):
    with open(out, "a") as f:
        f.write(json.dumps({"event": event, "t": time.time(), **extra}) + "\\n")

stamp("python_up")
from ampsweep.sweep import cli
stamp("imported")

def timed(owner, name, before, after, once=False):
    original = getattr(owner, name)
    seen = []
    def wrapper(*args, **kwargs):
        if not (once and seen):
            stamp(before, thread=threading.current_thread().name)
        try:
            return original(*args, **kwargs)
        finally:
            if not (once and seen) and after:
                stamp(after)
            seen.append(1)
    setattr(owner, name, wrapper)

def patch_ray(ray):
    timed(ray, "init", "ray_init_start", "ray_init_end")
    timed(ray, "remote", "actor_requested", None, once=True)

class AfterRay(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "ray":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module
        def exec_module(module):
            run(module)
            patch_ray(module)
        spec.loader.exec_module = exec_module
        return spec

if "ray" in sys.modules:
    patch_ray(sys.modules["ray"])
else:
    sys.meta_path.insert(0, AfterRay())
from ampsweep.sweep._api import Sweep
from ampsweep.sweep.cluster._actors import RayActors
from ampsweep.sweep.store._store import SweepStore
timed(cli, "read_spec", "spec_start", "spec_end")
timed(Sweep, "__init__", "check_start", "check_end")
timed(RayActors, "run", "trial_sent", None, once=True)
commit = SweepStore.commit
def committed(self, *args, **kwargs):
    commit(self, *args, **kwargs)
    stamp("committed")
    os.kill(os.getpid(), signal.SIGINT)  # the first result is in: stop as Ctrl-C would
SweepStore.commit = committed
sys.argv = ["ampsweep", "run", *sys.argv[2:]]
sys.exit(cli.main())
"""


def _child(code: str, args: list[str], **env: str) -> tuple[float, subprocess.CompletedProcess]:
    """Start ``python -c code *args`` from the checkout; (wall clock just before, the finished child)."""
    started = time.time()
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        env=child_env(**env),
        capture_output=True,
        text=True,
        timeout=900,
    )
    return started, done


def ray_alone(tmp: Path, **env: str) -> dict[str, float]:
    """Seconds from the process start: Ray imported, ``ray.init`` returned, ``ray.shutdown`` returned."""
    out = tmp / "ray-alone.json"
    out.unlink(missing_ok=True)
    started, done = _child(RAY_ALONE, [str(out)], **env)
    if done.returncode != 0 or not out.is_file():
        raise RuntimeError(f"Ray alone exited {done.returncode}: {done.stderr[-1500:]}")
    stamps = json.loads(out.read_text())
    return {
        "python_s": stamps["python_up"] - started,
        "import_ray_s": stamps["imported"] - stamps["python_up"],
        "ray_init_s": stamps["init_end"] - stamps["imported"],
        "ray_shutdown_s": stamps["shutdown_end"] - stamps["init_end"],
        "to_init_end_s": stamps["init_end"] - started,
        "to_shutdown_end_s": stamps["shutdown_end"] - started,
    }


def _spec(tiny: bool) -> dict[str, Any]:
    return {
        "name": "startup",
        "workload": f"{WORKLOAD}:make",
        "steps": 5 if tiny else 20,
        "grid": {"amp_level": ["O0"], "seed": [0]},
    }


def ampsweep_parts(tmp: Path, tiny: bool) -> dict[str, Any]:
    """One ``ampsweep run`` to its first committed result: each part's start and end, in seconds from the process start."""
    import pandas as pd
    import yaml

    tmp.mkdir(parents=True, exist_ok=True)
    spec = tmp / "startup.yaml"
    spec.write_text(yaml.safe_dump(_spec(tiny), sort_keys=False))
    stamps_file = tmp / "stamps.jsonl"
    argv = [str(stamps_file), str(spec), "--out", str(tmp / "out"), "--workers", "1", "--no-progress"]
    started, done = _child(AMPSWEEP, argv)
    events: dict[str, dict[str, Any]] = {}
    for line in stamps_file.read_text().splitlines() if stamps_file.is_file() else []:
        row = json.loads(line)
        events.setdefault(row["event"], row)  # the first of each
    if "committed" not in events:
        raise RuntimeError(f"ampsweep run exited {done.returncode} before a result: {done.stderr[-1500:]}")
    trial = pd.read_parquet(tmp / "out" / "startup" / "trials").iloc[0]
    at = {name: row["t"] - started for name, row in events.items()}
    at["trial_started"] = trial["started_at"].timestamp() - started
    at["trial_finished"] = trial["finished_at"].timestamp() - started
    return {
        "at": at,
        "compile_s": float(trial["compile_s"]),
        "check_thread": events.get("check_start", {}).get("thread", ""),
    }


def _parts(at: dict[str, float], compile_s: float) -> list[tuple[str, str, float]]:
    """The parts on the way to the first result, one after the other: (part, from → to, seconds).

    Rows starting with "of which" lie inside the row above them and are not
    on the path; the others add up to the time to the first result.
    """

    def between(first: str, then: str) -> float:
        return at.get(then, float("nan")) - at.get(first, float("nan"))

    return [
        ("Python starts, `import ampsweep.sweep.cli`", "process start → CLI imported", at["imported"]),
        (
            "spec read, workload file found, `import ray`",
            "CLI imported → `ray.init` starts",
            between("imported", "ray_init_start"),
        ),
        ("Ray's start", "`ray.init`: its call → its return", between("ray_init_start", "ray_init_end")),
        (
            "driver: devices found, first actor asked for",
            "`ray.init` returned → `ray.remote`",
            between("ray_init_end", "actor_requested"),
        ),
        (
            "actor start (a Ray worker process, `import mindspore`, device set-up), the workload check beside it",
            "actor asked for → trial starts on it",
            between("actor_requested", "trial_started"),
        ),
        (
            "of which the workload check on the driver (import MindSpore, build the network)",
            "`Sweep.__init__` → its return",
            between("check_start", "check_end"),
        ),
        (
            "of which the driver after the check: plan, folder, the first trial sent",
            "check done → `RayActors.run`",
            between("check_end", "trial_sent"),
        ),
        (
            "first trial: build, compile, steps",
            "trial start → end (the worker's stamps)",
            between("trial_started", "trial_finished"),
        ),
        ("of which its compile", "`compile_s`", compile_s),
        (
            "result back to the driver and committed",
            "trial end → commit",
            between("trial_finished", "committed"),
        ),
    ]


def _checks(run: dict[str, Any]) -> list[tuple[str, bool]]:
    """What must hold for the figures to be true: stamps in the code's order, no part shorter than its work."""
    at, compile_s = run["at"], run["compile_s"]
    names = ("check_start", "check_end", "ray_init_start", "ray_init_end", "actor_requested", "trial_sent")
    seen = all(name in at for name in names)
    if not seen:
        return [("every stamp was taken (the wrapped names are the ones ampsweep calls)", False)]
    parts = _parts(at, compile_s)
    path = [seconds for part, _, seconds in parts if not part.startswith("of which")]
    inside = {part: seconds for part, _, seconds in parts}
    return [
        ("every stamp was taken (the wrapped names are the ones ampsweep calls)", True),
        ("no part on the path is negative (the stamps came in the code's order)", min(path) >= 0),
        (
            "the parts on the path add up to the time to the first result",
            abs(sum(path) - at["committed"]) < 0.05,
        ),
        (
            "the workload check ran on the driver's main thread after `ray.init`, while the actor started",
            run["check_thread"] == "MainThread"
            and at["ray_init_end"] <= at["actor_requested"] <= at["check_start"]
            and at["check_end"] <= at["trial_sent"] <= at["trial_started"],
        ),
        ("the first trial is no shorter than its compile", inside["of which its compile"] <= parts[7][2]),
    ]


def run(tiny: bool = False) -> str:
    rounds = 1 if tiny else 3
    alone: list[dict[str, float]] = []
    python: list[dict[str, float]] = []
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ampsweep-startup-") as tmp:
        for index in range(rounds):
            # alternated, each kind first in turn: a drift of the machine's load hits both alike
            order = ("alone", "ampsweep", "python") if index % 2 == 0 else ("python", "ampsweep", "alone")
            for kind in order:
                log(NAME, f"round {index + 1}/{rounds}: {kind} (1-minute load {load_average()})")
                if kind == "alone":
                    alone.append(ray_alone(Path(tmp)))
                elif kind == "python":  # the protobuf backend MindSpore's import picks, which Ray inherits
                    python.append(ray_alone(Path(tmp), **{PROTOBUF_ENV: "python"}))
                else:
                    runs.append(ampsweep_parts(Path(tmp) / f"run-{index}", tiny))
    return _section(alone, python, runs, tiny)


def _section(
    alone: list[dict[str, float]], python: list[dict[str, float]], runs: list[dict[str, Any]], tiny: bool
) -> str:
    med = statistics.median
    first = [r["at"]["committed"] for r in runs]
    started = [r["at"]["trial_started"] for r in runs]
    asked = [r["at"].get("actor_requested", float("nan")) for r in runs]
    yardstick = [a["to_shutdown_end_s"] for a in alone]
    to_init = [a["to_init_end_s"] for a in alone]
    share = med(started) - med(yardstick)
    strict = med(started) - med(to_init)
    lines = [
        f"## Start-up by part, against Ray's own start ({NAME})",
        "",
        f"{len(runs)} rounds, each kind first in turn; medians. ampsweep: `ampsweep run` of one FP32 trial "
        f"of the benchmarks' MLP ({_spec(tiny)['steps']} steps, 1 worker), from the process start to the "
        "trial's start on its worker (the trial's `started_at`), and on to the driver's commit of its result.",
        "",
        "| | s |",
        "|---|---|",
        f"| Ray alone: process start → `ray.init` returned | {med(to_init):.1f} |",
        f"| Ray alone: `ray.init` itself | {med(a['ray_init_s'] for a in alone):.1f} |",
        f"| Ray alone: `ray.shutdown` | {med(a['ray_shutdown_s'] for a in alone):.1f} |",
        f"| Ray alone: process start → `ray.shutdown` returned (the issue's yardstick) | {med(yardstick):.1f} |",
        f"| ampsweep: process start → first trial starts on its worker | {med(started):.1f} |",
        f"| **ampsweep's share beyond Ray's start and shutdown** (target ≤ {TARGET_S:.0f} s) | **{share:.1f}** |",
        f"| ampsweep's share beyond Ray's start alone (stricter: no shutdown in the yardstick) | {strict:.1f} |",
        f"| ratio: first trial's start / Ray's start and shutdown | {med(started) / med(yardstick):.2f}× |",
        f"| ampsweep: process start → first trial's result committed; beyond the yardstick (the trial's own "
        f"build, compile and steps included) | {med(first):.1f}; {med(first) - med(yardstick):.1f} |",
        f"| ampsweep's driver alone: process start → first actor asked for, beyond Ray alone's "
        f"process start → `ray.init` returned | {med(asked) - med(to_init):.1f} |",
        f"| Ray alone with `{PROTOBUF_ENV}=python` (MindSpore's choice; a Ray started after "
        "`import mindspore` inherits it unless told otherwise): "
        f"process start → `ray.shutdown` returned | {med(a['to_shutdown_end_s'] for a in python):.1f} |",
        f"| of which `import ray` (Ray alone: {med(a['import_ray_s'] for a in alone):.1f}) | "
        f"{med(a['import_ray_s'] for a in python):.1f} |",
        f"| of which `ray.init` (Ray alone: {med(a['ray_init_s'] for a in alone):.1f}) | "
        f"{med(a['ray_init_s'] for a in python):.1f} |",
        "",
        f"Target ({TARGET_S:.0f} s beyond `ray.init` + `ray.shutdown`): "
        + ("**met**" if share <= TARGET_S else "**missed**"),
        "",
        "### Where the time goes (median of each part)",
        "",
        "| part | from → to | s |",
        "|---|---|---|",
    ]
    table = [_parts(r["at"], r["compile_s"]) for r in runs]
    for position, (part, span, _) in enumerate(table[0]):
        label = part if part.startswith("of which") else f"**{part}**"
        lines.append(f"| {label} | {span} | {med(t[position][2] for t in table):.1f} |")
    lines += [
        "",
        "### Can every figure be true?",
        "",
        "| check | holds in every round |",
        "|---|---|",
    ]
    checks = [dict(_checks(r)) for r in runs]
    for what in checks[0]:
        lines.append(f"| {what} | {'yes' if all(c.get(what) for c in checks) else '**no**'} |")
    if not tiny:
        RESULTS_JSON.parent.mkdir(parents=True, exist_ok=True)
        figures = {
            "name": NAME,
            "measured_at": now_utc(),
            "load_average": load_average(),
            "target_s": TARGET_S,
            "share_beyond_init_and_shutdown_s": share,
            "first_result_beyond_init_and_shutdown_s": med(first) - med(yardstick),
            "share_beyond_init_s": strict,
            "driver_share_beyond_init_s": med(asked) - med(to_init),
            "ratio": med(started) / med(yardstick),
            "ray_alone": alone,
            "ray_alone_protobuf_python": python,
            "ampsweep": runs,
        }
        RESULTS_JSON.write_text(json.dumps(figures, indent=2) + "\n")
    return "\n".join(lines)
