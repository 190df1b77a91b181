"""A local ``ampsweep run`` writes its report while Ray shuts down.

At the end of a local sweep two independent waits remain: Ray's shutdown
(stopping the actors, the raylet and the GCS: about two seconds on a 2-core
machine) and the analysis and report (about as long). Run one after the
other, as Ray's exit handler would, they add up; side by side the run ends
with the longer of the two.

``ray.shutdown`` stays on the main thread, where ``ray.init`` ran; the report
runs in a helper thread. The start is overlapped the other way round: the
workload check (and the loading of the report's plotting) runs on a helper
thread while ``ray.init`` runs on the main one (``sweep._early``).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def _beside(work: Callable[[], T], main: Callable[[], None]) -> T:
    """Run ``work`` in a helper thread while ``main`` runs here; return ``work``'s value.

    An exception from either is raised here, but only once ``work`` has
    ended, so the helper thread is never left running behind the caller.
    """
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread as is
            box["error"] = exc

    helper = threading.Thread(target=target, name="ampsweep-report", daemon=True)
    helper.start()
    try:
        main()
    finally:
        helper.join()
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


def while_ray_stops(work: Callable[[], T]) -> T:
    """Run ``work`` (the report) while this process's Ray shuts down; return its value.

    Garbage that still holds Ray objects is collected first, while Ray runs.
    A dead actor's error keeps its handle and its calls' references in a
    cycle of exception, traceback and frames; collected during or after the
    shutdown (in whichever thread allocates next), releasing one of them
    reached a core worker that was gone, and Ray ended the process with exit
    code 1 before the report was written: 3 of 18 runs of the killed-worker
    end-to-end test's sweep without this collection, none of 32 with it.
    """
    import ray

    if not ray.is_initialized():
        return work()
    gc.collect()
    return _beside(work, ray.shutdown)
