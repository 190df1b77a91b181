"""A workload that SIGKILLs the process building it: a worker (or a rank) dying mid-sweep, once."""

from __future__ import annotations

from pathlib import Path


def killer_workload(folder: Path, workload: Path) -> tuple[Path, Path]:
    """``workload`` wrapped so that its first build of seed 1 SIGKILLs its own process.

    Returns the wrapper's file and the marker it leaves, so a test can tell the kill happened.
    """
    marker = folder / "killed"
    killer = folder / "killer.py"
    killer.write_text(
        "import os, signal, importlib.util, sys\nfrom pathlib import Path\n"
        f"spec = importlib.util.spec_from_file_location('workload_for_kill', {str(workload)!r})\n"
        "tiny = importlib.util.module_from_spec(spec); sys.modules['workload_for_kill'] = tiny\n"
        "spec.loader.exec_module(tiny)\n"
        "def make(seed, **kw):\n"
        f"    if seed == 1 and not Path({str(marker)!r}).exists():\n"
        f"        Path({str(marker)!r}).touch()\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return tiny.make(seed, **kw)\n"
    )
    return killer, marker
