"""A driver that still holds a large answer when its node's raylet dies (slow: two Ray sessions).

Ray hands a large answer over as views of the object store, and ends the driver (exit 1, no message) when
such a view is dropped after the raylet died: a sweep would then stop without its resume line. The pool
copies every answer as it arrives (``owned_answer``); the driver here drops its copy after killing its
raylet and lives on.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

DRIVER = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np, psutil, pyarrow as pa, ray
    from ampsweep.sweep.cluster._actors import owned_answer

    ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR", log_to_driver=False)

    @ray.remote
    class Answers:
        def trial(self):
            return {"steps": pa.table({"loss": np.arange(500_000, dtype=np.float64)})}

    done = Answers.remote().trial.remote().future()
    answer = (owned_answer(done) if sys.argv[1] == "owned" else done).result()
    del done
    for process in psutil.Process().children(recursive=True):
        if process.name() == "raylet":
            process.kill()
    time.sleep(1)
    assert answer["steps"].num_rows == 500_000
    del answer
    time.sleep(2)
    print("the driver lives on", flush=True)
    os._exit(0)
    """
)


def _drive(how: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", DRIVER, how], capture_output=True, text=True, timeout=120)


def test_an_owned_answer_outlives_the_raylet_and_a_view_of_the_store_does_not():
    owned = _drive("owned")
    assert owned.returncode == 0 and "the driver lives on" in owned.stdout, owned.stderr[-2000:]
    viewed = _drive("view")
    assert viewed.returncode != 0 and "lives on" not in viewed.stdout, (
        "Ray no longer ends a driver that drops a view of a dead node's object store: owned() may go"
    )
