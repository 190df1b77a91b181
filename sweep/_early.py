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

import importlib.util
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from ._api import Sweep, resolved_yaml
from ._config import RunConfig
from ._grid import expand_grid
from ._launcher import cluster_address, start_ray
from ._lock import DriverLock
from ._resume import check_same_sweep
from ._spec import SweepSpec, read_spec
from ._store import SweepStore
from ._workload_check import resolve_workload

#: what ``import mindspore`` sets to ``python`` when unset (``mindspore.run_check``, 2.7 to 2.10)
PROTOBUF_BACKEND_ENV = "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"
#: the line protoc 3.20 and later write into a generated module; older modules create their
#: descriptors directly, which only protobuf's pure-Python backend still allows
_NEW_STYLE_PB2 = "from google.protobuf.internal import builder"


def choose_protobuf_backend() -> str:
    """Pick protobuf's backend for this process and every process Ray starts from it; returns it.

    ``import mindspore`` selects the pure-Python backend when none is chosen.
    MindSpore 2.7's generated modules need it; 2.10's do not. Pure-Python
    protobuf is slow for Ray, whose Python processes (the driver's ``ray.init``,
    its API server, the workers) all inherit the choice: on 2 cores a local
    ``ray.init`` took about 4.1 s with it and 2.6 s with protobuf's default
    (upb). So the default is kept when every generated module of the installed
    MindSpore is new-style, and written into the environment so that MindSpore
    and Ray's child processes agree. A value the user set is left alone.
    """
    chosen = os.environ.get(PROTOBUF_BACKEND_ENV)
    if chosen:
        return chosen
    if _mindspore_needs_pure_python():
        backend = "python"
    else:
        from google.protobuf.internal import api_implementation

        backend = api_implementation.Type()
    os.environ[PROTOBUF_BACKEND_ENV] = backend
    return backend


def _mindspore_needs_pure_python() -> bool:
    """Whether the installed MindSpore has generated protobuf modules older than protoc 3.20."""
    found = importlib.util.find_spec("mindspore")
    if found is None or not found.submodule_search_locations:
        return True  # no MindSpore to look at: choose what its import would
    generated = [
        p for folder in found.submodule_search_locations for p in Path(folder, "train").glob("*_pb2.py")
    ]
    return not generated or any(_NEW_STYLE_PB2 not in p.read_text(errors="replace") for p in generated)


def _yield_to_ray_start() -> None:
    """Lower the calling thread's priority (nice 19), so that Ray's start goes first.

    The actors can be created only once ``ray.init`` has returned, and the
    workload check finished well before it; at equal priority the check took
    CPU from Ray's processes on a 2-core machine and made ``ray.init`` longer.
    Niced, it runs in the moments Ray's start waits, and is still done first:
    on ``bench_vs_tune``'s grid, 4 interleaved runs each, ``ray.init`` took
    3.5-4.0 s instead of 4.8-5.3 s and the first trial started at 6.0-6.6 s
    instead of 6.9-7.8 s. The price: a workload whose build outlasts Ray's
    start ends its check later, behind Ray's prestarted workers. Linux
    applies nice per thread; the threads this one starts (numpy's BLAS server,
    pyarrow's allocator) inherit it, and the driver gives them no heavy work.
    Lowering one's own priority needs no privilege, raising it back does.
    """
    if not sys.platform.startswith("linux"):  # elsewhere the id would name a process, not this thread
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except OSError:
        pass


def _all_committed(spec: SweepSpec, store: SweepStore) -> bool:
    """Whether ``store`` already holds every trial of ``spec``, each readable.

    A rerun of a finished sweep (to write its report again, or a resume that
    finds nothing left) then starts no cluster: on 2 cores that was 3-5 s of
    ``ray.init`` and ``ray.shutdown`` for no trial. Only a grid from step 0:
    a forked sweep's trial ids name snapshots the workload check resolves,
    and an adaptive search picks its next trials from its last.
    """
    if spec.start_from is not None or spec.search != "grid":
        return False
    wanted = {trial.trial_id for trial in expand_grid(spec)}
    return wanted <= store.committed() and not store.unreadable(wanted)


def validate_while_ray_starts(
    path: Path, run: RunConfig, out: str, meanwhile: Callable[[], object] | None = None
) -> Sweep:
    """The validated ``Sweep`` of the file at ``path``; a local cluster is up when it returns.

    Joining an existing cluster (``--address`` or ``RAY_ADDRESS``) needs the
    workload's location first (its folder may travel as the runtime_env), so
    that case validates first and leaves Ray to ``run_sweep``. ``meanwhile``
    runs on the checker thread once the spec is valid, while Ray still starts
    (the CLI loads the report's plotting there); its failure is ignored, and
    it is not waited for: the actors start as soon as Ray and the check are
    done. Waited for, the report's warm-up outlasted ``ray.init`` in 2 of 3
    demo starts and held the actors back by up to 0.85 s.
    """
    # Chosen before Ray loads protobuf, MindSpore's import (about a second) can run on the
    # checker thread beside Ray's start instead of before it.
    choose_protobuf_backend()
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
    if _all_committed(spec, store):
        return Sweep(spec, base_dir=path.parent)  # nothing to train: no cluster to start
    checked: dict[str, Sweep | BaseException] = {}
    check_done = threading.Event()

    def check() -> None:
        _yield_to_ray_start()
        try:
            checked["sweep"] = Sweep(spec, base_dir=path.parent)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the main thread
            checked["error"] = exc
            return
        finally:
            check_done.set()
        if meanwhile is not None:
            try:
                meanwhile()
            except Exception:  # noqa: BLE001, S110 - a head start only: the same work happens later anyway
                pass

    checker = threading.Thread(target=check, name="ampsweep-validate", daemon=True)
    checker.start()
    try:
        start_ray(None, run.workers, run.runtime_env)
    finally:
        check_done.wait()
    if "error" in checked:
        ray.shutdown()
        raise checked["error"]
    sweep = checked["sweep"]
    assert isinstance(sweep, Sweep)
    return sweep
