"""``ampsweep run``'s start: validate the workload while the local Ray cluster starts.

The two slowest parts of a run's start are independent: checking the
workload (importing MindSpore and building the network once, in the driver)
and starting a private local Ray cluster (its GCS, raylet and API server
processes: 3-5 s on 2 cores).
Done one after the other they were the sum; here the workload check runs on
a thread while the main thread starts Ray (``ray.init`` itself must stay on
the main thread), so the first trial starts after the longer of the two.

The spec's shape and the workload file's existence are checked first, before
anything starts, so a typo costs no cluster start. A workload that fails its check shuts the cluster down again
before the one-line error: nothing is written either way.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from ._api import Sweep, resolved_yaml
from ._config import RunConfig
from ._launcher import cluster_address, start_ray
from ._lock import DriverLock
from ._resume import check_same_sweep
from ._spec import read_spec
from ._store import SweepStore
from ._workload_check import resolve_workload

#: what ``import mindspore`` sets to ``python`` when unset (``mindspore.run_check``, 2.7 to 2.10)
PROTOBUF_BACKEND_ENV = "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"


def validate_while_ray_starts(path: Path, run: RunConfig, out: str) -> Sweep:
    """The validated ``Sweep`` of the file at ``path``; a local cluster is up when it returns.

    Joining an existing cluster (``--address`` or ``RAY_ADDRESS``) needs the
    workload's location first (its folder may travel as the runtime_env), so
    that case validates first and leaves Ray to ``run_sweep``.
    """
    # Importing MindSpore selects protobuf's pure-Python backend (its 2.7 generated modules
    # need it) unless the variable is set, which is too late once Ray has loaded protobuf.
    # Set as MindSpore would, Ray may load protobuf first, and MindSpore's import (about a
    # second) runs on the checker thread beside Ray's start instead of before it.
    os.environ.setdefault(PROTOBUF_BACKEND_ENV, "python")
    import ray

    spec = read_spec(path)  # the shape and the workload's file: cheap, and a typo should not wait for Ray
    resolve_workload(spec, path.parent)
    if cluster_address(run.address) is not None or ray.is_initialized():
        return Sweep(spec, base_dir=path.parent)
    # the folder's refusals too (another live driver, other fixed settings): run_sweep makes
    # them again, but a second driver must be told at once, not after a cluster start
    store = SweepStore(out, spec.name)
    DriverLock(store).check()
    check_same_sweep(store, resolved_yaml(spec))
    checked: dict[str, Sweep | BaseException] = {}

    def check() -> None:
        try:
            checked["sweep"] = Sweep(spec, base_dir=path.parent)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the main thread
            checked["error"] = exc

    checker = threading.Thread(target=check, name="ampsweep-validate", daemon=True)
    checker.start()
    try:
        start_ray(None, run.workers, run.runtime_env)
    finally:
        checker.join()
    if "error" in checked:
        ray.shutdown()
        raise checked["error"]
    sweep = checked["sweep"]
    assert isinstance(sweep, Sweep)
    return sweep
