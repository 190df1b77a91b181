"""``analysis._draw_helper``: a forked process draws every other figure of a report, or none at all.

The helper is forked from a single-threaded process only, and this pytest
process may hold threads of earlier tests, so each case runs in a fresh
Python of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ampsweep.analysis._draw_helper import DrawHelper

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the helper is forked")

SCRIPT = """
import json, sys
from pathlib import Path
from ampsweep.analysis._draw_helper import DrawHelper
helper = DrawHelper.start()  # first, while this process has no other thread
from ampsweep import analysis
from ampsweep.analysis import _figures, _heatmap, _plot
from tests.test_analysis import build_ranked_sweep

root = Path(sys.argv[1]) / "unit-sweep"
build_ranked_sweep(root)
a = analysis.analyze(root)
plain = [[i.png_base64 for i in kind] for kind in _figures.report_figures(a)]
here = []
real_png = _plot.png

def counted(fig):
    here.append(1)
    return real_png(fig)

_figures.png = _heatmap.png = counted  # in this process only: the helper was forked before
if sys.argv[2] == "kill":
    helper._process.kill()
    helper._process.join()
shared = [[i.png_base64 for i in kind] for kind in _figures.report_figures(a, helper)]
helper.close()
print(json.dumps({"started": helper is not None, "same": shared == plain, "here": len(here),
                  "figures": sum(map(len, plain))}))
"""


def _run(tmp_path: Path, mode: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path), mode],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_helper_draws_every_other_figure_pixel_for_pixel(tmp_path: Path) -> None:
    found = _run(tmp_path, "share")
    assert found["started"] and found["same"]
    assert 0 < found["here"] < found["figures"]  # the rest came from the helper


def test_a_dead_helper_leaves_every_figure_to_this_process(tmp_path: Path) -> None:
    found = _run(tmp_path, "kill")
    assert found["started"] and found["same"]
    assert found["here"] == found["figures"]


def test_no_helper_is_forked_beside_another_thread() -> None:
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert DrawHelper.start() is None
    finally:
        stop.set()
        other.join()


def test_the_helper_leaves_when_its_parent_is_killed(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nfrom ampsweep.analysis._draw_helper import DrawHelper\n"
            "h = DrawHelper.start()\nprint(h._process.pid, flush=True)\ntime.sleep(600)\n",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 60  # a hang guard: it checks its parent every second
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, left for init to reap, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_the_command_is_single_threaded_where_it_forks_the_helper() -> None:
    # ``ampsweep run`` forks the helper first thing; a module that started a thread on import
    # would silently leave every figure to the driver
    code = "import threading, ampsweep.sweep.cli, ampsweep.analysis._draw_helper\nprint(threading.active_count())"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "1", done.stderr[-2000:]


def test_forking_the_helper_does_not_load_the_analysis_before_ray_starts():
    # the CLI forks it before ray.init: pandas and the renderers imported first held Ray's start back
    code = (
        "import sys, ampsweep.sweep.cli, ampsweep.analysis._draw_helper; "
        "print(sorted(m for m in ('pandas', 'matplotlib', 'ampsweep.analysis._public') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
    # the public names still come from the package, loaded on first use
    code = "from ampsweep.analysis import RECOMMENDATION_SCHEMA, analyze; print(analyze.__module__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "ampsweep.analysis._public"
