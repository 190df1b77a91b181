"""The Python entry point, ``Sweep(spec).run(out)`` (``docs/api.md``); the CLI is a thin layer over it.
``Sweep`` validates at construction as the CLI does, so a script gets the same one-line ``SpecError``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from ._config import FailurePolicy, RunConfig
from ._result import SweepResult
from ._tensorboard import check_logdir, exporting
from .cluster._launcher import run_sweep
from .cluster._pool import WorkerPool
from .planning._plan import SweepPlan
from .planning._spec import SweepSpec, parse_spec, read_spec
from .planning._workload_check import WorkloadFacts, check_workload
from .search._horizon import HorizonCheck
from .search._rounds import run_rounds
from .search._search import AdaptiveSearch


class Sweep:
    """A validated sweep, ready to plan and run: ``spec`` shaped like a sweep file (or a ``SweepSpec``); a
    relative ``path/to/file.py:make`` is looked up from ``base_dir`` (default: the working directory)."""

    def __init__(self, spec: Mapping[str, Any] | SweepSpec, *, base_dir: str | Path | None = None) -> None:
        self.spec: SweepSpec = spec if isinstance(spec, SweepSpec) else parse_spec(dict(spec))
        self.workload: WorkloadFacts = check_workload(self.spec, Path(base_dir) if base_dir else None)
        self.workload_ref: str = self.workload.reference

    @classmethod
    def from_yaml(cls, path: str | Path) -> Sweep:
        """Read a sweep file; its relative workload path is relative to the file's folder."""
        path = Path(path)
        return cls(read_spec(path), base_dir=path.parent)

    @property
    def name(self) -> str:
        return self.spec.name

    def resolved_yaml(self) -> str:
        """The spec with every default filled in: what ``sweep.yaml`` in the output holds."""
        return yaml.safe_dump(self.spec.model_dump(mode="json"), sort_keys=False)

    def plan(self) -> SweepPlan:
        return SweepPlan.from_spec(
            self.spec, self.workload_ref, self.workload.loss_only_classes, self.workload.starts
        )

    def run(self, out: str | Path, config: RunConfig | None = None, **overrides: Any) -> SweepResult:
        """Run every trial ``out`` does not hold yet; ``overrides`` are ``RunConfig`` fields."""
        config = completed(self.spec, replace(config or RunConfig(), **overrides))
        check_logdir(f"{str(out).rstrip('/')}/{self.name}", config.tensorboard)
        with WorkerPool(config, self.spec.devices) as pool:  # one set of actors for every run of the sweep
            return self._run_on(pool, str(out), config)

    def _run_on(self, pool: WorkerPool, out: str, config: RunConfig) -> SweepResult:
        """``run`` on actors the caller may have started (and closes); ``config`` is ``completed``; with
        ``config.tensorboard``, every trial it commits is exported there before it returns."""
        pool.avoid = set(self.spec.avoid_devices)
        with exporting(f"{out.rstrip('/')}/{self.name}", config.tensorboard):
            if self.spec.search == "adaptive":
                search = AdaptiveSearch(self.spec, self.workload, self.resolved_yaml(), out)
                run_rounds(search, pool, config, search.store.snapshot_folder)
                return search.totals
            plan = self.plan()
            result = run_sweep(plan, self.resolved_yaml(), out, config, pool=pool)
            if self.spec.horizon is not None and plan.trials and any(t.save_snapshot for t in plan.trials):
                profile = result.profile.as_json() if result.profile is not None else None
                check = HorizonCheck(self.spec, plan, self.resolved_yaml(), out, profile, result)
                run_rounds(check, pool, config, check.store.snapshot_folder)
            return result


def completed(spec: SweepSpec, config: RunConfig) -> RunConfig:
    """``config`` with what the spec decides where the caller left it open (the attempts per trial)."""
    if config.failure is None:
        config = replace(config, failure=FailurePolicy(max_attempts=spec.max_attempts))
    return config
