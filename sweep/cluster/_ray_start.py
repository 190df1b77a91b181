"""Starting Ray for a sweep (``docs/internals.md``, "Starting Ray"): join a cluster or start a local one
with a private token, and the first actors with it while the driver checks the workload."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .._errors import warn

if TYPE_CHECKING:
    from .._config import RunConfig
    from ._pool import WorkerPool

#: Ray's switch for token authentication; unset, a local ``ray.init`` turns it on (Ray 2.59 and later)
AUTH_MODE_ENV = "RAY_AUTH_MODE"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"  # where Ray keeps the token instead, when set
PROTOBUF_ENV = "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"  # Ray's processes inherit the driver's choice
#: the user's own protobuf backend, read before MindSpore's import picks one (None: not chosen)
CHOSEN_PROTOBUF = os.environ.get(PROTOBUF_ENV)

T = TypeVar("T")


def start_ray(address: str | None, workers: int | None, runtime_env: dict[str, Any] | None = None) -> None:
    """Join a cluster (with its own authentication setting) or start a local one with token authentication;
    never a bare ``ray.init()``, which attaches to any cluster another tool left in ``/tmp/ray``."""
    import ray

    if ray.is_initialized():
        return
    common: dict[str, Any] = {"logging_level": "ERROR", "log_to_driver": False}
    if runtime_env:
        common["runtime_env"] = runtime_env
    if address:
        ray.init(address=address, **common)
    else:
        mode = os.environ.get(AUTH_MODE_ENV, "token")
        if mode.lower() != "token":
            warn(
                f"{AUTH_MODE_ENV}={mode}: this sweep's local Ray accepts any client that reaches its ports; "
                f"unset {AUTH_MODE_ENV} to require Ray's token"
            )
        cpus = max(os.cpu_count() or 1, workers or 0)
        before = os.environ.get(PROTOBUF_ENV)
        if CHOSEN_PROTOBUF is None and importlib.util.find_spec("google._upb") is not None:
            # Ray's own processes never import MindSpore: they keep protobuf's default, not the slower
            # pure-Python backend MindSpore's import picks (bench_startup times Ray's start on both). The
            # job's workers, which do import MindSpore, get MindSpore's choice.
            env_vars = {PROTOBUF_ENV: before or "python", **common.get("runtime_env", {}).get("env_vars", {})}
            common["runtime_env"] = {**common.get("runtime_env", {}), "env_vars": env_vars}
            os.environ[PROTOBUF_ENV] = "upb"
        try:
            ray.init(address="local", num_cpus=cpus, include_dashboard=False, **common)
        finally:  # this process's own choice again
            if before is None:
                os.environ.pop(PROTOBUF_ENV, None)
            else:
                os.environ[PROTOBUF_ENV] = before
    keep_token_private()


def keep_token_private() -> None:
    """Make Ray's token file 600, saying so in one line, when others can read it: Ray writes it 644, and
    any user of the machine could read it, join the cluster and run code as the sweep's user."""
    path = Path(os.environ.get(TOKEN_PATH_ENV) or Path.home() / ".ray" / "auth_token")
    try:
        mode = path.stat().st_mode & 0o777
        if not mode & 0o077:
            return
        path.chmod(0o600)
    except OSError:  # no token file (authentication off), or not ours to change
        return
    warn(f"Ray's token {path} was readable by other users (mode {mode:o}); made it 600 (owner only)")


def checked_while_actors_start(
    check: Callable[[], T], config: RunConfig, devices: str | list[str], actors: int
) -> tuple[T, WorkerPool]:
    """Start a local Ray and a pool's first ``actors`` actors, then ``check()`` while they start (beside
    ``ray.init`` it slowed it; an actor's start leaves a core free); what it returned, and that pool. A
    refused sweep leaves no cluster. Protobuf's backend is picked before the pool imports Ray, as ``import
    mindspore`` would: MindSpore 2.7's modules need it then."""
    os.environ.setdefault(PROTOBUF_ENV, "python")
    import ray

    from ._pool import WorkerPool

    start_ray(None, config.workers, config.runtime_env)
    pool = WorkerPool(config, devices)
    try:
        pool.prestart(actors)
        return check(), pool
    except BaseException:
        pool.close()
        ray.shutdown()
        raise
