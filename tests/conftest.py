"""Shared fixtures: sweep files written into a temporary folder."""

from __future__ import annotations

import os
import queue
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mindspore  # noqa: F401 - before any test module imports ray (see below)
import pytest
import yaml

# MindSpore 2.7.0 cannot be imported after ray in one process: its generated protobuf
# modules fail with "Descriptors cannot be created directly" under ray's newer protobuf.
# A test file run alone that imports ray at its top would then fail for that reason only.

TESTS = Path(__file__).parent
TINY = TESTS / "workloads" / "tiny_mlp.py"


@pytest.fixture(scope="session", autouse=True)
def _one_thread_mindspore() -> None:
    os.environ.setdefault("GLOG_v", "3")


@pytest.fixture(autouse=True)
def _shut_down_the_ray_a_test_started():
    """A test that ran ``Sweep.run`` in this process leaves Ray up, as the API does for
    a user; the next test that joins a cluster of its own must not find it attached."""
    ray = sys.modules.get("ray")
    before = bool(ray and ray.is_initialized())
    yield
    ray = sys.modules.get("ray")
    if ray is not None and not before and ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def write_spec(tmp_path: Path):
    """Write a sweep file (a dict, merged over a small valid one) and return its path."""

    def write(overrides: dict | None = None, *, raw: str | None = None, name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        if raw is not None:
            path.write_text(raw)
            return path
        spec = {
            "name": "tiny",
            "workload": f"{TINY}:make",
            "steps": 20,
            "grid": {
                "amp_level": ["O0", "O2"],
                "black_list": [[], ["Scaler"]],
                "clip": [None, 1.0],
                "seed": [0],
            },
        }
        for key, value in (overrides or {}).items():
            if key == "grid":
                spec["grid"].update(value)
            else:
                spec[key] = value
        path.write_text(yaml.safe_dump(spec))
        return path

    return write


@pytest.fixture(scope="module")
def gang() -> Iterator[tuple[Any, Any]]:
    """One gang of 2 CPU rank actors (a placement group and MindSpore's scheduler) for a whole module:
    forming one costs tens of seconds on 2 cores."""
    import ray

    from ampsweep.sweep.cluster._gang import GangActors
    from ampsweep.sweep.devices import CpuBackend, device_setup

    ray.init(address="local", num_cpus=2, include_dashboard=False)
    actors = GangActors(2)
    backend = CpuBackend()
    formed = actors.start(0, device_setup(backend, 0, None), backend.actor_options())
    try:
        answer(actors, actors.probe(formed))
        yield actors, formed
    finally:
        actors.kill(formed)
        ray.shutdown()


def answer(actors: Any, key: Any, timeout_s: float = 300.0) -> Any:
    """The answer to ``key``, read off the gang's completion queue."""
    while True:
        try:
            call, future = actors.completions.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"no answer within {timeout_s:.0f} s") from None
        if call is key:
            return future.result()
