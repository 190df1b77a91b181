"""Helpers the benchmarks share: the CLI as a subprocess, reading a sweep folder, sizes on disk.

Sweeps run through the real ``ampsweep run`` command in a child process, the
way a user runs them: the measured wall time then holds Python start-up,
validation, Ray start, the actors, the trials and the report. What happened
inside comes back from the sweep folder's own tables (``trials/*.parquet``:
``started_at``, ``finished_at``, ``wall_s``, ``compile_s``, ``worker_index``,
``graph_id``).

When a trial ran is the worker's own stamps, ``started_at`` → ``finished_at``
around the whole trial (localization replay included). ``finished_at`` once was
the driver's commit time, and a start computed as ``finished_at − wall_s`` made
a sweep look shorter than the work its workers did; ``wall_s`` is now only the
fallback for a trial no worker finished (``started_at`` null).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a child process: this checkout first on the path, quiet MindSpore."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("GLOG_v", "3")
    env.update(extra)
    return env


def as_a_cpu_worker() -> None:
    """Set this process's MindSpore up as a CPU sweep's worker is (``sweep.devices.device_setup``).

    Pinning is the caller's: each benchmark picks its own core.
    """
    from ampsweep.sweep.devices import CpuBackend, device_setup

    device_setup(CpuBackend(), 0, None).configure_mindspore()


def ampsweep_command() -> list[str]:
    """``ampsweep`` as installed next to this interpreter, else the module."""
    script = BIN / "ampsweep"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "ampsweep"]


def dir_bytes(path: Path) -> dict[str, int]:
    """Bytes on disk under ``path``, by top-level entry (files directly under it: ``(files)``)."""
    sizes: dict[str, int] = {}
    if not path.exists():
        return sizes
    for file in path.rglob("*"):
        if file.is_file():
            rel = file.relative_to(path)
            key = rel.parts[0] if len(rel.parts) > 1 else "(files)"
            sizes[key] = sizes.get(key, 0) + file.stat().st_size
    return sizes


def _epoch_s(stamps: Any) -> Any:
    """Seconds since the epoch for a column of UTC timestamps (NaN where null)."""
    import pandas as pd

    return (pd.to_datetime(stamps, utc=True) - pd.Timestamp(0, tz="UTC")).dt.total_seconds()


def trial_ends(trials: Any) -> Any:
    """Per trial, the wall clock (epoch s) at which it ended: ``finished_at``."""
    return _epoch_s(trials["finished_at"])


def trial_starts(trials: Any) -> Any:
    """Per trial, the wall clock (epoch s) at which it started on its worker.

    ``started_at`` (the worker's stamp); only where that is null (a trial no
    worker finished, or a table from before the column) ``finished_at − wall_s``,
    the best the table then says.
    """
    fallback = trial_ends(trials) - trials["wall_s"].astype(float)
    if "started_at" not in trials:
        return fallback
    return _epoch_s(trials["started_at"]).fillna(fallback)


def trial_spans(trials: Any) -> Any:
    """Per trial, seconds its worker spent on it, start stamp to end stamp (localization included)."""
    return trial_ends(trials) - trial_starts(trials)


def worker_busy_s(trials: Any) -> dict[int, float]:
    """Per worker index, Σ of its trials' spans: the time that worker was inside a trial.

    A worker runs one trial at a time, so this cannot exceed the sweep phase
    (first start → last end); a benchmark that finds it does has a measuring bug.
    Trials without a worker (``worker_index`` null) are left out.
    """
    spans = trial_spans(trials)
    busy = spans.groupby(trials["worker_index"]).sum()
    return {int(worker): float(seconds) for worker, seconds in busy.items()}


@dataclass
class CliRun:
    """One ``ampsweep run`` in a child process, and what its sweep folder says happened."""

    wall_s: float
    started_at: float  # time.time() just before the child was started
    ended_at: float
    root: Path
    trials: Any  # pandas DataFrame of trials/*.parquet
    steps_rows: int
    bytes_by_table: dict[str, int] = field(default_factory=dict)
    stdout: str = ""
    error: str = ""  # set when the command failed after committing its trials

    @property
    def bytes_total(self) -> int:
        return sum(self.bytes_by_table.values())

    @property
    def first_start(self) -> float:
        """Wall clock at which the first trial started on a worker (earliest ``started_at``)."""
        return float(trial_starts(self.trials).min())

    @property
    def last_end(self) -> float:
        """Wall clock at which the last trial ended on a worker (latest ``finished_at``)."""
        return float(trial_ends(self.trials).max())

    @property
    def worker_busy_s(self) -> dict[int, float]:
        """Per worker index, Σ (``finished_at`` − ``started_at``) over its trials (``worker_busy_s``)."""
        return worker_busy_s(self.trials)

    @property
    def compiles(self) -> int:
        return int((self.trials["compile_s"] > 0).sum())


def run_cli(spec: dict[str, Any], tmp: Path, workers: int, *, timeout: float = 1800) -> CliRun:
    """Write ``spec`` as YAML, run ``ampsweep run SPEC --out TMP --workers N --no-progress``, read back."""
    import pandas as pd
    import yaml

    tmp.mkdir(parents=True, exist_ok=True)
    spec_path = tmp / f"{spec['name']}.yaml"
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    out = tmp / "out"
    command = [
        *ampsweep_command(),
        "run",
        str(spec_path),
        "--out",
        str(out),
        "--workers",
        str(workers),
        "--no-progress",
    ]
    started_at = time.time()
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - started
    ended_at = time.time()
    root = out / spec["name"]
    error = ""
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        if not (root / "trials").is_dir():
            raise RuntimeError(f"`ampsweep run` exited {done.returncode}:\n{tail}")
        # the trials ran and are committed; what failed came after them (the report)
        error = f"`ampsweep run` exited {done.returncode} after the trials: {tail.splitlines()[-1]}"
    trials = pd.read_parquet(root / "trials")
    steps_rows = len(pd.read_parquet(root / "steps", columns=["step"]))
    return CliRun(
        wall_s=wall,
        started_at=started_at,
        ended_at=ended_at,
        root=root,
        trials=trials,
        steps_rows=steps_rows,
        bytes_by_table=dir_bytes(root),
        stdout=done.stdout,
        error=error,
    )


def compiles_per_worker_graph(trials: Any) -> tuple[int, int, list[str]]:
    """(compiles, distinct (worker, graph) pairs, pairs compiled more than once)."""
    compiled = trials[trials["compile_s"] > 0]
    pairs = trials.groupby(["worker_index", "graph_id"]).size()
    counts = compiled.groupby(["worker_index", "graph_id"]).size()
    extra = [f"worker {w} graph {g}: {n}×" for (w, g), n in counts.items() if n > 1]
    return int(len(compiled)), int(len(pairs)), extra


def log(name: str, message: str) -> None:
    print(f"[{name}] {message}", file=sys.stderr, flush=True)


def mb(n_bytes: float) -> str:
    return f"{n_bytes / 1e6:.2f} MB"


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def recommended_config(root: Path) -> dict[str, Any]:
    """amp_level, black_list (sorted), clip of a sweep's ``report/recommendation.json``: the answer two
    ways of running a grid are compared on (``config`` None when nothing is stable)."""
    path = root / "report" / "recommendation.json"
    if not path.is_file():
        return {"status": "no report", "config": None}
    rec = json.loads(path.read_text())
    config = rec.get("config")
    if config is None and rec.get("recommendations"):
        config = rec["recommendations"][0].get("config")
    picked = None
    if config is not None:
        picked = {
            "amp_level": config["amp_level"],
            "black_list": sorted(config["black_list"]),
            "clip": config["clip"],
        }
    return {"status": rec.get("status"), "config": picked}


def _load_now() -> float:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return float("nan")


def timed(name: str, label: str, body: Callable[[], Any], settle: bool) -> tuple[Any, tuple[float, float]]:
    """Wait (20 s at most) for the previous way's processes to wind down, run ``body``, and note the
    1-minute load before and after: ways timed back to back on a shared machine compare only so."""
    from ._machine import wait_for_quiet

    if settle:
        wait_for_quiet(max_wait=20.0)
    before = _load_now()
    log(name, f"{label} (1-minute load {before})")
    started = time.perf_counter()
    value = body()
    log(name, f"{label}: done in {time.perf_counter() - started:.1f} s")
    return value, (before, _load_now())
