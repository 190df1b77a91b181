"""Helpers the benchmarks share: the CLI as a subprocess, reading a sweep folder, sizes on disk.

Sweeps run through the real ``ampsweep run`` command in a child process, the
way a user runs them: the measured wall time then holds Python start-up,
validation, Ray start, the actors, the trials and the report. What happened
inside comes back from the sweep folder's own tables (``trials/*.parquet``:
``finished_at``, ``wall_s``, ``compile_s``, ``worker_index``, ``graph_id``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
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
        """Wall clock at which the first trial started on a worker (``finished_at − wall_s``)."""
        starts = [t.timestamp() - w for t, w in zip(self.trials["finished_at"], self.trials["wall_s"])]
        return min(starts)

    @property
    def last_end(self) -> float:
        return max(t.timestamp() for t in self.trials["finished_at"])

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
